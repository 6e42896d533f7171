"""Step and sync times looked up as the Pollux artifact looks them up (`PerfModel(throughput=
"artifact")`), for comparing engines with that artifact on its own workloads.

The artifact (petuum/adaptdl osdi21-artifact, `simulator/applications.py`,
`Application.get_throughput`) keys a placement by the lexicographically smallest rotation of
its node sequence. If that sequence was measured (placements.csv: up to 4 nodes x 4 GPUs) it
interpolates the sequence's own rows linearly in the local batch; otherwise it interpolates
linearly over (num_nodes capped at 16, num_replicas, local_bsz) between the placements rows
averaged per (nodes, replicas, local batch) and the scalability rows (a Delaunay
triangulation: scipy's `LinearNDInterpolator`).

A job of fixed total batch B on n replicas runs, in the artifact (`simulator.py`,
`Job.update_local_bsz`), a local batch rounded up, ceil(B / n); accum = ceil(local / max
local batch) - 1 accumulation steps, at least one on a single replica when B exceeds the
application's smallest batch; an atomic batch ceil(local / (accum + 1)) capped at the largest
batch / (n (accum + 1)); so its true batch is n x atomic x (accum + 1) (bert at 384 on 12
replicas: 360), and an iteration takes step + accum (step - sync) at the atomic batch
(`artifact_batch`; `PerfModel.accumulated_step_time` with this throughput).

The project's default (`perf/model.py`) differs on purpose: it averages every measured
rotation of a multiset (the ring order of nodes is noise in the measurement) and interpolates
in log batch. What the artifact would do but this does not:

- The node sequence is taken largest first, the order in which the artifact's Tiresias and
  Optimus fill nodes (most free GPUs first); a placement does not record node order here.
- Outside the measured local batches of a sequence the artifact raises; here the nearest end
  holds. Outside the triangulation the artifact fails an assertion; here the project's grid
  answers instead.
"""

from __future__ import annotations

import bisect
import math
from typing import Any, NamedTuple


class ArtifactBatch(NamedTuple):
    atomic: int  # samples per replica per micro-step
    accum: int  # extra micro-steps per iteration
    batch: int  # the job's true batch: replicas x atomic x (accum + 1)


def artifact_batch(batch: float, replicas: int, max_local: int, smallest: int,
                   largest: int) -> ArtifactBatch:
    """How the artifact runs a job of total `batch` on `replicas` (module docstring);
    `smallest`, `largest`: the application's measured batch sizes' ends."""
    local = math.ceil(batch / replicas - 1e-8)
    accum = math.ceil(local / max_local - 1e-8) - 1
    if replicas == 1 and batch > smallest:
        accum = max(1, accum)
    atomic = min(math.ceil(local / (accum + 1) - 1e-8), int(largest / (replicas * (accum + 1))))
    return ArtifactBatch(atomic, accum, replicas * atomic * (accum + 1))


class ArtifactThroughput:
    """One application's lookup. `step(counts, b)` -> (step_time, sync_time) or None where the
    artifact has no answer (outside the triangulation)."""

    def __init__(self, app_data: dict[str, Any]) -> None:
        exact = dict(app_data["placements"])  # a multiset with one measured rotation: its rows
        exact.update(app_data.get("filled", {}))  # several: the largest-first sequence's rotation
        self.exact = {tuple(int(c) for c in k.split(",")): v for k, v in exact.items()}
        self._grid = app_data["grid"]
        self._nd = None  # built on first use: the triangulation costs ~10 ms per application

    def step(self, counts: tuple[int, ...], b: float) -> tuple[float, float] | None:
        rows = self.exact.get(counts)
        if rows is not None:
            bs, step, sync = rows
            return _linear(bs, step, b), _linear(bs, sync, b)
        out = self._interpolator()([min(len(counts), 16), sum(counts), b])[0]
        if out[0] != out[0]:  # NaN: outside the measured hull
            return None
        return float(out[0]), float(out[1])

    def _interpolator(self):
        if self._nd is None:
            from scipy.interpolate import LinearNDInterpolator

            points, values = [], []
            for key, (bs, step, sync) in self._grid.items():
                nodes, replicas = (int(c) for c in key.split(","))
                for b, st, sy in zip(bs, step, sync):
                    points.append((nodes, replicas, b))
                    values.append((st, sy))
            self._nd = LinearNDInterpolator(points, values)
        return self._nd


def _linear(xs: list[float], ys: list[float], x: float) -> float:
    """Linear between measured points; the nearest end outside them."""
    if x <= xs[0]:
        return float(ys[0])
    if x >= xs[-1]:
        return float(ys[-1])
    i = bisect.bisect_right(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)
