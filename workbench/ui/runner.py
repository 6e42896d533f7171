"""Moving a run forward, the part of the store (`WorkbenchState` builds on `RunControls`)
that owns the clock: the simulator jumps on request and on the app's tick; a real cluster's
clock runs by itself, so a scheduler thread runs the Controller's loop while playing.

Kept apart from the store's data so the threading lives in one small place: the scheduler
thread touches no parameter of the store (their watchers drive Bokeh documents, which only
their own sessions may change); it reads `running` and keeps its error for the console.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

import param

from ..backend import Backend, Forkable
from ..control import Controller
from ..errors import ConfigError, check_number
from ..whatif import OneAtATime

SAMPLE_EVERY = 20  # rounds between two calls of `_between_rounds` while many rounds run


class SchedulerThread:
    """Runs `controller`'s rounds in a daemon thread while `keep_going()` is true; stops at
    the end of the run or at the first error, which it keeps in `error` for the console."""

    def __init__(self, controller: Controller, keep_going: Callable[[], bool]) -> None:
        self.controller = controller
        self.keep_going = keep_going
        self.error = ""
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name="workbench-ui-scheduler")

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        backend = self.controller.backend
        while self.keep_going():
            try:
                report = self.controller.step()
            except Exception as e:  # noqa: BLE001 - the console shows it; scheduling stops
                self.error = f"scheduler stopped: {e}"
                return
            if report is None and backend.done():
                return


class RunControls(param.Parameterized):
    """Run, pause, step, advance, run to the end, and the clock as the views show it; the
    store underneath supplies `backend`, `controller`, `time_origin` and `refresh()`. When
    `controls_locked`, every method that would change the run raises `PermissionError`."""

    running = param.Boolean(default=False, doc="the simulator advances on every tick")
    speed = param.Number(default=600.0, bounds=(1.0, 1e7),
                         doc="simulated seconds per wall-clock second")
    period_ms = param.Integer(default=500, bounds=(50, 60_000), doc="tick period of the app")
    finished = param.Boolean(default=False)
    controls_locked = param.Boolean(default=False,
                                    doc="changing a real cluster needs authentication")
    busy = param.String(default="", doc="what long computation is running, if any")
    to_end = param.Boolean(default=False, doc="running to the end as fast as the machine goes,"
                                              " a tick at a time (the console's Run to end)")

    backend: Backend
    controller: Controller
    version: int  # the store's refresh counter (a parameter of the store)
    time_origin = 0.0  # where the views' hours count from, on the backend clock
    advance_seconds = 0.0  # wall time of the last move
    _scheduler: SchedulerThread | None = None
    _last_tick = -math.inf

    def __init__(self, **params) -> None:
        super().__init__(**params)
        self.heavy = OneAtATime()  # what-ifs from the consoles on this store: one at a time
        # Pausing, playing and finishing change what the headline says but not the run's data:
        # views redraw on `version`, so these bump it too (else the headline keeps "running").
        self.param.watch(self._status_moved, ["running", "finished", "to_end", "speed"])
        self._ticks: deque[tuple[float, float]] = deque(maxlen=8)  # (wall, simulated) per tick

    def _status_moved(self, event) -> None:
        if event.name == "running" and not event.new:
            self.to_end = False  # paused or finished: a run to the end stops with it
        elif event.name == "speed":
            self.to_end = False  # a speed chosen while running to the end: on at that speed
        self._ticks.clear()  # the pace is measured afresh
        self.version += 1

    def refresh(self) -> None:
        raise NotImplementedError

    @property
    def simulated(self) -> bool:
        """A simulator (it can fork and jump its clock); otherwise a real cluster."""
        return isinstance(self.backend, Forkable)

    @property
    def kind(self) -> str:
        return "simulated" if self.simulated else "kubernetes"

    @property
    def clock_speed(self) -> float:
        """Backend seconds per wall second: 1 on a real cluster's own clock, more on an
        emulated one's fast clock; the simulator's clock jumps (see `speed`)."""
        return self.backend.clock.speed or 1.0

    def hours(self, t: float | None) -> float:
        """A time on the backend clock as the views show it: hours from `time_origin`."""
        if t is None or not math.isfinite(t):
            return float("nan")
        return (t - self.time_origin) / 3600.0

    def wall_time(self, t: float) -> float | None:
        """A real cluster's clock as Unix time (its clock may run faster than the wall's, to
        match an emulated cluster); None on the simulator."""
        if self.simulated:
            return None
        clock = self.backend.clock
        return t if not clock.speed else clock.origin + (t - clock.origin) / clock.speed

    @property
    def time_label(self) -> str:
        """The views' time axis."""
        return "simulated time (h)" if self.simulated else "hours since the console connected"

    def _require_control(self) -> None:
        if self.controls_locked:
            raise PermissionError("controls are locked: changing this cluster needs the access token")

    def step(self) -> None:
        """One scheduling round (the simulator jumps to it; a real cluster runs it now)."""
        self._require_control()
        t0 = time.perf_counter()
        if self.simulated:
            self.controller.step()
        elif not self._scheduler_alive():
            self.controller.round()  # while paused only: the scheduler thread owns the loop
        self.advance_seconds = time.perf_counter() - t0
        self._after_move()

    def advance(self, seconds: float, max_rounds: int | None = None) -> None:
        """Run the simulator `seconds` forward (or `max_rounds` rounds, if fewer)."""
        seconds = check_number("seconds", seconds, minimum=0)  # NaN ran the workload to its end
        if max_rounds is not None and (isinstance(max_rounds, bool) or check_number(
                "max_rounds", max_rounds, minimum=1) != int(max_rounds)):  # (-1, 2.5 ran on)
            raise ConfigError(f"max_rounds: expected a whole number >= 1, got {max_rounds!r}")
        self._require_control()
        if not self.simulated:
            raise TypeError("only the simulator's clock can be moved; a real cluster runs on"
                            " its own (play/pause)")
        t0 = time.perf_counter()
        self.controller.run(until=self.backend.now + seconds, max_rounds=max_rounds,
                            progress=self._between_rounds,
                            progress_every=SAMPLE_EVERY)
        self.advance_seconds = time.perf_counter() - t0
        self._after_move()

    def run_to_end(self, *, wait: bool = True) -> None:
        """Run the simulation to its end: at once (`wait`), or as fast as the machine goes but
        a tick at a time (`wait=False`, the console's button), so the console keeps answering
        and Pause stops it. At once, the Philly trace's replay held the server for the whole
        run, with no sign of progress."""
        self._require_control()
        if not self.simulated:
            raise TypeError("a real cluster has no end to run to")
        if wait:
            self.controller.run(progress=self._between_rounds, progress_every=SAMPLE_EVERY)
            self._after_move()
        elif not self.finished:
            self.to_end = True
            self.running = True

    def _run_for(self, seconds: float, until: float | None = None) -> None:
        """Rounds up to `until` (None: the end), stopping once `seconds` of wall time have gone
        (read every few rounds): the simulation then lags the speed asked for, as it must when
        the machine cannot keep up."""
        self._require_control()
        t0 = time.perf_counter()
        backend = self.backend
        while not backend.done() and (until is None or backend.now < until):
            self.controller.run(until=until, max_rounds=20, progress=self._between_rounds,
                            progress_every=SAMPLE_EVERY)
            if time.perf_counter() - t0 >= seconds:
                break
        self.advance_seconds = time.perf_counter() - t0
        self._after_move()

    def tick(self) -> None:
        """Called by the app's periodic callback: advance if running, then refresh. Several
        sessions may share one store and all tick it: only one tick per period counts. A tick
        runs rounds for at most 80 % of its period, the rest left to redraw and answer clicks
        (at 1 day / s on the Philly trace, a tick of 12 simulated hours took up to 0.84 s)."""
        now = time.monotonic()
        if now - self._last_tick < 0.8 * self.period_ms / 1000.0:
            return
        self._last_tick = now
        if not self.simulated:
            self.refresh()  # the scheduler thread moves a real cluster
        elif self.running and not self.finished and not self.busy:
            period = self.period_ms / 1000.0
            try:
                self._run_for(0.8 * period, None if self.to_end else
                              self.backend.now + self.speed * period)
            except PermissionError:
                self.running = False
            self._ticks.append((now, self.backend.now))

    @property
    def pace(self) -> float | None:
        """Simulated seconds per wall second over the last few ticks while running (below
        `speed` where the machine cannot keep up); None before two ticks."""
        if len(self._ticks) < 2 or self._ticks[-1][0] <= self._ticks[0][0]:
            return None
        (w0, s0), (w1, s1) = self._ticks[0], self._ticks[-1]
        return (s1 - s0) / (w1 - w0)

    def play(self) -> None:
        """Let the scheduler run: the simulator advances on each tick; on a real cluster a
        scheduler thread runs the Controller's loop until paused."""
        self._require_control()
        if self.finished:
            return
        self.running = True
        if not self.simulated and not self._scheduler_alive():
            self._scheduler = SchedulerThread(self.controller, lambda: self.running)
            self._scheduler.start()

    def pause(self) -> None:
        """Stop scheduling (on a real cluster after the round or wait in progress)."""
        self.running = False

    def _scheduler_alive(self) -> bool:
        return self._scheduler is not None and self._scheduler.alive

    @property
    def scheduler_error(self) -> str:
        """Why a real cluster's scheduler thread stopped, if it failed."""
        return self._scheduler.error if self._scheduler is not None else ""

    def close(self) -> None:
        """Stop scheduling and let go of the backend (a real cluster's watches and threads;
        the cluster itself and its jobs are left as they are)."""
        self.running = False
        self.backend.interrupt()  # a scheduler thread waiting for a change returns now
        if self._scheduler is not None:
            self._scheduler.join(timeout=30)
        self.backend.close()

    def _after_move(self) -> None:
        if self.backend.done():
            self.running = False
            self.finished = True
        self.refresh()

    def _between_rounds(self, _now: float) -> None:
        """Called every few rounds while the simulator runs many at once (the store samples its
        engine's view there)."""
