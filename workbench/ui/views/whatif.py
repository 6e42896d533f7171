"""What-if: fork the current state, run every engine forward to the end, and show their
outcomes side by side (a table and the distribution of job completion times)."""

from __future__ import annotations

import pandas as pd
import panel as pn
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure

from ...policies import available
from ...whatif import WhatIfResult
from .. import export
from ..state import WorkbenchState
from ._charts import jct_cdf, legend_outside
from ._tables import csv_download, table

RESULT_TITLES = {"jobs": "jobs", "avg_jct_h": "avg JCT (h)", "median_jct_h": "median JCT (h)",
                 "p95_jct_h": "p95 JCT (h)", "makespan_h": "makespan (h)",
                 "avg_queue_h": "avg queue (h)", "deadline_hit_rate": "deadlines met",
                 "gpu_alloc_util": "GPU use", "ran_to_h": "ran to (h)", "wall_s": "wall (s)"}


def _shortfalls(result: WhatIfResult) -> str:
    """A warning naming the engines whose averages rest on only part of the jobs."""
    t = export.what_if(result)
    short = t[(t["rejected"] > 0) | (t["unfinished"] > 0)]
    if short.empty:
        return ""
    names = "; ".join(f"**{r.policy}** rejected {r.rejected} and left {r.unfinished} unfinished"
                      f" of {r.jobs}" for r in short.itertuples())
    return f"  \n⚠ {names}: their averages cover only the jobs they completed."


EMPTY_CDF = {"xs": [], "ys": [], "policy": [], "label": [], "colour": [], "dash": []}


def _flag_shortfall(row: pd.Series) -> list[str]:
    """Red counts where an engine rejected or left jobs: its averages cover fewer jobs."""
    bad = "background-color: #fde0dc; color: #a50f15; font-weight: 600"
    return [bad if c in ("rejected", "unfinished") and row[c] > 0 else "" for c in row.index]


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
        self.table = table(
            export.what_if(None), name="whatif-table", titles=RESULT_TITLES,
            counts=("jobs", "completed", "rejected", "unfinished", "restarts", "stalled"),
            hours=("avg_jct_h", "median_jct_h", "p95_jct_h", "makespan_h", "avg_queue_h",
                   "ran_to_h", "wall_s"), shares=("deadline_hit_rate", "gpu_alloc_util"),
            wrap=("note",))
        self.table.style.apply(_flag_shortfall, axis=1)
        self.download = csv_download("Download results (CSV)", "workbench-what-if.csv",
                                     lambda: export.what_if(self.state.what_if_result))
        self.source = ColumnDataSource(dict(EMPTY_CDF), name="whatif_cdf")
        fig = figure(height=360, sizing_mode="stretch_width", x_axis_type="log",
                     name="whatif_cdf_figure",
                     x_axis_label="job completion time (h, log scale)",
                     y_axis_label="share of all jobs completed",
                     title="JCT distribution (CDF of all jobs: a curve ending below 1 left"
                           " jobs rejected or unfinished)",
                     tools="pan,wheel_zoom,reset", toolbar_location="above")
        lines = fig.multi_line("xs", "ys", source=self.source, line_color="colour", line_width=2,
                               line_dash="dash", legend_field="label")
        fig.add_tools(HoverTool(renderers=[lines], tooltips=[("engine", "@label")]))
        legend_outside(fig)
        self.figure = fig
        self.panel = pn.Column(
            pn.pane.Markdown("Fork the simulated cluster as it is now and run each engine from"
                             " here, on identical copies.", margin=(0, 10)),
            pn.Row(self.engines, self.horizon, self.run_button), self.status,
            pn.Row(pn.pane.Markdown("Averages are over each engine's completed jobs: read"
                                    " them with its completed and rejected counts.",
                                    margin=(0, 10), align="center"), self.download),
            self.table,
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
        self.table.value = export.what_if(result)
        if result is None:
            self.source.data = dict(EMPTY_CDF)
            return
        self.source.data = jct_cdf(result)
        until = "the end" if result.until is None else f"{self.state.hours(result.until):.2f} h"
        self.status.object = (f"Forked at {self.state.hours(result.start):.2f} h, ran to {until} in"
                              f" {result.seconds:.1f} s.{_shortfalls(result)}")
