"""A sweep's summary: per engine and per point of the other axes that vary, each metric's
mean over the seeds with a 95 % confidence interval (Student's t, half-width), as a table."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

METRICS = ("avg_jct_h", "p95_jct_h", "makespan_h", "avg_queue_h", "deadline_hit_rate",
           "gpu_alloc_util")
GROUP_AXES = ("workload", "cluster", "load")


def check_metrics(names: Sequence[str], flag: str = "--metrics") -> list[str]:
    """`names` if each is a metric a sweep's row holds, else a `ConfigError` naming the first
    that is not (a misspelt one left the summary without it, and without a word)."""
    from ..errors import ConfigError

    known = metric_names()
    for name in names:
        if name not in known:
            raise ConfigError(f"{flag}: unknown metric {name!r}; expected some of"
                              f" {', '.join(known)}")
    return list(names)


def metric_names() -> list[str]:
    """Every metric of a run's row: those `metrics.run_metrics` gives (read off a run of no
    jobs, so the list cannot drift from it) and the controller's `stalled`."""
    from ..clusters import parse_cluster
    from ..metrics import run_metrics
    from ..sim import SimBackend

    return [*run_metrics(SimBackend(parse_cluster("small"), []), []), "stalled"]


def group_columns(table: pd.DataFrame) -> list[str]:
    """`engine` and each axis other than the seed that takes more than one value."""
    return ["engine"] + [c for c in GROUP_AXES if c in table and table[c].nunique(dropna=False) > 1]


def ci95(values: np.ndarray) -> float:
    """Half-width of the 95 % confidence interval of the mean of `values` (NaN ignored; NaN
    for fewer than two)."""
    from scipy.special import stdtrit  # Student's t quantile (scipy.stats is slow to import)

    values = values[~np.isnan(values)]
    if len(values) < 2:
        return float("nan")
    spread = values.std(ddof=1)
    if spread <= 1e-12 * max(abs(values.mean()), 1.0):  # equal runs, up to rounding
        return 0.0
    return float(stdtrit(len(values) - 1, 0.975) * spread / np.sqrt(len(values)))


def summarize(table: pd.DataFrame, metrics: Sequence[str] = METRICS) -> pd.DataFrame:
    """One row per group (`group_columns`): `runs`, and for each metric `M` its mean `M` and
    `M_ci95`, over the group's seeds."""
    metrics = [m for m in metrics if m in table]
    by = group_columns(table)
    rows = []
    for point, group in table.groupby(by, dropna=False, sort=False):
        row = dict(zip(by, point if isinstance(point, tuple) else (point,)))
        row["runs"] = len(group)
        for m in metrics:
            values = group[m].to_numpy(dtype=float)
            row[m] = float(np.nanmean(values)) if (~np.isnan(values)).any() else float("nan")
            row[f"{m}_ci95"] = ci95(values)
        rows.append(row)
    return pd.DataFrame(rows)


def text_rows(summary: pd.DataFrame, metrics: Sequence[str] = METRICS) -> list[dict]:
    """The summary for a text table: each metric as `mean ± ci`."""
    out = []
    for record in summary.to_dict("records"):
        row = {k: v for k, v in record.items() if k not in metrics and not k.endswith("_ci95")}
        for m in metrics:
            if m in record:
                mean, ci = record[m], record[f"{m}_ci95"]
                row[m] = ("-" if np.isnan(mean) else f"{mean:.3g}"
                          + ("" if np.isnan(ci) else f" ± {ci:.2g}"))
        out.append(row)
    return out


def rejection_notes(table: pd.DataFrame, most: int = 10) -> list[str]:
    """One line per engine and workload whose runs rejected jobs: the summary's means are over
    the jobs that ran, and an engine that refuses a workload's jobs (dl2 takes
    parameter-server jobs only) otherwise shows a hit rate of 0 and no JCT without a why."""
    if "rejected" not in table or not len(table):
        return []
    sums = table.groupby(["engine", "workload"], sort=False)[["rejected", "jobs"]].sum()
    lines = [f"{engine} on {workload}: {int(r.rejected):,} of {int(r.jobs):,} jobs rejected"
             " over its runs (the decisions say why: workbench simulate --decisions)"
             for (engine, workload), r in sums.iterrows() if r.rejected > 0]
    return lines[:most] + ([f"... and {len(lines) - most} more"] if len(lines) > most else [])
