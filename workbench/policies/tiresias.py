"""Tiresias (NSDI'19), discretised two-dimensional least-attained-service (2D-LAS).

A job's priority is its queue, set by the GPU-seconds it has received so far (thresholds
`queue_thresholds`), FIFO within a queue. Each round the highest-priority jobs that fit
the cluster's GPUs run; running jobs that fall out of that set are preempted (they keep
their checkpointed progress). Replicas and batch size stay as submitted, as in the Pollux
artifact's Tiresias, whose default queue threshold is 3600 x 16 GPU-seconds.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator

from ..model import Action, ClusterState, JobState, JobStatus, Place, Suspend
from .base import Policy, register
from .common import NewArrivalCheck, wait_reason

_WAITING = (JobState.PENDING, JobState.HOLDING)


@register("tiresias")
class TiresiasPolicy(Policy):
    takes_placement = True
    quiet_restarts = True
    def __init__(self, queue_thresholds: tuple[float, ...] = (3600.0 * 16,),
                 round_interval: float = 60.0) -> None:
        self.queue_thresholds = tuple(sorted(queue_thresholds))
        self.round_interval = round_interval
        self._arrivals = NewArrivalCheck()
        self._wakeup_for: ClusterState | None = None
        self._wakeup: float | None = None
        self._waiting0: dict[str, JobStatus] = {}  # see _first_queue_waiting
        self._held: list[JobStatus] = []  # jobs holding GPUs during or after the last round

    def queue_of(self, job: JobStatus) -> int:
        return bisect.bisect_right(self.queue_thresholds, job.attained_service)

    def next_wakeup(self, state: ClusterState | None) -> float | None:
        """The next time a running job crosses into a lower-priority queue."""
        if state is None:
            return None
        if state is self._wakeup_for:  # known from the round that saw this state
            return self._wakeup
        best = math.inf
        for job in state.iter_placed():
            if job.state is not JobState.HOLDING:
                best = min(best, self._crossing(job, job.num_workers, state.now))
        self._wakeup_for, self._wakeup = state, best if best < math.inf else None
        return self._wakeup

    def _crossing(self, job: JobStatus, workers: int, now: float) -> float:
        """When `job`, running on `workers`, enters its next queue (inf: never). A restarting
        job starts accruing soon; counting it from now wakes us a little early at worst, and
        an early round just re-ranks."""
        q = bisect.bisect_right(self.queue_thresholds, job.attained_service)
        rate = job.spec.worker_demand.gpu * workers
        if q >= len(self.queue_thresholds) or rate <= 0:
            return math.inf
        return now + (self.queue_thresholds[q] - job.attained_service) / rate

    def ranked(self, state: ClusterState, skip: set[str]) -> Iterator[list[JobStatus]]:
        """Placed and waiting jobs in 2D-LAS order (queue, arrival, name), lazily: a round
        walks only as far as the GPUs go, not the whole of a long queue. Yields runs of
        consecutive jobs (placed ones come in runs, so a round handles them in bulk)."""
        thresholds = self.queue_thresholds
        placed = sorted((bisect.bisect_right(thresholds, j.attained_service), j.spec.arrival,
                         j.name, j) for j in state.iter_placed())
        for q in range(len(thresholds) + 1):
            level = [p for p in placed if p[0] == q]  # in (arrival, name) order
            i, n = 0, len(level)
            waiting = self._first_queue_waiting(skip) if q == 0 else state.iter_waiting()
            for job in waiting:  # in arrival order; merged with `level`
                if job.name in skip or bisect.bisect_right(thresholds, job.attained_service) != q:
                    continue
                key = (q, job.spec.arrival, job.name)
                start = i
                while i < n and level[i] < key:
                    i += 1
                if i > start:
                    yield [p[3] for p in level[start:i]]
                yield [job]
            if i < n:
                yield [p[3] for p in level[i:]]

    def _first_queue_waiting(self, skip: set[str]) -> list[JobStatus]:
        """The waiting jobs of the first queue, in arrival order, without walking a long queue
        of jobs that have had their service: arrivals since the last round, plus the jobs that
        held GPUs after the last round and wait again (preempted here, or sent back by a node
        failure), plus those still waiting from before; everything on the first round and
        when the cluster's shape changes."""
        if self._arrivals.everything:
            self._waiting0 = {}
        first = self.queue_thresholds[0] if self.queue_thresholds else math.inf
        for job in itertools.chain(self._arrivals.checked, self._held):
            if job.attained_service < first and job.state in _WAITING:
                self._waiting0[job.name] = job
        live = [j for j in self._waiting0.values() if j.state in _WAITING and j.name not in skip
                and j.attained_service < first]
        self._waiting0 = {j.name: j for j in live}
        return sorted(live, key=lambda j: (j.spec.arrival, j.name))

    def schedule(self, state: ClusterState) -> list[Action]:
        actions = self._arrivals.reject(state)
        rejected = {a.job for a in actions}
        capacity = float(state.capacity[state.node_up, 2].sum())
        chosen: list[JobStatus] = []
        used = 0.0
        now = state.now
        for run in self.ranked(state, rejected):
            needs = [j.spec.worker_demand.gpu * j.spec.initial_workers for j in run]
            whole = sum(needs)
            if used + whole <= capacity + 1e-9:  # the whole run fits (typical: placed jobs)
                chosen += run
                used += whole
            else:
                for job, need in zip(run, needs):
                    if used + need <= capacity + 1e-9:
                        chosen.append(job)
                        used += need
            if used >= capacity - 1e-9:
                break
        # The next queue crossing among the jobs that will hold GPUs.
        wakeup = min((self._crossing(j, j.spec.initial_workers, now) for j in chosen),
                     default=math.inf)
        self._wakeup_for, self._wakeup = state, wakeup if wakeup < math.inf else None
        chosen_names = {j.name for j in chosen}
        self._held = chosen + list(state.iter_placed())  # preempted ones wait again next round
        ledger = self.ledger(state)
        for job in state.iter_placed():
            if job.name not in chosen_names:
                ledger.give_back(job.workers, job.spec.worker_demand)
                ledger.give_back(job.ps, job.spec.ps_demand)
                actions.append(Suspend(job.name, f"preempted: queue {self.queue_of(job)} after"
                                       f" {job.attained_service / 3600:.1f} GPU-hours; higher"
                                       " priority jobs need the GPUs"))
        pos = 0
        placed_names = {j.name for j in state.iter_placed()}
        for job in chosen:
            if job.name in placed_names:
                continue
            placement = ledger.place_gang(job, job.spec.initial_workers)
            if placement is None:
                w = wait_reason(ledger, job, job.spec.initial_workers, pos, f"queue {self.queue_of(job)}")
                pos += 1
                if w:
                    actions.append(w)
                continue
            workers, ps = placement
            ledger.take(workers, job.spec.worker_demand)
            ledger.take(ps, job.spec.ps_demand)
            actions.append(Place(job.name, f"started: queue {self.queue_of(job)}, least attained"
                                 " service first", workers, ps))
        return actions
