"""The app shell: composes the views around one `WorkbenchState` and keeps it ticking.

In a notebook cell:

    from workbench.ui import Workbench
    wb = Workbench(trace="default", cluster="default", policy="tiresias")
    wb            # renders inline and keeps updating (JS bundled: works offline)
    wb.play()     # or use the Run button
    wb.ipywidget()   # for front-ends that speak only ipywidgets (VS Code, Voila)

Served (`workbench serve`, or `panel serve` of a script that calls `.servable()`), each
browser session gets its own Workbench unless one is shared explicitly.
"""

from __future__ import annotations

import html
import math
import time
from typing import Any

import pandas as pd
import panel as pn
from bokeh.document.events import ModelChangedEvent
from panel.config import _cleanup_panel

from . import cells, export
from .link import ViewLink
from .output_gone import OutputGone
from .state import WorkbenchState
from .views import (
    ClusterView,
    ControlsView,
    DecisionsView,
    EngineView,
    ForecastView,
    JobsView,
    TimelineView,
    WhatIfView,
)
from .views._charts import SHRINKS, wrapping_row
from .views._panes import HTML

TITLE = "Scheduling Workbench"
STATUS_RESEND_S = 3.0  # a notebook console re-sends its status lines this often (see Console)
CONTROLS_WIDTH = 380
# the least width of the tabs beside the controls: below it they go under them (at 1,024 px they
# stay beside, at 800 px they go under)
TABS_MIN_WIDTH = 600
TAB_TITLES = ("Cluster", "Jobs", "Forecasts", "Timeline", "Decisions", "What-if", "Engine")
_extension_loaded = False


def load_extension(inline: bool | None = None) -> None:
    """Load Panel's JS: once in a served app; in a notebook with each call (each console made),
    as a first cell's `pn.extension()` is run again: a page reloaded while its kernel ran has
    lost the JS an earlier cell sent, and a console shown without it stays blank. In a
    notebook, `inline` bundles every JS/CSS resource into the output so the app renders with
    no internet; it defaults to on there."""
    global _extension_loaded
    if _extension_loaded and not _in_notebook():
        return
    if inline is None:
        inline = _in_notebook()
    # A served page shows a spinner until the app has rendered (a blank page otherwise).
    pn.extension("tabulator", inline=inline, notifications=False,
                 global_loading_spinner=not inline)
    _extension_loaded = True


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _header_html(state: WorkbenchState) -> str:
    where = "simulated cluster" if state.simulated else "Kubernetes cluster"
    return (f'<div style="display:flex;align-items:baseline;gap:14px;padding:8px 14px;'
            f'background:#24384f;color:white;border-radius:4px;flex-wrap:wrap">'
            f'<span style="font-size:20px;font-weight:600">{TITLE}</span>'
            f'<span style="font-size:13px;opacity:.85">{where} · deep-learning training jobs'
            f'</span><span class="identity" style="font-size:12px;opacity:.75">'
            f"{html.escape(state.identity())}</span></div>")


def _header(state: WorkbenchState) -> pn.pane.HTML:
    return HTML(_header_html(state), sizing_mode="stretch_width", margin=(5, 10))


BUSY_CSS = """
.busy { display: inline-flex; align-items: center; gap: 6px; font-size: 13px; }
.busy .spin { width: 14px; height: 14px; border-radius: 50%; border: 3px solid #d0d7e2;
              border-top-color: #0072b5; animation: busy-spin 0.9s linear infinite; }
@keyframes busy-spin { to { transform: rotate(360deg); } }
"""


class BusyIndicator:
    """A spinner and a line saying what the store computes in the background (a switch
    preview, a what-if), there only while something runs. Both are the text of one pane:
    a change of a pane's visibility or classes makes the browser lay out the whole console
    again, every chart of every tab (~0.2 s each time), a change of its text does not."""

    def __init__(self) -> None:
        self.panel = HTML("", margin=(0, 10), align="center", css_classes=["busy-text"],
                          stylesheets=[BUSY_CSS])
        self._shown = ""

    def show(self, what: str) -> None:
        if what == self._shown:
            return
        self._shown = what
        self.panel.object = (f'<span class="busy"><span class="spin"></span>'
                             f"<i>working: {html.escape(what)}…</i></span>") if what else ""


class Console:
    """One rendering of the app: its own views (and Bokeh models) on a shared store. A Bokeh
    model lives in one document only, so every place the app is shown gets a Console."""

    def __init__(self, state: WorkbenchState, locked: bool = False,
                 real_ok: bool | None = None) -> None:
        s = self.state = state
        self.controls = ControlsView(s, locked=locked, real_ok=real_ok)
        self.controls.after_action = self.sync
        self.cluster = ClusterView(s)
        self.jobs = JobsView(s)
        self.forecasts = ForecastView(s)
        self.timeline = TimelineView(s)
        self.what_if = WhatIfView(s, may_run=lambda: self.controls.may_change)
        self.engine = EngineView(s)
        self.decisions = DecisionsView(s)
        panels = (self.cluster.panel, self.jobs.panel, self.forecasts.panel,
                  self.timeline.panel, self.decisions.panel, self.what_if.panel, self.engine.panel)
        self.tabs = pn.Tabs(*zip(TAB_TITLES, panels), sizing_mode="stretch_width", dynamic=False)
        self.header = _header(s)
        self.busy = BusyIndicator()
        self.link = ViewLink(self, TAB_TITLES)
        self._kind = s.kind
        self.layout = pn.Column(
            # (`OutputGone`: the page tells the kernel when a notebook output of it is gone)
            pn.Row(self.header, self.busy.panel, self.link.widget, OutputGone(),
                   sizing_mode="stretch_width"),
            # the tabs go below the controls where both would not fit (a narrow notebook
            # cell or window), rather than keeping a tab 400 px wide beside them
            # (flex-grow 1 : 1000: beside the tabs the controls keep their width; alone on
            # a line they take it all, and put their two groups side by side)
            wrapping_row((self.controls.panel, f"1 1 {CONTROLS_WIDTH}px"),
                         (self.tabs, f"1000 1 {TABS_MIN_WIDTH}px")),
            sizing_mode="stretch_width", min_height=600, stylesheets=[SHRINKS])
        # Views in tab order; only the controls and the visible tab redraw on each update,
        # a tab catches up when it is shown.
        self.tab_views = (self.cluster, self.jobs, self.forecasts, self.timeline,
                          self.decisions, self.what_if, self.engine)
        self.views = (self.controls, *self.tab_views)
        self.tabs.param.watch(lambda e: self.sync(), "active")
        self._callbacks: list = []
        self.tick_seconds = 0.0
        self._status_sent = -math.inf

    def tick(self) -> None:
        """One update: advance the simulator (if running; once per period however many
        consoles share the store) and redraw. Called periodically."""
        t0 = time.perf_counter()
        self.state.tick()
        self.sync()
        self.tick_seconds = time.perf_counter() - t0

    def sync(self, all_views: bool = False) -> None:
        """Redraw the views whose data moved (in this console's own context): the controls and
        the visible tab, or every view."""
        # Raw Bokeh changes (a chart's data) join Panel's queue of messages, in order. Sent
        # straight to the socket, they overtook the queued message that brings a new chart to
        # the page (made while a click was handled): "reference p2031 isn't known".
        with pn.io.unlocked():
            self._sync(all_views)

    def _sync(self, all_views: bool) -> None:
        if self._kind != self.state.kind:  # the controls moved the store to another backend
            self._kind = self.state.kind
        header = _header_html(self.state)  # a live cluster's leader may change any time
        if header != self.header.object:
            self.header.object = header
        views = self.views if all_views else (self.controls, self.tab_views[self.tabs.active])
        for view in views:
            view.sync()
        self.busy.show(self.state.background.describe())
        if _in_server_session():
            self.link.sync()
        elif self.layout._models:
            self._resend_status()
            pn.io.push_notebook(self.layout)  # notebooks get raw Bokeh changes only when pushed

    def _resend_status(self, force: bool = False) -> None:
        """In a notebook, send the headline and the engine line again every STATUS_RESEND_S
        even when unchanged. A notebook's browser holds its own copy of the document: one that
        missed a change (an output re-drawn from the state saved when it was displayed, a
        message lost before its comm was open) would show a stale status ("Engine now:
        tiresias" after a switch to fifo) until the next change, which a paused run never
        makes. The lines are short; the rest of the console follows the next change."""
        now = time.monotonic()
        if not force and now - self._status_sent < STATUS_RESEND_S:
            return
        self._status_sent = now
        for pane in (self.controls.clock, self.controls.engine):
            for model, _parent in list(pane._models.values()):
                doc = model.document
                if doc is None:
                    continue
                # The pane's text, not the model's: a browser's edit may have reached the model.
                truth = pane._get_properties(doc).get("text", model.text)
                if model.text != truth:
                    model.text = truth  # sent as any change is
                else:  # an event carrying the text although it is unchanged
                    doc.callbacks.trigger_on_change(ModelChangedEvent(doc, model, "text", truth))

    def start(self) -> None:
        """Start the periodic update in the current context (a server session or the kernel)."""
        if not self._callbacks:
            if _in_server_session() and pn.state.location is not None:
                self.link.restore(pn.state.location.query_params)  # a link's tab, engine, job
            cb = pn.state.add_periodic_callback(self.tick, period=self.state.period_ms, start=True)
            self._callbacks.append(cb)

    def stop(self) -> None:
        for cb in self._callbacks:
            cb.stop()
        self._callbacks.clear()

    def release(self) -> None:
        """Stop, and let Panel drop its hold on this console's models, as it does when
        JupyterLab says an output is gone (`panel.config._cleanup_panel`): called when the
        notebook output that showed it is gone (`cells`). Nothing then holds this console,
        or the run it showed, but the user's own names."""
        self.stop()
        for ref, (viewable, *_) in list(pn.state._views.items()):
            if viewable is self.layout:
                _cleanup_panel(ref)

    def shows(self, ref: str) -> bool:
        """Whether Panel's notebook output `ref` shows this console."""
        view = pn.state._views.get(ref)
        return view is not None and view[0] is self.layout


class Workbench:
    """The console for one `WorkbenchState`, wherever it is shown.

    Either pass a `state`, or the workload to simulate: `trace` (see `load_trace`), `cluster`
    (a preset or NxG), `policy` (engine name), and any `WorkbenchState` parameter
    (`speed`, `period_ms`, `controls_locked`, ...). `locked`: the console may watch its
    cluster but not change it; `real_ok`: it may connect to and change a real (Kubernetes)
    cluster (default: when not locked). Displaying it again (or `.ipywidget()`)
    adds another console on the same state; all of them follow it."""

    def __init__(self, trace: str = "default", cluster: str | None = "default",
                 policy: str = "tiresias", *, state: WorkbenchState | None = None,
                 seed: int = 0, limit: int | None = None, running: bool = False,
                 inline: bool | None = None, locked: bool = False, real_ok: bool | None = None,
                 **params: Any) -> None:
        self.state = state or WorkbenchState.from_workload(trace, cluster, policy, seed=seed,
                                                           limit=limit, **params)
        load_extension(inline)  # after the checks of the input: a refused one sends no JS
        self.locked, self.real_ok = locked, real_ok
        self.console = Console(self.state, locked, real_ok)  # the first; its views are attributes here
        self.consoles = [self.console]
        self._shown = False
        if running:
            self.state.running = True

    def __getattr__(self, name: str):
        # wb.cluster, wb.tabs, wb.layout, wb.sync(), ...: the first console's.
        if name in ("controls", "cluster", "jobs", "forecasts", "timeline", "what_if", "engine",
                    "decisions", "tabs", "layout", "views", "tab_views", "sync", "tick",
                    "tick_seconds"):
            return getattr(self.__dict__["console"], name)
        raise AttributeError(name)

    def play(self) -> None:
        self.state.play()

    # ---- tables to take away (as the console's CSV downloads; see ui.export) ---------------

    def decisions_frame(self, include_waits: bool = True) -> pd.DataFrame:
        """The decision log so far, oldest first."""
        return export.decisions(self.state, include_waits)

    def jobs_frame(self) -> pd.DataFrame:
        """The jobs table, in arrival order."""
        return export.jobs(self.state)

    def what_if_frame(self) -> pd.DataFrame:
        """The last what-if's results, one row per engine (empty before the first)."""
        return export.what_if(self.state.what_if_result)

    def pause(self) -> None:
        self.state.pause()

    def stop(self) -> None:
        for c in self.consoles:
            c.stop()

    # ---- where it renders -------------------------------------------------------------------

    def new_console(self) -> Console:
        """A console for one more place (the first one is used for the first showing)."""
        if not self._shown:
            self._shown = True
            console = self.console
        else:
            console = Console(self.state, self.locked, self.real_ok)
            self.consoles.append(console)
        console.start()
        if not _in_server_session():  # (a served page is not a cell's output)
            cells.shown_here(console)  # let go of when its notebook output is gone
        return console

    def __panel__(self) -> pn.viewable.Viewable:
        return self.new_console().layout

    def servable(self, title: str = TITLE) -> pn.viewable.Viewable:
        return self.__panel__().servable(title=title)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return self.__panel__()._repr_mimebundle_(include, exclude)

    def ipywidget(self):
        """The app as an ipywidget (needs `jupyter_bokeh`), for widget-only front-ends."""
        return pn.ipywidget(self.__panel__())

    def show(self, **kwargs):
        """Serve the app on this state and open it in a browser tab (blocks unless
        `threaded=True`); every browser session gets a console on the same state."""
        return pn.serve(lambda: self.__panel__(), title=TITLE, **kwargs)


def _in_server_session() -> bool:
    doc = pn.state.curdoc
    return bool(doc is not None and doc.session_context is not None)


def app(trace: str = "default", cluster: str | None = "default", policy: str = "tiresias",
        **kwargs: Any) -> pn.viewable.Viewable:
    """A fresh app for one server session, e.g. in a script for `panel serve`:
    `from workbench.ui.app import app; app().servable()`."""
    return Workbench(trace, cluster, policy, **kwargs).__panel__()
