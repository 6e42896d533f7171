"""Step and sync times looked up as the Pollux artifact looks them up (`PerfModel(throughput=
"artifact")`), for comparing engines with that artifact on its own workloads.

The artifact (petuum/adaptdl osdi21-artifact, `simulator/applications.py`,
`Application.get_throughput`) keys a placement by the lexicographically smallest rotation of
its node sequence. If that sequence was measured (placements.csv: up to 4 nodes x 4 GPUs) it
interpolates the sequence's own rows linearly in the local batch; otherwise it interpolates
linearly over (num_nodes capped at 16, num_replicas, local_bsz) between the placements rows
averaged per (nodes, replicas, local batch) and the scalability rows (a Delaunay
triangulation: scipy's `LinearNDInterpolator`).

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
from typing import Any


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
