"""Controls: the clock, run/pause/step and speed, the engine (with a forecast of what a
switch changes, shown before it is applied), and a new simulated cluster or workload.
Widgets only call the store's methods; when the store's controls are locked (a real cluster
seen without the access token) they are disabled."""

from __future__ import annotations

import pandas as pd
import panel as pn
from bokeh.models.widgets.tables import NumberFormatter

from ...clusters import PRESETS
from ...policies import available
from ..state import WorkbenchState

SPEEDS = {"1 min / s": 60.0, "10 min / s": 600.0, "30 min / s": 1800.0, "1 h / s": 3600.0,
          "6 h / s": 21600.0, "1 day / s": 86400.0}


def clock_text(seconds: float) -> str:
    days, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"day {days}, {h:02d}:{m:02d}:{s:02d}"


class ControlsView:
    def __init__(self, state: WorkbenchState) -> None:
        self.state = state
        self.clock = pn.pane.Markdown("", margin=(0, 10), sizing_mode="stretch_width")
        self.play = pn.widgets.Toggle(name="▶ Run", button_type="success", width=90)
        self.step = pn.widgets.Button(name="Step", width=70)
        self.to_end = pn.widgets.Button(name="Run to end", width=100)
        speed_name = min(SPEEDS, key=lambda k: abs(SPEEDS[k] - state.speed))
        self.speed = pn.widgets.Select(name="speed (simulated time per second)",
                                       options=list(SPEEDS), value=speed_name, width=290)
        self.play.param.watch(self._play, "value")
        self.step.on_click(lambda e: self._guard(state.step))
        self.to_end.on_click(lambda e: self._guard(state.run_to_end))
        self.speed.param.watch(lambda e: setattr(state, "speed", SPEEDS[e.new]), "value")

        self.engine = pn.pane.Markdown("", margin=(0, 10))
        self.candidate = pn.widgets.Select(name="switch to", options=[""] + available(), width=290)
        self.candidate.param.watch(self._consider, "value")
        self.preview_text = pn.pane.Markdown("", margin=(0, 10), sizing_mode="stretch_width")
        fmt = NumberFormatter(format="0.00")
        self.preview_table = pn.widgets.Tabulator(
            pd.DataFrame(), show_index=False, disabled=True, visible=False,
            sizing_mode="stretch_width", layout="fit_data_stretch",
            formatters={"mean_jct_h": fmt, "gpu_util": NumberFormatter(format="0%")})
        self.preview_changes = pn.widgets.Tabulator(pd.DataFrame(), show_index=False,
                                                    disabled=True, visible=False, height=200,
                                                    sizing_mode="stretch_width",
                                                    layout="fit_data_stretch")
        self.apply = pn.widgets.Button(name="Apply switch", button_type="warning", width=140,
                                       disabled=True)
        self.cancel = pn.widgets.Button(name="Cancel", width=80, disabled=True)
        self.apply.on_click(self._apply)
        self.cancel.on_click(lambda e: self._reset_candidate())

        self.cluster = pn.widgets.Select(name="cluster", options=list(PRESETS),
                                         value=state.cluster_name if state.cluster_name in PRESETS
                                         else "default", width=140)
        self.trace = pn.widgets.TextInput(name="trace", value=state.workload or "default", width=140)
        self.new_policy = pn.widgets.Select(name="engine", options=available(), value=state.policy,
                                            width=140)
        self.load = pn.widgets.Button(name="Load", width=80)
        self.load.on_click(self._load)
        self.lock_note = pn.pane.Alert("", alert_type="warning", visible=False)
        self.message = pn.pane.Markdown("", margin=(0, 10), styles={"color": "#555"})

        self.panel = pn.Column(
            self.lock_note, self.clock,
            pn.Row(self.play, self.step, self.to_end), self.speed,
            pn.layout.Divider(), self.engine, self.candidate, self.preview_text,
            pn.Row(self.apply, self.cancel), self.preview_table, self.preview_changes,
            pn.layout.Divider(),
            pn.Card(pn.Row(self.cluster, self.trace), pn.Row(self.new_policy, self.load),
                    title="New simulation", collapsed=True, sizing_mode="stretch_width"),
            self.message, sizing_mode="stretch_width", name="Controls")
        self.update()
        self._lock()
        state.param.watch(lambda e: self.update(), "version")
        state.param.watch(self._show_preview, "preview")
        state.param.watch(self._lock, "controls_locked")
        state.param.watch(lambda e: setattr(self.play, "value", e.new), "running")
        state.param.watch(lambda e: setattr(self.message, "object", e.new), "message")
        state.param.watch(self._busy, "busy")

    # ---- actions ----------------------------------------------------------------------------

    def _guard(self, action, *args) -> None:
        try:
            action(*args)
        except (PermissionError, KeyError, ValueError, TypeError) as e:
            self.message.object = f"**Not done:** {e}"

    def _play(self, event) -> None:
        self.play.name = "⏸ Pause" if event.new else "▶ Run"
        if event.new and not self.state.running:
            self._guard(self.state.play)
            if not self.state.running:
                self.play.value = False
        elif not event.new and self.state.running:
            self.state.pause()

    def _consider(self, event) -> None:
        name = event.new
        if not name:
            return
        if name == self.state.policy:
            self.preview_text.object = f"{name} is already scheduling."
            return
        if not self.state.simulated:
            self.preview_text.object = ("No forecast on a real cluster (it cannot be forked):"
                                        " the switch applies from the next round.")
            self.apply.disabled = self.state.controls_locked
            self.cancel.disabled = False
            return
        self.preview_text.object = f"Forecasting what a switch to **{name}** changes…"
        try:
            self.state.candidate = name  # the store computes the preview
        except Exception as e:  # noqa: BLE001 - shown to the user, the console carries on
            self.preview_text.object = f"forecast failed: {e}"

    def _show_preview(self, event) -> None:
        p = event.new
        if p is None:
            self.preview_table.visible = self.preview_changes.visible = False
            self.apply.disabled = self.cancel.disabled = True
            if not self.candidate.value:
                self.preview_text.object = ""
            return
        self.preview_text.object = (f"**If you switch {p.current} → {p.candidate} now** (forecast by"
                                    f" forking the simulator, {p.seconds:.1f} s): {p.summary()}."
                                    " Jobs whose outcome changes most:")
        self.preview_table.value = p.table
        self.preview_changes.value = p.changes
        self.preview_table.visible = self.preview_changes.visible = True
        self.apply.disabled = self.state.controls_locked
        self.cancel.disabled = False

    def _apply(self, _event) -> None:
        name = self.candidate.value
        if name:
            self._guard(self.state.switch_policy, name)
        self._reset_candidate()

    def _reset_candidate(self) -> None:
        self.candidate.value = ""
        self.state.candidate = None
        self.preview_text.object = ""
        self.apply.disabled = self.cancel.disabled = True
        self.preview_table.visible = self.preview_changes.visible = False

    def _load(self, _event) -> None:
        self.message.object = f"loading {self.trace.value} on {self.cluster.value}…"
        self._guard(self.state.load, self.trace.value.strip() or "default", self.cluster.value,
                    self.new_policy.value)

    # ---- presentation ---------------------------------------------------------------------

    def _lock(self, *_) -> None:
        locked = self.state.controls_locked
        for w in (self.play, self.step, self.to_end, self.apply, self.load):
            w.disabled = locked
        self.lock_note.visible = locked
        self.lock_note.object = ("**Read-only view.** Changing this cluster needs the access"
                                 " token: open the URL printed by `workbench serve` (it ends in"
                                 " `?token=…`).")
        if not locked:
            self.apply.disabled = self.state.preview is None

    def _busy(self, event) -> None:
        if event.new:
            self.message.object = f"*{event.new}…*"

    def update(self) -> None:
        s = self.state.summary
        if not s:
            return
        state_word = "finished" if self.state.finished else "running" if self.state.running \
            else "paused"
        deadlines = ""
        if s["deadline_hits"] or s["deadline_misses"]:
            deadlines = f" · deadlines met {s['deadline_hits']}, missed {s['deadline_misses']}"
        self.clock.object = (
            f"### {clock_text(self.state.now)} · {state_word}\n"
            f"**{s['gpus_used']:g}/{s['gpus_total']:g} GPUs** in use on {s['nodes_up']}/{s['nodes']}"
            f" nodes · {s['running']} running · {s['queued']} queued · {s['completed']} completed"
            f" · {s['rejected']} rejected · {s['to_arrive']} yet to arrive{deadlines}")
        self.engine.object = (f"**Engine now: {s['policy']}** · simulated cluster"
                              f" *{self.state.cluster_name}*, workload *{self.state.workload}*"
                              if self.state.simulated else f"**Engine now: {s['policy']}**")
