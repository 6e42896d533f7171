"""The DL2 engine: each slot the policy network resizes every parameter-server job afresh;
jobs whose worker and PS counts did not change keep their placement, the others are
(re)placed. With `learn=True` it also learns online from the observed progress."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...model import (
    Action,
    ClusterState,
    JobKind,
    JobStatus,
    Place,
    Placement,
    Reject,
    Suspend,
    Wait,
    describe_placement,
)
from ...placement.ledger import Ledger
from ..base import Policy, register
from .allocator import JobView, SlotAllocator, Trajectory, drf_teacher, net_chooser, type_index
from .net import _EPS, ACTION_NAMES, MAX_WORKERS, STOP, WINDOW, PolicyNet, load_shipped


@register("dl2")
class Dl2Policy(Policy):
    """DL2: a policy network (SL on DRF, then RL) resizes PS jobs each slot."""

    needs_every_round = True

    def __init__(self, perf=None, round_interval: float = 600.0, weights: str | None = None,
                 learn: bool = False, learning_rate: float = 1e-4, seed: int = 0,
                 greedy: bool | None = None, teacher: bool = False) -> None:
        if perf is None:
            from ...perf import default_perf

            perf = default_perf()
        self.perf = perf
        self.round_interval = float(round_interval)
        self.weights = weights
        self.learn = learn
        self.learning_rate = learning_rate
        self.seed = seed
        self.greedy = (not learn) if greedy is None else greedy
        self.teacher = teacher  # True: DL2's elastic DRF (the warm-up teacher) instead of the net
        self.reset()

    def reset(self) -> None:
        if self.weights is None:
            self.net, self.meta = load_shipped(self.perf)
        else:
            self.net, self.meta = PolicyNet.load(self.weights)
        self.rng = np.random.default_rng(self.seed)
        self._prev: dict[str, tuple[int, int]] = {}
        self._last_probs: list = []
        self._last_view: dict[str, Any] = {}
        self._pending: tuple[Trajectory, dict[str, float], dict[str, float]] | None = None
        self._baseline: float | None = None
        self.updates = 0

    def schedule(self, state: ClusterState) -> list[Action]:
        jobs = sorted((j for j in state.jobs.values() if not j.state.finished),
                      key=lambda j: (j.spec.arrival, j.name))
        if self.learn:
            self._learn_from(state)
        ps_jobs = [j for j in jobs if j.spec.kind == JobKind.PS]
        actions: list[Action] = []
        for j in jobs:
            if j.spec.kind != JobKind.PS and not j.state.placed:
                # Its network was trained on PS jobs only: refuse at once rather than hold forever.
                actions.append(Reject(j.name, "rejected: DL2 schedules parameter-server jobs only"
                                      " (switch engine for all-reduce jobs)"))
        alloc = SlotAllocator(state.capacity, self.net.types, self.round_interval)
        views = [self._view(j, state.now) for j in ps_jobs]
        # Resources held by jobs the network does not steer (not PS) stay taken.
        free = state.capacity.copy()
        free[~state.node_up] = 0.0
        for j in jobs:
            if j.spec.kind != JobKind.PS and j.state.placed:
                free -= _held(state, j)
        free = np.maximum(free, 0.0)
        traj = Trajectory()
        log: list = []
        choose = drf_teacher if self.teacher else net_chooser(self.net, self.rng, self.greedy, log)
        alloc.allocate(views, free, choose, traj)
        self._last_probs = log
        counts = {}
        for j, v in zip(ps_jobs, views):
            w, p = len(v.workers), len(v.ps)
            if w < j.spec.min_workers or p < 1:
                w, p = 0, 0
            counts[j.name] = (w, p, v)
        actions += self._realise(state, ps_jobs, counts)
        for j in ps_jobs:
            self._prev[j.name] = counts[j.name][:2]
        if self.learn and len(traj) and not self.teacher:
            progress = {j.name: j.progress for j in ps_jobs}
            totals = {j.name: j.spec.total_work for j in ps_jobs}
            self._pending = (traj, progress, totals)
        self._last_view = self._view_summary(state.now, counts)
        return actions

    def _view(self, j: JobStatus, now: float) -> JobView:
        s = j.spec
        left = j.remaining_work
        one = float(self.perf.ps_speed(s.application, 1, 1)) if s.application in \
            getattr(self.perf, "ps_models", ()) else 0.0
        return JobView(
            name=j.name, type_index=type_index(self.net.types, s.application), age=now - s.arrival,
            remaining=left / s.total_work, remaining_hours=left / max(one, _EPS) / 3600.0,
            worker_demand=s.worker_demand.as_array(), ps_demand=s.ps_demand.as_array(),
            max_workers=min(s.max_workers, MAX_WORKERS), min_workers=s.min_workers,
            prev_workers=self._prev.get(j.name, (j.num_workers, j.num_ps))[0] if j.state.placed else 0,
            prev_ps=self._prev.get(j.name, (j.num_workers, j.num_ps))[1] if j.state.placed else 0)

    def _realise(self, state: ClusterState, jobs: list[JobStatus], counts: dict) -> list[Action]:
        """Turn counts into placements: unchanged jobs stay put, the rest go where the slot's
        plan put them, or anywhere they fit. Where a job the plan gave workers then fits
        nowhere around the jobs that stayed put, the whole plan is carried out instead: it
        fits by construction (the allocator put each task where there was room), and moving
        an unchanged job costs it a restart where waiting would cost the other a whole slot."""
        actions, stranded = self._realise_with(state, jobs, counts, stay_put=True)
        if stranded:
            actions, _ = self._realise_with(state, jobs, counts, stay_put=False)
        return actions

    def _realise_with(self, state: ClusterState, jobs: list[JobStatus], counts: dict,
                      stay_put: bool) -> tuple[list[Action], bool]:
        """The actions, and whether a job given workers found no room. `stay_put`: a job
        whose counts did not change keeps its nodes; else only a job already where the plan
        puts it does."""
        ledger = Ledger(state)
        for j in jobs:
            if j.state.placed:
                ledger.give_back(j.workers, j.spec.worker_demand)
                ledger.give_back(j.ps, j.spec.ps_demand)
        names = [n.name for n in state.nodes]
        plans = {}
        keep, move = [], []
        for j in jobs:
            w, p, v = counts[j.name]
            plans[j.name] = (_counts(names, v.workers), _counts(names, v.ps)) if w else None
            same = ((w, p) == (j.num_workers, j.num_ps) if stay_put
                    else plans[j.name] == (_nonzero(j.workers), _nonzero(j.ps)))
            if j.state.placed and w and same:
                ledger.take(j.workers, j.spec.worker_demand)
                ledger.take(j.ps, j.spec.ps_demand)
                keep.append(j)
            else:
                move.append(j)
        suspends: list[Action] = []
        places: list[Action] = []
        stranded = False
        for j in move:
            w, p, _ = counts[j.name]
            planned, got = plans[j.name], None
            if w:
                spec = j.spec
                fits = ledger.holds(spec.worker_demand, planned[0], spec.ps_demand, planned[1])
                got = planned if fits else ledger.place_gang(j, w, p)
                stranded = stranded or got is None
            if j.state.placed:
                why = (f"DL2 resizes it to {w} workers, {p} PS" if (w, p) != (j.num_workers,
                       j.num_ps) else "DL2 moves it to where the slot's plan puts it")
                suspends.append(Suspend(j.name, why if w else "DL2 gives it nothing this slot"))
            if got is None:
                why = ("waiting: DL2 gave it no workers this slot" if not w else
                       f"waiting: {w} workers, {p} PS do not fit now")
                if j.reason != why or j.state.placed:
                    places.append(Wait(j.name, why))
                continue
            ledger.take(got[0], j.spec.worker_demand)
            ledger.take(got[1], j.spec.ps_demand)
            places.append(Place(j.name, f"DL2 network: {w} workers, {p} PS"
                                f" ({describe_placement(*got)})", got[0], got[1]))
        return suspends + places, stranded

    # ---- online learning -------------------------------------------------------------------

    def _learn_from(self, state: ClusterState) -> None:
        if self._pending is None:
            return
        traj, before, totals = self._pending
        self._pending = None
        reward = 0.0
        for name, p0 in before.items():
            job = state.jobs.get(name)
            now = job.progress if job is not None else totals[name]  # gone: completed
            reward += max(now - p0, 0.0) / totals[name]
        if self._baseline is None:
            self._baseline = reward
        adv = reward - self._baseline
        self._baseline = 0.9 * self._baseline + 0.1 * reward
        X, G, jm, am, acts = traj.arrays()
        A = np.full(len(acts), adv / (abs(self._baseline) + 1e-6))
        self.net.policy_gradient(X, G, jm, am, acts, A, self.learning_rate, 0.01)
        self.updates += 1

    # ---- teaching view -----------------------------------------------------------------------

    def _view_summary(self, now: float, counts: dict) -> dict[str, Any]:
        steps = []
        for p, names in self._last_probs[:200]:
            per_job = {}
            for i, n in enumerate(names):
                per_job[n] = {a: float(p[3 * i + k]) for k, a in enumerate(ACTION_NAMES)}
            steps.append({"jobs": per_job, "stop": float(p[STOP]), "chosen": int(np.argmax(p))})
        first = steps[0] if steps else {"jobs": {}, "stop": 1.0}
        return {"time": now, "first_step": first, "steps": steps,
                "allocation": {n: {"workers": c[0], "ps": c[1]} for n, c in counts.items()}}

    def engine_view(self) -> dict[str, Any]:
        """The network's last slot: for the first decision step, the probability of each
        action per job in its window (add a worker, a PS, both) and of stopping; the workers
        and PS it gave each job. `probabilities` holds every step, for notebooks (`details`:
        not drawn by the console)."""
        trained = {k: self.meta.get(k) for k in ("seed", "sl_traces", "rl_iters")}
        view: dict[str, Any] = {
            "engine": "dl2", "actions": list(ACTION_NAMES) + ["stop"], "window": WINDOW,
            "weights": self.weights or "shipped",
            "trained": ", ".join(f"{k} {v}" for k, v in trained.items() if v is not None)
            or "shipped weights", "learning": self.learn, "updates": self.updates,
            "probabilities": self._last_view, "details": ["probabilities"]}
        first = self._last_view.get("first_step", {}).get("jobs") if self._last_view else None
        if not first:
            view["status"] = ("no parameter-server job to steer: DL2 resizes PS jobs only and"
                              " rejects all-reduce jobs at once (switch engine for those)")
            return view
        # to 3 decimals: the network is sure of most steps (1e-200 reads as noise)
        view["action_probabilities"] = {job: {a: round(x, 3) for a, x in p.items()}
                                        for job, p in first.items()}
        view["stop_probability"] = round(self._last_view["first_step"]["stop"], 3)
        view["allocation"] = self._last_view["allocation"]
        return view


def _held(state: ClusterState, j: JobStatus) -> np.ndarray:
    out = np.zeros_like(state.capacity)
    for n, c in j.workers.items():
        out[state.node_index[n]] += j.spec.worker_demand.as_array() * c
    for n, c in j.ps.items():
        out[state.node_index[n]] += j.spec.ps_demand.as_array() * c
    return out


def _counts(names: list[str], nodes: list[int]) -> Placement:
    out: Placement = {}
    for i in nodes:
        out[names[i]] = out.get(names[i], 0) + 1
    return out


def _nonzero(placement: Placement) -> Placement:
    return {n: c for n, c in placement.items() if c}


