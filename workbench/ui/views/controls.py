"""Controls: the clock, run/pause/step and speed, the engine (the switch with its forecast is
`switch.SwitchPanel`'s), and the backend: a simulated cluster (a preset
and a trace) or a Kubernetes cluster (a kubeconfig's context and a namespace).
Widgets only call the store's methods; when the store's controls are locked (a real cluster
seen without the access token) they are disabled."""

from __future__ import annotations

import time

import panel as pn

from ...clusters import PRESETS
from ...errors import ConfigError, WorkbenchError
from ...policies import available
from ...traces.registry import names_a_file
from ..connection import default_kubeconfig, kubeconfig_contexts
from ..state import WorkbenchState
from ._base import View, button
from ._charts import SHRINKS, wrapping_row
from ._panes import Alert, Markdown, as_text
from .switch import SwitchPanel

SPEEDS = {"1 min / s": 60.0, "10 min / s": 600.0, "30 min / s": 1800.0, "1 h / s": 3600.0,
          "6 h / s": 21600.0, "1 day / s": 86400.0}


def speed_label(speed: float) -> str:
    """A speed (simulated seconds per wall-clock second) as the speed list names it."""
    speed = float(f"{speed:.3g}")  # rounded first: 3,599 s/s is "1 h / s", not "60 min / s"
    for unit, size in (("day", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if speed >= size:
            amount = f"{speed / size:.3g}"
            plural = "s" if unit == "day" and amount != "1" else ""
            return f"{amount} {unit}{plural} / s"
    return f"{speed:.3g} s / s"


def speed_options(speed: float) -> dict[str, float]:
    """The speed list: the usual speeds, and `speed` among them in its place if it is not one
    (`workbench serve --speed 36000` ran at 10 h/s while the list said "6 h / s")."""
    if speed in SPEEDS.values():
        return dict(SPEEDS)
    return dict(sorted({**SPEEDS, speed_label(speed): speed}.items(), key=lambda kv: kv[1]))


def pace_text(state: WorkbenchState) -> str:
    """How fast the simulation goes where that is not the speed asked for: running to the end
    (as fast as it goes), or slower than the speed because the machine cannot keep up."""
    pace = state.pace  # None unless running (a pause or a finish clears the ticks it reads)
    if pace is None or pace <= 0:
        return ""
    if state.to_end:
        return f" · simulating {speed_label(pace)}"
    if pace < 0.8 * state.speed:
        return (f" · simulating {speed_label(pace)}, as fast as this machine goes"
                f" ({speed_label(state.speed)} asked)")
    return ""


def next_arrival_text(state: WorkbenchState, summary: dict) -> str:
    """When the next job arrives, where nothing waits and the cluster has room: a trace's
    quiet stretch, during which nothing else moves."""
    t = summary.get("next_arrival_h")
    if t is None or summary["queued"] or t <= summary["now_h"]:
        return ""
    return f" (the next at {clock_text(round(t * 3600, 3))})"


def clock_text(seconds: float) -> str:
    days, rest = divmod(int(seconds), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return f"day {days}, {h:02d}:{m:02d}:{s:02d}"


def wall_text(seconds: float) -> str:
    """Unix seconds as a date and time."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def one_line(e: BaseException) -> str:
    """An error as the one line the console shows (never a traceback)."""
    text = (str(e).strip().splitlines() or [""])[0].replace("--kubeconfig ", "kubeconfig ")
    return text[:300] or type(e).__name__


BACKENDS = ("simulated", "Kubernetes")
# the least width of each group of controls (the run's, the engine's) beside the other
GROUP_WIDTH = 360
PREVIEW_WIDTH = 700  # px: the engine's group with a switch's preview (two tables side by side)


class ControlsView(View):
    """`locked`: this session may watch but not change the cluster it was given (no or a wrong
    token). `real_ok`: it may connect to a Kubernetes cluster and change it (it presented the
    operator token, or nobody asks for one); default: when not locked."""

    def __init__(self, state: WorkbenchState, locked: bool = False,
                 real_ok: bool | None = None) -> None:
        super().__init__(state)
        self.locked = locked
        self.real_ok = (not locked) if real_ok is None else bool(real_ok)
        self.connect_options: dict = {}  # more for `state.connect` (e.g. clock_speed)
        self.after_action = lambda: None  # the shell redraws the views right after an action
        self._build_clock(state)
        self.engine = Markdown("", margin=(0, 10))
        self.switch = SwitchPanel(state, lambda: self.may_change, self._guard)
        known = self._build_backend(state)
        self.lock_note = Alert("", alert_type="warning", visible=False)
        self.message = Markdown("", margin=(0, 10), styles={"color": "#555"})

        # the run's controls and the engine's side by side where the console puts the tabs
        # under them (a notebook cell: half the height above the tabs), one above the other
        # in the column beside the tabs
        run = pn.Column(self.lock_note, self.clock, pn.Row(self.play, self.step, self.to_end),
                        self.speed, sizing_mode="stretch_width")
        engine = pn.Column(pn.layout.Divider(), self.engine, self.switch.panel,
                           pn.layout.Divider(), self.backend_card, self.message,
                           sizing_mode="stretch_width", margin=(0, 10, 0, 0))
        self.panel = pn.Column(wrapping_row((run, f"1 1 {GROUP_WIDTH}px"),
                                            (engine, f"1 1 {GROUP_WIDTH}px")),
                               sizing_mode="stretch_width", name="Controls",
                               stylesheets=[SHRINKS])  # (Panel: the sum of the groups' widths)
        # a switch's preview widens the engine's group: where the controls have a line of their
        # own, it takes one too, and the preview's tables go side by side
        self.switch.on_show = lambda shown: setattr(engine, "styles", {
            **engine.styles, "flex": f"1 1 {PREVIEW_WIDTH if shown else GROUP_WIDTH}px"})
        self._kind = None
        self._read_contexts(known.get("context") or None, quiet=True)
        self._show_backend_box()
        self._follow_backend()
        self.sync()

    def _build_clock(self, state: WorkbenchState) -> None:
        """The clock, run/pause, step, run to the end, and the speed."""
        self.clock = Markdown("", margin=(0, 10), sizing_mode="stretch_width")
        self.play = button("Run", pn.widgets.Toggle, color="success", width=90)
        self.step = button("Step", width=70)
        self.to_end = button("Run to end", width=100)
        self.speed = pn.widgets.Select(label="speed (simulated time per second)",
                                       options=speed_options(state.speed), value=state.speed,
                                       width=290)
        self.play.param.watch(self._play, "value")
        self.step.on_click(lambda e: self._guard(state.step))
        self.to_end.on_click(lambda e: self._guard(state.run_to_end, wait=False))
        self.speed.param.watch(self._speed, "value")

    def _build_backend(self, state: WorkbenchState) -> dict:
        """The backend card: a simulation (preset + trace) or a Kubernetes cluster (a
        kubeconfig's context and a namespace). Returns the connection it was filled from."""
        self.backend_kind = pn.widgets.RadioButtonGroup(
            options=list(BACKENDS), value=BACKENDS[0] if state.simulated else BACKENDS[1],
            width=290)
        self.cluster = pn.widgets.Select(label="cluster", options=list(PRESETS),
                                         value=state.cluster_name if state.cluster_name in PRESETS
                                         else "default", width=140)
        self.trace = pn.widgets.TextInput(label="trace", value=state.workload or "default", width=140)
        self.new_policy = pn.widgets.Select(label="engine", options=available(), value=state.policy,
                                            width=140)
        self.load = button("Load", width=80)
        self.load.on_click(self._load)
        known = dict(state.connection) if self.real_ok else {}
        self.kubeconfig = pn.widgets.TextInput(
            label="kubeconfig", value=known.get("kubeconfig") or (
                default_kubeconfig() if self.real_ok else ""),
            placeholder="path to a kubeconfig file", width=290)
        self.context = pn.widgets.Select(label="context", options=[], width=140)
        self.namespace = pn.widgets.TextInput(label="namespace", value=known.get("namespace", ""),
                                              placeholder="all namespaces", width=140)
        self.k8s_policy = pn.widgets.Select(label="engine", options=available(),
                                            value=state.policy, width=140)
        self.connect = button("Connect", color="primary", width=90)
        self.connect.on_click(self._connect)
        self.kubeconfig.param.watch(lambda e: self._read_contexts(), "value")
        self.k8s_note = Markdown("", margin=(0, 10), styles={"color": "#555"})
        self.sim_box = pn.Column(pn.Row(self.cluster, self.trace), pn.Row(self.new_policy, self.load),
                                 sizing_mode="stretch_width")
        self.k8s_box = pn.Column(self.kubeconfig, pn.Row(self.context, self.namespace),
                                 pn.Row(self.k8s_policy, self.connect), self.k8s_note,
                                 sizing_mode="stretch_width")
        self.backend_kind.param.watch(lambda e: self._show_backend_box(), "value")
        self.backend_card = pn.Card(self.backend_kind, self.sim_box, self.k8s_box,
                                    title="Backend", collapsed=True, sizing_mode="stretch_width")
        return known

    # ---- actions ----------------------------------------------------------------------------

    @property
    def may_change(self) -> bool:
        """This session may change the cluster the store is on now."""
        if self.state.controls_locked:
            return False
        return not self.locked if self.state.simulated else self.real_ok

    @property
    def may_read_files(self) -> bool:
        """This session may have the server read a file it names (a trace's path): what lets it
        connect to a real cluster (reading a kubeconfig on the server) lets it do that."""
        return self.may_connect

    @property
    def may_connect(self) -> bool:
        """This session may connect the store to a Kubernetes cluster."""
        return self.real_ok and self.may_change

    def _guard(self, action, *args, **kwargs) -> None:
        """Run a store action that changes the cluster: checked here, on the server, since a
        disabled button is only a hint to an honest browser."""
        try:
            if not self.may_change:
                raise PermissionError("read-only session: changing this cluster needs the token")
            action(*args, **kwargs)
        except (PermissionError, KeyError, ValueError, TypeError, WorkbenchError) as e:
            # a bad trace, cluster or engine: one line here, and the store stays as it was
            self.message.object = f"**Not done:** {as_text(one_line(e))}"
        self.after_action()

    def _speed(self, event) -> None:
        if self.may_change and event.new != self.state.speed:
            self.state.speed = event.new

    def _show_speed(self) -> None:
        """The list shows the store's speed: one set by another console sharing the store, or
        by the caller (`Workbench(speed=...)`), and a speed the list does not offer, named."""
        speed = self.state.speed
        if self.speed.value != speed:
            if speed not in self.speed.options.values():
                self.speed.options = speed_options(speed)
            self.speed.value = speed

    def _play(self, event) -> None:
        self.play.label = "Pause" if event.new else "Run"
        if event.new == self.state.running:
            return
        self._guard(self.state.play if event.new else self.state.pause)
        if self.play.value != self.state.running:
            self.play.value = self.state.running

    def _load(self, _event) -> None:
        trace = self.trace.value.strip() or "default"
        if names_a_file(trace) and not self.may_read_files:
            self.message.object = ("**Not done:** loading a trace from a file on the server needs"
                                   " the access token (the URL `workbench serve` printed with"
                                   " `?token=…`); the built-in workloads load without it")
            return
        self.message.object = as_text(f"loading {trace} on {self.cluster.value}…")
        self._guard(self.state.load, trace, self.cluster.value, self.new_policy.value)

    def _read_contexts(self, choose: str | None = None, quiet: bool = False) -> None:
        """Fill the context picker from the kubeconfig file (its current context chosen)."""
        path = self.kubeconfig.value.strip()
        if not self.real_ok or not path:
            self.context.options = []
            return
        try:
            names, current = kubeconfig_contexts(path)
        except ConfigError as e:
            self.context.options = []
            if not quiet:
                self.message.object = f"**Not connected:** {as_text(str(e))}"
            return
        self.context.options = names
        self.context.value = choose if choose in names else current

    async def _connect(self, _event) -> None:
        """Connect the store to the chosen Kubernetes context (in a worker thread: it may take
        seconds); any failure is one line in the message, and the store stays as it was."""
        import asyncio

        if not self.may_connect:
            self.message.object = ("**Not done:** connecting to a Kubernetes cluster needs the"
                                   " access token")
            return
        path, context = self.kubeconfig.value.strip(), self.context.value or ""
        if not path:
            self.message.object = "**Not connected:** give the path of a kubeconfig file"
            return
        if not context:
            self._read_contexts()
            context = self.context.value or ""
            if not context:
                return  # _read_contexts said why
        where = f"{context} ({path})"
        self.message.object = as_text(f"connecting to {where}…")
        self.connect.disabled = True
        try:
            job = self.state.prepare_connect(path, context, self.namespace.value.strip(),
                                             self.k8s_policy.value, **self.connect_options)
            fresh = await asyncio.to_thread(job)
            try:
                self.state.adopt(fresh)
            except BaseException:
                fresh.close()
                raise
        except Exception as e:  # noqa: BLE001 - one clear line, the console carries on
            self.message.object = f"**Not connected:** {as_text(one_line(e))}"
        finally:
            self.connect.disabled = not self.may_connect
        # After an await a served session no longer holds its document's lock, which changing
        # the views' Bokeh sources needs: redraw on the session's next tick, which holds it.
        doc = pn.state.curdoc
        if doc is not None and doc.session_context is not None:
            doc.add_next_tick_callback(self.after_action)
        else:
            self.after_action()

    # ---- presentation ---------------------------------------------------------------------

    def _show_backend_box(self) -> None:
        k8s = self.backend_kind.value == BACKENDS[1]
        self.sim_box.visible, self.k8s_box.visible = not k8s, k8s

    def _follow_backend(self) -> None:
        """Show the controls that fit the backend the store is on (the controls may move it to
        another): a real cluster runs on its own clock and has no end or speed."""
        if self._kind == self.state.kind:
            return
        self._kind = self.state.kind
        simulated = self.state.simulated
        self.to_end.visible = self.speed.visible = simulated
        self.backend_kind.value = BACKENDS[0] if simulated else BACKENDS[1]
        if not simulated and self.state.connection:
            c = self.state.connection
            if self.real_ok and c.get("kubeconfig") and self.kubeconfig.value != c["kubeconfig"]:
                self.kubeconfig.value = c["kubeconfig"]
            if c.get("context") in self.context.options:
                self.context.value = c["context"]
        self.switch.reset()
        self._lock()

    def _lock(self) -> None:
        locked = not self.may_change
        for w in (self.play, self.step, self.to_end, self.load, self.speed, self.cluster,
                  self.trace, self.new_policy):
            w.disabled = locked
        for w in (self.kubeconfig, self.context, self.namespace, self.k8s_policy, self.connect):
            w.disabled = not self.may_connect
        self.k8s_note.object = "" if self.may_connect else \
            "Connecting to a Kubernetes cluster needs the access token."
        self.switch.lock(locked)
        self.lock_note.visible = locked
        self.lock_note.object = ("**Read-only view.** Changing this cluster needs the access"
                                 " token: open the URL printed by `workbench serve` (it ends in"
                                 " `?token=…`).")

    def sync(self) -> None:
        self._follow_backend()
        super().sync()
        self.switch.sync()
        if self.play.value != self.state.running:
            self.play.value = self.state.running
        self._show_speed()
        msg = self.state.message or self.state.scheduler_error
        if msg and msg != self._last_message:
            self._last_message = msg
            self.message.object = msg

    _last_message = ""

    def update(self) -> None:
        s = self.state.summary
        if not s:
            return
        state_word = "finished" if self.state.finished else \
            "running to the end" if self.state.running and self.state.to_end else \
            "running" if self.state.running else "paused"
        deadlines = ""
        if s["deadline_hits"] or s["deadline_misses"]:
            deadlines = f" · deadlines met {s['deadline_hits']}, missed {s['deadline_misses']}"
        st = self.state
        if st.simulated:
            when = clock_text(st.now - st.time_origin)
        else:  # the wall clock, and the console's hours (its clock may run faster: emulated)
            speed = st.clock_speed
            fast = f" on the cluster clock (×{speed:g})" if speed != 1.0 else ""
            when = (f"{wall_text(st.wall_time(st.now))} · {st.hours(st.now):.2f} h{fast}"
                    " since connected")
        self.clock.object = (
            f"### {when} · {state_word}\n"
            f"**{s['gpus_used']:g}/{s['gpus_total']:g} GPUs** in use on {s['nodes_up']}/{s['nodes']}"
            f" nodes · {s['running']} running · {s['queued']} queued · {s['completed']} completed"
            f" · {s['rejected']} rejected · {s['to_arrive']} yet to arrive{next_arrival_text(st, s)}"
            f"{deadlines}"
            f"{pace_text(st)}")
        self.engine.object = (f"**Engine now: {s['policy']}** · simulated cluster"
                              f" *{self.state.cluster_name}*, workload *{self.state.workload}*"
                              if self.state.simulated else
                              f"**Engine now: {s['policy']}** · Kubernetes"
                              f" *{self.state.cluster_name}*, {self.state.workload}")
