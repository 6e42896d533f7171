"""A Dorm-like heuristic (Sun et al., 2017): dynamic partitions sized for utilisation and fairness.

Dorm gives every application a resizable partition and re-solves the partition sizes when an
application arrives or leaves, maximising utilisation under a fairness bound and limiting how
many partitions change (each change costs a checkpoint-restart). Our heuristic version, the
baseline OASiS compares against:

1. Every active job gets its minimum workers, oldest first, while the cluster has room (no
   admission control: a job that does not fit waits).
2. Water-filling: one worker at a time goes to the job with the smallest dominant share, up to
   its `max_workers`, while the whole cluster still has room: high utilisation, DRF-fair.
3. A parameter-server job keeps its submitted PS-to-worker ratio (at least one PS).
4. A running job is resized only if its fair size differs from its current one by more than
   `adjust_threshold` of it (Dorm's bound on adjustments), or if it must shrink to let others in.
"""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np

from ..model import Action, ClusterState, JobKind, JobStatus
from .base import Policy, register
from .common import by_arrival, commit_plans, reject_impossible
from .teaching import queue_facts, queue_rows, top


def ps_for(job: JobStatus, workers: int) -> int:
    """PS count for `workers` at the job's submitted PS-to-worker ratio."""
    s = job.spec
    if s.kind != JobKind.PS and not s.num_ps:
        return 0
    return max(1, math.ceil(workers * s.num_ps / max(s.initial_workers, 1) - 1e-9))


@register("dorm")
class DormPolicy(Policy):
    """Dorm-like: DRF water-filling of elastic jobs, resizing only on large changes."""
    takes_placement = True

    def __init__(self, round_interval: float = 60.0, adjust_threshold: float = 0.5) -> None:
        self.round_interval = round_interval
        self.adjust_threshold = adjust_threshold

    def schedule(self, state: ClusterState) -> list[Action]:
        actions, jobs = reject_impossible(state, by_arrival(list(state.active)))
        if not jobs:
            return actions
        cap = state.capacity[state.node_up].sum(axis=0)
        cap = np.where(cap > 0, cap, np.inf)
        budget = state.capacity[state.node_up].sum(axis=0).astype(float)

        def need(job: JobStatus, w: int) -> np.ndarray:
            return job.spec.worker_demand.as_array() * w + job.spec.ps_demand.as_array() * ps_for(job, w)

        alloc: dict[str, int] = {}
        for job in sorted(jobs, key=lambda j: (not j.state.placed, j.spec.arrival)):
            n = need(job, job.spec.min_workers)
            if (n <= budget + 1e-9).all():
                alloc[job.name] = job.spec.min_workers
                budget -= n
        by_name = {j.name: j for j in jobs}
        heap = [(float((need(by_name[n], w) / cap).max()), by_name[n].spec.arrival, n)
                for n, w in alloc.items()]
        heapq.heapify(heap)
        while heap:
            _, _, name = heapq.heappop(heap)
            job, w = by_name[name], alloc[name]
            if w >= job.spec.max_workers:
                continue
            extra = need(job, w + 1) - need(job, w)
            if not (extra <= budget + 1e-9).all():
                continue
            alloc[name] = w + 1
            budget -= extra
            heapq.heappush(heap, (float((need(job, w + 1) / cap).max()), job.spec.arrival, name))

        ledger = self.ledger(state)
        plans: list[tuple[JobStatus, int]] = []
        waiting = any(not by_name[n].state.placed for n in alloc)
        for name, w in alloc.items():
            job = by_name[name]
            if job.state.placed:
                cur = job.num_workers
                if w == cur:
                    continue
                small_change = abs(w - cur) <= self.adjust_threshold * cur
                if small_change and not (w < cur and waiting):
                    continue
                ledger.give_back(job.workers, job.spec.worker_demand)
                ledger.give_back(job.ps, job.spec.ps_demand)
            plans.append((job, w))
        # Shrinking jobs first, so the resources they free are there for the others.
        actions += commit_plans(
            ledger, sorted(plans, key=lambda p: (not (p[0].state.placed and p[1] < p[0].num_workers),
                                                 not p[0].state.placed, p[0].spec.arrival)),
            wait_label="Dorm partition", ps_for=ps_for,
            scale_reason=lambda job, w: (f"partition resized {job.num_workers}→{w} workers"
                                         " (fair share moved beyond the adjustment bound)"),
            place_reason=lambda job, w: (f"partition of {w} workers, {ps_for(job, w)} PS:"
                                         " DRF water-filling of the free cluster"))
        return actions

    def engine_view(self, state: ClusterState | None = None) -> dict[str, Any]:
        """Dorm's partitions now: the workers each active job holds and the dominant share
        they amount to (water-filling evens these out), and the jobs still waiting."""
        view: dict[str, Any] = {
            **super().engine_view(state),
            "rule": "DRF water-filling of elastic jobs: every job its minimum, then one worker"
                    " at a time to the smallest dominant share",
            "adjust_threshold": f"resize a running job only when its share moves by more than"
                                f" {self.adjust_threshold:.0%}"}
        if state is None:
            return view
        cap = state.capacity[state.node_up].sum(axis=0)
        cap = np.where(cap > 0, cap, np.inf)
        share = {j.name: float((j.demand(j.num_workers, j.num_ps).as_array() / cap).max())
                 for j in state.iter_placed()}
        waiting = by_arrival(list(state.iter_waiting()))
        return {**view, **queue_facts(waiting),
                "dominant_share": top(share) or {"(no job running)": 0.0},
                "queue": queue_rows(waiting, state.now)}
