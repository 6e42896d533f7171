"""The engine switch in the controls: choose an engine (with a placement plugin), see what the
switch is forecast to change, then apply it.

A preview is computed on a fork of the simulator at one moment and goes stale as the run
moves on: it says the time it was computed for, Recompute takes a fresh one, and Apply
recomputes a stale one before switching. Its table shows rejected and unfinished jobs too;
a switch predicted to do harm (an engine that rejects most of the workload, fewer completions
or deadlines) is applied only once the operator ticks "switch anyway". Previews fork and run
the simulator (seconds of CPU at Philly scale): a session that may not change the cluster
(a read-only viewer) may not compute them either.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable

import pandas as pd
import panel as pn

from ...placement.plugins import PLACEMENT_PLUGINS
from ...policies import available
from ...policies.base import placement_engines
from ...whatif import SwitchPreview
from ..state import WorkbenchState
from ._base import button, in_session
from ._charts import wrapping_row
from ._panes import HTML, Markdown
from ._tables import table

OWN_PLACEMENT = "(engine's own)"
CONFIRM_LABEL = "switch anyway, despite the predicted harm"
TABLE_WIDTH = 330  # px: a preview's table at its narrowest beside the other
# the harm alert's box, drawn by its text (Bootstrap's "danger" colours), tight: two bullets
# took 90 px of the narrow control column with a Markdown's own margins
HARM_CSS = (".harm { color: #842029; background: #f8d7da; border: 1px solid #f5c2c7;"
            " border-radius: 4px; padding: 6px 12px; } .harm p { margin: 2px 0; }"
            " .harm ul { margin: 2px 0; padding-left: 20px; }")


class SwitchPanel:
    """`may_change()`: this session may change the cluster (and so compute previews);
    `guard(action, *args)` runs a store action that changes the cluster, reporting refusals."""

    def __init__(self, state: WorkbenchState, may_change: Callable[[], bool],
                 guard: Callable[..., None]) -> None:
        self.state = state
        self.may_change = may_change
        self.guard = guard
        self.preview: SwitchPreview | None = None
        self._computing = ""  # the engine whose preview is being computed
        # "" is no choice; its label says so instead of showing an empty box
        self.candidate = pn.widgets.Select(
            label="switch to", options={"(choose one)": "", **{e: e for e in available()}},
            width=140)
        self.placement = pn.widgets.Select(label="placement",
                                           options=[OWN_PLACEMENT, *PLACEMENT_PLUGINS],
                                           width=140, disabled=True)
        self.candidate.param.watch(self._consider, "value")
        self.placement.param.watch(self._consider, "value")
        self.preview_text = Markdown("", margin=(0, 10), sizing_mode="stretch_width")
        self.age = Markdown("", margin=(0, 10), sizing_mode="stretch_width",
                                    styles={"color": "#555"})
        # What a preview changes is text where it can be: a change of a pane's visibility,
        # classes or children makes the browser lay out the whole console again, every
        # chart of every tab (0.15-0.3 s each), a change of its text does not. So the harm
        # alert is drawn by its text, the buttons stay (disabled until there is a choice),
        # and the tables show and hide together.
        self.warning = HTML("", margin=(0, 10), sizing_mode="stretch_width",
                            stylesheets=[HARM_CSS], css_classes=["harm-alert"])
        self.confirm = pn.widgets.Checkbox(label=CONFIRM_LABEL, value=False, visible=False,
                                           css_classes=["confirm-harm"])
        self.confirm.param.watch(lambda e: self._buttons(), "value")
        # The tables' columns never change: a change of columns made the browser build its
        # table anew (and a second change while it built threw); the engines' names are
        # the summary's first row.
        self.preview_table = pn.widgets.Tabulator(
            pd.DataFrame(columns=SUMMARY_COLUMNS), show_index=False, disabled=True,
            sizing_mode="stretch_width", layout="fit_data_stretch",
            css_classes=["preview-summary"], titles=OUTCOME_TITLES)
        self.preview_changes = _changes_table(pd.DataFrame(columns=CHANGES_COLUMNS))
        self.apply = button("Apply switch", color="primary", width=120, disabled=True)
        self.recompute = button("Recompute", width=100, disabled=True)
        self.cancel = button("Cancel", width=80, disabled=True)
        self.apply.on_click(self._on_apply)
        self.recompute.on_click(self._on_recompute)
        self.cancel.on_click(lambda e: self.reset())
        self.buttons = pn.Row(self.apply, self.recompute, self.cancel)
        # the two tables side by side where the preview has the width (the controls alone on
        # a line): one above the other, they pushed the tabs 1,200 px down a 930 px window
        # (each in a Column: a table's own styles do not reach the row's flex box)
        self.tables = wrapping_row(
            (pn.Column(self.preview_table, sizing_mode="stretch_width"), f"1 1 {TABLE_WIDTH}px"),
            (pn.Column(self.preview_changes, sizing_mode="stretch_width"),
             f"1 1 {TABLE_WIDTH}px"))
        self.tables.visible = False
        self.on_show: Callable[[bool], None] = lambda shown: None  # a preview shown, or gone
        self.panel = pn.Column(
            pn.Row(self.candidate, self.placement), self.preview_text, self.age, self.warning,
            self.confirm, self.buttons, self.tables, sizing_mode="stretch_width")

    @property
    def choice(self) -> str:
        """The engine chosen to switch to, with its placement plugin if one is chosen."""
        engine, plugin = self.candidate.value, self.placement.value
        return f"{engine}+{plugin}" if engine and plugin != OWN_PLACEMENT else engine

    # ---- computing a preview --------------------------------------------------------------

    async def _consider(self, _event) -> None:
        takes = self.candidate.value in placement_engines()
        self.placement.disabled = not takes or not self.may_change()
        if not takes and self.placement.value != OWN_PLACEMENT:
            self.placement.value = OWN_PLACEMENT  # its watcher considers the choice again
            return
        name = self.choice
        self.show(None)
        if not name:
            return
        if not self.may_change():
            self.preview_text.object = ("**Not done:** a read-only session cannot preview or"
                                        " apply a switch (that needs the access token).")
            return
        if name == self.state.policy:
            self.preview_text.object = f"{name} is already scheduling."
            return
        if not self.state.can_look_ahead:
            self.preview_text.object = ("No forecast here (this backend can neither fork nor"
                                        " take a snapshot): the switch applies from the next"
                                        " round.")
            self._buttons()
            return
        preview = await self._compute(name)
        if preview is not None:
            self.show(preview)

    async def _compute(self, name: str) -> SwitchPreview | None:
        """A preview of switching to `name` for the run as it is now (None if it failed, or
        the choice changed meanwhile)."""
        self._computing = name
        self._buttons()
        self.preview_text.object = (f"Forecasting what a switch to **{name}** changes, from"
                                    f" {self.state.hours(self.state.now):.2f} h…")
        try:
            job = self.state.prepare_preview(name)  # forks now, on the app's thread
            preview = await asyncio.to_thread(job)
        except Exception as e:  # noqa: BLE001 - shown to the user, the console carries on
            self.preview_text.object = f"forecast failed: {e}"
            return None
        finally:
            self._computing = ""
            self._buttons()
        return preview if self.choice == name else None  # else: no longer the one asked about

    async def _on_recompute(self, _event) -> None:
        name = self.choice
        if name and self.may_change() and self.state.can_look_ahead:
            preview = await self._compute(name)
            if preview is not None:
                self.show(preview)

    # ---- showing it -------------------------------------------------------------------------

    def show(self, p: SwitchPreview | None) -> None:
        self.preview = p
        self.confirm.value = False
        if p is None:
            self.tables.visible = self.confirm.visible = False
            self.warning.object = ""
            self.age.object = ""
            self.preview_text.object = ""
            self._buttons()
            self.on_show(False)
            return
        self.on_show(True)
        self.preview_text.object = (f"**If you switch {p.current} → {p.candidate} now**"
                                    f" (forecast on {_where(p)}, {p.seconds:.1f} s):"
                                    f" {p.summary()}."
                                    " Below: the two engines side by side, then the jobs whose"
                                    " outcome changes most.")
        warnings = p.warnings()
        self.warning.object = harm_html(warnings)
        self.confirm.visible = bool(warnings)
        self.preview_table.value = summary_rows(p)
        self.preview_changes.value = p.changes.set_axis(CHANGES_COLUMNS, axis=1)
        self.tables.visible = True
        self.sync()
        self._buttons()

    def sync(self) -> None:
        """Say which moment the preview was computed for, and whether the run has moved on."""
        p = self.preview
        if p is None:
            return
        then, now = self.state.hours(p.start), self.state.hours(self.state.now)
        if p.stale(self.state.now):
            self.age.object = (f"Computed for {then:.2f} h; the run is at {now:.2f} h now:"
                               " Apply recomputes it first (or press Recompute).")
        else:
            self.age.object = f"Computed for {then:.2f} h, the run as it is now."

    def _buttons(self) -> None:
        ok = self.may_change() and not self._computing
        chosen = bool(self.choice) and self.choice != self.state.policy
        forecast_ok = self.preview is not None or not self.state.can_look_ahead
        confirmed = self.preview is None or not self.preview.harmful or self.confirm.value
        self.apply.disabled = not (ok and chosen and forecast_ok and confirmed)
        self.recompute.disabled = not (ok and self.preview is not None)
        self.cancel.disabled = not self.choice

    def lock(self, locked: bool) -> None:
        """A session that may not change the cluster may not choose (or preview) a switch."""
        self.candidate.disabled = locked
        self.placement.disabled = locked or self.candidate.value not in placement_engines()
        self._buttons()

    # ---- applying it ------------------------------------------------------------------------

    async def _on_apply(self, _event) -> None:
        """Apply: a stale preview is recomputed first (the switch lands on the run as it is
        now, not as it was), and a harmful one needs the confirmation ticked."""
        name = self.choice
        p = self.preview
        if name and self.may_change() and self.state.can_look_ahead and (p is None or
                                                                    p.stale(self.state.now)):
            fresh = await self._compute(name)
            if fresh is None:
                return
            was_harmful = p is not None and p.harmful
            confirmed = self.confirm.value
            self.show(fresh)
            if fresh.harmful and not (confirmed and was_harmful):
                self.preview_text.object = ("**Not applied yet:** recomputed for the run as it"
                                            " is now, the switch is predicted to do harm. "
                                            + self.preview_text.object)
                return
            self.confirm.value = confirmed
            in_session(lambda: self.apply_choice(confirmed=True))  # after an await
            return
        self.apply_choice()

    def apply_choice(self, confirmed: bool | None = None) -> None:
        """Switch to the chosen engine now, unless the preview predicts harm and the operator
        has not confirmed it (checked here, on the server: a browser may send anything)."""
        name = self.choice
        if not name:
            return
        confirmed = self.confirm.value if confirmed is None else confirmed
        if self.preview is not None and self.preview.harmful and not confirmed:
            self.preview_text.object = (f"**Not applied:** tick “{CONFIRM_LABEL}” to switch to"
                                        f" {name}. " + self.preview_text.object)
            return
        self.guard(self.state.switch_policy, name)
        self.reset()

    def reset(self) -> None:
        self.candidate.value = ""
        self.show(None)


def _where(p: SwitchPreview) -> str:
    """What the preview ran on: a fork of the simulator, or one restored from a snapshot."""
    return "a fork of the simulator" if p.snapshot_at is None else \
        "a simulator restored from a snapshot of the cluster"


# The preview tables' fields: `comparison`'s and `job_changes`'s, the engines' columns under
# fixed names, titled by their role
SUMMARY_COLUMNS = ["over the horizon", "current", "candidate"]
CHANGES_COLUMNS = ["job", "current", "candidate"]
OUTCOME_TITLES = {"current": "if kept", "candidate": "if switched"}


def summary_rows(p: SwitchPreview) -> pd.DataFrame:
    """`p.comparison()` under `SUMMARY_COLUMNS`, the engines' names its first row."""
    engines = pd.DataFrame([["engine", p.current, p.candidate]], columns=SUMMARY_COLUMNS)
    return pd.concat([engines, p.comparison().set_axis(SUMMARY_COLUMNS, axis=1)],
                     ignore_index=True)


def _changes_table(changes: pd.DataFrame) -> pn.widgets.Tabulator:
    """The jobs whose outcome changes most (`CHANGES_COLUMNS`), each engine's outcome wrapped
    in its cell: sized to its data, 'restarting, 37% done' ran past the sidebar's edge and was
    cut."""
    return table(changes, wrap=CHANGES_COLUMNS, pagination="local", page_size=6,
                 name="preview-changes", titles=OUTCOME_TITLES)


def harm_html(warnings: list[str]) -> str:
    """The harm alert's text: a box with the predicted harms as bullets ("" for none)."""
    if not warnings:
        return ""
    items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
    return (f'<div class="harm"><p><b>The switch is predicted to do harm:</b></p>'
            f"<ul>{items}</ul></div>")
