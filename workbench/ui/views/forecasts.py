"""Forecasts: every active job's predicted finish with its band, against its deadline,
coloured by the risk of missing it (or by its deadline having passed). Jobs most at risk
first; within a risk class in the order of their deadlines, then arrivals, so rows stay put
while forecasts move."""

from __future__ import annotations

import math

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Span
from bokeh.plotting import figure

from ..state import WorkbenchState
from ._base import View
from ._charts import legend_outside
from ._panes import Markdown

RISK = (("safe (P ≥ 90%)", "#2ca02c"), ("at risk (50–90%)", "#ff7f0e"),
        ("likely late (< 50%)", "#d62728"), ("deadline passed", "#6b1a1a"),
        ("no deadline", "#8c8c8c"))
MAX_JOBS = 40


class ForecastView(View):
    def __init__(self, state: WorkbenchState, max_jobs: int = MAX_JOBS) -> None:
        super().__init__(state)
        self.max_jobs = max_jobs
        self.source = ColumnDataSource(self._data(), name="forecasts")
        fig = figure(height=520, sizing_mode="stretch_width", y_range=FactorRange(),
                     x_axis_label=state.time_label, tools="pan,xwheel_zoom,reset",
                     toolbar_location="above")
        bar = fig.hbar(y="job", left="low", right="high", height=0.55, source=self.source,
                       fill_color="colour", fill_alpha=0.35, line_color="colour",
                       legend_field="risk")
        fig.scatter(x="finish", y="job", source=self.source, size=8, color="colour")
        fig.scatter(x="deadline", y="job", source=self.source, size=11, marker="dash",
                    line_width=3, color="#222222", angle=math.pi / 2)
        # An invisible point at "now" keeps the present in the auto-ranged view.
        self.now_source = ColumnDataSource({"x": [], "y": []})
        self.now_dot = fig.scatter(x="x", y="y", source=self.now_source, alpha=0)
        self.now_line = Span(location=state.hours(state.now), dimension="height",
                             line_color="#555555",
                             line_dash="dashed", line_width=1)
        fig.add_layout(self.now_line)
        fig.add_tools(HoverTool(renderers=[bar], tooltips=[
            ("job", "@job (@state)"), ("finish", "@finish{0.00} h (@low{0.00}–@high{0.00})"),
            ("deadline", "@deadline{0.00} h"), ("P(meet)", "@p{0%}"), ("source", "@source")]))
        legend_outside(fig)
        fig.ygrid.grid_line_color = None
        self.figure = fig
        self.note = Markdown("", margin=(0, 10))
        self.panel = pn.Column(self.note, pn.pane.Bokeh(fig, sizing_mode="stretch_width"),
                               sizing_mode="stretch_width", name="Forecasts")
        self.sync()

    def _data(self) -> dict:
        df = self.state.jobs
        df = df[~df["state"].isin(["completed", "rejected"]).to_numpy() & df["finish_h"].notna()]
        finish = df["finish_h"].to_numpy(dtype=float)
        deadline = df["deadline_h"].to_numpy(dtype=float)
        p = df["p_meet"].to_numpy(dtype=float).copy()
        no_p = np.isnan(p)
        p[no_p] = np.where(finish[no_p] <= deadline[no_p], 1.0, 0.0)
        # rank 0 likely late, 1 at risk, 2 safe, 3 deadline passed (late whatever is done
        # now), 4 no deadline: most at risk first; within a rank by deadline, then arrival
        # (both fixed): a row moves only when its risk does, not whenever two predicted
        # finishes cross.
        rank = np.where(np.isnan(deadline), 4, np.where(
            deadline < self.state.hours(self.state.now), 3,
            np.where(p >= 0.9, 2, np.where(p >= 0.5, 1, 0))))
        arrival = df["arrival_h"].to_numpy(dtype=float)
        order = np.lexsort((df["job"].to_numpy(), arrival, np.nan_to_num(deadline, nan=np.inf),
                            rank))
        self.total = len(order)
        take = order[: self.max_jobs]
        self.any_deadline = bool((rank[take] != 4).any())
        labels = [RISK[k][0] for k in (2, 1, 0, 3, 4)]
        colours = [RISK[k][1] for k in (2, 1, 0, 3, 4)]
        low = df["finish_low_h"].to_numpy(dtype=float)[take]
        high = df["finish_high_h"].to_numpy(dtype=float)[take]
        jobs = df["job"].to_numpy()[take].tolist()
        return {
            "job": jobs, "state": df["state"].to_numpy()[take].tolist(),
            "finish": finish[take], "low": np.where(np.isnan(low), finish[take], low),
            "high": np.where(np.isnan(high), finish[take], high), "deadline": deadline[take],
            "p": df["p_meet"].to_numpy(dtype=float)[take],
            "colour": [colours[r] for r in rank[take]], "risk": [labels[r] for r in rank[take]],
            "source": [getattr(self.state.forecasts.get(j), "source", "") for j in jobs],
        }

    def update(self) -> None:
        data = self._data()
        # Most at risk at the top: a FactorRange lists bottom-up.
        self.figure.y_range.factors = list(reversed(data["job"]))
        height = int(np.clip(90 + 26 * len(data["job"]), 240, 1100))  # rows stay ~26 px tall
        if self.figure.height != height:
            self.figure.height = height
        self.source.data = data
        now_h = self.state.hours(self.state.now)
        self.now_line.location = now_h
        first = data["job"][:1]
        self.now_source.data = {"x": [now_h] * len(first), "y": first}
        if self.figure.xaxis[0].axis_label != self.state.time_label:  # another backend now
            self.figure.xaxis[0].axis_label = self.state.time_label
        # with no deadline among them (the Philly trace) the rows are the earliest arrivals
        which = "most at risk" if self.any_deadline else "earliest arrivals"
        shown = f"the {self.max_jobs} {which} of " if self.total > self.max_jobs else ""
        age_h = now_h - self.state.hours(self.state.forecast_time)
        ago = f"{age_h:.1f} h" if age_h >= 1 else f"{age_h * 60:.0f} min"
        lag = "" if not age_h > 0 else (
            f" Forecast {ago} ago: each takes {self.state.forecast_seconds:.2f} s, so not every"
            " update makes one.")
        if self.total:
            self.note.object = (f"Predicted finish (dot) with its band, deadline (black bar), now"
                                f" (dashed); {shown}{self.total} active jobs with a forecast.{lag}")
        else:  # (the chart is a blank box)
            self.note.object = f"No data yet: no queued or running job has a forecast now.{lag}"
