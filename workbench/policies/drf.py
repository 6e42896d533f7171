"""Dominant Resource Fairness across users: the user with the smallest dominant share
starts their next job first (gang); non-preemptive."""

from __future__ import annotations

import heapq
from collections import defaultdict

import numpy as np

from ..model import Action, ClusterState, Place
from .base import Policy, register
from .common import by_arrival, reject_impossible, wait_reason


@register("drf")
class DrfPolicy(Policy):
    takes_placement = True
    quiet_restarts = True
    def __init__(self, round_interval: float = 60.0) -> None:
        self.round_interval = round_interval

    def schedule(self, state: ClusterState) -> list[Action]:
        actions, queue = reject_impossible(state, by_arrival(state.waiting))
        if not queue:
            return actions
        cap = state.capacity[state.node_up].sum(axis=0)
        cap[cap == 0] = np.inf
        usage: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(3))
        for job in state.jobs.values():
            if job.state.placed:
                usage[job.spec.user] += job.demand(job.num_workers, job.num_ps).as_array()
        per_user: dict[str, list] = defaultdict(list)
        for job in queue:
            per_user[job.spec.user].append(job)
        heap = [(float((usage[u] / cap).max()), per_user[u][0].spec.arrival, u) for u in per_user]
        heapq.heapify(heap)
        ledger = self.ledger(state)
        pos = 0
        while heap:
            share, _, user = heapq.heappop(heap)
            job = per_user[user].pop(0)
            placement = ledger.place_gang(job, job.spec.initial_workers)
            if placement is None:
                w = wait_reason(ledger, job, job.spec.initial_workers, pos,
                                f"user {user} dominant share {share:.0%}")
                pos += 1
                if w:
                    actions.append(w)
                # DRF is work-conserving: try this user's next job after others'.
            else:
                workers, ps = placement
                ledger.take(workers, job.spec.worker_demand)
                ledger.take(ps, job.spec.ps_demand)
                usage[user] += job.demand().as_array()
                actions.append(Place(job.name, f"started: user {user} had the smallest dominant"
                                     f" share ({share:.0%})", workers, ps))
            if per_user[user]:
                heapq.heappush(heap, (float((usage[user] / cap).max()),
                                      per_user[user][0].spec.arrival, user))
        return actions
