"""Performance models built from measured profiles: step time per placement, PS speed, convergence.

All figures come from `workbench/perf/data/`, written by `tools/derive_profiles.py` from the
measured Pollux profiles (Apache-2.0; attribution in `pollux.json`) and a fit to the DL2 testbed
speeds (`ps_fit.json`; only the coefficients are shipped). Nothing here reads the shared data
folder.

Units: times in seconds, rates in iterations per second, batch sizes in samples.

Step time of a Pollux application (`step_time(app, counts, local_bsz)`), `counts` = replicas per
node, largest first:

1. If the multiset `counts` was measured (placements.csv: up to 4 nodes × 4 GPUs; the artifact's
   rotations of one multiset are averaged), interpolate that placement's curve in the local batch.
2. Otherwise interpolate on a grid over (num_nodes, num_replicas): rows of placements.csv averaged
   per (nodes, replicas) as the artifact does, plus scalability.csv (6, 8, 12, 16 nodes × 1-4
   replicas per node). At each bracketing measured node count n_i the replica count is taken at
   the same replicas-per-node ratio (r/n · n_i, clamped to that node count's measured range, so
   more than 4 replicas per node costs what 4 per node cost), then blended linearly in nodes.
   Beyond 16 nodes the sync part keeps growing with log(nodes) at the rate it grew from 12 to 16
   nodes (never shrinks): sync(n) = sync(16) + max(0, sync(16) - sync(12)) · log(n/16) / log(16/12),
   both taken at the same replicas per node; the compute part stays.
3. In the local batch every curve is piecewise linear in log(local_bsz): log(step_time) and
   sync_time are interpolated between measured batch sizes. Below the smallest measured batch the
   step and sync times stay at their values there (fixed per-step overheads dominate small
   batches, and it keeps a tiny batch spread over many GPUs from looking free); above the largest
   the compute part (step - sync) grows in proportion to the batch and sync stays.

`PerfModel(throughput="artifact")` (`artifact_perf()`) looks step and sync times up as the
Pollux artifact does instead (`perf/artifact.py`: one rotation's rows, linear in batch; a
Delaunay interpolation elsewhere), for comparing engines with the artifact on its workloads.

Gradient accumulation (the artifact's rule): if the local batch exceeds the app's max local
batch, accum = ceil(local / max) - 1, each micro-step has local / (accum + 1) samples, and one
iteration takes step + accum · (step - sync).

PS jobs (DL2 models): speed = 1 / (θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p) in DL2's unit, mini-batches
per second summed over workers (DL2 divides it by an epoch size counted in mini-batches), so one
"iteration" of a PS job is one worker mini-batch. M is the measured batch field; a different
`batch_per_worker` scales the θ0 term in proportion (not measured: an assumption).

Convergence: `total_iterations(app, b)` is the `iteration` of row (max_epochs - 1) of the
validation file for batch b, interpolated linearly in batch size between measured batch sizes
exactly as the Pollux artifact does; outside the measured range it scales as 1/b from the
nearest measured size. `metric_at` interpolates the validation `metric` column in iterations
(held at the first epoch's value before the first epoch ends, and at the last after) and blends
the two bracketing batch sizes linearly in batch size at the same epoch count. For PS models the
curve is synthetic: loss = 1/(a·k + 1) + 0.1 with k = epochs done and a = 20 / epochs, so the
loss starts at 1.1 and ends near 0.148; it is not measured.

`grad_stats` / `statistical_efficiency` give the artifact's gradient statistics (per epoch,
linear in batch size) and its gain (var + sqr) / (var / scale + sqr), scale = batch / initial.

Measured errors (`fit_report()` computes them from the shipped data; `workbench bench perf`
prints them), relative |predicted / measured - 1| of step_time, median (90th percentile) per app:

- a local batch left out of a measured placement, predicted from its neighbours in log batch:
  2.0-7.9 % (4.7-15 %), worst yolov3;
- a whole replicas-per-node multiset left out (its share of the grid too), predicted from the
  (nodes, replicas) grid: 2.1-7.3 % (7-20 %), worst ncf;
- a scalability node count (6, 8 or 12) left out, predicted from its neighbours: 3.0-6.7 %
  (8-18 %).

PS fit, relative error of speed over all measured points except failed runs: median 2.0-7.3 %,
mean 3.1-9.7 % per model (3.1-9.3 % for w > 2). The Optimus form cannot follow both the strong
1/p effect at one worker and the weak w/p effect at many workers, so it over-predicts 1-2 workers
on 1-2 PS: resnet-50 at 1 PS × 1 worker by 2.1×, wlm by 1.9×, vgg-16 by 1.6×.

Speed: an uncached `iteration_rate` takes about 10 µs, a cached one about 3.5 µs (2 cores, Python
3.11); results are memoised per (app, batch, counts) for all-reduce jobs and per (model, w, p)
for PS jobs unless the model is built with `cached=False`.
"""

from __future__ import annotations

import bisect
import json
import math
from functools import lru_cache
from importlib import resources
from typing import Any

from ..model import JobKind, JobSpec, Placement
from .artifact import ArtifactBatch, ArtifactThroughput, artifact_batch
from .interp import Curve, Grid

_PS = JobKind.PS  # (a global: in Python 3.11 an Enum member read through its class is slow)

THROUGHPUTS = ("project", "artifact")


class _App:
    def __init__(self, name: str, d: dict[str, Any]) -> None:
        self.name = name
        self.max_epochs = int(d["max_epochs"])
        self.max_local_bsz = int(d["max_local_bsz"])
        self.metric_increases = bool(d["metric_increases"])
        self.placement_data = {tuple(int(c) for c in k.split(",")): v
                               for k, v in d["placements"].items()}
        self.grid_data = {tuple(int(c) for c in k.split(",")): v for k, v in d["grid"].items()}
        self.placements = {k: Curve(*v) for k, v in self.placement_data.items()}
        self.grid = Grid({k: Curve(*v) for k, v in self.grid_data.items()})
        val = sorted(((int(b), v) for b, v in d["validation"].items()), key=lambda x: x[0])
        self.val_bsz = [b for b, _ in val]
        self.val = [v for _, v in val]
        self.total_iters = [v["iteration"][self.max_epochs - 1] for v in self.val]

    def step(self, counts: tuple[int, ...], b: float) -> tuple[float, float]:
        curve = self.placements.get(counts)
        if curve is not None:
            a, s = curve.at(b, math.log(b))
            return math.exp(a), s
        return self.grid.at(len(counts), sum(counts), b)


class PerfModel:
    """Throughput and convergence of the profiled applications. See the module docstring."""

    def __init__(self, pollux: dict[str, Any], ps_fit: dict[str, Any], cached: bool = True,
                 throughput: str = "project") -> None:
        if throughput not in THROUGHPUTS:
            raise ValueError(f"throughput must be one of {', '.join(THROUGHPUTS)}, got {throughput!r}")
        self._apps = {name: _App(name, d) for name, d in pollux["apps"].items()}
        # "artifact": step times looked up as the Pollux artifact does (`perf/artifact.py`)
        self.throughput = throughput
        self._artifact = ({name: ArtifactThroughput(d) for name, d in pollux["apps"].items()}
                          if throughput == "artifact" else None)
        self._ps = ps_fit["models"]
        self.applications: tuple[str, ...] = tuple(self._apps)
        self.ps_models: tuple[str, ...] = tuple(self._ps)
        self.notice = pollux.get("notice", "")
        self.cached = cached
        self._step_cache: dict[tuple, tuple[float, float]] = {}
        self._rate_cache: dict[tuple, float] = {}
        self._report: dict | None = None

    @classmethod
    def from_package(cls, cached: bool = True, throughput: str = "project") -> PerfModel:
        pollux, ps = _package_data()
        return cls(pollux, ps, cached=cached, throughput=throughput)

    def clear_cache(self) -> None:
        self._step_cache.clear()
        self._rate_cache.clear()

    # ---- Pollux applications (all-reduce) ------------------------------------------------

    def _app(self, app: str) -> _App:
        try:
            return self._apps[app]
        except KeyError:
            raise KeyError(f"no measured profile for application {app!r};"
                           f" known: {', '.join(self.applications)}") from None

    def step_and_sync(self, app: str, counts: tuple[int, ...], local_bsz: float
                      ) -> tuple[float, float]:
        """(step_time, sync_time) in seconds of one iteration at that placement and local batch."""
        key = (app, counts, local_bsz)
        if self.cached:
            hit = self._step_cache.get(key)
            if hit is not None:
                return hit
        norm = tuple(sorted((int(c) for c in counts if c > 0), reverse=True))
        if not norm or not local_bsz > 0:
            raise ValueError(f"{app}: need replicas and a positive local batch,"
                             f" got {counts}, {local_bsz}")
        a = self._app(app)
        out = None
        if self._artifact is not None:
            out = self._artifact[app].step(norm, float(local_bsz))
        if out is None:
            out = a.step(norm, float(local_bsz))
        if self.cached:
            self._step_cache[key] = out
        return out

    def step_time(self, app: str, counts: tuple[int, ...], local_bsz: float) -> float:
        """Seconds per iteration; counts = replicas per node, largest first."""
        return self.step_and_sync(app, counts, local_bsz)[0]

    def sync_time(self, app: str, counts: tuple[int, ...], local_bsz: float) -> float:
        return self.step_and_sync(app, counts, local_bsz)[1]

    def accumulated_step_time(self, app: str, counts: tuple[int, ...], batch_size: float) -> float:
        """Seconds per iteration at total batch `batch_size`, with gradient accumulation when the
        local batch exceeds the app's max local batch (with the artifact's throughput, its
        rounding and accumulation rules: `perf.artifact.artifact_batch`)."""
        n = sum(counts)
        if self._artifact is not None:  # the artifact's rounding and accumulation rules
            run = self.artifact_run(app, batch_size, n)
            st, sy = self.step_and_sync(app, counts, run.atomic)
            return st + run.accum * (st - sy)
        local = batch_size / n
        cap = self._app(app).max_local_bsz
        if local > cap:
            accum = math.ceil(local / cap - 1e-8) - 1
            st, sy = self.step_and_sync(app, counts, local / (accum + 1))
            return st + accum * (st - sy)
        return self.step_and_sync(app, counts, local)[0]

    def artifact_run(self, app: str, batch_size: float, replicas: int) -> ArtifactBatch:
        """How the Pollux artifact's job runs a fixed `batch_size` on `replicas` (its atomic
        batch, accumulation steps and true batch: `perf.artifact.artifact_batch`)."""
        a = self._app(app)
        return artifact_batch(batch_size, replicas, a.max_local_bsz, a.val_bsz[0], a.val_bsz[-1])

    def max_local_bsz(self, app: str) -> int:
        return self._app(app).max_local_bsz

    def max_epochs(self, app: str) -> int:
        if app in self._ps:
            return int(self._ps[app]["epochs"])
        return self._app(app).max_epochs

    def measured_batch_sizes(self, app: str) -> tuple[int, ...]:
        return tuple(self._app(app).val_bsz)

    # ---- Job-level rates -----------------------------------------------------------------

    def iteration_rate(self, spec: JobSpec, workers: Placement, ps: Placement) -> float:
        """Iterations per second of the whole job at this placement; 0.0 if it cannot train.

        All-reduce: 1 / step time at local batch spec.batch_size / workers (with gradient
        accumulation above the max local batch). PS: `ps_speed(app, workers, ps)`, which does
        not depend on where the tasks are nor on spec.batch_size (one measured batch per model).
        """
        if len(workers) == 1:  # most placements: one node (the same tuple, without sorting)
            (c,) = workers.values()
            counts = (c,) if c > 0 else ()
        else:
            counts = tuple(sorted((c for c in workers.values() if c > 0), reverse=True))
        if not counts:
            return 0.0
        ps_job = spec.kind == _PS
        if ps_job:
            n_ps = sum(ps.values())
            key = (spec.application, True, spec.batch_size, sum(counts), n_ps)
        else:
            n_ps = 0
            key = (spec.application, False, spec.batch_size, counts, 0)
        if self.cached:
            hit = self._rate_cache.get(key)
            if hit is not None:
                return hit
        if ps_job:
            rate = self.ps_speed(spec.application, sum(counts), n_ps)
        else:
            rate = 1.0 / self.accumulated_step_time(spec.application, counts, spec.batch_size)
        if self.cached:
            self._rate_cache[key] = rate
        return rate

    def ideal_rate(self, spec: JobSpec, workers: int, gpus_per_node: int = 4) -> float:
        """Rate when the workers are packed on as few nodes as possible. PS jobs use
        spec.num_ps parameter servers, or if that is 0 the best count from 1 to `workers`."""
        if workers <= 0:
            return 0.0
        if spec.kind == JobKind.PS:
            if spec.num_ps > 0:
                return self.ps_speed(spec.application, workers, spec.num_ps)
            return self.best_ps_speed(spec.application, workers)
        full, rest = divmod(workers, gpus_per_node)
        counts = (gpus_per_node,) * full + ((rest,) if rest else ())
        return 1.0 / self.accumulated_step_time(spec.application, counts, spec.batch_size)

    # ---- Parameter-server models (DL2) ---------------------------------------------------

    def ps_speed(self, model: str, workers: int, ps: int, batch_per_worker: int | None = None
                 ) -> float:
        """Fitted Optimus-form speed, mini-batches per second summed over workers (DL2's unit);
        0.0 without workers or parameter servers."""
        if workers <= 0 or ps <= 0:
            return 0.0
        try:
            fit = self._ps[model]
        except KeyError:
            raise KeyError(f"no PS speed fit for model {model!r};"
                           f" known: {', '.join(self.ps_models)}") from None
        t0, t1, t2, t3, t4 = fit["theta"]
        m = fit["batch"] if batch_per_worker is None else batch_per_worker
        w, p = float(workers), float(ps)
        return 1.0 / (t0 * m / w + t1 + t2 * w / p + t3 * w + t4 * p)

    def best_ps_speed(self, model: str, workers: int) -> float:
        """`ps_speed` at the best count of parameter servers from 1 to `workers`, in O(1).

        With the fit's coefficients non-negative (as fitted) the denominator is positive, and
        only t2·w/p + t4·p of it depends on p: convex with its minimum at sqrt(t2·w/t4) when
        t2, t4 > 0, monotone otherwise. So the fastest count is 1, `workers` or next to that
        minimum; trying those few equals trying every count (which cost O(workers) a call,
        O(workers²) over a rate table). Other coefficients: every count is tried.
        """
        if workers <= 0:
            return 0.0
        speed = self.ps_speed(model, workers, 1)  # raises KeyError for an unknown model
        theta = self._ps[model]["theta"]
        if min(theta) < 0:
            return max(self.ps_speed(model, workers, p) for p in range(1, workers + 1))
        t2, t4 = theta[2], theta[4]
        counts = {workers}
        if t2 > 0 and t4 > 0:
            best = math.sqrt(t2 * workers / t4)
            counts.update(min(max(int(best) + d, 1), workers) for d in (-1, 0, 1, 2))
        return max([speed] + [self.ps_speed(model, workers, p) for p in sorted(counts)])

    # ---- Convergence ---------------------------------------------------------------------

    def total_iterations(self, app: str, batch_size: float) -> float:
        """Iterations to finish the app's max epochs at this total batch size."""
        if app in self._ps:
            fit = self._ps[app]
            return float(fit["epochs"] * fit["epoch_size"])
        a = self._app(app)
        return _interp_batch(a.val_bsz, a.total_iters, batch_size)

    def epoch_iterations(self, app: str, batch_size: float) -> float:
        """Iterations per epoch (average over the app's max epochs) at this total batch size."""
        if app in self._ps:
            return float(self._ps[app]["epoch_size"])
        return self.total_iterations(app, batch_size) / self._app(app).max_epochs

    def metric_at(self, app: str, batch_size: float, iterations: float) -> float:
        """Validation metric after `iterations` at total batch `batch_size` (measured curve,
        interpolated; PS models: the synthetic loss of the module docstring)."""
        if app in self._ps:
            epochs = self._ps[app]["epochs"]
            k = max(iterations, 0.0) / self._ps[app]["epoch_size"]
            return 1.0 / (20.0 / epochs * k + 1.0) + 0.1
        a = self._app(app)
        epochs_done = iterations / self.epoch_iterations(app, batch_size)
        bs = a.val_bsz
        if batch_size <= bs[0]:
            return self._metric_on(a, 0, epochs_done)
        if batch_size >= bs[-1]:
            return self._metric_on(a, len(bs) - 1, epochs_done)
        i = bisect.bisect_right(bs, batch_size)
        m0 = self._metric_on(a, i - 1, epochs_done)
        if batch_size == bs[i - 1]:
            return m0
        m1 = self._metric_on(a, i, epochs_done)
        t = (batch_size - bs[i - 1]) / (bs[i] - bs[i - 1])
        return m0 + t * (m1 - m0)

    def grad_stats(self, app: str, batch_size: float, iterations: float) -> tuple[float, float]:
        """(grad_sqr, grad_var) of the validation files during the epoch reached after
        `iterations` at `batch_size`; linear in batch size between measured sizes (the artifact's
        rule), the nearest measured size outside."""
        a = self._app(app)
        epoch = int(iterations // self.epoch_iterations(app, batch_size))
        epoch = min(max(epoch, 0), a.max_epochs - 1)
        bs = a.val_bsz
        i = min(max(bisect.bisect_right(bs, batch_size), 1), len(bs) - 1)
        b0, b1 = bs[i - 1], bs[i]
        t = min(max((batch_size - b0) / (b1 - b0), 0.0), 1.0)
        v0, v1 = a.val[i - 1], a.val[i]
        sqr = v0["grad_sqr"][epoch] + t * (v1["grad_sqr"][epoch] - v0["grad_sqr"][epoch])
        var = v0["grad_var"][epoch] + t * (v1["grad_var"][epoch] - v0["grad_var"][epoch])
        return sqr, var

    def statistical_efficiency(self, app: str, batch_size: float, iterations: float,
                               initial_batch_size: float | None = None) -> float:
        """Progress per iteration relative to the initial batch, as in the Pollux artifact:
        (var + sqr) / (var / scale + sqr) with scale = batch / initial batch (default: the
        smallest measured batch)."""
        init = initial_batch_size or self._app(app).val_bsz[0]
        sqr, var = self.grad_stats(app, batch_size, iterations)
        scale = batch_size / init
        return (var + sqr) / (var / scale + sqr)

    def metric_increases(self, app: str) -> bool:
        """True if the app's metric improves upwards (accuracy), False for loss-like metrics."""
        if app in self._ps:
            return False
        return self._app(app).metric_increases

    def _metric_on(self, a: _App, i: int, epochs_done: float) -> float:
        v = a.val[i]
        iters = v["iteration"]
        per_epoch = a.total_iters[i] / a.max_epochs
        x = epochs_done * per_epoch
        metric = v["metric"]
        if x <= iters[0]:
            return metric[0]
        if x >= iters[-1]:
            return metric[-1]
        j = bisect.bisect_right(iters, x)
        t = (x - iters[j - 1]) / (iters[j] - iters[j - 1])
        return metric[j - 1] + t * (metric[j] - metric[j - 1])

    # ---- Report --------------------------------------------------------------------------

    def fit_report(self) -> dict:
        """Hold-out interpolation errors per app and PS fit errors per model (see _report.py)."""
        if self._report is None:
            from ._report import build_report

            self._report = build_report(self._apps, self._ps)
        return self._report


def _interp_batch(bs: list[int], ys: list[float], b: float) -> float:
    """Linear in batch size between measured sizes (the artifact's rule); 1/b outside."""
    if b <= bs[0]:
        return ys[0] * bs[0] / b
    if b >= bs[-1]:
        return ys[-1] * bs[-1] / b
    i = bisect.bisect_right(bs, b)
    b0, b1 = bs[i - 1], bs[i]
    if b == b0:
        return float(ys[i - 1])
    return ((b - b0) * ys[i] + (b1 - b) * ys[i - 1]) / (b1 - b0)


@lru_cache(maxsize=1)
def _package_data() -> tuple[dict, dict]:
    data = resources.files(__package__) / "data"
    pollux = json.loads((data / "pollux.json").read_text())
    ps = json.loads((data / "ps_fit.json").read_text())
    return pollux, ps


@lru_cache(maxsize=1)
def default_perf() -> PerfModel:
    """The shared, cached model built from the package data."""
    return PerfModel.from_package()


@lru_cache(maxsize=1)
def artifact_perf() -> PerfModel:
    """The shared model whose step times are looked up as the Pollux artifact does."""
    return PerfModel.from_package(throughput="artifact")
