"""Dominant Resource Fairness across users: the user with the smallest dominant share
starts their next job first (gang); non-preemptive."""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict, deque
from typing import Any

from ..model import Action, ClusterState, JobSpec, JobStatus, Place
from .base import Policy, register
from .common import MAX_WAIT_REASONS, NewArrivalCheck, by_arrival, wait_reason
from .teaching import queue_facts, queue_rows, top

MAX_SHAPES = 64  # shapes judged at most when deciding that no waiting job fits


@register("drf")
class DrfPolicy(Policy):
    takes_placement = True
    quiet_restarts = True
    def __init__(self, round_interval: float = 60.0) -> None:
        self.round_interval = round_interval
        # a job that can never run at its requested size is rejected as it arrives: the
        # waiting jobs are not judged again every round (the Philly queue holds ~1,300)
        self._arrivals = NewArrivalCheck(rigid=True)
        # shape (demands, sizes) -> a job of it, for every job that may wait (`_note_shapes`)
        self._shapes: dict[tuple, JobStatus] = {}

    def forget_cluster(self) -> None:
        self._arrivals = NewArrivalCheck(rigid=True)
        self._shapes = {}

    def _note_shapes(self, queue: list[JobStatus], placed: list[JobStatus]) -> None:
        """Keep `_shapes` holding the shape of every job waiting now or at the next round: those
        of the jobs that arrived since the last round and of the jobs placed now (any job that
        waits next has arrived, or waits or is placed now); all of them on a first round, a
        new cluster shape, or when shapes no longer waiting pile up."""
        if self._arrivals.everything or len(self._shapes) > MAX_SHAPES:
            self._shapes = {}
            arrived = queue
        else:
            arrived = self._arrivals.checked
        shapes = self._shapes
        for job in itertools.chain(arrived, placed):
            shapes.setdefault(_shape(job), job)

    def __getstate__(self) -> dict:  # a copy checks anew
        return {**self.__dict__, "_arrivals": NewArrivalCheck(rigid=True), "_shapes": {}}

    def schedule(self, state: ClusterState) -> list[Action]:
        actions = self._arrivals.reject(state)
        rejected = {a.job for a in actions}
        queue = list(state.iter_waiting())  # oldest first
        if rejected:
            queue = [j for j in queue if j.name not in rejected]
        placed = by_arrival(state.iter_placed())
        self._note_shapes(queue, placed)
        if not queue:
            return actions
        cap = _capacity(state)
        usage = _held(placed)
        per_user: dict[str, deque] = defaultdict(deque)
        for job in queue:
            per_user[job.spec.user].append(job)
        heap = [(_share(usage.get(u), cap), jobs[0].spec.arrival, u)
                for u, jobs in per_user.items()]
        heapq.heapify(heap)
        ledger = self.ledger(state)
        # once none of those shapes fits (every waiting job has one) and no more reasons are
        # given, the rest of the walk would change nothing (without a placement plugin, whose
        # choices may draw random numbers)
        shapes = self._shapes if ledger.view is None and len(self._shapes) <= MAX_SHAPES \
            else {}  # (a queue of many shapes: walked to its end)
        pos, looked = 0, None
        while heap:
            if shapes and pos >= MAX_WAIT_REASONS and looked != ledger.version:
                looked = ledger.version
                if not any(ledger.place_gang(j, j.spec.initial_workers) for j in shapes.values()):
                    break
            share, _, user = heapq.heappop(heap)
            jobs = per_user[user]
            job = jobs.popleft()
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
                _add(usage, user, job.spec, job.spec.initial_workers, job.spec.num_ps)
                actions.append(Place(job.name, f"started: user {user} had the smallest dominant"
                                     f" share ({share:.0%})", workers, ps))
            if jobs:
                heapq.heappush(heap, (_share(usage.get(user), cap), jobs[0].spec.arrival, user))
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


def _shape(job: JobStatus) -> tuple:
    spec = job.spec
    w, p = spec.worker_demand, spec.ps_demand  # by their fields: a tuple of floats hashes fast
    return w.cpu, w.mem, w.gpu, p.cpu, p.mem, p.gpu, spec.initial_workers, spec.num_ps


def _capacity(state: ClusterState) -> list[float]:
    """The nodes up's (CPU, memory, GPU) in total; inf for a resource they have none of."""
    return [c if c else math.inf for c in state.capacity[state.node_up].sum(axis=0).tolist()]


def _held(placed: list[JobStatus]) -> dict[str, list[float]]:
    """(CPU, memory, GPU) held per user, summed in the order of `placed`; plain floats: a
    numpy array per job cost more than the rest of a round."""
    usage: dict[str, list[float]] = {}
    for job in placed:
        _add(usage, job.spec.user, job.spec, job.num_workers, job.num_ps)
    return usage


def _add(usage: dict[str, list[float]], user: str, spec: JobSpec, workers: int, ps: int) -> None:
    """Add what `workers` and `ps` of `spec` hold to `user`'s usage: `JobStatus.demand`'s sums
    in plain floats (no `Resources` made per running job per round)."""
    w, p = spec.worker_demand, spec.ps_demand
    cpu, mem, gpu = w.cpu * workers + p.cpu * ps, w.mem * workers + p.mem * ps, \
        w.gpu * workers + p.gpu * ps
    held = usage.get(user)
    if held is None:
        usage[user] = [cpu, mem, gpu]
    else:
        held[0] += cpu
        held[1] += mem
        held[2] += gpu


def _share(held: list[float] | None, cap: list[float]) -> float:
    """The user's dominant share: the largest share of a resource it holds (0 holding none)."""
    if held is None:
        return 0.0
    return max(held[0] / cap[0], held[1] / cap[1], held[2] / cap[2])


def dominant_shares(state: ClusterState) -> dict[str, float]:
    """User -> the largest share of any resource their running jobs hold."""
    cap = _capacity(state)
    return {u: _share(held, cap) for u, held in _held(by_arrival(state.iter_placed())).items()}
