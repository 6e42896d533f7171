"""Forecasts: every active job's predicted finish with its band, against its deadline,
coloured by the risk of missing it. Jobs most at risk first."""

from __future__ import annotations

import math

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, HoverTool, Span
from bokeh.plotting import figure

from ..state import WorkbenchState
from ._base import View

RISK = (("safe (P ≥ 90%)", "#2ca02c"), ("at risk (50–90%)", "#ff7f0e"),
        ("likely late (< 50%)", "#d62728"), ("no deadline", "#8c8c8c"))
MAX_JOBS = 40


def risk_colour(p: float | None, finish: float, deadline: float) -> tuple[str, str]:
    if math.isnan(deadline):
        return RISK[3]
    if p is None or math.isnan(p):
        p = 1.0 if finish <= deadline else 0.0
    return RISK[0] if p >= 0.9 else RISK[1] if p >= 0.5 else RISK[2]


class ForecastView(View):
    def __init__(self, state: WorkbenchState, max_jobs: int = MAX_JOBS) -> None:
        super().__init__(state)
        self.max_jobs = max_jobs
        self.source = ColumnDataSource(self._data(), name="forecasts")
        fig = figure(height=520, sizing_mode="stretch_width", y_range=FactorRange(),
                     x_axis_label="simulated time (h)", tools="pan,xwheel_zoom,reset",
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
        self.now_line = Span(location=state.now / 3600, dimension="height", line_color="#555555",
                             line_dash="dashed", line_width=1)
        fig.add_layout(self.now_line)
        fig.add_tools(HoverTool(renderers=[bar], tooltips=[
            ("job", "@job (@state)"), ("finish", "@finish{0.00} h (@low{0.00}–@high{0.00})"),
            ("deadline", "@deadline{0.00} h"), ("P(meet)", "@p{0%}"), ("source", "@source")]))
        fig.legend.location = "bottom_right"
        fig.legend.label_text_font_size = "9pt"
        fig.ygrid.grid_line_color = None
        self.figure = fig
        self.note = pn.pane.Markdown("", margin=(0, 10))
        self.panel = pn.Column(self.note, pn.pane.Bokeh(fig, sizing_mode="stretch_width"),
                               sizing_mode="stretch_width", name="Forecasts")
        self.sync()

    def _data(self) -> dict:
        df = self.state.jobs
        df = df[~df["state"].isin(["completed", "rejected"]) & df["finish_h"].notna()]
        rows = []
        for r in df.itertuples(index=False):
            label, colour = risk_colour(r.p_meet, r.finish_h, r.deadline_h)
            rank = {RISK[2][0]: 0, RISK[1][0]: 1, RISK[0][0]: 2, RISK[3][0]: 3}[label]
            rows.append((rank, r.finish_h, r.job, r.state, r.finish_h,
                         r.finish_low_h if not math.isnan(r.finish_low_h) else r.finish_h,
                         r.finish_high_h if not math.isnan(r.finish_high_h) else r.finish_h,
                         r.deadline_h, r.p_meet, colour, label,
                         getattr(self.state.forecasts.get(r.job), "source", "")))
        rows.sort()
        self.total = len(rows)
        rows = rows[: self.max_jobs]
        cols = ["rank", "order", "job", "state", "finish", "low", "high", "deadline", "p", "colour",
                "risk", "source"]
        data = {c: [row[k] for row in rows] for k, c in enumerate(cols)}
        for c in ("finish", "low", "high", "deadline", "p"):
            data[c] = np.array(data[c], dtype=float)
        return data

    def update(self) -> None:
        data = self._data()
        # Most at risk at the top: a FactorRange lists bottom-up.
        self.figure.y_range.factors = list(reversed(data["job"]))
        self.source.data = data
        self.now_line.location = self.state.now / 3600
        first = data["job"][:1]
        self.now_source.data = {"x": [self.state.now / 3600] * len(first), "y": first}
        shown = f"the {self.max_jobs} most at risk of " if self.total > self.max_jobs else ""
        self.note.object = (f"Predicted finish (dot) with its band, deadline (black bar), now"
                            f" (dashed); {shown}{self.total} active jobs with a forecast.")
