"""The timeline: utilisation and GPU fragmentation, queue length, completions and deadline
hits over time, with a marker wherever the policy was switched. New samples are streamed,
never resent."""

from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from ..data import TIMELINE_COLUMNS
from ..state import WorkbenchState
from ._base import View

SWITCH_COLOUR = "#9467bd"


class TimelineView(View):
    def __init__(self, state: WorkbenchState, height: int = 200) -> None:
        super().__init__(state)
        self.source = ColumnDataSource({c: [] for c in TIMELINE_COLUMNS}, name="timeline")
        self.switches = ColumnDataSource({"time_h": [], "label": [], "y": []}, name="switches")
        self._sent = 0
        self._run_id = id(state.controller)
        common = {"height": height, "sizing_mode": "stretch_width",
                  "tools": "xpan,xwheel_zoom,reset", "toolbar_location": "above"}
        util = figure(title="utilisation and fragmentation", y_range=(0, 1.08), **common)
        util.line("time_h", "gpu_util", source=self.source, color="#1f77b4", legend_label="GPU",
                  line_width=2)
        util.line("time_h", "cpu_util", source=self.source, color="#4c78a8", legend_label="CPU",
                  line_dash="dotted")
        # Share of the free GPUs the workload's tasks cannot use (FGD's fragmentation rate).
        util.line("time_h", "gpu_frag", source=self.source, color="#ff7f0e", line_dash="dashed",
                  legend_label="free GPUs fragmented", name="gpu_frag_line")
        queue = figure(title="jobs", x_range=util.x_range, **common)
        queue.step("time_h", "queued", source=self.source, color="#d62728", legend_label="queued",
                   mode="after", line_width=2)
        queue.step("time_h", "running", source=self.source, color="#2ca02c",
                   legend_label="running", mode="after")
        done = figure(title="completions and deadlines", x_range=util.x_range,
                      x_axis_label=state.time_label, **common)
        done.line("time_h", "completed", source=self.source, color="#17becf",
                  legend_label="completed", line_width=2)
        done.line("time_h", "deadline_hits", source=self.source, color="#2ca02c",
                  legend_label="deadlines met")
        done.line("time_h", "deadline_misses", source=self.source, color="#d62728",
                  legend_label="deadlines missed")
        for fig in (util, queue, done):
            marks = fig.vspan(x="time_h", source=self.switches, line_color=SWITCH_COLOUR,
                              line_width=2, line_dash="dashed")
            fig.add_tools(HoverTool(renderers=[marks], tooltips=[("switch", "@label")]))
            fig.legend.location = "top_left"
            fig.legend.label_text_font_size = "8pt"
            fig.legend.background_fill_alpha = 0.6
            fig.title.text_font_size = "10pt"
        util.text(x="time_h", y="y", text="label", source=self.switches, text_font_size="8pt",
                  text_color=SWITCH_COLOUR, x_offset=3, text_baseline="top")
        self.figures = (util, queue, done)
        self.panel = pn.Column(*(pn.pane.Bokeh(f, sizing_mode="stretch_width") for f in self.figures),
                               sizing_mode="stretch_width", name="Timeline")
        self.sync()

    def update(self) -> None:
        if id(self.state.controller) != self._run_id:  # a new run was loaded: start over
            self._run_id = id(self.state.controller)
            self._sent = 0
            self.source.data = {c: [] for c in TIMELINE_COLUMNS}
            self.figures[-1].xaxis[0].axis_label = self.state.time_label  # another backend?
        new = self.state.timeline_frame(self._sent)
        if len(new):
            self.source.stream({c: new[c].to_numpy() for c in TIMELINE_COLUMNS})
            self._sent += len(new)
        sw = self.state.switches_frame()
        if len(sw) != len(self.switches.data["time_h"]):
            self.switches.data = {"time_h": sw["time_h"].to_numpy(),
                                  "label": [f"{a} → {b}" for a, b in zip(sw["from"], sw["to"])],
                                  "y": [1.06] * len(sw)}
