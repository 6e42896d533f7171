"""Tiresias (NSDI'19), discretised two-dimensional least-attained-service (2D-LAS).

A job's priority is its queue, set by the GPU-seconds it has received so far (thresholds
`queue_thresholds`), FIFO within a queue. Each round the highest-priority jobs that fit
the cluster's GPUs run; running jobs that fall out of that set are preempted (they keep
their checkpointed progress). Replicas and batch size stay as submitted, as in the Pollux
artifact's Tiresias, whose default queue threshold is 3600 x 16 GPU-seconds.
"""

from __future__ import annotations

import bisect

from ..model import Action, ClusterState, JobState, JobStatus, Place, Suspend
from .base import Policy, register
from .common import reject_impossible, wait_reason
from .placement import Ledger


@register("tiresias")
class TiresiasPolicy(Policy):
    quiet_restarts = True
    def __init__(self, queue_thresholds: tuple[float, ...] = (3600.0 * 16,),
                 round_interval: float = 60.0) -> None:
        self.queue_thresholds = tuple(sorted(queue_thresholds))
        self.round_interval = round_interval

    def queue_of(self, job: JobStatus) -> int:
        return bisect.bisect_right(self.queue_thresholds, job.attained_service)

    def next_wakeup(self, state: ClusterState | None) -> float | None:
        """The next time a running job crosses into a lower-priority queue."""
        if state is None:
            return None
        best = None
        for job in state.jobs.values():
            # A restarting job starts accruing soon; counting it from now wakes us a little
            # early at worst, and an early round just re-ranks.
            if job.state not in (JobState.RUNNING, JobState.RESTARTING):
                continue
            q = self.queue_of(job)
            if q < len(self.queue_thresholds):
                rate = job.spec.worker_demand.gpu * job.num_workers
                if rate > 0:
                    t = state.now + (self.queue_thresholds[q] - job.attained_service) / rate
                    best = t if best is None else min(best, t)
        return best

    def schedule(self, state: ClusterState) -> list[Action]:
        actions, waiting = reject_impossible(state, state.waiting)
        placed = [j for j in state.jobs.values() if j.state.placed]
        thresholds = self.queue_thresholds
        # One tuple per job, sorted natively: (queue, arrival, name) is the 2D-LAS priority.
        ranked = sorted((bisect.bisect_right(thresholds, j.attained_service), j.spec.arrival, j.name, j)
                        for j in placed + waiting)
        jobs = [r[3] for r in ranked]
        capacity = float(state.capacity[state.node_up, 2].sum())
        chosen: list[JobStatus] = []
        used = 0.0
        for job in jobs:
            need = job.spec.worker_demand.gpu * job.spec.initial_workers
            if used + need <= capacity + 1e-9:
                chosen.append(job)
                used += need
            if used >= capacity - 1e-9:
                break
        chosen_names = {j.name for j in chosen}
        ledger = Ledger(state)
        for job in placed:
            if job.name not in chosen_names:
                ledger.give_back(job.workers, job.spec.worker_demand)
                ledger.give_back(job.ps, job.spec.ps_demand)
                actions.append(Suspend(job.name, f"preempted: queue {self.queue_of(job)} after"
                                       f" {job.attained_service / 3600:.1f} GPU-hours; higher"
                                       " priority jobs need the GPUs"))
        pos = 0
        for job in chosen:
            if job.state.placed:
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
