"""Tiresias (NSDI'19), discretised two-dimensional least-attained-service (2D-LAS).

A job's priority is its queue, set by the GPU-seconds it has received so far (thresholds
`queue_thresholds`), FIFO within a queue. Each round the highest-priority jobs that fit
the cluster's GPUs run; running jobs that fall out of that set are preempted (they keep
their checkpointed progress). Replicas and batch size stay as submitted, as in the Pollux
artifact's Tiresias, whose default queue threshold is 3600 x 16 GPU-seconds.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from ..model import Action, ClusterState, JobState, JobStatus, Place, Suspend
from .base import Policy, register
from .common import NewArrivalCheck, wait_reason


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

    def queue_of(self, job: JobStatus) -> int:
        return bisect.bisect_right(self.queue_thresholds, job.attained_service)

    def next_wakeup(self, state: ClusterState | None) -> float | None:
        """The next time a running job crosses into a lower-priority queue."""
        if state is None:
            return None
        if state is self._wakeup_for:  # the controller asks again while the state is the same
            return self._wakeup
        best = None
        for job in state.iter_placed():
            # A restarting job starts accruing soon; counting it from now wakes us a little
            # early at worst, and an early round just re-ranks.
            if job.state is JobState.HOLDING:
                continue
            q = self.queue_of(job)
            if q < len(self.queue_thresholds):
                rate = job.spec.worker_demand.gpu * job.num_workers
                if rate > 0:
                    t = state.now + (self.queue_thresholds[q] - job.attained_service) / rate
                    best = t if best is None else min(best, t)
        self._wakeup_for, self._wakeup = state, best
        return best

    def ranked(self, state: ClusterState, skip: set[str]) -> Iterator[JobStatus]:
        """Placed and waiting jobs in 2D-LAS order (queue, arrival, name), lazily: a round
        walks only as far as the GPUs go, not the whole of a long queue."""
        thresholds = self.queue_thresholds
        placed = sorted((bisect.bisect_right(thresholds, j.attained_service), j.spec.arrival,
                         j.name, j) for j in state.iter_placed())
        for q in range(len(thresholds) + 1):
            level = [p[3] for p in placed if p[0] == q]  # in (arrival, name) order
            i = 0
            for job in state.iter_waiting():  # in arrival order; merged with `level`
                if job.name in skip or bisect.bisect_right(thresholds, job.attained_service) != q:
                    continue
                key = (job.spec.arrival, job.name)
                while i < len(level) and (level[i].spec.arrival, level[i].name) < key:
                    yield level[i]
                    i += 1
                yield job
            yield from level[i:]

    def schedule(self, state: ClusterState) -> list[Action]:
        actions = self._arrivals.reject(state)
        rejected = {a.job for a in actions}
        capacity = float(state.capacity[state.node_up, 2].sum())
        chosen: list[JobStatus] = []
        used = 0.0
        for job in self.ranked(state, rejected):
            need = job.spec.worker_demand.gpu * job.spec.initial_workers
            if used + need <= capacity + 1e-9:
                chosen.append(job)
                used += need
            if used >= capacity - 1e-9:
                break
        chosen_names = {j.name for j in chosen}
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
