"""What-if: fork the current state, run every engine forward to the end, and show their
outcomes side by side (a table and the distribution of job completion times)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import panel as pn
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.models.widgets.tables import NumberFormatter
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from ...policies import available
from ...whatif import WhatIfResult
from ..state import WorkbenchState


class WhatIfView:
    def __init__(self, state: WorkbenchState) -> None:
        self.state = state
        self.engines = pn.widgets.MultiChoice(label="engines", options=available(),
                                              value=available(), width=420)
        self.horizon = pn.widgets.FloatInput(label="horizon (h, 0 = to the end)", value=0.0,
                                             start=0.0, step=1.0, width=180)
        self.run_button = pn.widgets.Button(label="Fork and run every engine", color="primary",
                                            width=240)
        self.run_button.on_click(self._run)
        self.status = pn.pane.Markdown("", margin=(0, 10))
        fmt = NumberFormatter(format="0.00")
        self.table = pn.widgets.Tabulator(
            pd.DataFrame(), show_index=False, disabled=True, sizing_mode="stretch_width",
            layout="fit_data_stretch",
            formatters={c: fmt for c in ("avg_jct_h", "median_jct_h", "p95_jct_h", "makespan_h",
                                         "avg_queue_h")} | {
                "deadline_hit_rate": NumberFormatter(format="0%"),
                "gpu_alloc_util": NumberFormatter(format="0%")})
        self.source = ColumnDataSource({"xs": [], "ys": [], "policy": [], "colour": []})
        fig = figure(height=320, sizing_mode="stretch_width", x_axis_type="log",
                     x_axis_label="job completion time (h, log scale)",
                     y_axis_label="share of completed jobs", title="JCT distribution (CDF)",
                     tools="pan,wheel_zoom,reset", toolbar_location="above")
        lines = fig.multi_line("xs", "ys", source=self.source, line_color="colour", line_width=2,
                               legend_field="policy")
        fig.add_tools(HoverTool(renderers=[lines], tooltips=[("engine", "@policy")]))
        fig.legend.location = "bottom_right"
        self.figure = fig
        self.panel = pn.Column(
            pn.pane.Markdown("Fork the simulated cluster as it is now and run each engine from"
                             " here, on identical copies.", margin=(0, 10)),
            pn.Row(self.engines, self.horizon, self.run_button), self.status, self.table,
            pn.pane.Bokeh(fig, sizing_mode="stretch_width"), sizing_mode="stretch_width",
            name="What-if")
        self._shown = None
        self._kind = None
        self._follow_backend()

    def _follow_backend(self) -> None:
        """Only the simulator can be forked: on a real cluster the button is off."""
        if self._kind == self.state.kind:
            return
        self._kind = self.state.kind
        self.run_button.disabled = not self.state.simulated
        self.status.object = "" if self.state.simulated else \
            "What-if needs the simulator (it forks the cluster's state)."

    def sync(self) -> None:
        """Show a result once it is there (this session's or, on a shared store, another's)."""
        self._follow_backend()
        if self.state.what_if_result is not self._shown:
            self._shown = self.state.what_if_result
            self.show(self._shown)

    async def _run(self, _event) -> None:
        import asyncio

        names = list(self.engines.value) or available()
        until = self.state.now + self.horizon.value * 3600 if self.horizon.value else None
        self.run_button.disabled = True
        self.status.object = (f"running {', '.join(names)} from"
                              f" {self.state.hours(self.state.now):.2f} h…")
        try:
            # Forks are taken now, on the app's thread; the runs proceed in a worker thread so
            # the console keeps updating meanwhile.
            job = self.state.prepare_what_if(names, until)
            result = await asyncio.to_thread(job)
            self.state.what_if_result = result
        except Exception as e:  # noqa: BLE001 - shown to the user, the app carries on
            self.status.object = f"what-if failed: {e}"
        finally:
            self.run_button.disabled = False

    def show(self, result: WhatIfResult | None) -> None:
        if result is None:
            self.table.value = pd.DataFrame()
            self.source.data = {"xs": [], "ys": [], "policy": [], "colour": []}
            return
        self.table.value = result.table
        xs, ys, names, colours = [], [], [], []
        for k, (name, jct) in enumerate(result.jct_h.items()):
            jct = np.sort(jct[jct > 0])
            if not len(jct):
                continue
            xs.append(jct)
            ys.append(np.arange(1, len(jct) + 1) / len(jct))
            names.append(name)
            colours.append(Category10_10[k % 10])
        self.source.data = {"xs": xs, "ys": ys, "policy": names, "colour": colours}
        until = "the end" if result.until is None else f"{self.state.hours(result.until):.2f} h"
        self.status.object = (f"Forked at {self.state.hours(result.start):.2f} h, ran to {until} in"
                              f" {result.seconds:.1f} s.")
