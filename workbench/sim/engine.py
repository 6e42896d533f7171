"""The discrete-event simulator: `SimBackend` jumps from event to event on a virtual clock.

Events are job arrivals, completions, the end of a checkpoint-restart delay, and injected
node failures/recoveries. Between events every running job advances at the rate the
performance model gives for its current placement; progress is brought up to date lazily
(when read or when the job changes, see `LiveJobStatus`), so a step costs O(events), not O(jobs).

Modelling choices (documented defaults):
- Every change of a job's allocation, its first start included, costs `restart_delay`
  seconds with no progress (30 s, as in the Pollux artifact's simulator).
- A failed node's jobs go back to waiting with the progress of their last checkpoint,
  taken every `checkpoint_interval` seconds of training (default 600 s).
- Contention (off by default): a task uses `cpu_burst` × its CPU request when unthrottled;
  where the running tasks on a node want more cores than it has, the cores are shared in
  proportion to the requests (CPU shares, water-filled: a task never gets more than it wants),
  and a job runs at the pace of its most squeezed node (see `cpu_share_factors`). Tasks that
  want no more than they request (`cpu_burst` 1.0, the default) are never slowed, and whole
  GPUs are exclusive, so only CPU is contended.
"""

from __future__ import annotations

import bisect
import contextlib
import contextvars
import copy
import gc
import heapq
import math
import operator
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from ..backend import Outcome, VirtualClock, refusal
from ..errors import ConfigError, check_number
from ..model import (
    CPU,
    GPU,
    MEM,
    Action,
    Admit,
    ClusterState,
    JobSpec,
    JobState,
    JobStatus,
    Migrate,
    Node,
    Place,
    Placement,
    Reject,
    Resources,
    Scale,
    Suspend,
    Wait,
    describe_placement,
    merge_placements,
    placement_counts,
    placement_need,
    total,
)
from ..perf.goodput import adaptive_rate
from .live import LiveJobStatus
from .queue import WaitingQueue
from .snapshot import MAX_RESTART_DELAY, Snapshot, take

_EPS = 1e-9
_ARRIVAL = operator.attrgetter("arrival")
_WHOLE = 1 - _EPS  # a GPU this free is whole
# whole numbers below this add up exactly in any order over up to 2**21 nodes (sums < 2**53)
_EXACT = 2.0**32
# The states the hot paths set and test, as globals: in Python 3.11 a member read through its
# Enum class goes through `EnumType.__getattr__`'s slow path (5x a global's cost).
_PENDING, _RESTARTING, _RUNNING, _COMPLETED = (JobState.PENDING, JobState.RESTARTING,
                                                JobState.RUNNING, JobState.COMPLETED)


@dataclass(frozen=True, order=True)
class Fault:
    """Node `node` fails at `time` and comes back `duration` seconds later (None: never)."""

    time: float
    node: str
    duration: float | None = 3600.0


@dataclass
class Usage:
    """Integrals over time, for utilisation metrics (resource-seconds)."""

    gpu_allocated: float = 0.0
    gpu_effective: float = 0.0  # held by jobs that are training, not waiting or restarting
    cpu_allocated: float = 0.0
    cpu_effective: float = 0.0
    gpu_capacity: float = 0.0
    cpu_capacity: float = 0.0


# (since, until) of `pickled_without_settled` while a pickle runs in this context (None: none)
_SETTLED_BY: contextvars.ContextVar[tuple[float, float | None] | None] = contextvars.ContextVar(
    "settled_by", default=None)


@contextlib.contextmanager
def pickled_without_settled(since: float, until: float | None = None) -> Iterator[None]:
    """Within the block, a `SimBackend` pickled in this thread leaves out what a run forward
    from its present never reads: the jobs finished by `since` and the specs of the jobs
    arrived (a Philly run at mid-trace pickles to 67 MB with them, 13.5 MB without), and, with
    `until`, the specs of the jobs arriving after it but the first (a run to `until` reads no
    other; the first keeps the next arrival and `done` as they were). At Philly mid-trace a
    4-hour look-ahead needs 53 of 30,486 specs to come, whose unpickling took 0.3 s in each
    worker. For sending a look-ahead to another process; the run itself is not touched.
    `since`: the last round's time or earlier (`Controller.carry_on` reads the jobs finished
    after it). The copy's whole-run metrics would miss the jobs left out: its
    `finished_left_out` and `arrivals_left_out` count them and `run_metrics` refuses it."""
    token = _SETTLED_BY.set((since, until))
    try:
        yield
    finally:
        _SETTLED_BY.reset(token)


def _checked_faults(faults: Sequence[Fault], nodes: dict[str, int]) -> list[Fault]:
    """`faults`, or a one-line ConfigError naming the first that is not a `Fault` on one of
    `nodes` at a finite time >= 0 lasting a finite time > 0 (or None): a notebook's
    `Workbench(faults=...)` reaches no CLI flag ('bogus' was an AttributeError of the engine)."""
    if isinstance(faults, (str, bytes)) or not isinstance(faults, Sequence):
        raise ConfigError(f"faults: expected a list of Fault(time, node, duration), got {faults!r}")
    for i, f in enumerate(faults):
        if not isinstance(f, Fault):
            raise ConfigError(f"faults[{i}]: expected a Fault(time, node, duration), got {f!r}")
        if f.node not in nodes:
            raise ConfigError(f"faults[{i}]: unknown node {f.node!r}")
        check_number(f"faults[{i}].time", f.time, minimum=0.0)
        if f.duration is not None and check_number(f"faults[{i}].duration", f.duration,
                                                   minimum=0.0) <= 0:
            raise ConfigError(f"faults[{i}].duration: expected a finite number > 0 (or None:"
                              f" never back), got {f.duration!r}")
    return list(faults)


class SimBackend:
    def __init__(self, nodes: Sequence[Node], jobs: Sequence[JobSpec], perf=None, *,
                 restart_delay: float = 30.0, checkpoint_interval: float = 600.0,
                 faults: Sequence[Fault] = (), contention: bool = False,
                 history_interval: float = 300.0) -> None:
        if perf is None:
            from ..perf import default_perf

            perf = default_perf()
        self.perf = perf
        self.nodes = list(nodes)
        if not self.nodes:  # (a notebook's simulate([], ...): one line, a ConfigError)
            raise ConfigError("nodes: the cluster has no nodes")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError("node names must be unique")
        self.node_index = {n: i for i, n in enumerate(names)}
        self.capacity = np.array([[n.cpus, n.mem, n.gpus] for n in self.nodes], dtype=float)
        self.allocated = np.zeros_like(self.capacity)
        max_g = max(int(n.gpus) for n in self.nodes) or 1
        self.gpu_free = np.full((len(self.nodes), max_g), np.nan)
        for i, n in enumerate(self.nodes):
            self.gpu_free[i, : n.gpus] = 1.0
        self.node_up = np.ones(len(self.nodes), dtype=bool)
        # checked here too: a notebook's Workbench(restart_delay=...) reaches no CLI flag
        self.restart_delay = check_number("restart_delay", restart_delay, minimum=0.0,
                                          maximum=MAX_RESTART_DELAY)
        self.checkpoint_interval = check_number("checkpoint_interval", checkpoint_interval,
                                                minimum=0.0)  # (NaN: no checkpoint, silently)
        self.contention = contention
        self.history_interval = history_interval

        self._specs = sorted(jobs, key=lambda s: (s.arrival, s.name))
        seen: set[str] = set()
        for s in self._specs:
            if s.name in seen:
                raise ConfigError(f"jobs: two jobs are named {s.name!r}; a job's name is its own")
            seen.add(s.name)
        self._next_arrival = 0
        self._arrival_at = self._specs[0].arrival if self._specs else math.inf  # the next one's
        self.jobs: dict[str, JobStatus] = {}  # every arrived job, finished ones included
        self.active: dict[str, JobStatus] = {}  # arrived and not finished
        self.finished: list[JobStatus] = []  # in the order they completed or were rejected
        self._queue = WaitingQueue()
        self._running: dict[str, JobStatus] = {}  # state RUNNING: progress advancing
        self._running_use: dict[str, tuple[float, float]] = {}  # their GPUs and CPUs, as added
        self._placed: dict[str, JobStatus] = {}  # holding resources: holding, restarting, running
        self._held: dict[str, list[tuple[int, int, float]]] = {}  # job -> (node, gpu, amount)
        self._checkpoint: dict[str, float] = {}
        self._version: dict[str, int] = {}
        self._completions: list[tuple[float, int, str, int]] = []
        self._restarts: list[tuple[float, int, str, int]] = []
        self._faults: list[tuple[float, int, str, str]] = []  # (time, seq, "fail"/"recover", node)
        self._seq = 0
        for f in _checked_faults(faults, self.node_index):
            self.inject_fault(f)
        self._now = self._specs[0].arrival if self._specs else 0.0
        self.usage = Usage()
        self._effective = [0.0, 0.0]  # GPUs, CPUs held by jobs that are training
        self._usage_time = self._now
        self._totals: tuple[float, float, float, float] | None = None  # for _accumulate_usage
        self._alloc_sums: list[float] | None = [0.0, 0.0]  # see `_row_changed`
        self._capacity_totals: tuple[float, float] | None = None
        self.events: list[tuple[float, str, str]] = []  # (time, kind, subject) of faults
        self.clock = VirtualClock()

    # ---- Backend protocol ---------------------------------------------------------------

    @property
    def now(self) -> float:
        return self._now

    def submit(self, spec: JobSpec) -> None:
        if spec.name in self.jobs or any(s.name == spec.name for s in self._specs[self._next_arrival:]):
            raise ValueError(f"duplicate job name {spec.name!r}")
        spec = spec if spec.arrival >= self._now else spec.with_(arrival=self._now)
        pending = self._specs[self._next_arrival:]
        pending.append(spec)
        pending.sort(key=lambda s: (s.arrival, s.name))
        self._specs[self._next_arrival:] = pending
        self._arrival_at = pending[0].arrival

    def inject_fault(self, fault: Fault) -> None:
        if fault.node not in self.node_index:
            raise ValueError(f"fault names unknown node {fault.node!r}")
        self._push(self._faults, fault.time, "fail", fault.node)
        if fault.duration is not None:
            self._push(self._faults, fault.time + fault.duration, "recover", fault.node)

    def observe(self) -> ClusterState:
        # Running jobs' progress is read lazily (LiveJobStatus): nothing to bring up to date.
        interval = self.history_interval
        if interval is not None:
            now = self._now
            for job in self._running.values():
                h = job.history  # `_record_history`'s test inline: most rounds record nothing
                if not h or now - h[-1][0] >= interval:
                    self._record_history(job)
        return ClusterState(
            now=self._now, nodes=self.nodes, capacity=self.capacity.copy(),
            allocated=self.allocated.copy(), gpu_free=self.gpu_free.copy(),
            node_up=self.node_up.copy(), jobs=self.active, node_index=self.node_index,
            queue=self._queue, placed=self._placed.values(),
        )

    def next_event_time(self) -> float | None:
        """The earliest of arrivals, completions, faults and restart ends; None if none."""
        t = self._next_decision_at()
        heap = self._restarts
        if heap:
            top = heap[0]  # `_live_top`, its usual case inline: the top entry is live
            if self._version.get(top[2]) != top[3]:
                top = _live_top(heap, self._version)
            if top is not None and top[0] < t:
                t = top[0]
        return None if t == math.inf else t

    def next_decision_time(self) -> float | None:
        """Like next_event_time, without restart ends: those change no free resources."""
        t = self._next_decision_at()
        return None if t == math.inf else t

    def _next_decision_at(self) -> float:
        """`next_decision_time`, inf for none."""
        t = self._arrival_at  # inf: none left
        heap = self._completions
        if heap:
            top = heap[0]
            if self._version.get(top[2]) != top[3]:
                top = _live_top(heap, self._version)
            if top is not None and top[0] < t:
                t = top[0]
        if self._faults and self._faults[0][0] < t:
            t = self._faults[0][0]
        return t

    def done(self) -> bool:
        return self._next_arrival >= len(self._specs) and not self.active

    def pending_arrivals(self) -> int:
        return len(self._specs) - self._next_arrival

    def next_arrival_time(self) -> float | None:
        """When the next job arrives; None when none is to come."""
        i = self._next_arrival
        return self._specs[i].arrival if i < len(self._specs) else None

    def advance(self, until: float) -> None:
        while True:
            t = self.next_event_time()
            if t is None or t > until:
                break
            self._accumulate_usage(t)
            self._now = max(self._now, t)
            self._process_events_at(t)
        self._accumulate_usage(max(until, self._now))
        self._now = max(until, self._now)

    def apply(self, actions: Sequence[Action]) -> list[Outcome]:
        outcomes = []
        for action in actions:
            try:
                detail = self._apply_one(action)
                outcomes.append(Outcome(action, True, detail))
            except _Refused as r:
                outcomes.append(Outcome(action, False, str(r)))
        return outcomes

    def interrupt(self) -> None:
        """Nothing to wake: the simulator's `advance` never waits."""

    def close(self) -> None:
        """Nothing to let go of."""

    def gpu_holders(self) -> dict[str, list[tuple[int, int, float]]]:
        """Per job, the GPUs it holds as (node index, GPU index, amount)."""
        return {name: gpus for name, gpus in self._held.items() if gpus}

    def snapshot(self, engine: str = "") -> Snapshot:
        """The present as a `Snapshot` (as a live cluster's is taken; `fork` copies it exactly)."""
        return take(self, self.observe(), source="simulator", engine=engine,
                    restart_delay=self.restart_delay, checkpoint_interval=self.checkpoint_interval,
                    upcoming=self._specs[self._next_arrival:], clock_origin=self.clock.origin)

    # ---- restoring a snapshot (sim.restore) ----------------------------------------------

    def restore_job(self, found: JobStatus) -> None:
        """Put the arrived job `found.name` where a snapshot found it (`found`: its status
        then): finished, waiting, or placed on `found.workers`/`found.ps` and running from
        now with no restart delay (restarting: paying a full one; holding: a partial gang).
        Its progress, service, restarts and history are taken over. ValueError naming the
        job when its placement does not fit."""
        job = self.jobs[found.name]
        for attr in ("progress", "attained_service", "executed_time", "restarts", "admitted",
                     "reason", "metric", "history", "first_start", "finish_time"):
            setattr(job, attr, copy.copy(getattr(found, attr)))
        if found.state is JobState.PENDING:
            return
        self._queue.discard(job.name)
        if found.state.finished:
            job.state = found.state
            self._bump(job)
            del self.active[job.name]
            self.finished.append(job)
            return
        try:
            self._allocate(job, found.workers, found.ps)
        except _Refused as e:
            raise ValueError(str(e)) from None
        job.target_workers = found.target_workers or job.num_workers
        job.target_ps = found.target_ps or job.num_ps
        if found.state is JobState.HOLDING:
            job.state = JobState.HOLDING
            self._queue.add(job)
        elif found.state is JobState.RESTARTING:
            self._begin_restart(job)
        else:
            self._start_running(job)
        job.last_start = found.last_start if found.last_start is not None else job.last_start

    def hold_background(self, node: str, held: Resources) -> None:
        """Resources on `node` held by something no engine schedules (another scheduler's
        pods on a live cluster): never free for the jobs."""
        i = self.node_index[node]
        self.allocated[i] += held.as_array()
        self._alloc_sums = None
        self.gpu_free[i, _whole_gpus(self.gpu_free[i], math.ceil(held.gpu - _EPS))] = 0.0
        self._totals = None

    def set_schedulable(self, node: str, up: bool) -> None:
        """Whether `node` takes new work; unlike a fault, the jobs on it carry on (a cordon)."""
        self.node_up[self.node_index[node]] = up
        self._totals = self._capacity_totals = None

    def reset_usage(self) -> None:
        """Count utilisation from now on only (a run restored from a snapshot starts now)."""
        self.usage = Usage()
        self._usage_time = self._now

    def fork(self) -> "SimBackend":
        """An independent copy for what-if runs. It shares what never changes: the perf
        model, the nodes, the job specs (frozen), and the finished jobs (no action or event
        changes a job once it has left `active`: `LiveJobStatus.in_fork`). A full deep copy of
        a Philly run at mid-trace took 7 s, mostly finished jobs' histories and specs; this
        takes well under a second (docs/sim-performance.md)."""
        collecting = gc.isenabled()
        gc.disable()  # ~150 k new objects would set off full collections of a large heap
        try:
            return self._fork()
        finally:
            if collecting:
                gc.enable()

    finished_left_out = 0  # finished jobs left out when this copy was pickled (0: none)
    arrivals_left_out = 0  # jobs to come left out when it was pickled (0: none)

    def __getstate__(self) -> dict:
        """What pickling keeps: everything, or inside `pickled_without_settled(since, until)`
        not the jobs finished by `since`, the specs of the jobs arrived, nor (with `until`)
        those of the jobs arriving after it but the first (see there)."""
        window = _SETTLED_BY.get()
        if window is None:
            return self.__dict__
        since, until = window
        finished = [j for j in self.finished if j.finish_time is None or j.finish_time > since]
        kept = {j.spec.name for j in finished}
        specs = self._specs[self._next_arrival:]
        to_come = len(specs)
        if until is not None:  # arrivals are in time order: up to the first after `until`
            specs = specs[:bisect.bisect_right(specs, until, key=_ARRIVAL) + 1]
        return {**self.__dict__, "finished": finished,
                "jobs": {name: j for name, j in self.jobs.items()
                         if name in self.active or name in kept},
                "_specs": specs, "_next_arrival": 0,
                "finished_left_out": self.finished_left_out + len(self.finished) - len(kept),
                "arrivals_left_out": self.arrivals_left_out + to_come - len(specs)}

    def _fork(self) -> "SimBackend":
        twin = type(self).__new__(type(self))
        memo: dict[int, object] = {id(self): twin, id(self.perf): self.perf}
        # What is shared is mapped to itself, in C (a Philly run holds ~80 k specs and ~50 k
        # finished jobs: a Python loop over them was most of a fork's 0.15 s).
        specs, nodes, finished = self._specs, self.nodes, self.finished
        memo.update(zip(map(id, specs), specs))
        memo.update(zip(map(id, nodes), nodes))
        memo[id(specs)] = list(specs)
        # Flat containers of immutable values (floats, ints, tuples of them) are copied flat.
        for flat in (self._version, self._checkpoint):
            memo[id(flat)] = dict(flat)
        for job in self.active.values():
            memo[id(job.history)] = list(job.history)
        live = [job for job in finished if isinstance(job, LiveJobStatus)]
        memo.update(zip(map(id, live), live))  # `LiveJobStatus.in_fork`: itself, once it no
        for job in live:                       # longer accrues; a copy while it does
            if job.accruing:
                memo[id(job)] = job.in_fork(twin)
        for job in self.active.values():
            job.fork_copy(memo)
        twin_of = memo.__getitem__
        if all(map(memo.__contains__, map(id, self.jobs.values()))):
            memo[id(self.jobs)] = dict(zip(self.jobs, map(twin_of, map(id, self.jobs.values()))))
            memo[id(finished)] = list(map(twin_of, map(id, finished)))
        twin.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return twin

    # ---- events -------------------------------------------------------------------------

    def _push(self, heap, t, *rest) -> None:
        self._seq += 1
        heapq.heappush(heap, (t, self._seq, *rest))

    def _process_events_at(self, t: float) -> None:
        if self._arrival_at <= t:
            specs = self._specs
            while self._next_arrival < len(specs) and specs[self._next_arrival].arrival <= t:
                spec = specs[self._next_arrival]
                self._next_arrival += 1
                job = LiveJobStatus(self, spec=spec, target_workers=spec.initial_workers,
                                    target_ps=spec.num_ps,
                                    reason="waiting: arrived, not yet scheduled")
                self.jobs[spec.name] = job
                self.active[spec.name] = job
                self._queue.add(job)
                self._version[spec.name] = 0
            k = self._next_arrival
            self._arrival_at = specs[k].arrival if k < len(specs) else math.inf
        while self._faults and self._faults[0][0] <= t:
            _, _, kind, node = heapq.heappop(self._faults)
            self._fail(node) if kind == "fail" else self._recover(node)
        version, jobs = self._version, self.jobs
        restarts, completions = self._restarts, self._completions
        # due entries in order, stale ones (an older version) dropped; each popped before it is
        # handled (a handler may push onto its heap)
        while restarts and (version.get(restarts[0][2]) != restarts[0][3] or restarts[0][0] <= t):
            _, _, name, v = heapq.heappop(restarts)
            if version.get(name) == v:
                self._start_running(jobs[name])
        while completions and (version.get(completions[0][2]) != completions[0][3]
                               or completions[0][0] <= t):
            _, _, name, v = heapq.heappop(completions)
            if version.get(name) == v:
                self._complete(jobs[name])

    def _bump(self, job: JobStatus) -> int:
        v = self._version[job.name] = self._version.get(job.name, 0) + 1
        return v

    def _start_running(self, job: JobStatus) -> None:
        job.state = _RUNNING
        job.last_start = self._now
        if job.first_start is None:
            job.first_start = self._now
        job.throughput = self._rate(job)
        job.start_accruing()
        self._set_running(job)
        self._schedule_completion(job)
        if self.contention:
            self._refresh_contention(job.nodes)

    def _set_running(self, job: JobStatus) -> None:
        self._running[job.name] = job
        gpu, cpu = self._running_use[job.name] = _gpus_cpus(job)
        self._effective[0] += gpu
        self._effective[1] += cpu

    def _stop_running(self, job: JobStatus) -> None:
        if self._running.pop(job.name, None) is not None:
            job.stop_accruing()
            gpu, cpu = self._running_use.pop(job.name)  # taken away exactly as added
            self._effective[0] -= gpu
            self._effective[1] -= cpu

    def _schedule_completion(self, job: JobStatus) -> None:
        name = job.name
        v = self._version[name] = self._version.get(name, 0) + 1  # `_bump`, inlined
        if job.throughput > 0:
            remaining = max(job.spec.total_work - job.progress, 0.0)  # `remaining_work`
            self._seq += 1  # `_push`, inlined
            heap = self._completions
            heapq.heappush(heap, (self._now + remaining / job.throughput, self._seq, name, v))
            if len(heap) > 4 * len(self._running) + 64:
                self._drop_stale(heap)

    def _drop_stale(self, heap: list) -> None:
        """Remove the entries of an event heap that are no longer the job's (an older version):
        a preempted job's completion would otherwise stay until its time, and the Philly
        replay's heap held ~2,600 entries for ~170 running jobs. The live entries pop in the
        same order (time, then a unique sequence number)."""
        version = self._version
        heap[:] = [e for e in heap if version.get(e[2]) == e[3]]
        heapq.heapify(heap)

    def _complete(self, job: JobStatus) -> None:
        job.catch_up()  # `_sync` without the checkpoint: a finished job never resumes
        self._record_history(job)
        job.progress = job.spec.total_work
        self._release(job)
        job.state = _COMPLETED
        job.finish_time = self._now
        job.throughput = 0.0
        job.reason = "completed"
        if self.history_interval is not None:
            self._record_history(job, force=True)
        del self.active[job.name]
        self.finished.append(job)

    def _fail(self, node: str) -> None:
        i = self.node_index[node]
        if not self.node_up[i]:
            return
        self.events.append((self._now, "node-failed", node))
        victims = [j for j in self.active.values() if node in j.nodes]
        for job in victims:
            self._sync(job)
            job.progress = min(job.progress, self._checkpoint.get(job.name, 0.0))
            self._release(job)
            job.state = JobState.PENDING
            self._queue.add(job)
            job.reason = f"waiting: node {node} failed; resumes from checkpoint at {job.progress:,.0f} iterations"
        self.node_up[i] = False
        self._totals = self._capacity_totals = None

    def _recover(self, node: str) -> None:
        i = self.node_index[node]
        self.node_up[i] = True
        self._totals = self._capacity_totals = None
        self.events.append((self._now, "node-recovered", node))

    # ---- progress -----------------------------------------------------------------------

    def _rate(self, job: JobStatus) -> float:
        if job.spec.adaptive_batch:  # it picks its batch each epoch: goodput, perf/goodput.py
            rate = adaptive_rate(self.perf, job.spec, placement_counts(job.workers), job.progress)
        else:
            rate = self.perf.iteration_rate(job.spec, job.workers, job.ps)
        if self.contention:
            rate *= self._contention_factor(job)
        return rate

    def _contention_factor(self, job: JobStatus) -> float:
        """Slowdown of a job from co-located jobs that want more cores than a node has.

        On each node the job's tasks get cores in proportion to their requests (see
        `cpu_share_factors`); the job runs at the pace of its most squeezed node.
        """
        worst = 1.0
        for name in job.nodes:
            worst = min(worst, self._node_cpu_factors(self.node_index[name]).get(job.name, 1.0))
        return worst

    def _node_cpu_factors(self, i: int) -> dict[str, float]:
        name = self.nodes[i].name
        want: dict[str, float] = {}
        weight: dict[str, float] = {}
        for j in self._running.values():
            w, p = j.workers.get(name, 0), j.ps.get(name, 0)
            if not (w or p):
                continue
            request = j.spec.worker_demand.cpu * w + j.spec.ps_demand.cpu * p
            want[j.name] = request * j.spec.cpu_burst
            weight[j.name] = max(request, 1e-3)  # a best-effort pod still gets a minimal share
        return cpu_share_factors(float(self.capacity[i, CPU]), want, weight)

    def _refresh_contention(self, nodes: set[str]) -> None:
        for job in list(self._running.values()):
            if job.nodes & nodes:
                self._sync(job)
                new = self._rate(job)
                if abs(new - job.throughput) > 1e-12:
                    job.throughput = new
                    self._schedule_completion(job)

    def _sync(self, job: JobStatus) -> None:
        """Store a running job's progress and service as of now (before its rate changes), and
        bring its checkpoint up to date."""
        if job.state is not _RUNNING:
            return
        now = self._now
        job.catch_up()
        if self.history_interval is not None:
            self._record_history(job)
        interval = self.checkpoint_interval
        if interval > 0:
            start = now if job.last_start is None else job.last_start
            if now - start >= interval:
                # Checkpoints are taken every interval of training since the last start.
                at = start + (now - start) // interval * interval
                saved = self._checkpoint.get(job.name, 0.0)
                self._checkpoint[job.name] = max(saved, job.progress - job.throughput * (now - at))

    def _record_history(self, job: JobStatus, force: bool = False) -> None:
        if self.history_interval is None:
            return
        h = job.history
        if force or not h or self._now - h[-1][0] >= self.history_interval:
            metric = self._metric(job)
            job.metric = metric
            h.append((self._now, job.progress, metric))

    def _metric(self, job: JobStatus) -> float:
        try:
            return float(self.perf.metric_at(job.spec.application, job.spec.batch_size, job.progress))
        except Exception:  # a model without a convergence curve reports progress only
            return float("nan")

    # ---- actions ------------------------------------------------------------------------

    def _apply_one(self, action: Action) -> str:
        job = self.active.get(action.job)
        if job is None:
            raise _Refused(f"{action.job}: no such active job")
        if isinstance(action, Wait):  # the most common action; refusal() lets every Wait through
            job.reason = action.reason
            return ""
        if (why := refusal(job, action)) is not None:
            raise _Refused(why)
        if isinstance(action, Place):  # the most common after Wait (the classes are disjoint)
            return self._place(job, action)
        if isinstance(action, Admit):
            job.admitted = True
            job.reason = action.reason
            return ""
        if isinstance(action, Reject):
            if job.state.placed:
                self._sync(job)
                self._release(job)
            job.state = JobState.REJECTED
            self._queue.discard(job.name)
            job.finish_time = self._now
            job.reason = action.reason
            self._bump(job)
            del self.active[job.name]
            self.finished.append(job)
            return ""
        if isinstance(action, Suspend):
            self._sync(job)
            self._release(job)
            job.state = _PENDING
            self._queue.add(job)
            job.reason = action.reason
            return ""
        return self._reshape(job, action)  # Scale or Migrate: refusal() let no other through

    def _place(self, job: JobStatus, a: Place) -> str:
        if a.partial:
            self._allocate(job, a.workers, a.ps)
            job.target_workers, job.target_ps = job.spec.initial_workers, job.spec.num_ps
            job.reason = a.reason
            if job.num_workers == job.target_workers and job.num_ps == job.target_ps:
                self._begin_restart(job)
            else:
                job.state = JobState.HOLDING
            return ""
        self._allocate(job, a.workers, a.ps)
        job.target_workers, job.target_ps = sum(a.workers.values()), sum(a.ps.values())  # total()
        job.reason = a.reason
        job.admitted = True
        if job.first_start is not None:
            job.restarts += 1  # resumed after a preemption or failure
        self._begin_restart(job)
        return describe_placement(a.workers, a.ps)

    def _reshape(self, job: JobStatus, a: Scale | Migrate) -> str:
        self._sync(job)
        old_w, old_p = dict(job.workers), dict(job.ps)
        self._release(job)
        try:
            self._allocate(job, a.workers, a.ps)
        except _Refused:
            self._allocate(job, old_w, old_p)  # put it back as it was
            self._begin_restart(job, count=False, delay=0.0)
            raise
        self._checkpoint[job.name] = job.progress  # a reshape starts from a fresh checkpoint
        job.target_workers, job.target_ps = total(a.workers), total(a.ps)
        job.reason = a.reason
        job.restarts += 1
        self._begin_restart(job, count=False)
        return describe_placement(a.workers, a.ps)

    def _begin_restart(self, job: JobStatus, count: bool = True, delay: float | None = None) -> None:
        name = job.name
        if name in self._running:
            self._stop_running(job)
        self._queue.discard(name)
        job.throughput = 0.0
        job.state = _RESTARTING
        delay = self.restart_delay if delay is None else delay
        v = self._version[name] = self._version.get(name, 0) + 1  # `_bump`, inlined
        self._seq += 1  # `_push`, inlined
        heapq.heappush(self._restarts, (self._now + delay, self._seq, name, v))
        if self.contention:
            self._refresh_contention(job.nodes)

    def _allocate(self, job: JobStatus, workers: Placement, ps: Placement) -> None:
        if not ps and not job.workers and not job.ps and self._allocate_workers(job, workers):
            return
        try:
            need, tasks = placement_need(job.spec, workers, ps, self.nodes, self.node_index,
                                         self.node_up, self.capacity, self.allocated)
        except ValueError as e:
            raise _Refused(str(e)) from None
        taken: list[tuple[int, int, float]] = []
        try:
            for i, count, g in tasks:
                taken += self._take_gpus(i, g, count, job.name)
        except _Refused:
            for i, g, amount in taken:
                self.gpu_free[i, g] += amount
            raise
        held = self._held.get(job.name)
        if held is None:
            self._held[job.name] = taken
        else:
            held += taken
        allocated = self.allocated
        for i, (cpu, mem, gpu) in need.items():  # element by element: a row from a list costs more
            allocated[i, CPU] += cpu
            allocated[i, MEM] += mem
            allocated[i, GPU] += gpu
        self._totals = self._alloc_sums = None
        self._placed[job.name] = job
        # merge_placements, with the usual case (nothing held before) a filtered copy
        job.workers = merge_placements(job.workers, workers) if job.workers else \
            {n: c for n, c in workers.items() if c}
        job.ps = merge_placements(job.ps, ps) if job.ps else {n: c for n, c in ps.items() if c}

    def _allocate_workers(self, job: JobStatus, workers: Placement) -> bool:
        """`_allocate` of workers alone for a job holding nothing, whose tasks take whole GPUs
        (or none): most placements. The same checks and the same arithmetic as
        `placement_need` and `_take_gpus`, each node read once. False, with nothing changed,
        where the general path must answer (it refuses, with its reasons; or fractional GPUs
        or an empty count)."""
        demand = job.spec.worker_demand
        g = demand.gpu
        if 0 < g < 1:
            return False
        d_cpu, d_mem, d_gpu = float(demand.cpu), float(demand.mem), float(g)
        per = int(round(g))  # noqa: RUF046 - as `_take_gpus` counts them
        index, up, allocated, gpu_free = self.node_index, self.node_up, self.allocated, \
            self.gpu_free
        plan = []  # (node, its GPUs to take, its CPU and GPU before, its row of allocated after)
        for name, count in workers.items():
            i = index.get(name)
            if count <= 0 or i is None or not up[i]:
                return False
            n_cpu, n_mem, n_gpu = d_cpu * count, d_mem * count, d_gpu * count
            u_cpu, u_mem, u_gpu = allocated[i].tolist()
            c_cpu, c_mem, c_gpu = self.capacity[i].tolist()
            if u_cpu + n_cpu > c_cpu + 1e-6 or u_mem + n_mem > c_mem + 1e-6 or \
                    u_gpu + n_gpu > c_gpu + 1e-6:
                return False
            idx: list[int] = []
            if g > 0:
                n = per * count
                idx = _whole_gpus(gpu_free[i], n)
                if len(idx) < n:
                    return False
            # the row's sums as `allocated[i, X] += x` makes them, stored at once
            plan.append((i, idx, u_cpu, u_gpu, (u_cpu + n_cpu, u_mem + n_mem, u_gpu + n_gpu)))
        taken: list[tuple[int, int, float]] = []
        for i, idx, u_cpu, u_gpu, row in plan:
            gpus = gpu_free[i]
            for k in idx:  # one by one: a handful of scalar stores beat indexing by a list
                gpus[k] = 0.0
            taken += [(i, k, 1.0) for k in idx]
            allocated[i] = row
            self._row_changed(u_cpu, u_gpu, row[CPU], row[GPU])
        held = self._held.get(job.name)
        if held is None:
            self._held[job.name] = taken
        else:
            held += taken
        self._totals = None
        self._placed[job.name] = job
        job.workers = dict(workers)
        return True

    def _take_gpus(self, i: int, g: float, count: int, job: str) -> list[tuple[int, int, float]]:
        """GPUs for `count` tasks of `g` GPUs each on node `i`: whole GPUs first free first,
        a fraction on the GPU it fits best."""
        if g <= 0:
            return []
        row = self.gpu_free[i]
        if g >= 1:  # a row is a node's few GPUs: plain Python beats numpy calls here
            n = int(round(g)) * count
            idx = _whole_gpus(row, n)
            if len(idx) < n:
                raise _Refused(f"{job}: {self.nodes[i].name} has {len(idx)} whole GPUs free, needs {n}")
            for k in idx:  # one by one: a handful of scalar stores beat indexing by a list
                row[k] = 0.0
            return [(i, k, 1.0) for k in idx]
        taken = []
        for _ in range(count):
            ok = np.flatnonzero(row + _EPS >= g)
            if not len(ok):
                for _, k, amount in taken:
                    row[k] += amount
                raise _Refused(f"{job}: no GPU on {self.nodes[i].name} has {g:g} free")
            best = int(ok[np.argmin(row[ok])])  # best fit among the GPUs of the node
            row[best] -= g
            taken.append((i, best, g))
        return taken

    def _release(self, job: JobStatus) -> None:
        if not job.workers and not job.ps:
            return
        freed_nodes = job.nodes if self.contention else None
        self._stop_running(job)
        spec = job.spec
        allocated, index = self.allocated, self.node_index
        # the rows touched, in plain floats (the same IEEE steps), then
        # `np.maximum(allocated, 0.0, out=allocated)` on them: the other rows are never negative
        if not job.ps:  # the usual case: each node once
            demand = spec.worker_demand
            d_cpu, d_mem, d_gpu = float(demand.cpu), float(demand.mem), float(demand.gpu)
            for name, count in job.workers.items():
                i = index[name]
                u_cpu, u_mem, u_gpu = allocated[i].tolist()
                old_cpu, old_gpu = u_cpu, u_gpu
                if count == 1:
                    u_cpu, u_mem, u_gpu = u_cpu - d_cpu, u_mem - d_mem, u_gpu - d_gpu
                else:
                    u_cpu, u_mem, u_gpu = u_cpu - d_cpu * count, u_mem - d_mem * count, \
                        u_gpu - d_gpu * count
                # max(u, 0.0) for a number (keeps -0.0 as max does), without the calls
                row = (u_cpu if u_cpu >= 0.0 else 0.0,  # noqa: FURB136
                       u_mem if u_mem >= 0.0 else 0.0,  # noqa: FURB136
                       u_gpu if u_gpu >= 0.0 else 0.0)  # noqa: FURB136
                self._row_changed(old_cpu, old_gpu, row[CPU], row[GPU])
                allocated[i] = row
        else:
            rows: dict[int, list[float]] = {}
            for placement, demand in ((job.workers, spec.worker_demand), (job.ps, spec.ps_demand)):
                d = (float(demand.cpu), float(demand.mem), float(demand.gpu))
                for name, count in placement.items():
                    i = index[name]
                    row = rows.get(i) or allocated[i].tolist()
                    rows[i] = [u - x for u, x in zip(row, d)] if count == 1 else \
                        [u - x * count for u, x in zip(row, d)]
            for i, row in rows.items():
                allocated[i] = [max(u, 0.0) for u in row]
            self._alloc_sums = None
        self._totals = None
        held = self._held.pop(job.name, None)
        if held is not None:
            gpu_free = self.gpu_free
            for i, g, amount in held:  # in Python floats: the same sum, no numpy scalars
                free = gpu_free.item(i, g) + amount
                gpu_free[i, g] = min(free, 1.0)
        job.workers, job.ps = {}, {}
        self._placed.pop(job.name, None)
        job.throughput = 0.0
        self._version[job.name] += 1  # `_bump`: a placed job has a version
        if self.contention:
            self._refresh_contention(freed_nodes)

    # ---- utilisation integrals ------------------------------------------------------------

    _alloc_sums: list[float] | None = None  # (a copy pickled before it was kept: not known)

    def _row_changed(self, old_cpu: float, old_gpu: float, cpu: float, gpu: float) -> None:
        """Keep `_alloc_sums`, the GPU and CPU columns of `allocated` summed, in step with a
        row that changed, while every value in them is a whole number below `_EXACT`: such sums
        are exact in any order, so they equal the column sums that `_accumulate_usage` would
        add up after each change (132 k times in the Philly replay). Any other value, or a
        change made elsewhere, leaves them unknown (None) and the columns are summed again."""
        sums = self._alloc_sums
        if sums is None:
            return
        if gpu.is_integer() and cpu.is_integer() and -_EXACT < gpu < _EXACT and \
                -_EXACT < cpu < _EXACT:
            sums[0] += gpu - old_gpu
            sums[1] += cpu - old_cpu
        else:
            self._alloc_sums = None

    def _accumulate_usage(self, t: float) -> None:
        dt = t - self._usage_time
        if dt <= 0:
            return
        if self._totals is None:  # recomputed only after an allocation or a node changed
            if self._capacity_totals is None:  # only after a node changed
                up = self.node_up
                self._capacity_totals = (float(self.capacity[up, GPU].sum()),
                                         float(self.capacity[up, CPU].sum()))
            if self._alloc_sums is not None:  # whole numbers: the same sums, kept
                self._totals = (*self._capacity_totals, *self._alloc_sums)
            else:
                alloc = np.add.reduce(self.allocated, axis=0)  # .sum(axis=0), no wrapper
                self._totals = (*self._capacity_totals, float(alloc[GPU]), float(alloc[CPU]))
        gpu_cap, cpu_cap, gpu_alloc, cpu_alloc = self._totals
        u = self.usage
        u.gpu_capacity += gpu_cap * dt
        u.cpu_capacity += cpu_cap * dt
        u.gpu_allocated += gpu_alloc * dt
        u.cpu_allocated += cpu_alloc * dt
        u.gpu_effective += self._effective[0] * dt
        u.cpu_effective += self._effective[1] * dt
        self._usage_time = t


class _Refused(Exception):
    pass


def _live_top(heap: list, version: dict[str, int]) -> tuple | None:
    """The earliest entry of an event heap (time, seq, job, version) whose version is the
    job's current one, the stale ones above it dropped; None if none is left."""
    while heap:
        top = heap[0]
        if version.get(top[2]) == top[3]:
            return top
        heapq.heappop(heap)
    return None


def _gpus_cpus(job: JobStatus) -> tuple[float, float]:
    """The GPUs and CPUs a job's tasks hold: `job.demand(...)` without building Resources."""
    s, w, p = job.spec, job.num_workers, job.num_ps
    return (s.worker_demand.gpu * w + s.ps_demand.gpu * p,
            s.worker_demand.cpu * w + s.ps_demand.cpu * p)


def cpu_share_factors(cores: float, want: dict[str, float], weight: dict[str, float]
                      ) -> dict[str, float]:
    """Fraction of the cores it wants that each job gets on a node of `cores` cores.

    If all wants fit, everyone gets 1.0. Otherwise cores are shared in proportion to `weight`
    (the CPU requests, as Linux CPU shares do), water-filled: a job whose proportional share
    exceeds its want gets its want, and the rest is shared again among the others.
    """
    if sum(want.values()) <= cores + _EPS:
        return {k: 1.0 for k in want}
    got: dict[str, float] = {}
    left = {k for k, v in want.items() if v > 0}
    room = cores
    while left:
        wsum = sum(weight[k] for k in left)
        satisfied = [k for k in left if want[k] <= room * weight[k] / wsum + _EPS]
        if not satisfied:
            for k in left:
                got[k] = room * weight[k] / wsum
            break
        for k in satisfied:
            got[k] = want[k]
            room -= want[k]
            left.discard(k)
    return {k: (got.get(k, v) / v if v > 0 else 1.0) for k, v in want.items()}


__all__ = ["SimBackend", "Fault", "Usage", "Resources", "cpu_share_factors"]


def _whole_gpus(row: np.ndarray, n: int) -> list[int]:
    """The first `n` whole free GPUs of a node's row of free shares (fewer if it has fewer):
    a row is a node's few GPUs, where plain Python beats numpy calls."""
    return [k for k, free in enumerate(row.tolist()) if free >= _WHOLE][:n]
