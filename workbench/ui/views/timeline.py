"""The timeline: utilisation and GPU fragmentation, queue length, completions and deadline
hits over time, with a marker wherever the policy was switched. New samples are streamed,
never resent.

Every series is drawn as steps (a value holds until the next sample): samples come at
scheduling events, sparse in quiet hours, and a straight line between two of them would draw
a gradual change that never happened. Legends sit beside the plots, not over the data."""

from __future__ import annotations

import panel as pn
from bokeh.models import ColumnDataSource, DataRange1d, HoverTool
from bokeh.plotting import figure

from ..data import TIMELINE_COLUMNS
from ..state import WorkbenchState
from ._base import View
from ._charts import legend_outside
from ._panes import Markdown

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
        step = {"source": self.source, "mode": "after"}
        util.step("time_h", "gpu_util", color="#1f77b4", legend_label="GPU", line_width=2, **step)
        util.step("time_h", "cpu_util", color="#4c78a8", legend_label="CPU", line_dash="dotted",
                  **step)
        # Share of the free GPUs the workload's tasks cannot use (FGD's fragmentation rate).
        util.step("time_h", "gpu_frag", color="#ff7f0e", line_dash="dashed",
                  legend_label="free GPUs fragmented", name="gpu_frag_line", **step)
        # counts: the axis starts at 0 (with none yet, Bokeh's own range ran from -1 to 1)
        queue = figure(title="jobs", x_range=util.x_range,
                       y_range=DataRange1d(start=0, min_interval=1), **common)
        queue.step("time_h", "queued", color="#d62728", legend_label="queued", line_width=2,
                   **step)
        queue.step("time_h", "running", color="#2ca02c", legend_label="running", **step)
        done = figure(title="completions and deadlines", x_range=util.x_range,
                      y_range=DataRange1d(start=0, min_interval=1),
                      x_axis_label=state.time_label, **common)
        for counts in (queue, done):
            counts.yaxis.ticker.min_interval = 1  # whole jobs: no tick at 2.5
        done.step("time_h", "completed", color="#17becf", legend_label="completed",
                  line_width=2, **step)
        done.step("time_h", "deadline_hits", color="#2ca02c", legend_label="deadlines met",
                  **step)
        done.step("time_h", "deadline_misses", color="#d62728", legend_label="deadlines missed",
                  **step)
        for fig in (util, queue, done):
            marks = fig.vspan(x="time_h", source=self.switches, line_color=SWITCH_COLOUR,
                              line_width=2, line_dash="dashed")
            fig.add_tools(HoverTool(renderers=[marks], tooltips=[("switch", "@label")]))
            legend_outside(fig)
            fig.legend.label_text_font_size = "8pt"
            fig.legend.label_width = 110  # the same on every plot, so their x axes line up
            fig.title.text_font_size = "10pt"
        util.text(x="time_h", y="y", text="label", source=self.switches, text_font_size="8pt",
                  text_color=SWITCH_COLOUR, x_offset=3, text_baseline="top")
        self.figures = (util, queue, done)
        # before the first sample the charts were blank boxes with no word of why
        self.note = Markdown("", margin=(0, 10))
        self.panel = pn.Column(self.note,
                               *(pn.pane.Bokeh(f, sizing_mode="stretch_width") for f in self.figures),
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
        self.note.object = "" if self._sent else (
            "No data yet: the timeline starts at the run's first scheduling round (Step or Run).")
        sw = self.state.switches_frame()
        if len(sw) != len(self.switches.data["time_h"]):
            self.switches.data = {"time_h": sw["time_h"].to_numpy(),
                                  "label": [f"{a} → {b}" for a, b in zip(sw["from"], sw["to"])],
                                  "y": [1.06] * len(sw)}
