"""Dominant Resource Fairness across users: the user with the smallest dominant share
starts their next job first (gang); non-preemptive."""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import Any

import numpy as np

from ..model import Action, ClusterState, Place
from .base import Policy, register
from .common import by_arrival, reject_impossible, wait_reason
from .teaching import queue_facts, queue_rows, top


@register("drf")
class DrfPolicy(Policy):
    takes_placement = True
    quiet_restarts = True
    def __init__(self, round_interval: float = 60.0) -> None:
        self.round_interval = round_interval

    def schedule(self, state: ClusterState) -> list[Action]:
        actions, queue = reject_impossible(state, by_arrival(state.waiting), rigid=True)
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

    def engine_view(self, state: ClusterState | None = None) -> dict[str, Any]:
        """DRF's comparison now: each user's dominant share (the largest of their CPU, memory
        and GPU shares held), and the queue in the order those shares give it."""
        view: dict[str, Any] = {**super().engine_view(state),
                                "rule": "the user with the smallest dominant share starts their"
                                " next job first; no preemption"}
        if state is None:
            return view
        shares = dominant_shares(state)
        waiting = sorted(state.iter_waiting(),
                         key=lambda j: (shares.get(j.spec.user, 0.0), j.spec.arrival, j.name))
        return {**view, **queue_facts(waiting),
                "dominant_share": top(shares) or {"(no user holds resources)": 0.0},
                "queue": queue_rows(waiting, state.now, user=lambda j: j.spec.user)}


def dominant_shares(state: ClusterState) -> dict[str, float]:
    """User -> the largest share of any resource their running jobs hold."""
    cap = state.capacity[state.node_up].sum(axis=0)
    cap = np.where(cap > 0, cap, np.inf)
    usage: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(3))
    for job in state.iter_placed():
        usage[job.spec.user] += job.demand(job.num_workers, job.num_ps).as_array()
    return {u: float((use / cap).max()) for u, use in usage.items()}
