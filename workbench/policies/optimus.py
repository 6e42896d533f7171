"""Optimus (EuroSys'18) as the Pollux OSDI'21 artifact runs it: greedy marginal gain, every round.

Each round starts from scratch (petuum/adaptdl osdi21-artifact, simulator/optimus.py, the rules
cited where they are made):

1. every job gets its minimum (one worker), oldest first, while GPUs last; the rest wait, and a
   running job left without one is preempted;
2. then one worker at a time goes to the job whose predicted step time drops most, times its
   remaining iterations (that is, the most remaining time saved), up to its replica cap: its
   batch size ÷ the application's smallest measured local batch (ncf: 1 replica);
3. a job whose worker count is unchanged keeps its GPUs; every other job is placed afresh,
   smallest first, taking GPUs node by node from the node with the most free
   (`node_order="most-free"`); each change costs the simulator's checkpoint-restart.

The artifact optimizes every interval; a round that can find nothing new (no arrival,
completion or node event, no running job past an epoch, nothing moved by the last round) is
skipped here (`next_wakeup`): the same decisions at the same times, in a fifth of the rounds on
the Philly trace.

The batch size stays as submitted. Step times are the artifact's prediction: replicas packed
4 per node, the local batch rounded up, gradient accumulation above the max local batch and at
least one accumulation step on a single replica, measured step and sync times (`perf`).
Parameter-server jobs (DL2 models) have no such profile: their step time is 1 / `ideal_rate`
and their cap `max_workers`.

Variants (options): `min_gain` > 0 rescales a running job only when the new size saves more than
that share of its remaining time (each rescale costs a restart); `replica_cap="spec"` caps at the
job's `max_workers` only; `node_order="pack"` places on as few nodes as possible.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

from ..errors import ConfigError
from ..model import Action, ClusterState, JobKind, JobState, JobStatus, Suspend, Wait
from .base import Policy, register
from .common import (
    MAX_WAIT_REASONS,
    MOST_FREE,
    by_arrival,
    check_node_order,
    commit_plans,
    in_applicable_order,
    reject_impossible,
)
from .teaching import BARS, top

# The smallest local batch measured per application: the artifact's `min_local_bsz` (the least
# `local_bsz` of simulator/traces/<app>/placements.csv, read in applications.py).
MIN_LOCAL_BSZ = {"bert": 4, "cifar10": 32, "deepspeech2": 10, "imagenet": 20, "ncf": 32,
                 "yolov3": 4}
# artifact simulator.py get_optimus_job_info: "if job.application.name == 'ncf': max_replicas = 1"
ONE_REPLICA_APPS = frozenset({"ncf"})
REPLICA_CAPS = ("batch", "spec")
MAX_QUIET_ROUNDS = 10  # rounds skipped at most while no epoch ends
EPOCH_EARLY_S = 1.0  # a round is asked for this much before an epoch ends: never after it
_RUNNING = JobState.RUNNING
_NO_GPU = "waiting: every GPU went to an older job's first worker (minimums oldest first)"


@register("optimus")
class OptimusPolicy(Policy):
    takes_placement = True
    quiet_restarts = True
    # artifact simulator.py: `policy.optimize` every interval. Remaining iterations move with
    # every epoch, so the allocation may change without any arrival or completion: the next
    # round is at the next epoch a running job completes (`next_wakeup`), the only change
    # between events; the rounds between would find what the last one found.

    def __init__(self, perf=None, round_interval: float = 60.0, min_gain: float = 0.0,
                 replica_cap: str = "batch", node_order: str = MOST_FREE) -> None:
        if perf is None:
            from ..perf import default_perf

            perf = default_perf()
        self.perf = perf
        self.round_interval = round_interval  # artifact simulator.py: `--interval 60`
        self.min_gain = min_gain
        if replica_cap not in REPLICA_CAPS:
            raise ConfigError(f"replica_cap: expected one of {', '.join(REPLICA_CAPS)},"
                              f" got {replica_cap!r}")
        self.replica_cap = replica_cap
        self.node_order = check_node_order(node_order)
        self._step_times: dict[tuple, float] = {}  # (app, batch, workers, GPUs/node) -> s
        self._acted = True  # the last round changed the cluster (or there was none)
        self._wakeup: tuple[ClusterState | None, float] = (None, 0.0)  # state -> next_wakeup

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_wakeup": (None, 0.0)}  # a copy holds no cluster state

    # ---- the artifact's predictions ------------------------------------------------------

    def cap(self, job: JobStatus) -> int:
        """Most workers the job may get: batch ÷ the app's smallest local batch (artifact
        simulator.py get_optimus_job_info: `target_batch_size // min_local_bsz`, ncf 1), never
        above the job's `max_workers`; `replica_cap="spec"`: `max_workers` alone."""
        spec = job.spec
        if self.replica_cap == "spec" or spec.application not in MIN_LOCAL_BSZ:
            return spec.max_workers
        if spec.application in ONE_REPLICA_APPS:
            return min(1, spec.max_workers)
        return max(min(spec.batch_size // MIN_LOCAL_BSZ[spec.application], spec.max_workers),
                   spec.min_workers)

    def step_time(self, job: JobStatus, workers: int, gpus_per_node: int) -> float:
        """Predicted seconds per iteration on `workers` (artifact optimus.py predict_step_time)."""
        spec = job.spec
        if spec.kind == JobKind.PS or spec.application not in MIN_LOCAL_BSZ:
            rate = self.perf.ideal_rate(spec, workers, gpus_per_node)
            return 1.0 / rate if rate > 0 else math.inf
        # a function of these alone, asked ~100 times per round: remembered
        key = (spec.application, spec.batch_size, workers, gpus_per_node)
        known = self._step_times.get(key)
        if known is None:
            known = self._step_times[key] = self._profiled_step_time(*key)
        return known

    def _profiled_step_time(self, app: str, batch_size: int, workers: int,
                            gpus_per_node: int) -> float:
        perf = self.perf
        full, rest = divmod(workers, gpus_per_node)  # packed, as many full nodes as it takes
        counts = (gpus_per_node,) * full + ((rest,) if rest else ())
        local = math.ceil(batch_size / workers - 1e-8)
        accum = math.ceil(local / perf.max_local_bsz(app) - 1e-8) - 1
        if workers == 1:
            accum = max(1, accum)  # the artifact's rule: one replica always accumulates
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        atomic = min(atomic, int(perf.measured_batch_sizes(app)[-1] / (workers * (accum + 1))))
        step, sync = perf.step_and_sync(app, counts, max(atomic, 1))
        return step + (step - sync) * accum

    def remaining_iterations(self, job: JobStatus) -> float:
        """Iterations left after the epochs completed so far, as the artifact counts them:
        total - (completed + 1) epochs, at least 1 (optimus.py: `get_iteration(bsz,
        completion_epoch) - get_iteration(bsz, epoch)`; epochs of equal length here)."""
        epochs = self._epochs(job)
        if epochs is None:
            return max(job.remaining_work, 1.0)
        per_epoch = job.spec.total_work / epochs
        return max(job.spec.total_work - (self._epochs_done(job, epochs) + 1) * per_epoch, 1.0)

    def _epochs(self, job: JobStatus) -> int | None:
        """The job's epochs by its application's profile; None without one."""
        try:
            return self.perf.max_epochs(job.spec.application)
        except KeyError:
            return None

    @staticmethod
    def _epochs_done(job: JobStatus, epochs: int, progress: float | None = None) -> int:
        """Epochs the job has completed (all of them for a job of no work)."""
        per_epoch = job.spec.total_work / epochs
        if per_epoch <= 0:
            return epochs
        return math.floor((job.progress if progress is None else progress) / per_epoch + 1e-9)

    def gain(self, job: JobStatus, workers: int, gpus_per_node: int,
             remaining: float | None = None) -> float:
        """Time saved by one more worker: the step-time drop × remaining iterations
        (artifact optimus.py: `(predict_step_time(n) - predict_step_time(n + 1)) * remaining`;
        `remaining`: `remaining_iterations(job)` when the caller has it)."""
        drop = self.step_time(job, workers, gpus_per_node) - \
            self.step_time(job, workers + 1, gpus_per_node)
        return drop * (self.remaining_iterations(job) if remaining is None else remaining)

    def next_wakeup(self, state: ClusterState | None) -> float | None:
        """The first time a running job's remaining iterations change (it completes an epoch,
        `remaining_iterations`), a little early; now while a placed job is not running (its
        epochs are not yet on a clock) or has no profile (its remaining work moves all the
        time); at most `MAX_QUIET_ROUNDS` rounds on (progress reported by a live cluster)."""
        if state is None or not state.jobs:
            return None
        if state is self._wakeup[0]:  # asked again before the next round (quiet events)
            return self._wakeup[1]
        wakeup = self._next_epoch_end(state)
        self._wakeup = (state, wakeup)
        return wakeup

    def _next_epoch_end(self, state: ClusterState) -> float:
        """`next_wakeup` of `state`, worked out."""
        now = state.now
        if self._acted:  # the cluster changed since `state` (its own actions): look again
            return now
        first = now + MAX_QUIET_ROUNDS * self.round_interval
        for job in state.iter_placed():
            if job.state is not _RUNNING or job.throughput <= 0:
                return now
            epochs = self._epochs(job)
            if epochs is None:
                return now
            per_epoch = job.spec.total_work / epochs
            if per_epoch <= 0:
                continue
            progress = job.progress
            boundary = (self._epochs_done(job, epochs, progress) + 1 - 2e-9) * per_epoch
            first = min(first, now + (boundary - progress) / job.throughput - EPOCH_EARLY_S)
        return max(first, now)

    # ---- a round -------------------------------------------------------------------------

    def allocate(self, jobs: list[JobStatus], gpus: float, gpus_per_node: int) -> dict[str, int]:
        """Workers per job (0: none), from scratch: minimums oldest first, then the largest
        gain one worker at a time; a tie goes to the older job (Python's `max` over the
        artifact's dict in arrival order)."""
        alloc = dict.fromkeys([j.name for j in jobs], 0)
        given: list[int] = []
        for i, job in enumerate(jobs):  # artifact optimus.py: minimums before any gain
            need = job.spec.worker_demand.gpu * job.spec.min_workers
            if need > gpus + 1e-9:
                continue
            alloc[job.name] = job.spec.min_workers
            gpus -= need
            given.append(i)
        if gpus <= 1e-9:
            return alloc  # typical on a busy cluster: no worker left to give by gain
        # Each job's next worker, queued after the minimums rather than as each is given: an
        # entry queued then with more GPUs left but needing more than are left now would be
        # skipped when popped, so the same workers go to the same jobs. Caps and remaining
        # iterations are fixed for the round.
        caps: dict[int, int] = {}
        remaining: dict[int, float] = {}
        heap: list[tuple[float, int, int]] = []
        for i in given:
            job = jobs[i]
            caps[i], remaining[i] = self.cap(job), self.remaining_iterations(job)
            self._push(heap, i, job, alloc[job.name], caps[i], gpus, gpus_per_node,
                       remaining[i])
        while heap and gpus > 1e-9:
            _, i, w = heapq.heappop(heap)
            job = jobs[i]
            g = job.spec.worker_demand.gpu
            if g > gpus + 1e-9:
                continue
            alloc[job.name] = w + 1
            self._push(heap, i, job, w + 1, caps[i], gpus, gpus_per_node, remaining[i])
            gpus -= g
        return alloc

    def _push(self, heap: list, i: int, job: JobStatus, w: int, cap: int, gpus: float,
              gpus_per_node: int, remaining: float) -> None:
        """Queue the job's next worker, unless it is at its cap or no GPU is left (the
        artifact's `gain = 0`)."""
        if w + 1 > cap or gpus < job.spec.worker_demand.gpu - 1e-9:
            return
        gain = self.gain(job, w, gpus_per_node, remaining)
        if gain > 0:
            heapq.heappush(heap, (-gain, i, w))

    def _keeps_size(self, job: JobStatus, w: int, gpn: int, waiting: bool) -> bool:
        """Variant `min_gain` > 0: a running job keeps its size unless the change saves more
        than `min_gain` of its remaining time (or, shrinking, someone waits for the GPUs)."""
        current = job.num_workers
        now_t = self.step_time(job, current, gpn) * self.remaining_iterations(job)
        new_t = self.step_time(job, w, gpn) * self.remaining_iterations(job)
        if w > current:
            return now_t - new_t < self.min_gain * now_t
        return not waiting and new_t > now_t * (1 + self.min_gain)

    def schedule(self, state: ClusterState) -> list[Action]:
        actions, jobs = reject_impossible(state, by_arrival(list(state.active)))
        self._acted = bool(actions)
        if not jobs:
            return actions
        gpn = int(max(state.capacity[:, 2].max(), 1))
        alloc = self.allocate(jobs, float(state.capacity[state.node_up, 2].sum()), gpn)
        if self.min_gain > 0:
            waiting = any(w == 0 for w in alloc.values())
            for job in jobs:
                w = alloc[job.name]
                if job.state.placed and w and w != job.num_workers and \
                        self._keeps_size(job, w, gpn, waiting):
                    alloc[job.name] = job.num_workers
        ledger = self.ledger(state)
        plans: list[tuple[JobStatus, int]] = []
        waits = 0
        for job in jobs:
            w = alloc[job.name]
            if job.state.placed and w == job.num_workers:
                continue  # artifact optimus.py: an allocation of the same size is kept
            if job.state.placed:
                ledger.give_back(job.workers, job.spec.worker_demand)
                ledger.give_back(job.ps, job.spec.ps_demand)
                if w == 0:
                    actions.append(Suspend(job.name, f"preempted: {_NO_GPU[9:]}"))
                    continue
            if w:
                plans.append((job, w))
            elif not job.state.placed and waits < MAX_WAIT_REASONS and job.reason != _NO_GPU:
                actions.append(Wait(job.name, _NO_GPU))
                waits += 1
        plans.sort(key=lambda p: p[1])  # artifact optimus.py: smallest first (stable: oldest)
        actions += commit_plans(
            ledger, plans, wait_label="Optimus allocation", node_order=self.node_order,
            scale_reason=lambda job, w: (f"rescaled {job.num_workers}→{w} workers: largest"
                                         " marginal gain in remaining time"),
            place_reason=lambda job, w: f"started with {w} workers by marginal gain")
        # artifact simulator.py applies a round's allocations at once; a backend applies them
        # one by one, so those that free GPUs go first
        self._acted = any(type(a) is not Wait for a in actions)
        return in_applicable_order(state, actions)

    def engine_view(self, state: ClusterState | None = None) -> dict[str, Any]:
        """Optimus's greedy step now: for each active job the hours one more worker would save
        (its marginal gain; the largest gets the next GPU) and the workers it holds."""
        view: dict[str, Any] = {**super().engine_view(state),
                                "rule": "every job its minimum (oldest first), then each GPU to"
                                " the job whose remaining time one more worker cuts most"}
        if state is None or not len(state.nodes):
            return view
        gpn = int(max(state.capacity[:, 2].max(), 1))
        jobs = sorted(state.active, key=lambda j: (j.spec.arrival, j.name))[:2 * BARS]
        gains = {}
        for job in jobs:
            w = max(job.num_workers, job.spec.min_workers)
            try:
                gains[job.name] = max(self.gain(job, w, gpn), 0.0) / 3600.0 \
                    if w + 1 <= self.cap(job) else 0.0
            except (KeyError, ValueError):  # an application the model does not profile
                continue
        workers = {j.name: j.num_workers for j in state.iter_placed()}
        return {**view, "marginal_gain_h": top(gains) or {"(no active job)": 0.0},
                "workers": top(workers) or {"(no job running)": 0}}
