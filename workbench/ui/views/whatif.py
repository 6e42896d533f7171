"""What-if: fork the current state, run every engine forward to the end, and show their
outcomes side by side (a table and the distribution of job completion times).

Each console shows its own what-ifs (and the store's, from code: `state.what_if()`): on a
shared console one session's result never replaces another's. A what-if costs seconds to
minutes of CPU, so a read-only session may not start one, and a store runs one at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import panel as pn
from bokeh.models import ColumnDataSource, HoverTool
from bokeh.plotting import figure
from panel.io.model import JSCode

from ...policies import available
from ...stop import StopRequest
from ...whatif import WhatIfResult, wall_time
from .. import export
from ..state import WorkbenchState
from ._base import button, widget_row
from ._charts import html_legend, jct_cdf, wrapping_row
from ._panes import HTML, Markdown
from ._tables import csv_download, table

MAX_HORIZON_H = 100_000  # hours a what-if may look ahead (11 years: the Philly trace spans 2,600 h)
LEGEND_WIDTH = 240  # px: "kube-default: 160/160 done, 12 rejected" on one line; longer wraps
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
                      f" of {r.jobs}{f' ({r.note})' if r.note else ''}"
                      for r in short.itertuples())
    return f"  \n⚠ {names}: their averages cover only the jobs they completed."


class _Running(NamedTuple):
    """A what-if this console runs now."""

    start: str  # when it forked, as the console says it
    names: list[str]  # its engines
    done: list[str]  # those ended so far: appended to from the worker thread
    stop: StopRequest
    so_far: list[WhatIfResult]  # the result of those, after each: appended to likewise
    began: float  # time.perf_counter() when it started
    budget_s: float  # the wall time each engine may run
    workers: int  # how many engines run side by side


def _progress(run: _Running) -> str:
    """The status line of a running what-if: its engines, how many have ended, how long it
    ran and may still run, and a stop."""
    ended = list(run.done)  # a copy: the worker thread appends meanwhile
    names = run.names
    which = ", ".join(names) if len(names) <= 4 else f"{len(names)} engines"
    line = f"running {which} from {run.start}… {len(ended)} of {len(names)} done"
    if ended:
        line += f" ({', '.join(ended)})"
    if run.stop.asked:
        return line + " · stopping: each engine running ends at its next slice of rounds"
    elapsed = time.perf_counter() - run.began
    # each engine stops at its budget: the last to start does so once the ones before it
    # have had theirs on the workers, so this bounds the wait (a Philly what-if takes minutes)
    remaining = len(names) - len(ended)
    left = run.budget_s * ((remaining - 1) / run.workers + 1) if remaining else 0.0
    return line + (f" · {_duration(elapsed)} so far, at most {_duration(left)} more (each"
                   f" engine stops after {_duration(run.budget_s)})")


def _duration(seconds: float) -> str:
    """A wall time as the status line says it, in whole seconds: '45 s', '3 min 20 s'."""
    return wall_time(round(seconds))


EMPTY_CDF = {"xs": [], "ys": [], "policy": [], "label": [], "colour": [], "dash": []}


# Red counts where an engine rejected or left jobs: its averages cover fewer jobs. Drawn by
# the cells' formatter: Panel's cell styles reached the browser after the rows they were for,
# and a new result's fewer rows were drawn with the old ones' styles (Tabulator warned "Find
# Error - No matching row found" for each styled row gone, at each what-if's first row).
SHORTFALL = JSCode("""(cell) => { const v = cell.getValue(), bad = v > 0;
  Object.assign(cell.getElement().style, {textAlign: "right", fontWeight: bad ? "600" : "",
    backgroundColor: bad ? "#fde0dc" : "", color: bad ? "#a50f15" : ""});
  return Number.isFinite(v) ? v.toLocaleString("en-US") : ""; }""")


class WhatIfView:
    """`may_run()`: this session may start what-ifs (it may change the cluster)."""

    def __init__(self, state: WorkbenchState, may_run: Callable[[], bool] = lambda: True) -> None:
        self.state = state
        self.may_run = may_run
        self.result: WhatIfResult | None = None  # this console's own last what-if
        self._result_of = state.controller  # the run it was computed on
        self.engines = pn.widgets.MultiChoice(label="engines", options=available(),
                                              value=available(), max_width=420,
                                              sizing_mode="stretch_width")
        # bounded: the browser clamps what is typed (1e20 raised inside Panel and left the
        # field showing a value the what-if did not use)
        self.horizon = pn.widgets.FloatInput(label="horizon (h, 0 = to the end)", value=0.0,
                                             start=0.0, end=MAX_HORIZON_H, step=1.0, width=180)
        self.run_button = button("Fork and run every engine", color="primary", width=240)
        self.run_button.on_click(self._run)
        self.stop_button = button("Stop", width=90, disabled=True)
        self.stop_button.on_click(self._stop)
        self._running: _Running | None = None
        self.status = Markdown("", margin=(0, 10))
        self.table = table(
            export.what_if(None), name="whatif-table", titles=RESULT_TITLES,
            counts=("jobs", "completed", "rejected", "unfinished", "restarts", "stalled"),
            hours=("avg_jct_h", "median_jct_h", "p95_jct_h", "makespan_h", "avg_queue_h",
                   "ran_to_h", "wall_s"), shares=("deadline_hit_rate", "gpu_alloc_util"),
            wrap=("note",), formatters={"rejected": SHORTFALL, "unfinished": SHORTFALL},
            # on a laptop's screen these give way first, so the notes stay in sight (the CSV
            # has every column; the line above the table names unfinished jobs)
            hide_first=("wall_s", "stalled", "ran_to_h", "restarts", "avg_queue_h",
                        "median_jct_h", "p95_jct_h", "jobs", "unfinished", "makespan_h"),
            frozen=("policy",))  # in view when it scrolls sideways
        self.download = csv_download("Download results (CSV)", "workbench-what-if.csv",
                                     lambda: export.what_if(self.current))
        self.source = ColumnDataSource(dict(EMPTY_CDF), name="whatif_cdf")
        fig = figure(height=360, sizing_mode="stretch_width", x_axis_type="log",
                     name="whatif_cdf_figure",
                     x_axis_label="job completion time (h, log scale)",
                     y_axis_label="share of all jobs completed",
                     # two lines: Bokeh does not wrap a title, and a long one ran past the
                     # page's edge in a narrow window (a notebook cell), hidden tab or not
                     title="JCT distribution (CDF of all jobs):\na curve ending below 1 left"
                           " jobs rejected or unfinished",
                     tools="pan,wheel_zoom,reset", toolbar_location="above")
        lines = fig.multi_line("xs", "ys", source=self.source, line_color="colour", line_width=2,
                               line_dash="dash")
        fig.add_tools(HoverTool(renderers=[lines], tooltips=[("engine", "@label")]))
        self.figure = fig
        # the legend beside the chart where the tab is wide, below it where not (a Row whose
        # CSS wraps); shown with the first result: before it, a blank box a third of the tab
        self.legend = HTML("", css_classes=["whatif-legend"], width=LEGEND_WIDTH,
                           margin=(40, 10, 10, 10))
        self.chart = wrapping_row((pn.pane.Bokeh(fig, sizing_mode="stretch_width"), "1 1 360px"),
                                  (self.legend, "0 0 auto"))
        self.chart.visible = False
        self.panel = pn.Column(
            Markdown("Fork the simulated cluster as it is now and run each engine from"
                             " here, on identical copies.", margin=(0, 10)),
            widget_row(self.engines, self.horizon, self.run_button, self.stop_button),
            self.status,
            widget_row(Markdown("Averages are over each engine's completed jobs: read"
                                        " them with its completed and rejected counts.",
                                        margin=(0, 10), align="center"), self.download),
            self.table, self.chart, sizing_mode="stretch_width",
            name="What-if")
        self._shown = None
        self._drawn_jct: list[tuple[str, Any]] = []  # the JCT arrays the chart draws
        self._kind = None
        self._follow_backend()

    def _follow_backend(self) -> None:
        """The button is on where the store can look ahead (the simulator forks, a live
        cluster is snapshotted) and off for a read-only session."""
        if self._kind == (self.state.kind, self.may_run()):
            return
        self._kind = (self.state.kind, self.may_run())
        self.run_button.disabled = not (self.state.can_look_ahead and self.may_run())
        self.status.object = (
            "What-if needs a backend that can fork or take a snapshot."
            if not self.state.can_look_ahead else "" if self.may_run() else
            "This session is read-only: running a what-if needs the access token (each costs"
            " seconds of CPU on the shared server).")

    @property
    def current(self) -> WhatIfResult | None:
        """The result this console shows: its own last what-if on the current run, else the
        store's (a what-if run from code)."""
        if self._result_of is not self.state.controller:  # another run was loaded since
            self.result, self._result_of = None, self.state.controller
        return self.result if self.result is not None else self.state.what_if_result

    def sync(self) -> None:
        """Show this console's result once it is there (never another session's), and while
        its what-if runs, how far it got."""
        self._follow_backend()
        running = self._running
        if running is not None:  # the rows of the engines ended so far, as they come
            latest = running.so_far[-1] if running.so_far else None
            if latest is not None and latest is not self._shown:
                self._shown = latest
                self.show(latest)
            self.status.object = _progress(running)
            return
        if self.current is not self._shown:
            self._shown = self.current
            self.show(self._shown)

    async def _run(self, _event) -> None:
        import asyncio

        if not (self.may_run() and self.state.can_look_ahead):  # browsers send anything
            self.status.object = ("**Not done:** a read-only session cannot run a what-if"
                                  " (that needs the access token).")
            return
        names, hours = list(self.engines.value), self.horizon.value
        if not names:  # (it ran all 13, unasked)
            self.status.object = "**Not done:** choose at least one engine to run."
            return
        if hours is None or not 0 <= hours <= MAX_HORIZON_H:  # empty, NaN, negative, inf
            self.status.object = (f"**Not done:** horizon: hours ahead, 0 to {MAX_HORIZON_H:,}"
                                  " (0 runs to the end).")
            return
        until = self.state.now + hours * 3600 if hours else None
        self.run_button.disabled = True
        self.stop_button.disabled = False
        run = self._running = _Running(f"{self.state.hours(self.state.now):.2f} h", names, [],
                                       StopRequest(), [], time.perf_counter(),
                                       self.state.what_if_budget_s, self.state.fork_workers())
        self.status.object = _progress(run)
        try:
            # Forks are taken now, on the app's thread; the runs proceed in a worker thread so
            # the console keeps updating meanwhile.
            job = self.state.prepare_what_if(names, until, stop=run.stop, done=run.done.append,
                                             so_far=run.so_far.append)
            what = f"a what-if of {len(names)} engine{'s' * (len(names) > 1)}"
            result = await asyncio.to_thread(self.state.heavy.guard(what, job))
            self.result, self._result_of = result, self.state.controller  # this console's only
        except Exception as e:  # noqa: BLE001 - shown to the user, the app carries on
            self.status.object = f"what-if not run: {e}"
        finally:
            self._running = None
            run.stop.close()
            self.run_button.disabled = False
            self.stop_button.disabled = True

    def _stop(self, _event) -> None:
        """Ask the running what-if to stop: the engines running end at their next slice of
        rounds and show how far they got; those not started are left out."""
        if self._running is not None:
            self._running.stop.ask()
            self.status.object = _progress(self._running)

    def show(self, result: WhatIfResult | None) -> None:
        frame = export.what_if(result)
        # the final result repeats the rows the last engine's end showed: sent again, the table
        # and chart redrew as the user took over the page
        same = frame.equals(self.table.value) and result is not None and \
            len(self._drawn_jct) == len(result.jct_h) and all(
                k == name and v is jct for (k, v), (name, jct) in
                zip(self._drawn_jct, result.jct_h.items()))
        if not same:
            self.table.value = frame
        self.chart.visible = result is not None
        if result is None:
            self.source.data = dict(EMPTY_CDF)
            self._drawn_jct = []
            return
        if not same:
            self.source.data = cdf = jct_cdf(result)
            self.legend.object = html_legend(cdf)
            self._drawn_jct = list(result.jct_h.items())
        until = "the end" if result.until is None else f"{self.state.hours(result.until):.2f} h"
        ran = (f"stopped on request after {wall_time(result.seconds)}"
               f"{': ' + ', '.join(result.left_out) + ' not run' if result.left_out else ''}"
               if result.stopped else f"ran to {until} in {wall_time(result.seconds)}")
        self.status.object = (f"Forked at {self.state.hours(result.start):.2f} h, {ran}."
                              f"{_shortfalls(result)}")
