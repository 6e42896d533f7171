"""Controls: the clock, run/pause/step and speed, the engine (with a forecast of what a
switch changes, shown before it is applied), and a new simulated cluster or workload.
Widgets only call the store's methods; when the store's controls are locked (a real cluster
seen without the access token) they are disabled."""

from __future__ import annotations

import time

import pandas as pd
import panel as pn

from ...clusters import PRESETS
from ...policies import available
from ..state import WorkbenchState
from ._base import View

SPEEDS = {"1 min / s": 60.0, "10 min / s": 600.0, "30 min / s": 1800.0, "1 h / s": 3600.0,
          "6 h / s": 21600.0, "1 day / s": 86400.0}


def clock_text(seconds: float) -> str:
    days, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"day {days}, {h:02d}:{m:02d}:{s:02d}"


def wall_text(seconds: float) -> str:
    """A real cluster's clock (Unix seconds) as a date and time."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


class ControlsView(View):
    """`locked`: this session may watch but not change the cluster (no or a wrong token)."""

    def __init__(self, state: WorkbenchState, locked: bool = False) -> None:
        super().__init__(state)
        self.locked = locked
        self.after_action = lambda: None  # the shell redraws the views right after an action
        self.preview = None
        self.clock = pn.pane.Markdown("", margin=(0, 10), sizing_mode="stretch_width")
        self.play = pn.widgets.Toggle(label="Run", color="success", width=90)
        self.step = pn.widgets.Button(label="Step", width=70)
        self.to_end = pn.widgets.Button(label="Run to end", width=100)
        speed_name = min(SPEEDS, key=lambda k: abs(SPEEDS[k] - state.speed))
        self.speed = pn.widgets.Select(label="speed (simulated time per second)",
                                       options=list(SPEEDS), value=speed_name, width=290)
        self.play.param.watch(self._play, "value")
        self.step.on_click(lambda e: self._guard(state.step))
        self.to_end.on_click(lambda e: self._guard(state.run_to_end))
        self.speed.param.watch(self._speed, "value")

        self.engine = pn.pane.Markdown("", margin=(0, 10))
        self.candidate = pn.widgets.Select(label="switch to", options=[""] + available(), width=290)
        self.candidate.param.watch(self._consider, "value")
        self.preview_text = pn.pane.Markdown("", margin=(0, 10), sizing_mode="stretch_width")
        self.preview_table = pn.widgets.Tabulator(
            pd.DataFrame(), show_index=False, disabled=True, visible=False,
            sizing_mode="stretch_width", layout="fit_data_stretch")
        self.preview_changes = pn.widgets.Tabulator(pd.DataFrame(), show_index=False,
                                                    disabled=True, visible=False,
                                                    pagination="local", page_size=6,
                                                    sizing_mode="stretch_width",
                                                    layout="fit_data_stretch")
        self.apply = pn.widgets.Button(label="Apply switch", color="primary", width=140,
                                       disabled=True)
        self.cancel = pn.widgets.Button(label="Cancel", width=80, disabled=True)
        self.apply.on_click(self._apply)
        self.cancel.on_click(lambda e: self._reset_candidate())

        self.cluster = pn.widgets.Select(label="cluster", options=list(PRESETS),
                                         value=state.cluster_name if state.cluster_name in PRESETS
                                         else "default", width=140)
        self.trace = pn.widgets.TextInput(label="trace", value=state.workload or "default", width=140)
        self.new_policy = pn.widgets.Select(label="engine", options=available(), value=state.policy,
                                            width=140)
        self.load = pn.widgets.Button(label="Load", width=80)
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
        if not state.simulated:  # a real cluster runs on its own clock and cannot be reloaded
            self.to_end.visible = self.speed.visible = False
            self.panel.objects = [o for o in self.panel.objects if not isinstance(o, pn.Card)]
        self._lock()
        self.sync()

    # ---- actions ----------------------------------------------------------------------------

    @property
    def may_change(self) -> bool:
        return not (self.locked or self.state.controls_locked)

    def _guard(self, action, *args) -> None:
        """Run a store action that changes the cluster: checked here, on the server, since a
        disabled button is only a hint to an honest browser."""
        try:
            if not self.may_change:
                raise PermissionError("read-only session: changing this cluster needs the token")
            action(*args)
        except (PermissionError, KeyError, ValueError, TypeError) as e:
            self.message.object = f"**Not done:** {e}"
        self.after_action()

    def _speed(self, event) -> None:
        if self.may_change:
            self.state.speed = SPEEDS[event.new]

    def _play(self, event) -> None:
        self.play.label = "Pause" if event.new else "Run"
        if event.new == self.state.running:
            return
        self._guard(self.state.play if event.new else self.state.pause)
        if self.play.value != self.state.running:
            self.play.value = self.state.running

    async def _consider(self, event) -> None:
        import asyncio

        name = event.new
        self.preview = None
        self._show_preview(None)
        if not name:
            return
        if name == self.state.policy:
            self.preview_text.object = f"{name} is already scheduling."
            return
        if not self.state.simulated:
            self.preview_text.object = ("No forecast on a real cluster (it cannot be forked):"
                                        " the switch applies from the next round.")
            self.apply.disabled = not self.may_change
            self.cancel.disabled = False
            return
        self.preview_text.object = f"Forecasting what a switch to **{name}** changes…"
        try:
            job = self.state.prepare_preview(name)  # forks now, on the app's thread
            preview = await asyncio.to_thread(job)
        except Exception as e:  # noqa: BLE001 - shown to the user, the console carries on
            self.preview_text.object = f"forecast failed: {e}"
            return
        if self.candidate.value == name:  # still the one asked about
            self.preview = preview
            self._show_preview(preview)

    def _show_preview(self, p) -> None:
        if p is None:
            self.preview_table.visible = self.preview_changes.visible = False
            self.apply.disabled = self.cancel.disabled = True
            if not self.candidate.value:
                self.preview_text.object = ""
            return
        self.preview_text.object = (f"**If you switch {p.current} → {p.candidate} now** (forecast by"
                                    f" forking the simulator, {p.seconds:.1f} s): {p.summary()}."
                                    " Below: the two engines side by side, then the jobs whose"
                                    " outcome changes most.")
        self.preview_table.value = p.comparison()
        self.preview_changes.value = p.changes
        self.preview_table.visible = self.preview_changes.visible = True
        self.apply.disabled = not self.may_change
        self.cancel.disabled = False

    def _apply(self, _event) -> None:
        name = self.candidate.value
        if name:
            self._guard(self.state.switch_policy, name)
        self._reset_candidate()

    def _reset_candidate(self) -> None:
        self.candidate.value = ""
        self.preview = None
        self._show_preview(None)
        self.preview_text.object = ""

    def _load(self, _event) -> None:
        self.message.object = f"loading {self.trace.value} on {self.cluster.value}…"
        self._guard(self.state.load, self.trace.value.strip() or "default", self.cluster.value,
                    self.new_policy.value)

    # ---- presentation ---------------------------------------------------------------------

    def _lock(self) -> None:
        locked = not self.may_change
        for w in (self.play, self.step, self.to_end, self.load, self.speed):
            w.disabled = locked
        self.apply.disabled = locked or self.preview is None
        self.lock_note.visible = locked
        self.lock_note.object = ("**Read-only view.** Changing this cluster needs the access"
                                 " token: open the URL printed by `workbench serve` (it ends in"
                                 " `?token=…`).")

    def sync(self) -> None:
        super().sync()
        if self.play.value != self.state.running:
            self.play.value = self.state.running
        msg = self.state.message or self.state.scheduler_error
        if msg and msg != self._last_message:
            self._last_message = msg
            self.message.object = msg

    _last_message = ""

    def update(self) -> None:
        s = self.state.summary
        if not s:
            return
        state_word = "finished" if self.state.finished else "running" if self.state.running \
            else "paused"
        deadlines = ""
        if s["deadline_hits"] or s["deadline_misses"]:
            deadlines = f" · deadlines met {s['deadline_hits']}, missed {s['deadline_misses']}"
        when = clock_text(self.state.now) if self.state.simulated else wall_text(self.state.now)
        self.clock.object = (
            f"### {when} · {state_word}\n"
            f"**{s['gpus_used']:g}/{s['gpus_total']:g} GPUs** in use on {s['nodes_up']}/{s['nodes']}"
            f" nodes · {s['running']} running · {s['queued']} queued · {s['completed']} completed"
            f" · {s['rejected']} rejected · {s['to_arrive']} yet to arrive{deadlines}")
        self.engine.object = (f"**Engine now: {s['policy']}** · simulated cluster"
                              f" *{self.state.cluster_name}*, workload *{self.state.workload}*"
                              if self.state.simulated else f"**Engine now: {s['policy']}**")
