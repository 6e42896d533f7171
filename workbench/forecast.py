"""Per-job completion forecasts: when each job will finish, how sure we are, and what it needs.

    from workbench.forecast import forecast
    fc = forecast(state)                 # {job name: Forecast}, a pure function of the snapshot
    fc["cifar10-3"].p_meet_deadline

The QoS paper's observation is that training time is predictable: once a job has run for a
while its iteration rate at that configuration is known, so its completion time follows.

How each part is estimated (all arrays, one pass over the jobs):

- Work left. A job without a target metric has `total_work - progress` iterations left. A job
  with a `target_metric` (DQoES) trains until it reaches it, so its work is where its metric
  curve crosses the target. Before the job has `MIN_CURVE_POINTS` distinct metric values that
  is the crossing of the performance model's measured curve (`PRIOR_WORK_ERROR`); after, the
  Optimus form `metric = 1/(a·k + b) + c` (mirrored for metrics that increase) is fitted to
  the job's own history, and the two crossings are blended by inverse variance. The fit's
  error is the spread of its crossing over near-best fits, at least `FIT_ERROR_FLOOR`: on the
  measured Pollux curves (learning-rate steps, plateaus) the form extrapolates poorly, so the
  profile keeps most of the weight. Without a profile the fit alone is used. `total_work` is
  not used for such a job (in the simulator it only records where the crossing is).
- Rate. A running job's measured throughput; its spread over recent history intervals gives
  the rate's relative uncertainty, and measured/model is the job's `rate_scale` (applied to
  the rates of other sizes). A job that is not running gets the performance model's rate for
  its placement (or its submitted size, packed) with prior uncertainty `PRIOR_RATE_ERROR`
  (the perf model's hold-out errors are 2-10 %).
- Queueing delay of a waiting job: the waiting jobs, in `order` (default: arrival), start as
  soon as enough CPU, memory and GPUs are free in total, freed by the predicted finishes of
  the jobs ahead (list scheduling with start times non-decreasing, fragmentation ignored).
  Its uncertainty is taken as `WAIT_ERROR` of the delay (a heuristic, measured by
  `workbench bench forecast`). A job that does not fit even once every release is in waits
  forever (inf) and holds back no one behind it.
- Sizes: rates are tabled only up to the most workers the whole cluster holds, node by node
  (`most_workers`), never up to a `max_workers` the cluster cannot hold (a job asking for
  99,999 GPUs would cost minutes and gigabytes of model calls). A size above it runs never:
  rate 0, finish and band inf, P(meet) 0, no size to meet the deadline.
- Band: predicted finish ± z·sd with z for `confidence` (default 90 %), sd combining the rate,
  work and wait uncertainties; P(meet deadline) = Φ((deadline - finish) / sd).
- Smallest configuration to meet the deadline: the fewest workers w in [min, max] whose
  predicted finish at the high end of the band (rate from the model at w, packed, scaled by
  the job's measured/model ratio; a restart delay if w differs from its current size) is on
  or before the deadline.
"""

from __future__ import annotations

import heapq
import math
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri

from .model import ClusterState, JobSpec, JobState, JobStatus, most_tasks, tasks_per_node

PRIOR_RATE_ERROR = 0.10  # relative rate error before a job has been observed
PRIOR_WORK_ERROR = 0.10  # relative error of the measured profile's iterations to a target
FIT_ERROR_FLOOR = 0.25  # the Optimus curve misfits measured curves (LR steps, plateaus)
MIN_RATE_ERROR = 0.02
WAIT_ERROR = 0.30  # relative error of an expected queueing delay
MIN_CURVE_POINTS = 4  # distinct metric values before the job's own curve is trusted
HISTORY_WINDOW = 6  # recent history intervals used for the rate spread
SD_FLOOR = 30.0  # seconds: a band is never narrower than this


@dataclass(frozen=True)
class Forecast:
    """One job's outlook. Times are absolute on the backend clock (seconds)."""

    job: str
    finish: float  # predicted completion
    low: float  # band at the forecast's confidence (default 90 %)
    high: float
    p_meet_deadline: float | None  # None: the job has no deadline
    min_workers_to_meet: int | None  # None: no deadline, or no size meets it
    source: str  # "observed", "perf-model", "curve-fit" (+ "+queue" when it waits)
    deadline: float | None
    wait: float  # expected queueing delay from now (0 once placed)
    rate: float  # expected iterations per second when running
    remaining: float  # iterations still to do
    workers: int  # the size the forecast assumes
    sd: float  # seconds, one standard deviation of `finish`
    rate_scale: float  # measured rate / model rate (1.0 when never observed)
    rel_error: float  # relative sd of the run time (rate and work combined)

    @property
    def slack(self) -> float | None:
        """Deadline minus predicted finish (negative: predicted late)."""
        return None if self.deadline is None else self.deadline - self.finish

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["slack"] = self.slack
        return d


# ---- rates per size ------------------------------------------------------------------------


class _RateTable:
    """perf.ideal_rate per (application, batch, kind, PS, tasks per node) for 0..`top` workers,
    `top` being the most workers the cluster could hold (see `most_workers`)."""

    def __init__(self, perf) -> None:
        self.perf = perf
        self._tables: dict[tuple, np.ndarray] = {}
        self._targets: dict[tuple, float] = {}

    def rates(self, spec: JobSpec, per_node: int, top: int) -> np.ndarray:
        key = (spec.application, spec.batch_size, spec.kind, spec.num_ps, per_node, top)
        table = self._tables.get(key)
        if table is None:
            table = np.zeros(top + 1)
            # ideal_rate at w workers costs O(w), so this loop is O(top²): top must be bounded.
            for w in range(1, top + 1):
                try:
                    table[w] = self.perf.ideal_rate(spec, w, max(per_node, 1))
                except (KeyError, ValueError):
                    table[w] = 0.0
            table.flags.writeable = False  # shared by every caller (and kept per job)
            self._tables[key] = table
        return table

    def work_to_target(self, spec: JobSpec) -> float:
        """Iterations at which the model's metric curve first reaches the target (inf: never)."""
        key = (spec.application, spec.batch_size, spec.target_metric)
        hit = self._targets.get(key)
        if hit is None:
            hit = model_work_to_target(self.perf, spec.application, spec.batch_size,
                                       float(spec.target_metric))
            self._targets[key] = hit
        return hit


_TABLES: weakref.WeakKeyDictionary[object, _RateTable] = weakref.WeakKeyDictionary()


def _table_for(perf) -> _RateTable:
    try:
        table = _TABLES.get(perf)
        if table is None:
            table = _TABLES[perf] = _RateTable(perf)
        return table
    except TypeError:  # a perf object that cannot be weakly referenced
        return _RateTable(perf)


def model_work_to_target(perf, app: str, batch_size: float, target: float,
                         horizon_epochs: float = 1.5) -> float:
    """Iterations at which `perf`'s measured curve first reaches `target` (inf if it never does
    within `horizon_epochs` × the application's max epochs)."""
    try:
        total = float(perf.total_iterations(app, batch_size))
        up = bool(perf.metric_increases(app))
    except (KeyError, ValueError):
        return math.inf
    ks = np.linspace(0.0, total * horizon_epochs, 1201)
    ys = np.array([perf.metric_at(app, batch_size, k) for k in ks])
    reached = ys >= target if up else ys <= target
    idx = np.flatnonzero(reached)
    if not len(idx):
        return math.inf
    i = int(idx[0])
    if i == 0:
        return 0.0
    y0, y1 = ys[i - 1], ys[i]
    t = 1.0 if y1 == y0 else (target - y0) / (y1 - y0)
    return float(ks[i - 1] + min(max(t, 0.0), 1.0) * (ks[i] - ks[i - 1]))


# ---- the Optimus curve ---------------------------------------------------------------------


def _fit_grid(ks: np.ndarray, y: np.ndarray):
    """Least squares of y = c + 1/(a·k + b) for each c on a grid below min(y): (a, b, c, sse)
    arrays, sse = inf where the fit is not a decreasing curve. Vectorised over the grid."""
    span = float(y.max() - y.min())
    cs = y.min() - span * np.geomspace(1e-3, 30.0, 48)  # (C,)
    z = 1.0 / (y[None, :] - cs[:, None])  # 1/(y - c) is linear in k for the right c
    km, zm = ks.mean(), z.mean(axis=1)
    dk = ks - km
    var = float((dk * dk).sum())
    a = (dk[None, :] * (z - zm[:, None])).sum(axis=1) / var
    b = zm - a * km
    denom = a[:, None] * ks[None, :] + b[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sse = ((cs[:, None] + 1.0 / denom - y[None, :]) ** 2).sum(axis=1)
    valid = (a > 0) & (denom > 0).all(axis=1) & np.isfinite(sse)
    return a, b, cs, np.where(valid, sse, np.inf)


def _points(ks, ys, increasing: bool) -> tuple[np.ndarray, np.ndarray] | None:
    ks = np.asarray(ks, dtype=float)
    y = -np.asarray(ys, dtype=float) if increasing else np.asarray(ys, dtype=float)
    ok = np.isfinite(ks) & np.isfinite(y)
    ks, y = ks[ok], y[ok]
    if len(np.unique(y)) < MIN_CURVE_POINTS or np.ptp(ks) <= 0:
        return None
    return ks, y


def fit_curve(ks: np.ndarray, ys: np.ndarray, increasing: bool = False
              ) -> tuple[float, float, float, float] | None:
    """Fit metric = 1/(a·k + b) + c (mirrored, c - 1/(a·k + b), when `increasing`) to points.

    Returns (a, b, c, sse) or None when the points do not determine a decreasing-loss curve.
    For each c on a grid below the best value seen, 1/(y - c) is linear in k; the c with the
    least squared error in y wins.
    """
    grid = _fitted_grid(ks, ys, increasing)
    if grid is None:
        return None
    a, b, c, sse = grid
    i = int(np.argmin(sse))
    return float(a[i]), float(b[i]), float(c[i]), float(sse[i])


def _fitted_grid(ks: np.ndarray, ys: np.ndarray, increasing: bool):
    """(a, b, c, sse) over the grid of asymptotes c (see `fit_curve`), or None when the points
    determine no curve."""
    pts = _points(ks, ys, increasing)
    if pts is None:
        return None
    a, b, c, sse = _fit_grid(*pts)
    return (a, b, c, sse) if np.isfinite(sse).any() else None


def curve_work_to_target(ks: np.ndarray, ys: np.ndarray, target: float, increasing: bool
                         ) -> tuple[float, float] | None:
    """(iterations to reach `target`, relative uncertainty) from the fitted curve, or None.

    The uncertainty is the spread of the crossing over every asymptote c whose fit is within
    twice the best squared error (a profile of the fit); 1.0 when some of those never cross.
    """
    grid = _fitted_grid(ks, ys, increasing)
    if grid is None:
        return None
    a, b, c, sse = grid
    t = -target if increasing else target
    i = int(np.argmin(sse))
    if t <= c[i]:
        return None  # the best fit never gets there: let the model decide
    near = sse <= 2.0 * sse[i] + 1e-12
    reach = near & (t > c)
    with np.errstate(divide="ignore", invalid="ignore"):
        k_all = (1.0 / (t - c) - b) / a
    k_star = float(k_all[i])
    if not np.isfinite(k_star):
        return None
    if (near & ~reach).any():
        rel = 1.0
    else:
        ks_near = k_all[reach]
        rel = float(np.abs(ks_near - k_star).max()) / max(k_star, 1.0)
    return max(k_star, 0.0), min(max(rel, 0.02), 1.0)


# ---- the forecaster ------------------------------------------------------------------------


class Forecaster:
    """Forecasts for every active job of a ClusterState. Keeps only caches of model rates;
    `run(state)` depends on nothing but the snapshot (and the perf model)."""

    def __init__(self, perf=None, *, restart_delay: float = 30.0, confidence: float = 0.9) -> None:
        if perf is None:
            from .perf import default_perf

            perf = default_perf()
        self.perf = perf
        self.restart_delay = float(restart_delay)
        self.confidence = float(confidence)
        self.z = float(ndtri(0.5 + confidence / 2))
        self.table = _table_for(perf)
        self._per_node: dict[tuple, tuple[int, int]] = {}
        self._fits: dict[tuple, tuple[float, float] | None] = {}  # memo of a pure function
        # Per job, what its spec and the cluster's capacity alone decide, kept across calls
        # (a thousand jobs wait round after round): (spec, capacity generation, rate table)
        # and (spec, workers, PS, demand as 3 floats) of its held and its asked size.
        self._job_tables: dict[str, tuple] = {}
        self._job_demands: dict[tuple[str, bool], tuple] = {}
        self._capacity_seen: tuple | None = None
        self._capacity_generation = 0
        self.last_tables: dict[str, np.ndarray] = {}  # the last `run`'s rate table per job

    def __getstate__(self) -> dict:
        # a copy keeps the caches of rates and fits, not what was kept per job (remade as asked)
        return {**self.__dict__, "_job_tables": {}, "_job_demands": {}, "last_tables": {}}

    # -- per-job pieces ------------------------------------------------------------------

    def _sizes(self, state: ClusterState, spec: JobSpec) -> tuple[int, int]:
        """(most workers of `spec` one node holds, most the whole cluster holds), cached."""
        d = spec.worker_demand
        key = (state.capacity.shape, state.capacity.data.tobytes() if state.capacity.size < 4096
               else id(state.capacity), d.cpu, d.mem, d.gpu, spec.max_workers)
        hit = self._per_node.get(key)
        if hit is not None:
            return hit
        best = tasks_per_node(state.capacity, d.as_array()).max(initial=1.0)
        one = int(min(best, spec.max_workers)) if np.isfinite(best) else spec.max_workers
        if len(self._per_node) > 10000:
            self._per_node.clear()
        out = self._per_node[key] = (one, most_workers(state, spec))
        return out

    def per_node(self, state: ClusterState, spec: JobSpec) -> int:
        """Most workers of `spec` one node of this cluster can hold (for packed rates)."""
        return self._sizes(state, spec)[0]

    def rate_table(self, state: ClusterState, spec: JobSpec) -> np.ndarray:
        """Model iteration rate at 0..max_workers workers, packed on this cluster's nodes; only
        up to the most workers the whole cluster could hold (`most_workers`): larger sizes can
        never run here."""
        return self.table.rates(spec, *self._sizes(state, spec))

    def _generation(self, state: ClusterState) -> int:
        """A number that changes when the cluster's capacity does (keys `_job_tables`)."""
        cap = state.capacity
        key = (cap.shape, cap.data.tobytes() if cap.size < 4096 else id(cap))
        if key != self._capacity_seen:
            self._capacity_seen = key
            self._capacity_generation += 1
        return self._capacity_generation

    def _job_table(self, state: ClusterState, job: JobStatus, generation: int) -> np.ndarray:
        """`rate_table(state, job.spec)`, remembered per job for the capacity `generation`."""
        spec = job.spec
        hit = self._job_tables.get(job.name)
        if hit is not None and hit[0] is spec and hit[1] == generation:
            return hit[2]
        table = self.rate_table(state, spec)
        self._job_tables[job.name] = (spec, generation, table)
        return table

    def _demand3(self, job: JobStatus, workers: int, ps: int, held: bool) -> tuple:
        """`job.demand(workers, ps)` as (cpu, mem, gpu), remembered per job (`held`: its held
        size, else the size it asks for)."""
        key = (job.name, held)
        hit = self._job_demands.get(key)
        if hit is not None and hit[0] is job.spec and hit[1] == workers and hit[2] == ps:
            return hit[3]
        d = job.demand(workers, ps)
        out = (d.cpu, d.mem, d.gpu)
        self._job_demands[key] = (job.spec, workers, ps, out)
        return out

    def _forget_others(self, active: list[JobStatus]) -> None:
        """Drop what is kept of jobs no longer active (when it outgrows them)."""
        if len(self._job_tables) > 2 * len(active) + 1000 or \
                len(self._job_demands) > 4 * len(active) + 2000:
            names = {j.name for j in active}
            self._job_tables = {k: v for k, v in self._job_tables.items() if k in names}
            self._job_demands = {k: v for k, v in self._job_demands.items() if k[0] in names}

    def _model_rate(self, job: JobStatus, table: np.ndarray) -> float:
        if job.workers:
            try:
                return float(self.perf.iteration_rate(job.spec, job.workers, job.ps))
            except (KeyError, ValueError):
                return 0.0
        w = max(job.target_workers or job.spec.initial_workers, 1)
        return float(table[w]) if w < len(table) else 0.0  # larger than the cluster: never runs

    @staticmethod
    def _rate_spread(job: JobStatus) -> float | None:
        """Relative standard error of the rate over recent history intervals (None: < 2)."""
        h = job.history[-(HISTORY_WINDOW + 1):]
        rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in pairwise(h)
                 if b[0] > a[0] and b[1] > a[1]]
        n = len(rates)
        if n < 2:
            return None
        mean = sum(rates) / n
        var = sum((r - mean) ** 2 for r in rates) / n
        return math.sqrt(var) / max(mean, 1e-12) / math.sqrt(n)

    def _remaining(self, job: JobStatus) -> tuple[float, float, str]:
        """(iterations left, relative uncertainty, source)."""
        spec = job.spec
        if spec.target_metric is None:
            return job.remaining_work, 0.0, ""
        if job.state is JobState.COMPLETED:
            return 0.0, 0.0, ""
        up = _increases(self.perf, spec.application)
        m = job.metric if job.metric is not None else math.nan
        if (m >= spec.target_metric) if up else (m <= spec.target_metric):  # NaN: never
            return 0.0, 0.0, "observed"
        k_model = self.table.work_to_target(spec)
        fit = None
        h = job.history
        if len(h) >= MIN_CURVE_POINTS:
            key = (job.name, len(h), h[-1][0], spec.target_metric)
            if key in self._fits:
                fit = self._fits[key]
            else:
                arr = np.asarray(h if len(h) <= 256 else h[:: len(h) // 256 + 1] + h[-1:],
                                 dtype=float)
                fit = curve_work_to_target(arr[:, 1], arr[:, 2], spec.target_metric, up)
                if len(self._fits) > 4096:
                    self._fits.clear()
                self._fits[key] = fit
        if fit is not None:
            k_fit, rel_fit = fit[0], max(fit[1], FIT_ERROR_FLOOR)
            if not np.isfinite(k_model):
                return max(k_fit - job.progress, 0.0), rel_fit, "curve-fit"
            # Inverse-variance blend of the job's own curve and the measured profile's.
            w_fit = rel_fit ** -2 / (PRIOR_WORK_ERROR ** -2 + rel_fit ** -2)
            k = w_fit * k_fit + (1.0 - w_fit) * k_model
            rel = (PRIOR_WORK_ERROR ** -2 + rel_fit ** -2) ** -0.5
            return max(k - job.progress, 0.0), rel, "curve-fit"
        if not np.isfinite(k_model):
            return job.remaining_work, PRIOR_WORK_ERROR, "perf-model"  # train to the end
        return max(k_model - job.progress, 0.0), PRIOR_WORK_ERROR, "perf-model"

    # -- the whole state -----------------------------------------------------------------

    def run(self, state: ClusterState, order: Sequence[str] | None = None,
            jobs: Iterable[JobStatus] | None = None) -> dict[str, Forecast]:
        """Forecasts for the active jobs of `state` (or `jobs`). `order`: the queue order of the
        waiting jobs as the engine sees it (default: arrival)."""
        return self.outlook(state, order, jobs).forecasts()

    def outlook(self, state: ClusterState, order: Sequence[str] | None = None,
                jobs: Iterable[JobStatus] | None = None) -> Outlook:
        """What `run` reads of `state` and of its jobs, read now: each job's work left, rate,
        its relative error and measured/model ratio (`Outlook.pending`), and the forecasts,
        which follow from those alone, computed when first asked (`Outlook.forecasts`): an
        engine that decides on the first reads the rest only for its view."""
        active = [j for j in (state.active if jobs is None else jobs) if not j.state.finished]
        n = len(active)
        now = state.now
        if not n:
            return Outlook(self, now, active, order)
        # per job in Python lists, made arrays once (the same values as element by element)
        remaining_l: list[float] = []
        work_err_l: list[float] = []
        rate_l: list[float] = []
        rate_err_l: list[float] = []
        scale_l: list[float] = []
        placed_l: list[bool] = []
        delay_l: list[float] = []  # restart still to pay before training
        workers_l: list[int] = []
        held_l: list[tuple[int, int] | None] = []  # (workers, PS) a job holds, if any
        sources: list[str] = []
        tables: list[np.ndarray] = []
        generation = self._generation(state)
        self._forget_others(active)
        job_table, job_tables = self._job_table, self._job_tables
        running, restarting, holding = JobState.RUNNING, JobState.RESTARTING, JobState.HOLDING
        restart_delay = self.restart_delay
        for job in active:
            spec, jstate = job.spec, job.state
            hit = job_tables.get(job.name)  # `_job_table`, its memo read here
            table = hit[2] if hit is not None and hit[0] is spec and hit[1] == generation \
                else job_table(state, job, generation)
            tables.append(table)
            if spec.target_metric is None:  # `_remaining`'s first case, inlined
                rem, werr, wsrc = job.remaining_work, 0.0, ""
            else:
                rem, werr, wsrc = self._remaining(job)
            remaining_l.append(rem)
            work_err_l.append(werr)
            if job.workers:
                model = self._model_rate(job, table)
            else:  # `_model_rate`'s second case, inlined
                w = max(job.target_workers or spec.initial_workers, 1)
                model = float(table[w]) if w < len(table) else 0.0
            if jstate is running and job.throughput > 0:
                rate_l.append(job.throughput)
                scale_l.append(job.throughput / model if model > 0 else 1.0)
                spread = self._rate_spread(job)
                spread = MIN_RATE_ERROR * 2 if spread is None else spread
                rate_err_l.append(min(max(spread, MIN_RATE_ERROR), 0.5))
                src = "observed"
            else:
                rate_l.append(model)
                scale_l.append(1.0)
                rate_err_l.append(PRIOR_RATE_ERROR)
                src = "perf-model"
            is_placed = jstate.placed and jstate is not holding
            placed_l.append(is_placed)
            delay_l.append(restart_delay if jstate is restarting or not is_placed else 0.0)
            workers_l.append(job.num_workers if is_placed else max(
                job.target_workers or spec.initial_workers, 1))
            held_l.append((job.num_workers, job.num_ps) if job.workers or job.ps else None)
            sources.append(wsrc if wsrc in ("curve-fit",) else src)
        remaining = np.array(remaining_l, dtype=float)
        work_err = np.array(work_err_l, dtype=float)
        rate = np.array(rate_l, dtype=float)
        rate_err = np.array(rate_err_l, dtype=float)
        scale = np.array(scale_l, dtype=float)
        placed = np.array(placed_l, dtype=bool)
        delay = np.array(delay_l, dtype=float)
        workers = np.array(workers_l, dtype=np.int64)
        rel = np.sqrt(rate_err ** 2 + work_err ** 2)
        self.last_tables = {job.name: t for job, t in zip(active, tables)}
        return Outlook(self, now, active, order, remaining=remaining, rate=rate, scale=scale,
                       placed=placed, delay=delay, workers=workers, rel=rel, tables=tables,
                       sources=sources, sizes=workers_l, held=held_l,
                       free=None if placed.all() else state.free.sum(axis=0))

    def _forecasts(self, o: Outlook) -> dict[str, Forecast]:
        """`run`'s forecasts from what `outlook` read (`o`): nothing live is read here."""
        active, now, remaining, rate, placed, delay = (o.active, o.now, o.remaining, o.rate,
                                                       o.placed, o.delay)
        scale, workers, rel, tables, sources = o.scale, o.workers, o.rel, o.tables, o.sources
        with np.errstate(divide="ignore", invalid="ignore"):
            duration = np.where(rate > 0, remaining / rate, np.inf)
        duration = np.where(remaining <= 0, 0.0, duration)
        wait = self._queue_delays(now, o.free, active, placed, delay + duration, o.order,
                                  o.held, o.sizes)
        finish = now + wait + delay + duration
        sd = np.sqrt((duration * rel) ** 2 + (WAIT_ERROR * np.where(np.isfinite(wait), wait, 0)) ** 2)
        sd = np.maximum(sd, np.minimum(SD_FLOOR, 0.05 * (duration + delay) + 1.0))
        never = ~np.isfinite(finish)  # cannot finish on this cluster: the whole band is inf
        with np.errstate(invalid="ignore"):
            low = np.where(never, np.inf, np.maximum(finish - self.z * sd,
                                                     now + np.where(remaining > 0, delay, 0.0)))
        high = finish + self.z * sd
        deadline = np.array([np.nan if j.spec.deadline is None else j.spec.deadline for j in active])
        has_dl = np.isfinite(deadline)
        with np.errstate(invalid="ignore"):
            p_meet = np.where(np.isfinite(finish), ndtr((deadline - finish) / sd), 0.0)

        out: dict[str, Forecast] = {}
        # read as Python numbers (the same values) rather than numpy element by element
        (finish_, low_, high_, p_meet_, deadline_, wait_, rate_, remaining_, sd_, scale_, rel_,
         workers_, has_dl_, placed_) = (a.tolist() for a in (
             finish, low, high, p_meet, deadline, wait, rate, remaining, sd, scale, rel, workers,
             has_dl, placed))
        new = object.__new__
        for i, job in enumerate(active):
            min_w = None
            dl = has_dl_[i]
            if dl:
                # `_min_workers`, with the size the job held when read
                min_w = workers_to_meet(job, tables[i] * scale_[i], remaining_[i],
                                        deadline_[i] - now - wait_[i], rel_[i], self.z,
                                        self.restart_delay,
                                        current=workers_[i] if placed_[i] else None)
            # a frozen dataclass made as its __init__ makes it, without its 15 setattr calls
            f = new(Forecast)
            f.__dict__.update({
                "job": job.name, "finish": finish_[i], "low": low_[i], "high": high_[i],
                "p_meet_deadline": p_meet_[i] if dl else None, "min_workers_to_meet": min_w,
                "source": sources[i] + ("+queue" if wait_[i] > 0 else ""),
                "deadline": deadline_[i] if dl else None, "wait": wait_[i], "rate": rate_[i],
                "remaining": remaining_[i], "workers": workers_[i], "sd": sd_[i],
                "rate_scale": scale_[i], "rel_error": rel_[i]})
            out[job.name] = f
        return out

    def _min_workers(self, job: JobStatus, table: np.ndarray, scale: float, remaining: float,
                     rel: float, time_left: float, placed: bool) -> int | None:
        return workers_to_meet(job, table * scale, remaining, time_left, rel, self.z,
                               self.restart_delay, current=job.num_workers if placed else None)

    def _queue_delays(self, now: float, free: np.ndarray | None, active: list[JobStatus],
                      placed: np.ndarray, run_time: np.ndarray, order: Sequence[str] | None,
                      held_counts: list[tuple[int, int] | None], sizes: list[int]) -> np.ndarray:
        """Expected delay before each waiting job starts (0 for placed jobs); list scheduling
        over the cluster's total free CPU, memory and GPUs (`free`). `held_counts`: the
        (workers, PS) each job holds (None: nothing); `sizes`: the workers a waiting job asks
        for (as `Outlook` read them)."""
        n = len(active)
        wait = np.zeros(n)
        waiting = np.flatnonzero(~placed)
        if not len(waiting):
            return wait
        releases: list[tuple[float, int]] = []
        held = np.zeros((n, 3))
        demand3 = self._demand3
        run_time_ = run_time.tolist()  # the same values, as Python floats
        placed_ = placed.tolist()
        for i, job in enumerate(active):
            hc = held_counts[i]
            if hc is not None:
                held[i] = demand3(job, hc[0], hc[1], True)
            if placed_[i]:
                releases.append((now + run_time_[i], i))
        heapq.heapify(releases)
        releasable = held[[i for _, i in releases]].sum(axis=0)  # what the releases will free
        pos = {j.name: k for k, j in enumerate(active)}
        if order is None:
            queue = sorted(waiting.tolist(), key=lambda k: (active[k].spec.arrival, active[k].name))
        else:
            ranked = [pos[name] for name in order if name in pos and not placed[pos[name]]]
            seen = set(ranked)
            rest = sorted((k for k in waiting.tolist() if k not in seen),
                          key=lambda k: (active[k].spec.arrival, active[k].name))
            queue = ranked + rest
        # the walk in plain floats, [cpu, mem, gpu]: numpy's per-call cost on 3-vectors was
        # most of a QoS round (elementwise IEEE arithmetic either way: the same numbers)
        # (the three resources unrolled: the same operations in the same order)
        f0, f1, f2 = free.tolist()
        r0, r1, r2 = releasable.tolist()
        held3 = held.tolist()
        wait_ = wait.tolist()
        heappop, heappush = heapq.heappop, heapq.heappush
        t = now
        for k in queue:
            job = active[k]
            d0, d1, d2 = demand3(job, sizes[k], job.spec.num_ps, False)
            h0, h1, h2 = held3[k]
            n0, n1, n2 = d0 - h0, d1 - h1, d2 - h2
            if n0 > f0 + r0 + 1e-9 or n1 > f1 + r1 + 1e-9 or n2 > f2 + r2 + 1e-9:
                # Never fits, even once every release is in: it starts never and must not move
                # the clock (nor take the releases) of the jobs queued behind it.
                wait_[k] = math.inf
                continue
            while releases and (n0 > f0 + 1e-9 or n1 > f1 + 1e-9 or n2 > f2 + 1e-9):
                t_rel, r = heappop(releases)
                t = max(t, t_rel)
                g0, g1, g2 = held3[r]
                f0, f1, f2 = f0 + g0, f1 + g1, f2 + g2
                r0, r1, r2 = r0 - g0, r1 - g1, r2 - g2
            f0, f1, f2 = f0 - n0, f1 - n1, f2 - n2
            h0, h1, h2 = h0 + n0, h1 + n1, h2 + n2
            held3[k] = (h0, h1, h2)
            wait_[k] = t - now
            heappush(releases, (t + run_time_[k], k))
            r0, r1, r2 = r0 + h0, r1 + h1, r2 + h2
        return np.array(wait_, dtype=float)


class Outlook:
    """What `Forecaster.outlook` read of a state and its jobs (plain numbers and arrays, the
    jobs only for their names and specs), and the forecasts that follow, made once when first
    asked: the same as `Forecaster.run` gives for that state, whenever they are asked."""

    def __init__(self, forecaster: Forecaster, now: float, active: list[JobStatus],
                 order: Sequence[str] | None, **read: Any) -> None:
        self.forecaster, self.now, self.active = forecaster, now, active
        self.order = None if order is None else list(order)
        self.__dict__.update(read)
        self._forecasts: dict[str, Forecast] | None = None if active else {}

    def forecasts(self) -> dict[str, Forecast]:
        """{job name: Forecast}, as `Forecaster.run`."""
        if self._forecasts is None:
            self._forecasts = self.forecaster._forecasts(self)
        return self._forecasts

    def pending(self) -> dict[str, PendingForecast]:
        """Each job's work left, relative error and measured/model ratio, its whole forecast
        made on demand (`PendingForecast`)."""
        if not self.active:
            return {}
        return {job.name: PendingForecast(self, job.name, rem, rel, scale) for job, rem, rel, scale
                in zip(self.active, self.remaining.tolist(), self.rel.tolist(),
                       self.scale.tolist())}


class PendingForecast:
    """A job's `Forecast` before it is made: `remaining`, `rel_error` and `rate_scale` (the
    same values) at once; any other field, or `as_dict`, makes its outlook's forecasts. Copied
    or pickled as the `Forecast` itself."""

    __slots__ = ("_outlook", "job", "rate_scale", "rel_error", "remaining")

    def __init__(self, outlook: Outlook, job: str, remaining: float, rel_error: float,
                 rate_scale: float) -> None:
        self._outlook, self.job = outlook, job
        self.remaining, self.rel_error, self.rate_scale = remaining, rel_error, rate_scale

    def full(self) -> Forecast:
        return self._outlook.forecasts()[self.job]

    def as_dict(self) -> dict:
        return self.full().as_dict()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.full(), name)

    def __reduce__(self):
        return _itself, (self.full(),)


def _itself(value: Any) -> Any:
    return value


def most_workers(state: ClusterState, spec: JobSpec) -> int:
    """Most workers of `spec` the whole cluster could ever hold at once: every node, up or
    down, empty, holding as many whole workers as fit it (a worker cannot span nodes: three
    4-GPU nodes hold three 3-GPU workers, not four; parameter servers ignored), at most
    `spec.max_workers` (which it stays for a worker demanding nothing). An upper bound of
    every size that can run, so a size above it never does."""
    most = most_tasks(state.capacity, spec.worker_demand.as_array())
    return spec.max_workers if not math.isfinite(most) else int(min(most, spec.max_workers))


def workers_to_meet(job: JobStatus, rates: np.ndarray, remaining: float, time_left: float,
                    rel_err: float = 0.0, z: float = 0.0, restart_delay: float = 30.0,
                    current: int | None = None) -> int | None:
    """Fewest workers in [min, max] whose predicted finish (at z standard deviations of the
    relative error `rel_err`) fits in `time_left` seconds; None if none does. `rates` are the
    expected iteration rates at 0..max workers; a size other than `current` pays a restart."""
    spec = job.spec
    if remaining <= 0:
        return spec.min_workers if current is None else min(current, spec.min_workers)
    margin = remaining * (1.0 + z * rel_err)
    top = min(spec.max_workers, len(rates) - 1)
    rates = rates.tolist() if isinstance(rates, np.ndarray) else rates
    for w in range(spec.min_workers, top + 1):  # a short loop beats numpy on a few sizes
        r = rates[w]
        if r > 0 and margin / r + (0.0 if w == current else restart_delay) <= time_left:
            return w
    return None


def _increases(perf, app: str) -> bool:
    try:
        return bool(perf.metric_increases(app))
    except (KeyError, AttributeError):
        return False


def forecast(state: ClusterState, perf=None, *, order: Sequence[str] | None = None,
             restart_delay: float = 30.0, confidence: float = 0.9) -> dict[str, Forecast]:
    """{job name: Forecast} for every active job of `state`. See the module docstring."""
    if perf is None:
        from .perf import default_perf

        perf = default_perf()
    key = (id(perf), restart_delay, confidence)
    fc = _FORECASTERS.get(key)
    if fc is None or fc.perf is not perf:  # reuse caches (rates, fits) across calls
        if len(_FORECASTERS) > 8:
            _FORECASTERS.clear()
        fc = _FORECASTERS[key] = Forecaster(perf, restart_delay=restart_delay,
                                            confidence=confidence)
    return fc.run(state, order)


_FORECASTERS: dict[tuple, Forecaster] = {}


__all__ = [
    "Forecast",
    "Forecaster",
    "Outlook",
    "PendingForecast",
    "curve_work_to_target",
    "fit_curve",
    "forecast",
    "model_work_to_target",
    "most_workers",
    "workers_to_meet",
]
