"""Hold-out errors of the step-time interpolation and the PS fit, from the shipped data.

Three hold-outs per Pollux application, each a relative error |predicted / measured - 1| of
step_time:

- `batch`: every interior local batch of every measured placement is left out and predicted from
  that placement's neighbouring batch sizes (log-space interpolation).
- `placement`: every measured multiset of replicas-per-node is left out entirely (its share of the
  (nodes, replicas) grid cell too) and predicted from the grid, at each measured batch.
- `nodes`: every scalability node count strictly inside the grid (6, 8, 12) is left out and its
  rows are predicted from the neighbouring node counts.

PS: the error figures stored by tools/derive_profiles.py (the raw DL2 figures are not shipped).
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import _App

from .interp import Curve, Grid


def _summary(errs: list[float]) -> dict[str, float]:
    if not errs:
        return {"n": 0, "median": math.nan, "mean": math.nan, "p90": math.nan}
    s = sorted(errs)
    return {"n": len(s), "median": statistics.median(s), "mean": sum(s) / len(s),
            "p90": s[min(len(s) - 1, int(0.9 * len(s)))]}


def batch_holdout(app: _App) -> list[float]:
    errs = []
    for bsz, step, sync in app.placement_data.values():
        for i in range(1, len(bsz) - 1):
            keep = [j for j in range(len(bsz)) if j != i]
            c = Curve([bsz[j] for j in keep], [step[j] for j in keep], [sync[j] for j in keep])
            a, _ = c.at(bsz[i], math.log(bsz[i]))
            errs.append(abs(math.exp(a) / step[i] - 1.0))
    return errs


def _mean_curve(curves: list[list[list[float]]]) -> list[list[float]] | None:
    common = set(curves[0][0])
    for c in curves[1:]:
        common &= set(c[0])
    if not common:
        return None
    bs = sorted(common)
    steps, syncs = [], []
    for b in bs:
        steps.append(sum(c[1][c[0].index(b)] for c in curves) / len(curves))
        syncs.append(sum(c[2][c[0].index(b)] for c in curves) / len(curves))
    return [bs, steps, syncs]


def placement_holdout(app: _App) -> list[float]:
    base = {k: Curve(*v) for k, v in app.grid_data.items()}
    errs = []
    for key, (bsz, step, _) in app.placement_data.items():
        cell = (len(key), sum(key))
        others = [v for k, v in app.placement_data.items()
                  if k != key and (len(k), sum(k)) == cell]
        cells = dict(base)
        mean = _mean_curve(others) if others else None
        if mean is None:
            del cells[cell]
        else:
            cells[cell] = Curve(*mean)
        grid = Grid(cells)
        for b, st in zip(bsz, step):
            errs.append(abs(grid.at(len(key), sum(key), b)[0] / st - 1.0))
    return errs


def nodes_holdout(app: _App) -> list[float]:
    base = {k: Curve(*v) for k, v in app.grid_data.items()}
    nodes = sorted({n for n, _ in app.grid_data})
    errs = []
    for n in nodes:
        if n < 6 or n == nodes[-1]:
            continue
        grid = Grid({k: v for k, v in base.items() if k[0] != n})
        for (nn, r), (bsz, step, _) in app.grid_data.items():
            if nn != n:
                continue
            for b, st in zip(bsz, step):
                errs.append(abs(grid.at(n, r, b)[0] / st - 1.0))
    return errs


def build_report(apps: dict[str, _App], ps_fits: dict[str, dict]) -> dict:
    allreduce = {}
    for name, app in apps.items():
        allreduce[name] = {
            "batch": _summary(batch_holdout(app)),
            "placement": _summary(placement_holdout(app)),
            "nodes": _summary(nodes_holdout(app)),
        }
    ps = {}
    for name, fit in ps_fits.items():
        ps[name] = {k: fit[k] for k in ("points", "dropped", "median_rel_err", "mean_rel_err",
                                        "p90_rel_err", "max_rel_err", "mean_rel_err_w_le_2",
                                        "mean_rel_err_w_gt_2")}
        ps[name]["theta"] = list(fit["theta"])
    return {"allreduce": allreduce, "ps": ps,
            "units": {"errors": "relative, |predicted/measured - 1|",
                      "step_time": "seconds", "ps_speed": "mini-batches/s summed over workers"}}
