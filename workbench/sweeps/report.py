"""A sweep's plots in one HTML file (Bokeh, self-contained): per workload, the JCT CDF of
each engine (its runs' JCT percentiles averaged over seeds and loads), and each metric against
load with its 95 % band when the grid has more than one load."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..output import atomic_open
from .summary import summarize

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939")


def colours(engines: Sequence[str]) -> dict[str, str]:
    return {e: PALETTE[i % len(PALETTE)] for i, e in enumerate(sorted(set(engines)))}


def jct_cdf(table: pd.DataFrame, title: str, colour: dict[str, str]):
    from bokeh.plotting import figure

    fig = figure(title=f"JCT CDF: {title}", x_axis_label="JCT (hours)",
                 y_axis_label="share of completed jobs", width=720, height=360)
    for engine, group in table.groupby("engine", sort=True):
        curves = [c for c in group["jct_pct_h"] if c is not None and len(c)]
        if curves:
            mean = np.mean(np.vstack(curves), axis=0)  # quantiles averaged over runs
            fig.line(mean, np.linspace(0, 1, len(mean)), legend_label=engine,
                     color=colour[engine], line_width=2)
    if fig.legend:
        fig.add_layout(fig.legend[0], "right")
    return fig


def metric_vs_load(table: pd.DataFrame, metric: str, title: str, colour: dict[str, str]):
    from bokeh.plotting import figure

    fig = figure(title=f"{metric} vs load: {title}", x_axis_label="offered load",
                 y_axis_label=metric, width=720, height=360)
    summary = summarize(table.drop(columns=["workload", "cluster"]), [metric])
    for engine, group in summary.groupby("engine", sort=True):
        group = group.sort_values("load")
        x, y = group["load"].to_numpy(float), group[metric].to_numpy(float)
        ci = np.nan_to_num(group[f"{metric}_ci95"].to_numpy(float))
        fig.varea(x, y - ci, y + ci, color=colour[engine], alpha=0.2)
        fig.line(x, y, color=colour[engine], line_width=2, legend_label=engine)
        fig.scatter(x, y, color=colour[engine], size=6)
    if fig.legend:
        fig.add_layout(fig.legend[0], "right")
    return fig


def write_report(path: str, table: pd.DataFrame, metrics: Sequence[str], title: str) -> None:
    """Write the plots of `table` (a sweep's rows) to `path`, atomically."""
    from bokeh.embed import file_html
    from bokeh.layouts import column
    from bokeh.models import Div
    from bokeh.resources import INLINE

    colour = colours(table["engine"])
    figures: list = [Div(text=f"<h2>{title}</h2>")]
    for (workload, cluster), part in table.groupby(["workload", "cluster"], sort=False):
        name = f"{workload} on {cluster}"
        figures.append(jct_cdf(part, name, colour))
        if part["load"].nunique() > 1:
            figures += [metric_vs_load(part, m, name, colour) for m in metrics if m in part]
    with atomic_open(path, "--report") as f:
        f.write(file_html(column(*figures), INLINE, title))
