"""Goodput (Pollux, OSDI'21): system throughput × statistical efficiency, from the measured profiles.

The rules are those of the Pollux artifact's simulator (petuum/adaptdl, branch osdi21-artifact,
`simulator/simulator.py`, `applications.py`, `goodput.py`), re-written here:

- **Progress units.** A job's progress counts iterations at the application's smallest measured
  batch (`init_batch`), each weighted by the statistical efficiency of the batch it ran:
  an iteration at total batch B in epoch e adds gain = (var + sqr) / (var / scale + sqr),
  scale = B / init_batch, with (sqr, var) the validation files' gradient statistics of epoch e,
  linear in batch between measured sizes (simulator.py `Job.step`, applications.py
  `get_grad_stats`). Epoch e ends at `epoch_ends[e]` (the least `progress` of that row over the
  validation files, `get_progress`) and the job is done after the app's max epochs. The ends
  ship in `data/pollux_goodput.json` (`tools/derive_goodput.py`).
- **Goodput** of a configuration (replicas per node `counts`, atomic batch a, accumulation k)
  is gain / (step + k · (step − sync)) progress per second, step and sync the measured times of
  `counts` at local batch a (`PerfModel.step_and_sync`).
- **Batch candidates** for r replicas (goodput.py `GoodputFunction.optimize`): 50 total batch
  sizes geometric from max(init_batch, min_local · r) to the largest measured batch; local =
  B / r; k = ceil(local / max_local) − 1, and at least 1 on one replica above init_batch;
  a = ceil(local / (k + 1)); valid when min_local <= a <= max_local; then a is capped at
  max_batch / (r · (k + 1)) (simulator.py `update_local_bsz`).
- **A job that picks its own batch** (`JobSpec.adaptive_batch`, the artifact's Pollux jobs)
  trains each epoch at the candidate of best goodput on its placement. Here that choice uses
  the measured step times (`AppGoodput.table`); the artifact's job chooses with its fitted
  model, which after its first steps on a placement includes that placement's measured
  point (a deviation: ours is the best the fitted choice can reach).
- **The agent's throughput model** (`fit_params`, `predict_step`): the artifact's 7-parameter
  form, T_step = (T_compute^γ + T_network^γ)^(1/γ), T_compute = α_c + β_c · a, T_network by
  inter-node (α_n + β_n · max(r − 2, 0)) or intra-node (α_r, β_r) link, plus k · T_compute for
  accumulation; fitted on the (nodes, replicas, atomic batch) points the job has run so far by
  root-mean-square log error with the artifact's bounds, priors and regularisers.
- **Speedup** (`GoodputModel.best`): the best goodput over the candidates on (nodes, replicas)
  under the fitted model, with efficiency from the job's latest gradient statistics.

`adaptive_rate` is the simulator's rate for an adaptive-batch job: progress per second at its
placement, averaged over the epochs it has left (so a job that keeps its placement to the end
finishes exactly when the epoch-by-epoch accounting says; see the function).
"""

from __future__ import annotations

import json
import math
from collections import namedtuple
from contextlib import contextmanager
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from .model import default_perf

N_CANDIDATES = 50  # artifact goodput.py optimize: np.geomspace(min, max) (numpy's default 50)
# the artifact's optimiser (scipy's default with bounds); SLSQP is about twice as fast but lands
# in other local optima on some profiles (bert, yolov3 on 2 replicas: +3 % run time alone)
_METHOD = "L-BFGS-B"
EPS = 1e-8  # artifact goodput.py: tolerance for floor/ceil

# artifact goodput.py PerfParams: alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma
PerfParams = namedtuple("PerfParams", "alpha_c beta_c alpha_n beta_n alpha_r beta_r gamma")


def gain(sqr: np.ndarray | float, var: np.ndarray | float, scale: np.ndarray | float):
    """Progress per iteration relative to one at the initial batch: (var + sqr) / (var / scale
    + sqr), 1 where the denominator is not positive (artifact goodput.py `efficiency` × scale)."""
    denom = np.asarray(var / scale + sqr, dtype=float)
    safe = np.where(denom > 0, denom, 1.0)
    return np.where(denom > 0, (var + sqr) / safe, 1.0)


@lru_cache(maxsize=1)
def _data() -> tuple[dict, dict]:
    folder = resources.files(__package__) / "data"
    extra = json.loads((folder / "pollux_goodput.json").read_text())["apps"]
    profiles = json.loads((folder / "pollux.json").read_text())["apps"]
    return extra, profiles


def has_goodput(app: str) -> bool:
    """Whether the goodput model knows `app` (the six Pollux applications)."""
    return app in _data()[0]


class Candidates:
    """The artifact's batch candidates for `replicas` replicas (module docstring)."""

    def __init__(self, app: AppGoodput, replicas: int, fixed_batch: int | None = None) -> None:
        r = replicas
        if fixed_batch is not None:  # simulator.py update_local_bsz with a target batch
            local = np.array([math.ceil(fixed_batch / r - EPS)], dtype=float)
        else:
            low = max(app.init_batch, app.min_local * r)
            local = np.geomspace(low, app.max_batch, N_CANDIDATES) / r
        accum = np.ceil(local / app.max_local - EPS) - 1
        if r == 1:
            accum = np.where(local > app.init_batch + EPS, np.maximum(accum, 1), accum)
        accum = accum.astype(int)
        atomic = np.ceil(local / (accum + 1) - EPS).astype(int)
        if fixed_batch is not None:
            self.valid = np.ones(1, dtype=bool)
        else:
            self.valid = (app.min_local <= atomic) & (atomic <= app.max_local)
        self.accum = accum
        self.chosen_atomic = atomic  # what the choice is made on (optimize's evaluate)
        cap = np.floor(app.max_batch / (r * (accum + 1))).astype(int)
        self.atomic = np.maximum(np.minimum(atomic, cap), 1)  # what runs (update_local_bsz)
        self.batch = r * self.atomic * (accum + 1)
        self.eval_batch = r * atomic * (accum + 1)


class AppGoodput:
    """One application's goodput facts: batch limits, gradient statistics, epoch ends."""

    def __init__(self, perf, app: str) -> None:
        extra, profiles = _data()
        if app not in extra:
            raise KeyError(f"no goodput data for application {app!r}")
        self.perf, self.name = perf, app
        d, p = extra[app], profiles[app]
        self.epoch_ends = np.array(d["epoch_ends"], dtype=float)
        self.epochs = len(self.epoch_ends)
        self.total = float(self.epoch_ends[-1])
        self.min_local = int(d["min_local_bsz"])
        self.max_local = int(p["max_local_bsz"])
        sizes = sorted(int(b) for b in p["validation"])
        self.sizes = np.array(sizes, dtype=float)
        self.init_batch, self.max_batch = sizes[0], sizes[-1]
        self.sqr = np.array([p["validation"][str(b)]["grad_sqr"][:self.epochs] for b in sizes])
        self.var = np.array([p["validation"][str(b)]["grad_var"][:self.epochs] for b in sizes])
        self._tables: dict[tuple, Any] = {}
        self._candidates: dict[tuple, Candidates] = {}

    def candidates(self, replicas: int, fixed_batch: int | None = None) -> Candidates:
        """The batch candidates for `replicas` replicas (cached)."""
        key = (replicas, fixed_batch)
        hit = self._candidates.get(key)
        if hit is None:
            hit = self._candidates[key] = Candidates(self, replicas, fixed_batch)
        return hit

    def epoch_of(self, progress: float) -> int:
        """The epoch a job is in at `progress` (progress units), at most the last."""
        return min(int(np.searchsorted(self.epoch_ends, progress, side="right")), self.epochs - 1)

    def grad_stats(self, batch: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """(sqr, var), each (len(batch) x epochs): linear in batch between measured sizes,
        clamped to the measured range (applications.py get_grad_stats)."""
        b = np.clip(np.atleast_1d(np.asarray(batch, dtype=float)), self.sizes[0], self.sizes[-1])
        hi = np.clip(np.searchsorted(self.sizes, b, side="left"), 1, len(self.sizes) - 1)
        lo = hi - 1
        t = ((b - self.sizes[lo]) / (self.sizes[hi] - self.sizes[lo]))[:, None]
        sqr = (1 - t) * self.sqr[lo] + t * self.sqr[hi]
        var = (1 - t) * self.var[lo] + t * self.var[hi]
        return sqr, var

    def gains(self, batch: np.ndarray | float) -> np.ndarray:
        """Gain per iteration at each batch (rows) in each epoch (columns)."""
        sqr, var = self.grad_stats(batch)
        scale = np.atleast_1d(np.asarray(batch, dtype=float))[:, None] / self.init_batch
        return gain(sqr, var, scale)

    def fixed_batch_iterations(self, batch: float) -> float:
        """Iterations a job training at a fixed total `batch` runs to the end of its last epoch:
        each epoch's progress span over that epoch's gain at `batch` (module docstring)."""
        spans = np.diff(self.epoch_ends, prepend=0.0)
        return float(np.sum(spans / self.gains(batch)[0]))

    def table(self, counts: tuple[int, ...], fixed_batch: int | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per epoch on placement `counts`: (goodput, atomic batch, accumulation steps) of the
        candidate of best measured goodput (or the fixed batch's). Cached per placement."""
        key = (counts, fixed_batch)
        hit = self._tables.get(key)
        if hit is not None:
            return hit
        c = self.candidates(sum(counts), fixed_batch)
        times = np.empty(len(c.atomic))
        for i, (a, k) in enumerate(zip(c.atomic.tolist(), c.accum.tolist())):
            step, sync = self.perf.step_and_sync(self.name, counts, a)
            times[i] = step + k * (step - sync)
        good = self.gains(c.batch) / times[:, None]  # candidates x epochs
        good = np.where(c.valid[:, None], good, -np.inf)
        best = np.argmax(good, axis=0)
        if not c.valid.any():  # nothing valid: the artifact would run the smallest candidate
            best = np.zeros(self.epochs, dtype=int)
            good = self.gains(c.batch) / times[:, None]
        out = (good[best, np.arange(self.epochs)], c.atomic[best], c.accum[best])
        self._tables[key] = out
        return out

    def time_to_finish(self, counts: tuple[int, ...], progress: float,
                       fixed_batch: int | None = None) -> float:
        """Seconds to the end of the last epoch from `progress` on `counts`: along the agent's
        trajectory there (`trajectory`), or epoch by epoch at a fixed batch."""
        e = self.epoch_of(progress)
        ends = self.epoch_ends
        start = ends[e - 1] if e else 0.0
        if fixed_batch is None:
            times = self.trajectory(counts).times
            t0 = times[e - 1] if e else 0.0
            done = t0 + (times[e] - t0) * min(max(progress - start, 0.0) / (ends[e] - start), 1.0)
            return float(times[-1] - done)
        good = self.table(counts, fixed_batch)[0]
        seconds = max(ends[e] - progress, 0.0) / good[e]
        if e + 1 < self.epochs:
            seconds += float(np.sum(np.diff(ends[e:]) / good[e + 1:]))
        return seconds

    def trajectory(self, counts: tuple[int, ...]) -> Trajectory:
        """The agent's run alone on `counts` from the start (cached; see `Trajectory`)."""
        key = ("trajectory", counts)
        hit = self._tables.get(key)
        if hit is None:
            hit = self._tables[key] = Trajectory(self, counts)
        return hit


@lru_cache(maxsize=64)
def app_goodput(perf, app: str) -> AppGoodput:
    """The (cached) goodput facts of `app` under performance model `perf`."""
    return AppGoodput(perf, app)


def artifact_iterations(app: str, batch: float, perf=None) -> float:
    """Iterations a job of `app` at a fixed total `batch` trains in the Pollux artifact's
    simulator (the job length of its Tiresias and Optimus jobs).

    There a job advances in statistical-efficiency-weighted progress (module docstring): per
    iteration at batch B in epoch e it gains (var + sqr) / (var / (B / init_batch) + sqr), with
    the gradient statistics of epoch e linear in batch between the measured sizes; epoch e ends
    at `epoch_ends[e]` (the least `progress` of that row over the validation files) and the job
    is done after the app's max epochs (simulator.py `Job.step`, applications.py
    `get_progress`, `get_grad_stats`, `get_completion_epoch` without a target metric). So its
    iterations are the sum over epochs of the epoch's progress span over the epoch's gain. A
    large batch gains less than its size per iteration, so it needs more iterations than the
    validation table's `iteration` column (yolov3 at 128: +20 %). Raises KeyError for an app
    without goodput data (`has_goodput`)."""
    return app_goodput(perf or default_perf(), app).fixed_batch_iterations(batch)


def adaptive_rate(perf, spec, counts: tuple[int, ...], progress: float) -> float:
    """Progress units per second of an adaptive-batch job (`spec.adaptive_batch`) on `counts`:
    the work it has left over the time its remaining epochs take there, each epoch at its best
    batch. Constant between the simulator's events; exact at completion when the job keeps the
    placement to the end, and within an epoch's share when its placement changes."""
    if not counts:
        return 0.0
    app = app_goodput(perf, spec.application)
    left = max(spec.total_work - progress, 0.0)
    # the spec's total is the app's last epoch end; a shorter or longer job scales the ends
    ratio = spec.total_work / app.total
    seconds = app.time_to_finish(counts, progress / ratio) * ratio
    return left / seconds if seconds > 0 else 0.0


# ---- the agent's fitted throughput model ------------------------------------------------------

_START = (1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3)  # artifact goodput.py initial params
_LOWER = (1e-8,) * 6 + (1.0,)
_UPPER = (math.inf,) * 6 + (10.0,)


def network_time(p: PerfParams, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
    """Predicted all-reduce time: the inter-node link if nodes > 1, intra-node if replicas > 1."""
    if type(nodes) is int and type(replicas) is int:  # one shape (`GoodputModel.best`)
        return np.float64(_network_time_of(p, nodes, replicas))
    nodes, replicas = np.asarray(nodes), np.asarray(replicas)
    inter, intra = nodes > 1, replicas > 1
    alpha = np.select([inter, intra], [p.alpha_n, p.alpha_r], 1e-8)
    beta = np.select([inter, intra], [p.beta_n, p.beta_r], 1e-8)
    return alpha + beta * np.maximum(replicas - 2, 1e-8)


def _network_time_of(p: PerfParams, nodes: int, replicas: int) -> float:
    """`network_time` of one shape in floats (np.select on scalars cost ~10 µs): the same
    values picked and the same two IEEE operations, so the same number."""
    if nodes > 1:
        alpha, beta = p.alpha_n, p.beta_n
    elif replicas > 1:
        alpha, beta = p.alpha_r, p.beta_r
    else:
        alpha = beta = 1e-8
    return alpha + beta * max(float(replicas - 2), 1e-8)


def predict_step(p: PerfParams, nodes, replicas, atomic, accum) -> np.ndarray:
    """Predicted seconds per iteration (optimizer step plus accumulation micro-steps)."""
    compute = p.alpha_c + p.beta_c * np.asarray(atomic, dtype=float)
    net = network_time(p, nodes, replicas)
    optim = (compute ** p.gamma + net ** p.gamma) ** (1.0 / p.gamma)
    return np.asarray(accum) * compute + optim


def _objective(x: np.ndarray, nodes, replicas, atomic, log_compute, log_step
               ) -> tuple[float, np.ndarray]:
    """The artifact's fitting loss (goodput.py `_obj_fn`) and its gradient in the 7 params:
    RMS log error of compute time + RMS log error of step time + 1e-3 (γ - 1)² (towards a
    small γ) + 1e-2 ((β_n/α_n)² + (β_r/α_r)²) (an optimistic model)."""
    ac, bc, an, bn, ar, br, g = x.tolist()
    inter = nodes > 1
    intra = ~inter & (replicas > 1)
    m = np.maximum(replicas - 2, 1e-8)
    compute = ac + bc * atomic
    net = np.where(inter, an + bn * m, np.where(intra, ar + br * m, 1e-8 + 1e-8 * m))
    cg, ng = compute ** g, net ** g
    total = cg + ng
    log_optim = np.log(total) / g
    d1 = np.log(compute) - log_compute
    d2 = log_optim - log_step
    n = len(atomic)
    err1 = math.sqrt(float(np.mean(d1 ** 2)))
    err2 = math.sqrt(float(np.mean(d2 ** 2)))
    loss = err1 + err2 + 1e-3 * (g - 1) ** 2 + 1e-2 * ((bn / an) ** 2 + (br / ar) ** 2)
    w1 = d1 / (n * max(err1, 1e-12))
    w2 = d2 / (n * max(err2, 1e-12))
    dlc = w1 / compute + w2 * cg / (compute * total)  # d loss / d compute, per point
    dln = w2 * ng / (net * total)  # d loss / d network time, per point
    dg = w2 * (-np.log(total) / g ** 2 + (cg * np.log(compute) + ng * np.log(net)) / (g * total))
    grad = np.array([
        dlc.sum(), (dlc * atomic).sum(),
        (dln * inter).sum() - 2e-2 * bn ** 2 / an ** 3, (dln * inter * m).sum() + 2e-2 * bn / an ** 2,
        (dln * intra).sum() - 2e-2 * br ** 2 / ar ** 3, (dln * intra * m).sum() + 2e-2 * br / ar ** 2,
        dg.sum() + 2e-3 * (g - 1)])
    return float(loss), grad


@lru_cache(maxsize=1)
def _blas_thread_controls() -> tuple:
    """(get, set) of the thread count of scipy's bundled OpenBLAS, if this process has one
    loaded (Linux wheels); empty otherwise."""
    import ctypes

    import scipy.optimize  # noqa: F401  (loads scipy's BLAS)

    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libscipy_openblas-" in line}
    except OSError:
        return ()
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            return lib.scipy_openblas_get_num_threads, lib.scipy_openblas_set_num_threads
        except (OSError, AttributeError):
            continue
    return ()


@contextmanager
def _one_blas_thread():
    """L-BFGS-B makes thousands of tiny BLAS calls per fit; on a busy machine OpenBLAS's thread
    pool makes each cost ~1 ms (measured: 0.30 s a fit with the default threads, 0.017 s with
    one). One thread for the fit, the earlier count restored after."""
    controls = _blas_thread_controls()
    if not controls:
        yield
        return
    get, set_ = controls
    before = get()
    set_(1)
    try:
        yield
    finally:
        set_(before)


@lru_cache(maxsize=20_000)
def fit_params(points: tuple[tuple[int, int, int, float, float], ...]) -> PerfParams:
    """Fit the throughput model to `points` (nodes, replicas, atomic batch, step, sync), with
    the artifact's rules (goodput.py `fit_perf_params`): α_c fixed at half the mean compute
    time when one atomic batch was seen; the inter-node terms fixed at their floor without a
    multi-node point, the intra-node ones without a one-node multi-replica point, both β
    without a point over 2 replicas; after the fit, without a multi-node point, α_n and β_n are
    raised to 1.1 × α_r and β_r. Cached: jobs of an application that ran the same points share
    a fit."""
    from scipy.optimize import minimize

    arr = np.array(points, dtype=float)
    nodes, replicas, atomic, step, sync = arr.T
    compute = np.maximum(step - sync, 1e-8)
    x0, lo, hi = list(_START), list(_LOWER), list(_UPPER)

    def fix(i: int, value: float) -> None:
        x0[i] = lo[i] = hi[i] = value

    if len(np.unique(atomic)) == 1:
        fix(0, float(np.mean(compute)) / 2)
    if not np.any(nodes > 1):
        fix(2, _LOWER[2])
        fix(3, _LOWER[3])
    if not np.any((nodes == 1) & (replicas > 1)):
        fix(4, _LOWER[4])
        fix(5, _LOWER[5])
    if not np.any(replicas > 2):
        fix(3, _LOWER[3])
        fix(5, _LOWER[5])
    free = [i for i in range(7) if lo[i] != hi[i]]
    args = (nodes, replicas, atomic, np.log(compute), np.log(step))
    x = np.array(x0)
    if free:
        def f(y: np.ndarray) -> tuple[float, np.ndarray]:
            x[free] = y
            loss, grad = _objective(x, *args)
            return loss, grad[free]

        with _one_blas_thread():
            res = minimize(f, np.array([x0[i] for i in free]), jac=True, method=_METHOD,
                           bounds=[(lo[i], hi[i]) for i in free])
        x[free] = res.x
    if not np.any(nodes > 1):  # the prior: inter-node links are no faster than intra-node
        x[2], x[3] = max(x[2], x[4] * 1.1), max(x[3], x[5] * 1.1)
    return PerfParams(*x.tolist())


class GoodputModel:
    """A job's goodput as its agent predicts it: fitted throughput × efficiency from the latest
    gradient statistics (sqr, var) (artifact goodput.py `GoodputFunction`)."""

    def __init__(self, app: AppGoodput, params: PerfParams, sqr: float, var: float,
                 fixed_batch: int | None = None) -> None:
        self.app, self.params, self.sqr, self.var = app, params, sqr, var
        self.fixed_batch = fixed_batch

    def choose(self, nodes: int, replicas: int) -> tuple[int, int]:
        """(atomic batch, accumulation steps) the agent runs on (nodes, replicas): the candidate
        of best predicted goodput, its atomic batch capped as it runs (`update_local_bsz`)."""
        c = self.app.candidates(replicas, self.fixed_batch)
        i = int(np.argmax(self._goodputs(c, nodes, replicas)))
        return int(c.atomic[i]), int(c.accum[i])

    def _goodputs(self, c: Candidates, nodes: int, replicas: int) -> np.ndarray:
        t = predict_step(self.params, nodes, replicas, c.chosen_atomic, c.accum)
        good = gain(self.sqr, self.var, c.eval_batch / self.app.init_batch) / t
        return np.where(c.valid, good, 0.0)

    def best(self, nodes: int, replicas: int) -> float:
        """The best predicted goodput (progress per second) on (nodes, replicas) over the batch
        candidates; 0 without replicas."""
        if replicas <= 0:
            return 0.0
        c = self.app.candidates(replicas, self.fixed_batch)
        return float(self._goodputs(c, nodes, replicas).max())


class Trajectory:
    """A job of `app` picking its own batch alone on `counts` from progress 0, as the
    artifact's `Job.step` runs it in 60 s intervals after a 30 s restart: before its first fit
    it runs max(init_batch, min_local · replicas); each step it adds its configuration to its
    profile (a new one means a re-fit) and takes its batch statistics; an interval ends at the
    interval's end or an epoch's end (rounded to whole seconds, as there); then it picks the
    candidate of best goodput under its fitted model (`update_local_bsz`). Kept: the training
    seconds at each epoch's end (`times`) and the configuration each epoch ended with
    (`atomic`, `accum`). While nothing changes (same configuration, profile and epoch) whole
    intervals are skipped at once."""

    INTERVAL = 60.0  # simulator.py `--interval 60`
    RESTART = 30.0  # simulator.py Job.reallocate: `rescale_time = 30`

    def __init__(self, app: AppGoodput, counts: tuple[int, ...]) -> None:
        n, r = len(counts), sum(counts)
        first = app.candidates(r, max(app.init_batch, app.min_local * r))
        atomic, accum = int(first.atomic[0]), int(first.accum[0])
        points: dict[tuple[int, int, int], tuple[float, float]] = {}
        ends = app.epoch_ends
        self.times = np.zeros(app.epochs)
        self.atomic = np.zeros(app.epochs, dtype=int)
        self.accum = np.zeros(app.epochs, dtype=int)
        t, progress, epoch, budget = 0.0, 0.0, 0, self.INTERVAL - self.RESTART
        params = None
        while epoch < app.epochs:
            step, sync = app.perf.step_and_sync(app.name, counts, atomic)
            batch = r * atomic * (accum + 1)
            sqr, var = app.grad_stats(batch)
            sqr, var = float(sqr[0, epoch]), float(var[0, epoch])
            good = float(gain(sqr, var, batch / app.init_batch)) / (step + accum * (step - sync))
            new_point = (n, r, atomic) not in points
            if new_point:
                points[(n, r, atomic)] = (step, sync)
                params = fit_params(tuple(sorted((*k, *v) for k, v in points.items())))
            if progress + good * budget < ends[epoch]:
                progress += good * budget
                t += budget
                budget = 0.0
            else:
                delta = round((ends[epoch] - progress) / good)
                self.times[epoch], self.atomic[epoch], self.accum[epoch] = t + delta, atomic, accum
                t, progress, budget = t + delta, ends[epoch], budget - delta
                epoch += 1
            choice = GoodputModel(app, params, sqr, var).choose(n, r)
            if budget <= 0:
                budget = self.INTERVAL
                if choice == (atomic, accum) and not new_point and epoch < app.epochs:
                    # steady until this epoch ends: skip the whole intervals before it
                    skip = math.floor((ends[epoch] - progress) / (good * self.INTERVAL))
                    if skip > 1:
                        progress += good * self.INTERVAL * (skip - 1)
                        t += self.INTERVAL * (skip - 1)
            atomic, accum = choice
