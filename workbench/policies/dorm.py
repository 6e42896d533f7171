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
from .common import CheckedOnce, by_arrival, commit_plans
from .teaching import queue_facts, queue_rows, top


def ps_for(job: JobStatus, workers: int) -> int:
    """PS count for `workers` at the job's submitted PS-to-worker ratio."""
    s = job.spec
    if s.kind != JobKind.PS and not s.num_ps:
        return 0
    return max(1, math.ceil(workers * s.num_ps / max(s.initial_workers, 1) - 1e-9))


def _need(shape: tuple, w: int) -> tuple[float, float, float]:
    """What `w` workers and their PS (`ps_for`) take, per resource, of a job's `shape` (see
    `DormPolicy._shapes`): numpy's elementwise arithmetic on 3-vectors, in plain floats."""
    _, wd, pd, kind_ps, initial = shape[:5]
    p = max(1, math.ceil(w * kind_ps / initial - 1e-9)) if kind_ps >= 0 else 0
    return (wd[0] * w + pd[0] * p, wd[1] * w + pd[1] * p, wd[2] * w + pd[2] * p)


@register("dorm")
class DormPolicy(Policy):
    """Dorm-like: DRF water-filling of elastic jobs, resizing only on large changes."""
    takes_placement = True

    def __init__(self, round_interval: float = 60.0, adjust_threshold: float = 0.5) -> None:
        self.round_interval = round_interval
        self.adjust_threshold = adjust_threshold
        # Per job name: its spec, worker and PS demand as plain floats, its PS rule (`_need`)
        # and its need at its minimum size.
        self._shapes: dict[str, tuple] = {}
        self._reject_impossible = CheckedOnce()  # a waiting job checked once per cluster shape


    def schedule(self, state: ClusterState) -> list[Action]:
        actions, jobs = self._reject_impossible(state, by_arrival(list(state.active)))
        if not jobs:
            return actions
        alloc, by_name = self._water_fill(state, jobs)
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

    def _water_fill(self, state: ClusterState, jobs: list[JobStatus]
                    ) -> tuple[dict[str, int], dict[str, JobStatus]]:
        """Workers per job: every job its minimum, oldest first (placed jobs first) while the
        cluster has room, then one worker at a time to the smallest dominant share.

        In plain floats over the three resources: the same elementwise IEEE arithmetic as
        numpy on 3-vectors (so the same sizes), without numpy's per-call cost, which was most
        of a round with a thousand jobs waiting.
        """
        up = state.capacity[state.node_up].sum(axis=0)
        c0, c1, c2 = (c if c > 0 else math.inf for c in up.tolist())
        b0, b1, b2 = up.astype(float).tolist()  # the budget left
        eps = 1e-9
        shapes = self._shapes
        seen: dict[str, tuple] = {}
        alloc: dict[str, int] = {}
        held: dict[str, tuple[float, float, float]] = {}  # the need of each allocation
        # Placed jobs first, each group in arrival order (`jobs` is): a stable partition.
        for job in [j for j in jobs if j.state.placed] + [j for j in jobs if not j.state.placed]:
            s = job.spec
            shape = shapes.get(job.name)
            if shape is None or shape[0] is not s:
                wd, pd = s.worker_demand.as_array().tolist(), s.ps_demand.as_array().tolist()
                # ps_for's rule as a number: -1 no PS, else the submitted PS count
                kind_ps = s.num_ps if (s.kind == JobKind.PS or s.num_ps) else -1
                shape = (s, wd, pd, kind_ps, max(s.initial_workers, 1), None)
                shape = shapes[job.name] = shape[:5] + (_need(shape, s.min_workers),)
            seen[job.name] = shape
            n0, n1, n2 = shape[5]
            if n0 <= b0 + eps and n1 <= b1 + eps and n2 <= b2 + eps:
                alloc[job.name] = s.min_workers
                held[job.name] = shape[5]
                b0, b1, b2 = b0 - n0, b1 - n1, b2 - n2
        by_name = {j.name: j for j in jobs}
        heap = [(max(n[0] / c0, n[1] / c1, n[2] / c2), by_name[name].spec.arrival, name)
                for name, n in held.items()]
        heapq.heapify(heap)
        while heap:
            _, arrival, name = heapq.heappop(heap)
            w = alloc[name]
            if w >= by_name[name].spec.max_workers:
                continue
            now, more = held[name], _need(seen[name], w + 1)
            e0, e1, e2 = more[0] - now[0], more[1] - now[1], more[2] - now[2]
            if not (e0 <= b0 + eps and e1 <= b1 + eps and e2 <= b2 + eps):
                continue
            alloc[name] = w + 1
            held[name] = more
            b0, b1, b2 = b0 - e0, b1 - e1, b2 - e2
            heapq.heappush(heap, (max(more[0] / c0, more[1] / c1, more[2] / c2), arrival, name))
        if len(shapes) > 2 * len(jobs) + 1000:
            self._shapes = {n: shapes[n] for n in seen}
        return alloc, by_name

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
