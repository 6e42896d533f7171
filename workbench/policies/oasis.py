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
from typing import Any, NamedTuple

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


class _Rates(NamedTuple):
    """Every allowed (workers, PS) option of a job shape and its rate; the largest of each."""

    workers: np.ndarray
    ps: np.ndarray
    rates: np.ndarray
    top_rate: float
    most_workers: int
    most_ps: int


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
    asked = demand > 0  # only the resources it asks for limit it
    if not asked.any():
        return np.full(free.shape[:-1], 10**6, dtype=np.int64)
    if not asked.all():
        free, demand = free[..., asked], demand[asked]
    per = np.floor((free + _EPS) / demand)
    fewest = per[..., 0]
    for r in range(1, per.shape[-1]):  # the min over the last axis, ~20x faster at this size
        fewest = np.minimum(fewest, per[..., r])
    return fewest.astype(np.int64)


def _greedy(unit_price: np.ndarray, fits: np.ndarray, n: int) -> np.ndarray:
    """Servers of the n cheapest tasks, cheapest server first (ties by index); may be shorter."""
    order = np.argsort(unit_price, kind="stable")
    return np.repeat(order, np.minimum(fits[order], n))[:n]


def _costs_without_ps(spec: JobSpec, opts: _Options, prices: np.ndarray, free: np.ndarray
                      ) -> tuple[np.ndarray, list]:
    """`OasisPolicy._slot_costs` of the given slots for a job without PS, all slots at once:
    per slot the `_greedy` worker servers (the stable sort per row, the same servers) and the
    running sum of their prices (the same additions in the same order)."""
    n_max = int(opts.workers.max())
    wd = spec.worker_demand.as_array()
    pw = prices @ wd  # (slots, servers): the stack's matmul is one per slot, as before
    rows = np.arange(len(pw))[:, None]
    order = np.argsort(pw, axis=1, kind="stable")
    tasks = np.minimum(_fit(free, wd)[rows, order], n_max)
    ends = np.cumsum(tasks, axis=1)
    got = np.minimum(ends[:, -1], n_max)  # workers placed per slot
    # The j-th worker goes on order[i] for the first i whose running count passes j: searched
    # in all rows at once, each row's counts lifted above the previous row's.
    servers = order.shape[1]
    lift = rows * (servers * n_max + 1)
    at = np.searchsorted((ends + lift).ravel(), (lift + np.arange(n_max)).ravel(), side="right")
    nodes = order[rows, np.minimum(at.reshape(len(pw), n_max) - rows * servers, servers - 1)]
    running = np.cumsum(pw[rows, nodes], axis=1)
    w = opts.workers
    cost = np.where(w[None, :] <= got[:, None], running[:, w - 1], _INF)
    return cost, [_WorkerPicks(nodes[t, :got[t]]) for t in range(len(pw))]


def _programme(c: np.ndarray, prev: np.ndarray, K: int) -> tuple[np.ndarray, np.ndarray]:
    """The dynamic programme's rows for slots with option costs c[t, k] (k <= K units), after
    `prev` (the row of the slot before): best[t, d], the cheapest way to do d units by the
    end of slot t, and choice[t, d], the units done in slot t (the first cheapest)."""
    D = c.shape[1] - 1
    ks, kk = np.arange(D + 1), np.arange(K + 1)
    d_idx, k_idx = np.meshgrid(ks, kk, indexing="ij")  # (D+1, K+1)
    valid = k_idx <= d_idx
    behind = np.where(valid, d_idx - k_idx, 0)
    best = np.empty_like(c)
    choice = np.zeros(c.shape, dtype=np.int64)
    # A slot with room for no option does nothing: its row is the previous one, k = 0.
    idle = ~np.isfinite(c[:, 1:K + 1]).any(axis=1)
    for t in range(len(c)):
        if idle[t]:
            best[t] = prev
        else:
            total = np.where(valid, c[t, :K + 1] + prev[behind], _INF)
            choice[t] = total.argmin(axis=1)
            best[t] = total[ks, choice[t]]
        prev = best[t]
    return best, choice


def _path(choice: np.ndarray, c_opt: np.ndarray, t_end: int, D: int) -> list[tuple[int, int]]:
    """The programme's schedule finishing D units by slot t_end: (slot, option) of every slot
    that does some, latest first."""
    steps = []
    d, t = D, t_end
    while d > 0 and t >= 0:
        k = int(choice[t, d])
        if k > 0:
            steps.append((t, int(c_opt[t, k])))
        d -= k
        t -= 1
    return steps


class _WorkerPicks:
    """`picks[t]` of a job without PS: w workers on the first w greedy servers, no PS."""

    __slots__ = ("nodes",)
    _no_ps = (np.array([], dtype=np.int64), np.array([0.0]))

    def __init__(self, nodes: np.ndarray) -> None:
        self.nodes = nodes

    def __getitem__(self, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not 1 <= w <= len(self.nodes):
            raise KeyError(w)
        return (self.nodes[:w], *self._no_ps)


# ---- the engine ---------------------------------------------------------------------------


@register("oasis")
class OasisPolicy(Policy):
    """OASiS: admit a job if its utility beats the priced cost of its cheapest schedule."""

    needs_every_round = True
    earliest_chunk = 24  # slots looked at a time while looking for a job's earliest end

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
        self._index: dict[str, int] = {}  # position in `names`
        self._amounts: dict[tuple, np.ndarray] = {}  # see _amount
        self.schedules: dict[str, Schedule] = {}
        self.decided: set[str] = set()
        self.rejected: dict[str, str] = {}
        self.price_history: list[tuple[float, list[float]]] = []
        self._specs: dict[str, JobSpec] = {}
        self._slot = 0
        self._rates: dict[tuple, _Rates | None] = {}  # per job shape: see _rate_table
        self._bounds: dict[tuple, tuple] = {}  # see _widen_bounds
        self._stuck: dict[str, tuple] = {}  # see _replan

    # ---- slots and bounds ---------------------------------------------------------------

    def slot_of(self, t: float) -> int:
        assert self.origin is not None
        return math.floor((t - self.origin) / self.round_interval + 1e-6)

    def slot_start(self, slot: int) -> float:
        assert self.origin is not None
        return self.origin + slot * self.round_interval

    def next_wakeup(self, state: ClusterState | None) -> float | None:
        """The start of the next slot in which an admitted job holding nothing now has workers
        in its schedule: a schedule may pause a job for a few slots, and with nothing running
        meanwhile the controller took the idle rounds for a stall and rejected the job (10 runs
        of 60 in the property tests' workloads)."""
        if state is None or self.origin is None:
            return None
        s = self.slot_of(state.now)
        upcoming = [slot for job in state.active if not job.state.placed
                    and (sched := self.schedules.get(job.name)) is not None
                    for slot in sched.slots if slot > s]
        return self.slot_start(min(upcoming)) if upcoming else None

    def _setup(self, state: ClusterState) -> None:
        if self.origin is None:
            self.origin = state.now
        names = [n.name for n in state.nodes]
        if self.book is None or names != self.names:
            old = self.book
            self.names = names
            self._index, self._amounts = {}, {}
            for i, n in enumerate(names):
                self._index.setdefault(n, i)  # the first, as names.index
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
        """What a placement takes, per server (read-only): kept per placement, as a schedule's
        slots repeat a few (its order is kept too: the same sums)."""
        key = (spec.worker_demand, spec.ps_demand, tuple(workers.items()), tuple(ps.items()))
        amount = self._amounts.get(key)
        if amount is None:
            amount = np.zeros_like(self.book.capacity)
            wd, pd = spec.worker_demand.as_array(), spec.ps_demand.as_array()
            for n, c in workers.items():
                amount[self._index[n]] += wd * c
            for n, c in ps.items():
                amount[self._index[n]] += pd * c
            amount.flags.writeable = False
            if len(self._amounts) > 10_000:
                self._amounts.clear()
            self._amounts[key] = amount
        return amount

    def _widen_bounds(self, spec: JobSpec, table: _Rates, horizon: int) -> None:
        if self.fixed_bounds is not None:
            return
        key = (spec.worker_demand, spec.ps_demand, spec.priority, table.most_workers,
               table.most_ps, horizon)
        bounds = self._bounds.get(key)
        # Bounds applied to this book already move nothing (a job replanned every slot): the
        # book's bounds only ever move outwards, and it keeps every priced U at least L.
        if bounds is not None and bounds[2] is self.book:
            return
        if bounds is None:
            wd, pd = spec.worker_demand.as_array(), spec.ps_demand.as_array()
            smallest = np.where((wd > 0) & (pd > 0), np.minimum(wd, pd), np.maximum(wd, pd))
            U = np.where(smallest > 0, max(self.max_utility, utility_weight(spec)) / np.where(
                smallest > 0, smallest, 1.0), 0.0)
            biggest = float((wd * table.most_workers + pd * table.most_ps).sum())
            L = utility_weight(spec) * self.utility_floor / (2.0 * biggest * horizon)
            bounds = (L, U)
        self.book.widen(*bounds[:2])
        self._bounds[key] = (*bounds[:2], self.book)

    # ---- the subroutine: cheapest schedule per completion slot -----------------------------

    def _rate_table(self, spec: JobSpec) -> _Rates | None:
        """(workers, PS, rate) of every allowed option. They depend on the job's shape, not on
        its work, so they are kept per shape: a job replanned every slot asks again each time."""
        key = (spec.kind, spec.application, spec.batch_size, spec.min_workers, spec.max_workers,
               spec.num_ps)
        if key in self._rates:
            return self._rates[key]
        ws, ps = [], []
        for w in range(spec.min_workers, spec.max_workers + 1):
            if spec.kind == JobKind.PS:
                for p in range(max(-(-w // self.workers_per_ps), 1), w + 1):
                    ws.append(w)
                    ps.append(p)
            else:
                ws.append(w)
                ps.append(0)
        table = None
        if ws:
            rates = np.array([_rate(self.perf, spec, int(w), int(p)) for w, p in zip(ws, ps)])
            table = _Rates(np.array(ws), np.array(ps), rates, float(rates.max()), max(ws), max(ps))
        self._rates[key] = table
        return table

    def _options(self, spec: JobSpec) -> _Options | None:
        table = self._rate_table(spec)
        if table is None:
            return None
        w_arr, p_arr, rates = table[:3]
        eff = max(self.round_interval - self.restart_delay, 1.0)
        unit = spec.total_work / self.work_levels
        units = np.minimum(np.floor(rates * eff / unit + 1e-9), self.work_levels).astype(np.int64)
        return _Options(w_arr, p_arr, units)

    def _most_units(self, work: float, table: _Rates) -> int:
        """`_options(spec).units.max()` for `work` to do, without the array: units are a
        non-decreasing function of the rate, so the fastest option does the most (the same
        float operations)."""
        eff = max(self.round_interval - self.restart_delay, 1.0)
        unit = work / self.work_levels
        return min(math.floor(table.top_rate * eff / unit + 1e-9), self.work_levels)

    def _slot_costs(self, spec: JobSpec, opts: _Options, s0: int, horizon: int
                    ) -> tuple[np.ndarray, list]:
        """Cost (slots x options) of each option placed greedily on the cheapest servers, inf
        where it does not fit; and per slot the greedy worker/PS server lists (`picks[t][w]`:
        the worker servers, PS servers and PS cost prefix with w workers)."""
        prices = self.book.prices(s0, s0 + horizon)
        free = self.book.free(s0, s0 + horizon)
        if int(opts.ps.max()) == 0:  # every slot at once
            return _costs_without_ps(spec, opts, prices, free)
        # Slots with the same prices and room cost the same: each distinct one is costed once.
        seen: dict[bytes, int] = {}
        same = [seen.setdefault(prices[t].tobytes() + free[t].tobytes(), t)
                for t in range(horizon)]
        distinct = list(seen.values())
        rows, slot_picks = self._costs_with_ps(spec, opts, prices[distinct], free[distinct])
        where = dict(zip(distinct, range(len(distinct))))
        index = [where[t] for t in same]
        return rows[index], [slot_picks[i] for i in index]

    def _costs_with_ps(self, spec: JobSpec, opts: _Options, prices: np.ndarray,
                       free: np.ndarray) -> tuple[np.ndarray, list]:
        """`_slot_costs` of the given slots for a job with PS: a server's room for PS depends on
        the workers placed before them, so each worker count is placed in turn."""
        wd, pd = spec.worker_demand.as_array(), spec.ps_demand.as_array()
        n_max, p_max = int(opts.workers.max()), int(opts.ps.max())
        cost = np.full((len(prices), len(opts.workers)), _INF)
        picks: list = []
        for t in range(len(prices)):
            pw, pp = prices[t] @ wd, prices[t] @ pd
            wnodes = _greedy(pw, _fit(free[t], wd), n_max)
            wcost = np.concatenate([[0.0], np.cumsum(pw[wnodes])])
            per_w = {}
            for w in range(1, len(wnodes) + 1):
                used = np.bincount(wnodes[:w], minlength=len(free[t]))[:, None] * wd
                pnodes = _greedy(pp, _fit(free[t] - used, pd), p_max)
                pcost = np.concatenate([[0.0], np.cumsum(pp[pnodes])])
                per_w[w] = (wnodes[:w], pnodes, pcost)
            for i, (w, p) in enumerate(zip(opts.workers, opts.ps)):
                got = per_w.get(int(w))
                if got is None or len(got[2]) <= p:
                    continue
                cost[t, i] = wcost[w] + got[2][p]
            picks.append(per_w)
        return cost, picks

    def _earliest_end(self, spec: JobSpec, opts: _Options, s0: int, horizon: int
                      ) -> tuple[int, np.ndarray] | None:
        """The fewest slots in which the job could do all its work, None if more than
        `horizon`: each slot does at most the units of the fastest option it has room for the
        workers of (an option with more workers than a slot has room for costs inf there). So
        the dynamic programme finds nothing where this is None (~19 ms a job; at Philly scale
        after a switch, ~1,300 jobs every round, most needing more than the horizon), and its
        earliest completion is no sooner (exactly then for a job without PS, whose options
        need nothing but room for the workers). With it, the most units of each slot until
        then."""
        if int(opts.units.max()) * horizon < self.work_levels:
            return None
        done, first, most = 0, 0, []
        # A chunk of slots at a time, until the work is done (a job that can finish usually
        # can within the first hundred of the 288 slots); the first chunk is the fewest slots
        # in which the fastest option could do it all.
        stop = min(max(self.earliest_chunk, -(-self.work_levels // int(opts.units.max()))),
                   horizon)
        while first < horizon:
            free = self.book.free(s0 + first, s0 + stop)
            room = _fit(free, spec.worker_demand.as_array()).sum(axis=-1)
            fits = opts.workers[None, :] <= room[:, None]  # (slots, options)
            most.append(np.where(fits, opts.units[None, :], 0).max(axis=1))
            ran = done + np.cumsum(most[-1])
            if ran[-1] >= self.work_levels:
                end = first + int(np.argmax(ran >= self.work_levels)) + 1
                return end, np.concatenate(most)[:end]
            done, first, stop = int(ran[-1]), stop, min(stop + self.earliest_chunk, horizon)
        return None

    def _cheapest(self, spec: JobSpec, opts: _Options, now_slot: int, horizon: int,
                  first: int | None = None) -> tuple:
        """The dynamic programme over the horizon's slots: (cost, c_opt, best, choice, picks),
        with best[t, d] the cheapest way to do d work units by the end of slot t, choice[t, d]
        the units done in slot t, c_opt[t, k] the option doing k units in t, and the slot
        costs and greedy picks. `first`: for a must-finish job, which takes its earliest
        completion (the later slots are never read): the slots are costed `first` (its
        earliest possible end) then `earliest_chunk` more at a time until it can finish (its
        PS may not fit where its workers do); None: the whole horizon at once."""
        D = self.work_levels
        # No option does more than K units in a slot: c[t, k > K] is inf and never the first
        # minimum, so the programme looks at k <= K only (K is ~1 for a long replanned job).
        K = min(int(opts.units.max()), D)
        enough = opts.units[None, :] >= np.arange(K + 1)[:, None]  # (K+1, n_opt)
        prev = np.full(D + 1, _INF)
        prev[0] = 0.0
        parts, picks = [], []
        start, n = 0, horizon if first is None else min(first, horizon)
        while True:
            cost, chunk_picks = self._slot_costs(spec, opts, now_slot + start, n)
            picks += chunk_picks
            # c[t, k]: cheapest option doing at least k units in slot t.
            masked = np.where(enough[None, :, :], cost[:, None, :], _INF)  # (T, K+1, n_opt)
            c = np.full((n, D + 1), _INF)
            c_opt = np.zeros((n, D + 1), dtype=np.intp)
            c_opt[:, :K + 1] = masked.argmin(axis=2)
            c[:, :K + 1] = np.take_along_axis(masked, c_opt[:, :K + 1, None], axis=2)[..., 0]
            c[:, 0], c_opt[:, 0] = 0.0, -1
            best, choice = _programme(c, prev, K)
            prev = best[-1]
            parts.append((cost, c_opt, best, choice))
            start += n
            if first is None or start >= horizon or np.isfinite(prev[D]):
                break
            n = min(self.earliest_chunk, horizon - start)
        cost, c_opt, best, choice = (np.concatenate(p) for p in zip(*parts))
        return cost, c_opt, best, choice, picks

    def plan(self, spec: JobSpec, now_slot: int, floor: bool = True
             ) -> tuple[Schedule | None, str]:
        """The best-payoff schedule for `spec` starting at `now_slot`, or None and why not.
        `floor`: only completions while its utility is above `utility_floor`, the best payoff
        among them; else, for a job that must finish whatever its utility, the earliest
        completion within `horizon_slots` (its cheapest way to finish by then)."""
        table = self._rate_table(spec)
        if table is None:
            return None, "no worker count allowed"
        f = None  # a must-finish job's utility curve is read only for the schedule found
        if floor:
            # Candidate completion slots: until the utility falls below the floor (or the cap).
            f = self._utility_curve(spec, now_slot)
            useful = np.flatnonzero(f >= self.utility_floor * utility_weight(spec))
            horizon = int(useful[-1]) + 1 if len(useful) else 1
        else:
            horizon = self.horizon_slots
        infeasible = (None, f"no feasible schedule within {horizon} slots before its utility"
                            f" falls below {self.utility_floor:.0%} (cluster reserved)")
        if self._hopeless(spec, table, spec.total_work, horizon):
            return infeasible
        opts = self._options(spec)
        found = self._earliest_end(spec, opts, now_slot, horizon)
        if found is None:
            return infeasible
        end, most = found
        D = self.work_levels
        if not floor and int(opts.ps.max()) == 0 and int(most.sum()) == D:
            # Its earliest end takes the most units of every slot before it: that is the
            # programme's one finite path (no other k is finite both ways), so no programme.
            cost, picks = self._slot_costs(spec, opts, now_slot, end)
            ts = np.flatnonzero(most)[::-1]
            i = np.where(opts.units[None, :] >= most[ts, None], cost[ts], _INF).argmin(axis=1)
            steps = list(zip(ts.tolist(), i.tolist()))
        else:
            cost, c_opt, best, choice, picks = self._cheapest(spec, opts, now_slot, horizon,
                                                              None if floor else end)
            if not np.isfinite(best[:, D]).any():
                return infeasible
            if floor:
                payoff = f[:horizon] - best[:, D]
                t_best = int(np.nanargmax(np.where(np.isfinite(payoff), payoff, -_INF)))
            else:  # it must finish whatever its utility: the earliest completion that fits
                t_best = int(np.flatnonzero(np.isfinite(best[:, D]))[0])
            steps = _path(choice, c_opt, t_best, D)
        if f is None:
            f = self._utility_curve(spec, now_slot)
        sched = Schedule(spec.name)
        last = -1
        for t, i in steps:  # latest slot first
            w, p = int(opts.workers[i]), int(opts.ps[i])
            wnodes, pnodes, _ = picks[t][w]
            sched.slots[now_slot + t] = (_counts(self.names, wnodes[:w]),
                                         _counts(self.names, pnodes[:p]))
            sched.cost += float(cost[t, i])
            last = max(last, t)
        sched.completion_slot = now_slot + last
        sched.utility = float(f[last]) if last >= 0 else 0.0
        return sched, ""

    def _utility_curve(self, spec: JobSpec, now_slot: int) -> np.ndarray:
        """The job's utility at the end of each of the `horizon_slots` slots from `now_slot`."""
        target = utility_target(spec, self.perf, self.target_factor)
        ends = self.slot_start(now_slot + np.arange(1, self.horizon_slots + 1)) - spec.arrival
        return sigmoid_utility(utility_weight(spec), target, self.decay, ends, self.round_interval)

    def _hopeless(self, spec: JobSpec, table: _Rates, work: float, horizon: int) -> bool:
        """Whether `work` stays undone even with the fastest option in each of `horizon` slots
        (so the dynamic programme would find nothing); it first widens the bounds, as `plan`
        does for every job it looks at."""
        self._widen_bounds(spec, table, horizon)
        return self._most_units(work, table) * horizon < self.work_levels

    # ---- the round ------------------------------------------------------------------------

    def schedule(self, state: ClusterState) -> list[Action]:
        self._setup(state)
        s = self.slot_of(state.now)
        self._slot = s
        self._record_prices(state.now, s)
        actions: list[Action] = []
        # Only jobs not decided yet are looked at (most are, from the second round on).
        fresh = [j for j in state.jobs.values() if j.name not in self.decided
                 and not j.state.finished]
        for job in sorted(fresh, key=lambda j: (j.spec.arrival, j.name)):
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
        work = max(job.remaining_work, job.spec.total_work * 1e-6)
        stuck = self._stuck.get(job.name)
        if stuck is not None and stuck[0] is job.spec and stuck[1] == work and \
                stuck[2] is self.book:
            return  # as hopeless as last time: same shape, work, and bounds already applied
        table = self._rate_table(job.spec)
        if table is None or self._hopeless(job.spec, table, work, self.horizon_slots):
            self._stuck[job.name] = (job.spec, work, self.book)
            return  # what `plan` finds, without building the spec of the work left first
        sched, _ = self.plan(job.spec.with_(total_work=work), s, floor=False)
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
            if ledger.holds(j.spec.worker_demand, w, j.spec.ps_demand, p):
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
            w, p = j.num_workers, j.num_ps
            if not (w and p):
                last = _last_counts(self.schedules.get(j.name), j)
                w, p = w or last[0], p or last[1]
            got = None
            spec = j.spec
            if j.state.placed and ledger.holds(spec.worker_demand, j.workers, spec.ps_demand,
                                               j.ps):
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
        for n in [n for n in self._stuck if n not in state.jobs]:
            del self._stuck[n]
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
