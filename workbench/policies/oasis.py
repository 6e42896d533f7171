"""OASiS (Bao et al., INFOCOM'18): online admission and per-slot scheduling by primal-dual prices.

Time is cut into slots of `round_interval` seconds. When a job arrives, a subroutine finds its
cheapest feasible schedule for every candidate completion slot: how many workers and
parameter servers (PS) in each slot, on which servers. It is a dynamic programme over slots and
discretised work ("finish d units in slot t + the rest by t-1", the paper's recursion), where the
cost of doing k units in one slot is the cheapest (workers, PS) option that does them, placed
greedily on the servers with the lowest current prices. The job's payoff at completion slot t is
its utility f(t) minus that cost; the best t wins. A job with a positive payoff is admitted on that
schedule and its resources are reserved slot by slot; otherwise it is rejected, with the reason.

Prices: every (slot, server, resource) has a price that grows exponentially with the share of the
server's capacity already reserved in that slot, p = L (U_r / L)^(used / capacity), so it is L on
an idle server and U_r on a full one (no job pays more than U_r per unit, so a full server is never
sold twice). U_r is the largest utility per unit of resource r any job can pay (top utility weight
over the smallest per-task demand of r); L is half the smallest utility per unit of
resource-slot (utility at the latest useful completion over the largest resource-slots a job may
take). Both are widened online as jobs arrive (they only ever move outwards). The paper proves
a competitive ratio of 2α with α = max_r(1, ln(U_r / L)); `engine_view()` reports both.

Utility: the paper's sigmoid f(τ) = γ1 / (1 + exp(γ2 (τ - γ3) / slot)) of the completion time τ
after arrival: γ1 is the job's weight (`spec.priority`, at least 1), γ2 the decay per slot
(`decay`), γ3 the target (the job's deadline minus its arrival; without a deadline
`target_factor` × its run time at the submitted size).

Constraints (as the paper): at most `max_workers` workers per slot; PS count between
ceil(workers / `workers_per_ps`) (the PS bandwidth must cover the workers') and the worker count;
per-server capacity in every resource. Speeds come from the fitted PS model
(`perf.ps_speed`); each slot is counted as `round_interval - restart_delay` seconds of training, so a
schedule stays feasible when every slot pays a checkpoint-restart.

Modelling choices (ours): the schedule is fixed at admission, as in the paper; a job that runs
past its schedule (a failure, a policy switch) keeps its last allocation where free resources
allow, unpriced, until a new schedule for its remaining work fits (tried each slot); a job
admitted or started before this engine instance took over (a standby scheduler taking over
the lease, an engine switch) gets one the same way and is never rejected. Otherwise a job
that overruns (a cluster slower than the speed model) is starved by the reservations of
later arrivals. A job whose schedule changes between slots is suspended and placed again
(one checkpoint-restart, as a rescale costs in the simulator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..model import (
    RESOURCE_NAMES,
    Action,
    Admit,
    ClusterState,
    JobKind,
    JobSpec,
    JobState,
    JobStatus,
    Place,
    Placement,
    Reject,
    Suspend,
    Wait,
    describe_placement,
)
from ..placement.ledger import Ledger
from .base import Policy, register

_EPS = 1e-9
_INF = float("inf")


# ---- utility ------------------------------------------------------------------------------


def sigmoid_utility(weight: float, target: float, decay: float, elapsed: float | np.ndarray,
                    slot: float) -> float | np.ndarray:
    """γ1 / (1 + exp(γ2 (τ - γ3) / slot)): near γ1 well before the target, γ1/2 at it."""
    x = np.clip(decay * (np.asarray(elapsed, dtype=float) - target) / slot, -60.0, 60.0)
    out = weight / (1.0 + np.exp(x))
    return float(out) if np.ndim(out) == 0 else out


def utility_weight(spec: JobSpec) -> float:
    return float(max(spec.priority, 1))


def utility_target(spec: JobSpec, perf, target_factor: float = 3.0) -> float:
    """Seconds after arrival at which the utility has fallen to half: the deadline if any."""
    if spec.deadline is not None:
        return max(spec.deadline - spec.arrival, 1.0)
    rate = _rate(perf, spec, spec.initial_workers, max(spec.num_ps, 1))
    return target_factor * spec.total_work / max(rate, _EPS)


def job_utility(spec: JobSpec, finish: float | None, perf, *, slot: float = 300.0,
                decay: float = 5.0, target_factor: float = 3.0) -> float:
    """The utility a job earns by finishing at `finish` (0 if it never finishes)."""
    if finish is None:
        return 0.0
    return float(sigmoid_utility(utility_weight(spec), utility_target(spec, perf, target_factor),
                                 decay, finish - spec.arrival, slot))


def _rate(perf, spec: JobSpec, workers: int, ps: int) -> float:
    if spec.kind == JobKind.PS:
        return float(perf.ps_speed(spec.application, workers, ps))
    return float(perf.ideal_rate(spec, workers))


# ---- the schedule of one job ----------------------------------------------------------------


@dataclass
class Schedule:
    """A job's admitted (or proposed) schedule: per absolute slot, its worker and PS placement."""

    job: str
    slots: dict[int, tuple[Placement, Placement]] = field(default_factory=dict)
    completion_slot: int = -1
    utility: float = 0.0
    cost: float = 0.0

    @property
    def payoff(self) -> float:
        return self.utility - self.cost

    def counts(self, slot: int) -> tuple[int, int]:
        w, p = self.slots.get(slot, ({}, {}))
        return sum(w.values()), sum(p.values())


@dataclass
class _Options:
    workers: np.ndarray  # (n_opt,)
    ps: np.ndarray
    units: np.ndarray  # work units done in one slot


class PriceBook:
    """Reserved resources per (slot, server, resource) and the exponential prices on them."""

    def __init__(self, capacity: np.ndarray, slots: int = 64) -> None:
        self.capacity = np.asarray(capacity, dtype=float)
        self.used = np.zeros((slots, *self.capacity.shape))
        self.L = _INF
        self.U = np.zeros(self.capacity.shape[1])

    def ensure(self, slots: int) -> None:
        if slots > len(self.used):
            grow = max(slots, 2 * len(self.used))
            more = np.zeros((grow - len(self.used), *self.capacity.shape))
            self.used = np.concatenate([self.used, more])

    def widen(self, L: float, U: np.ndarray) -> None:
        self.L = min(self.L, L)
        self.U = np.maximum(self.U, U)
        # A resource no job has asked for yet is priced flat at L.
        self.U = np.where(self.U > 0, np.maximum(self.U, self.L), 0.0)

    def prices(self, start: int, stop: int) -> np.ndarray:
        """(slots, servers, resources) unit prices for slots [start, stop)."""
        self.ensure(stop)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(self.capacity > 0, self.used[start:stop] / self.capacity, 1.0)
        share = np.clip(share, 0.0, 1.0)
        ratio = np.where(self.U > 0, self.U / self.L, 1.0)
        return self.L * ratio ** share

    def free(self, start: int, stop: int) -> np.ndarray:
        self.ensure(stop)
        return np.maximum(self.capacity - self.used[start:stop], 0.0)

    def reserve(self, slot: int, amount: np.ndarray) -> None:
        self.ensure(slot + 1)
        self.used[slot] += amount

    def release(self, slot: int, amount: np.ndarray) -> None:
        if slot < len(self.used):
            self.used[slot] = np.maximum(self.used[slot] - amount, 0.0)

    @property
    def alpha(self) -> float:
        if not math.isfinite(self.L) or self.L <= 0:
            return float("nan")
        ratios = [u / self.L for u in self.U if u > 0]
        return max([1.0] + [math.log(r) for r in ratios])


def _fit(free: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """Tasks of `demand` each server (row of `free`) can take."""
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(demand > 0, np.floor((free + _EPS) / np.where(demand > 0, demand, 1)),
                       np.inf)
    counts = per.min(axis=-1)
    return np.where(np.isfinite(counts), counts, 10**6).astype(np.int64)


def _greedy(unit_price: np.ndarray, fits: np.ndarray, n: int) -> np.ndarray:
    """Servers of the n cheapest tasks, cheapest server first (ties by index); may be shorter."""
    order = np.argsort(unit_price, kind="stable")
    return np.repeat(order, np.minimum(fits[order], n))[:n]


# ---- the engine ---------------------------------------------------------------------------


@register("oasis")
class OasisPolicy(Policy):
    """OASiS: admit a job if its utility beats the priced cost of its cheapest schedule."""

    needs_every_round = True
    earliest_chunk = 24  # slots costed at a time while looking for a must-finish job's earliest end

    def __init__(self, perf=None, round_interval: float = 300.0, restart_delay: float = 30.0,
                 workers_per_ps: int = 4, work_levels: int = 100, horizon_slots: int = 288,
                 decay: float = 5.0, target_factor: float = 3.0, utility_floor: float = 0.01,
                 max_utility: float = 100.0,
                 bounds: tuple[float, dict[str, float]] | None = None) -> None:
        if perf is None:
            from ..perf import default_perf

            perf = default_perf()
        self.perf = perf
        self.round_interval = float(round_interval)
        self.restart_delay = float(restart_delay)
        self.workers_per_ps = max(int(workers_per_ps), 1)
        self.work_levels = max(int(work_levels), 1)
        self.horizon_slots = max(int(horizon_slots), 1)
        self.decay = float(decay)
        self.target_factor = float(target_factor)
        self.utility_floor = float(utility_floor)
        self.max_utility = float(max_utility)
        self.fixed_bounds = bounds
        self.reset()

    def reset(self) -> None:
        self.origin: float | None = None
        self.book: PriceBook | None = None
        self.names: list[str] = []
        self.schedules: dict[str, Schedule] = {}
        self.decided: set[str] = set()
        self.rejected: dict[str, str] = {}
        self.price_history: list[tuple[float, list[float]]] = []
        self._specs: dict[str, JobSpec] = {}
        self._slot = 0

    # ---- slots and bounds ---------------------------------------------------------------

    def slot_of(self, t: float) -> int:
        assert self.origin is not None
        return math.floor((t - self.origin) / self.round_interval + 1e-6)

    def slot_start(self, slot: int) -> float:
        assert self.origin is not None
        return self.origin + slot * self.round_interval

    def _setup(self, state: ClusterState) -> None:
        if self.origin is None:
            self.origin = state.now
        names = [n.name for n in state.nodes]
        if self.book is None or names != self.names:
            old = self.book
            self.names = names
            self.book = PriceBook(state.capacity.copy())
            if old is not None and math.isfinite(old.L):
                self.book.widen(old.L, old.U)
            if self.fixed_bounds is not None:
                L, U = self.fixed_bounds
                self.book.widen(L, np.array([U.get(r, 0.0) for r in RESOURCE_NAMES]))
            for sched in self.schedules.values():  # a changed node list: rebuild reservations
                spec = self._specs[sched.job]
                for slot, (w, p) in sched.slots.items():
                    if set(w) | set(p) <= set(names):
                        self.book.reserve(slot, self._amount(spec, w, p))

    def _amount(self, spec: JobSpec, workers: Placement, ps: Placement) -> np.ndarray:
        amount = np.zeros_like(self.book.capacity)
        wd, pd = spec.worker_demand.as_array(), spec.ps_demand.as_array()
        for n, c in workers.items():
            amount[self.names.index(n)] += wd * c
        for n, c in ps.items():
            amount[self.names.index(n)] += pd * c
        return amount

    def _widen_bounds(self, spec: JobSpec, options: _Options, horizon: int) -> None:
        if self.fixed_bounds is not None:
            return
        wd, pd = spec.worker_demand.as_array(), spec.ps_demand.as_array()
        smallest = np.where((wd > 0) & (pd > 0), np.minimum(wd, pd), np.maximum(wd, pd))
        U = np.where(smallest > 0, max(self.max_utility, utility_weight(spec)) / np.where(
            smallest > 0, smallest, 1.0), 0.0)
        biggest = float((wd * options.workers.max() + pd * options.ps.max()).sum())
        L = utility_weight(spec) * self.utility_floor / (2.0 * biggest * horizon)
        self.book.widen(L, U)

    # ---- the subroutine: cheapest schedule per completion slot -----------------------------

    def _options(self, spec: JobSpec) -> _Options | None:
        lo, hi = spec.min_workers, spec.max_workers
        ws, ps = [], []
        for w in range(lo, hi + 1):
            if spec.kind == JobKind.PS:
                for p in range(max(-(-w // self.workers_per_ps), 1), w + 1):
                    ws.append(w)
                    ps.append(p)
            else:
                ws.append(w)
                ps.append(0)
        if not ws:
            return None
        w_arr, p_arr = np.array(ws), np.array(ps)
        eff = max(self.round_interval - self.restart_delay, 1.0)
        rates = np.array([_rate(self.perf, spec, int(w), int(p)) for w, p in zip(ws, ps)])
        unit = spec.total_work / self.work_levels
        units = np.minimum(np.floor(rates * eff / unit + 1e-9), self.work_levels).astype(np.int64)
        return _Options(w_arr, p_arr, units)

    def _slot_costs(self, spec: JobSpec, opts: _Options, s0: int, horizon: int
                    ) -> tuple[np.ndarray, list]:
        """Cost (slots x options) of each option placed greedily on the cheapest servers, inf
        where it does not fit; and per slot the greedy worker/PS server lists."""
        wd, pd = spec.worker_demand.as_array(), spec.ps_demand.as_array()
        prices = self.book.prices(s0, s0 + horizon)
        free = self.book.free(s0, s0 + horizon)
        n_max, p_max = int(opts.workers.max()), int(opts.ps.max())
        cost = np.full((horizon, len(opts.workers)), _INF)
        picks: list = []
        cache: dict[bytes, tuple[np.ndarray, Any]] = {}
        for t in range(horizon):
            key = prices[t].tobytes() + free[t].tobytes()
            hit = cache.get(key)
            if hit is not None:
                cost[t] = hit[0]
                picks.append(hit[1])
                continue
            pw, pp = prices[t] @ wd, prices[t] @ pd
            wnodes = _greedy(pw, _fit(free[t], wd), n_max)
            wcost = np.concatenate([[0.0], np.cumsum(pw[wnodes])])
            per_w = {}
            for w in range(1, len(wnodes) + 1):
                if p_max == 0:
                    per_w[w] = (wnodes[:w], np.array([], dtype=np.int64), np.array([0.0]))
                    continue
                used = np.bincount(wnodes[:w], minlength=len(free[t]))[:, None] * wd
                pnodes = _greedy(pp, _fit(free[t] - used, pd), p_max)
                pcost = np.concatenate([[0.0], np.cumsum(pp[pnodes])])
                per_w[w] = (wnodes[:w], pnodes, pcost)
            row = np.full(len(opts.workers), _INF)
            for i, (w, p) in enumerate(zip(opts.workers, opts.ps)):
                got = per_w.get(int(w))
                if got is None or len(got[2]) <= p:
                    continue
                row[i] = wcost[w] + got[2][p]
            cost[t] = row
            picks.append(per_w)
            cache[key] = (row, per_w)
        return cost, picks

    def _can_finish(self, spec: JobSpec, opts: _Options, s0: int, horizon: int) -> bool:
        """Whether the job could do all its work within the horizon if each slot gave it the
        fastest option for which that slot has room for the workers (a necessary condition:
        an option with more workers than a slot has room for costs inf there, so where this
        fails the dynamic programme finds nothing, at ~19 ms a job; at Philly scale after a
        switch, ~1,300 jobs every round found nothing, most needing more than the horizon)."""
        if int(opts.units.max()) * horizon < self.work_levels:
            return False
        room = _fit(self.book.free(s0, s0 + horizon), spec.worker_demand.as_array()).sum(axis=-1)
        fits = opts.workers[None, :] <= room[:, None]  # (slots, options)
        best = np.where(fits, opts.units[None, :], 0).max(axis=1)
        return int(best.sum()) >= self.work_levels

    def _cheapest(self, spec: JobSpec, opts: _Options, now_slot: int, horizon: int,
                  floor: bool) -> tuple:
        """The dynamic programme over the horizon's slots: (cost, c_opt, best, choice, picks),
        with best[t, d] the cheapest way to do d work units by the end of slot t, choice[t, d]
        the units done in slot t, c_opt[t, k] the option doing k units in t, and the slot
        costs and greedy picks. A must-finish job (`floor` False) stops at the first slot by
        which it can finish (fewer rows)."""
        D = self.work_levels
        ks = np.arange(D + 1)
        enough = opts.units[None, :] >= ks[:, None]  # (D+1, n_opt)
        d_idx, k_idx = np.meshgrid(ks, ks, indexing="ij")
        valid = k_idx <= d_idx
        behind = np.where(valid, d_idx - k_idx, 0)
        prev = np.full(D + 1, _INF)
        prev[0] = 0.0
        costs, picks, c_opts, bests, choices = [], [], [], [], []
        # A job that must finish takes the earliest completion: the slots after the first one
        # where it can are never read, so they are costed a chunk at a time until it can.
        chunk = horizon if floor else self.earliest_chunk
        for first in range(0, horizon, chunk):
            n = min(chunk, horizon - first)
            cost, chunk_picks = self._slot_costs(spec, opts, now_slot + first, n)
            # c[t, k]: cheapest option doing at least k units in slot t.
            masked = np.where(enough[None, :, :], cost[:, None, :], _INF)  # (T, D+1, n_opt)
            c = masked.min(axis=2)
            c_opt = masked.argmin(axis=2)
            c[:, 0], c_opt[:, 0] = 0.0, -1
            # best[t, d]: cheapest way to do d units by the end of slot t; choice[t, d]: units
            # in slot t.
            best = np.full((n, D + 1), _INF)
            choice = np.zeros((n, D + 1), dtype=np.int64)
            for t in range(n):
                total = np.where(valid, c[t][k_idx] + prev[behind], _INF)
                choice[t] = total.argmin(axis=1)
                best[t] = total[ks, choice[t]]
                prev = best[t]
            costs.append(cost)
            picks += chunk_picks
            c_opts.append(c_opt)
            bests.append(best)
            choices.append(choice)
            if not floor and np.isfinite(prev[D]):
                break
        return (np.concatenate(costs), np.concatenate(c_opts), np.concatenate(bests),
                np.concatenate(choices), picks)

    def plan(self, spec: JobSpec, now_slot: int, floor: bool = True
             ) -> tuple[Schedule | None, str]:
        """The best-payoff schedule for `spec` starting at `now_slot`, or None and why not.
        `floor`: only completions while its utility is above `utility_floor`, the best payoff
        among them; else, for a job that must finish whatever its utility, the earliest
        completion within `horizon_slots` (its cheapest way to finish by then)."""
        opts = self._options(spec)
        if opts is None:
            return None, "no worker count allowed"
        weight = utility_weight(spec)
        target = utility_target(spec, self.perf, self.target_factor)
        slot = self.round_interval
        # Candidate completion slots: until the utility falls below the floor (or the cap).
        ends = self.slot_start(now_slot + np.arange(1, self.horizon_slots + 1)) - spec.arrival
        f = sigmoid_utility(weight, target, self.decay, ends, slot)
        useful = np.flatnonzero(f >= self.utility_floor * weight)
        horizon = int(useful[-1]) + 1 if len(useful) else 1
        if not floor:
            horizon = self.horizon_slots
        self._widen_bounds(spec, opts, horizon)
        infeasible = (None, f"no feasible schedule within {horizon} slots before its utility"
                            f" falls below {self.utility_floor:.0%} (cluster reserved)")
        if not self._can_finish(spec, opts, now_slot, horizon):
            return infeasible
        D = self.work_levels
        cost, c_opt, best, choice, picks = self._cheapest(spec, opts, now_slot, horizon, floor)
        if not np.isfinite(best[:, D]).any():
            return infeasible
        if floor:
            payoff = f[:horizon] - best[:, D]
            t_best = int(np.nanargmax(np.where(np.isfinite(payoff), payoff, -_INF)))
        else:  # it must finish whatever its utility: the earliest completion that fits
            t_best = int(np.flatnonzero(np.isfinite(best[:, D]))[0])
        sched = Schedule(spec.name)
        d, t = D, t_best
        last = -1
        while d > 0 and t >= 0:
            k = int(choice[t, d])
            if k > 0:
                i = int(c_opt[t, k])
                w, p = int(opts.workers[i]), int(opts.ps[i])
                wnodes, pnodes, _ = picks[t][w]
                workers = _counts(self.names, wnodes[:w])
                ps = _counts(self.names, pnodes[:p])
                sched.slots[now_slot + t] = (workers, ps)
                sched.cost += float(cost[t, i])
                last = max(last, t)
            d -= k
            t -= 1
        sched.completion_slot = now_slot + last
        sched.utility = float(f[last]) if last >= 0 else 0.0
        return sched, ""

    # ---- the round ------------------------------------------------------------------------

    def schedule(self, state: ClusterState) -> list[Action]:
        self._setup(state)
        s = self.slot_of(state.now)
        self._slot = s
        self._record_prices(state.now, s)
        actions: list[Action] = []
        for job in sorted(state.jobs.values(), key=lambda j: (j.spec.arrival, j.name)):
            if job.name in self.decided or job.state.finished:
                continue
            if job.admitted or job.state.placed or job.progress > 0:
                self.decided.add(job.name)
                self._replan(job, s)
                continue
            self._specs[job.name] = job.spec
            self.decided.add(job.name)
            sched, why = self.plan(job.spec, s)
            if sched is None or sched.payoff <= 0:
                if sched is not None:
                    why = (f"payoff {sched.payoff:.3g} ≤ 0: utility {sched.utility:.3g} at slot"
                           f" {sched.completion_slot - s + 1} < cost {sched.cost:.3g} at current"
                           " prices")
                self.rejected[job.name] = why
                actions.append(Reject(job.name, f"rejected: {why}"))
                continue
            self.schedules[job.name] = sched
            for slot, (w, p) in sched.slots.items():
                self.book.reserve(slot, self._amount(job.spec, w, p))
            end = self.slot_start(sched.completion_slot + 1)
            actions.append(Admit(job.name, (
                f"admitted: payoff {sched.payoff:.3g} = utility {sched.utility:.3g} − cost"
                f" {sched.cost:.3g}; {len(sched.slots)} slots, done by"
                f" t={end / 3600:.1f} h")))
        for job in state.jobs.values():  # overran its schedule (slower than planned, a failure)
            sched = self.schedules.get(job.name)
            if job.name in self.decided and job.name not in self.rejected and \
                    not job.state.finished and (sched is None or s > sched.completion_slot):
                self._replan(job, s)
        actions += self._carry_out(state, s)
        self._forget_finished(state)
        return actions

    def _replan(self, job: JobStatus, s: int) -> None:
        """A job admitted or started that has no schedule for slot `s` on: one admitted before
        this engine took over (a new leader, a switch), or one that overran its schedule (it
        ran slower than planned: restarts, a failure). It is never rejected: it gets a schedule
        for its remaining work, whatever its payoff now, if one fits; else it runs past its
        schedule on free resources and is tried again next slot."""
        left = job.spec.with_(total_work=max(job.remaining_work, job.spec.total_work * 1e-6))
        sched, _ = self.plan(left, s, floor=False)
        if sched is None:
            return
        self._specs[job.name] = job.spec
        self.schedules[job.name] = sched
        for slot, (w, p) in sched.slots.items():
            self.book.reserve(slot, self._amount(job.spec, w, p))

    def _carry_out(self, state: ClusterState, s: int) -> list[Action]:
        """Move every admitted job to its placement for slot s: planned ones first."""
        ledger = Ledger(state)
        active = [j for j in state.jobs.values() if not j.state.finished
                  and j.name not in self.rejected
                  and (j.name in self.schedules or j.admitted or j.state.placed)]
        for j in active:
            if j.state.placed:
                ledger.give_back(j.workers, j.spec.worker_demand)
                ledger.give_back(j.ps, j.spec.ps_demand)
        targets: dict[str, tuple[Placement, Placement] | None] = {}
        reasons: dict[str, str] = {}
        later = []
        for j in sorted(active, key=lambda j: (j.spec.arrival, j.name)):
            sched = self.schedules.get(j.name)
            if sched is None or s > sched.completion_slot:
                later.append(j)
                continue
            plan = sched.slots.get(s)
            if plan is None:
                targets[j.name] = None
                reasons[j.name] = f"paused in slot {s}: its schedule gives it no workers now"
                continue
            w, p = plan
            if _fits(ledger, j.spec, w, p):
                got = (w, p)
            else:  # a node down or taken by an unplanned job: same counts anywhere free
                got = ledger.place_gang(j, sum(w.values()), sum(p.values()))
            if got is None:
                targets[j.name] = None
                reasons[j.name] = f"waiting: its slot-{s} placement does not fit now"
                continue
            ledger.take(got[0], j.spec.worker_demand)
            ledger.take(got[1], j.spec.ps_demand)
            targets[j.name] = got
            reasons[j.name] = (f"slot {s} of its OASiS schedule: {sum(w.values())} workers,"
                               f" {sum(p.values())} PS on {describe_placement(*got)}")
        for j in later:  # past its schedule (or not ours): keep going where resources allow
            w = j.num_workers or _last_counts(self.schedules.get(j.name), j)[0]
            p = j.num_ps or _last_counts(self.schedules.get(j.name), j)[1]
            got = None
            if j.state.placed and _fits(ledger, j.spec, j.workers, j.ps):
                got = (j.workers, j.ps)
            elif w:
                got = ledger.place_gang(j, w, p)
            if got is not None:
                ledger.take(got[0], j.spec.worker_demand)
                ledger.take(got[1], j.spec.ps_demand)
            targets[j.name] = got
            reasons[j.name] = ("past its schedule: continues on free resources" if got else
                               "waiting: past its schedule, no free resources for it")
        suspends: list[Action] = []
        places: list[Action] = []
        for j in active:
            target = targets.get(j.name)
            current = (j.workers, j.ps) if j.state.placed else None
            if target is not None and current is not None and _same(target, current):
                continue
            if current is not None and j.state is not JobState.HOLDING:
                suspends.append(Suspend(j.name, reasons[j.name] if target is None else
                                        f"re-placed for slot {s}"))
            if target is not None:
                places.append(Place(j.name, reasons[j.name], target[0], target[1]))
            elif current is None and j.reason != reasons[j.name]:
                places.append(Wait(j.name, reasons[j.name]))
        return suspends + places

    def _forget_finished(self, state: ClusterState) -> None:
        """A job that finished ahead of its schedule hands back its later slots."""
        done = [n for n in self.schedules if n not in state.jobs]
        for n in done:
            sched = self.schedules.pop(n)
            spec = self._specs.pop(n, None)
            if spec is None:
                continue
            for slot, (w, p) in sched.slots.items():
                if slot >= self._slot:
                    self.book.release(slot, self._amount(spec, w, p))

    def _record_prices(self, now: float, s: int) -> None:
        if self.book is None or not math.isfinite(self.book.L):
            return
        p = self.book.prices(s, s + 1)[0].mean(axis=0)
        if not self.price_history or self.price_history[-1][0] != now:
            self.price_history.append((now, [float(x) for x in p]))

    # ---- teaching view ----------------------------------------------------------------------

    def engine_view(self) -> dict[str, Any]:
        if self.book is None or self.origin is None or not math.isfinite(self.book.L):
            return {"engine": "oasis", "resources": list(RESOURCE_NAMES),
                    "status": "no price yet: OASiS prices the resources when a job arrives"
                              " (each arrival is admitted only if its utility beats the cost)",
                    "slot_seconds": self.round_interval, "admitted": 0,
                    "slots": [], "price": [], "price_history": []}
        s = self._slot
        last = max([s + 1] + [sch.completion_slot + 1 for sch in self.schedules.values()])
        prices = self.book.prices(s, last)  # (slots, servers, resources)
        used = self.book.used[s:last].sum(axis=1) / np.maximum(self.book.capacity.sum(axis=0), _EPS)
        return {
            "engine": "oasis",
            "resources": list(RESOURCE_NAMES),
            "slot_seconds": self.round_interval,
            "slots": [self.slot_start(k) for k in range(s, last)],
            "price": prices.mean(axis=1).tolist(),  # per slot, per resource: mean over servers
            "price_max": prices.max(axis=1).tolist(),
            "reserved_share": used.tolist(),
            "price_history": [{"time": t, "price": p} for t, p in self.price_history],
            "L": self.book.L,
            "U": dict(zip(RESOURCE_NAMES, self.book.U.tolist())),
            "alpha": self.book.alpha,
            "competitive_ratio": 2 * self.book.alpha,
            "admitted": len(self.decided) - len(self.rejected),
            "rejected": dict(self.rejected),
        }


def _counts(names: list[str], nodes: np.ndarray) -> Placement:
    out: Placement = {}
    for i in nodes.tolist():
        out[names[i]] = out.get(names[i], 0) + 1
    return out


def _fits(ledger: Ledger, spec: JobSpec, workers: Placement, ps: Placement) -> bool:
    need = np.zeros_like(ledger.free)
    for n, c in workers.items():
        if n not in ledger.index:
            return False
        need[ledger.index[n]] += spec.worker_demand.as_array() * c
    for n, c in ps.items():
        if n not in ledger.index:
            return False
        need[ledger.index[n]] += spec.ps_demand.as_array() * c
    return bool((need <= ledger.free + 1e-6).all())


def _same(a: tuple[Placement, Placement], b: tuple[Placement, Placement]) -> bool:
    def norm(p: Placement) -> dict:
        return {k: v for k, v in p.items() if v}

    return norm(a[0]) == norm(b[0]) and norm(a[1]) == norm(b[1])


def _last_counts(sched: Schedule | None, job: JobStatus) -> tuple[int, int]:
    if sched is not None and sched.slots:
        return sched.counts(max(sched.slots))
    return job.spec.initial_workers, job.spec.num_ps


__all__ = [
    "OasisPolicy",
    "PriceBook",
    "Schedule",
    "job_utility",
    "sigmoid_utility",
    "utility_target",
    "utility_weight",
]
