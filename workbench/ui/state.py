"""The app's state store: one `param.Parameterized` holding the backend, the controller and
everything the views draw. It holds no widgets; views watch its parameters (`version` bumps
once per refresh) and call its methods.

    state = WorkbenchState.from_workload(trace="default", cluster="default", policy="tiresias")
    state.step()                       # one scheduling round
    state.advance(3600)                # an hour of simulated time
    preview = state.preview_switch("fifo")   # what the switch is forecast to change
    state.switch_policy("fifo")        # live, from the next round on
    result = state.what_if()           # every engine from here to the end

On a real cluster (not the simulator) the controls that change it can be locked
(`controls_locked`); the methods that would change it then raise `PermissionError`.

    state.connect("~/.kube/config", context="prod", namespace="ml")   # now a real cluster
    state.load("default", "small")                                     # and a simulation again

Times: the backend's clock is in seconds; every view shows hours from `time_origin` (see
`hours`): the trace start (0) on the simulator, the moment the console connected on a real
cluster (whose clock is Unix time), so a cluster shows hours since then, not since 1970.
`wall_time` turns a real cluster's clock into Unix time for a wall-clock display.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import param

from ..control import Controller
from ..metrics import FragmentationMeter, fragmented_share, run_metrics
from ..model import JobState, JobStatus
from ..placement.plugins import PLACEMENT_PLUGINS
from ..placement.state import workload_of_jobs
from ..policies import available, make_policy
from ..policies.base import placement_engines
from .data import (
    CellPainter,
    ClusterCells,
    ClusterLayout,
    JobsTable,
    cluster_layout,
    gpu_holders,
    job_sort_key,
)
from .forecasting import JobForecaster

TIMELINE_COLUMNS = ["time_h", "policy", "gpu_util", "cpu_util", "queued", "running", "completed",
                    "deadline_hits", "deadline_misses", "gpu_frag"]
_STATE_RANK = {JobState.RUNNING: 0, JobState.RESTARTING: 1, JobState.HOLDING: 2,
               JobState.PENDING: 3}
FORECAST_BUDGET = 0.025  # seconds of forecasting per refresh, amortised
ENGINE_HISTORY = 2000  # samples of each numeric engine-view series kept for the charts


@dataclass
class SwitchPreview:
    """What switching from `current` to `candidate` is forecast to change over `horizon` s."""

    current: str
    candidate: str
    start: float
    horizon: float
    table: pd.DataFrame  # one row per policy: completed, deadline hits, JCT, queue, utilisation
    changes: pd.DataFrame  # jobs whose outcome differs most
    decisions: pd.DataFrame  # the first decisions each policy would take
    seconds: float

    def comparison(self) -> pd.DataFrame:
        """The table transposed: one row per measure, one column per engine (fits a sidebar)."""
        labels = {"completed": "jobs completed", "deadline_hits": "deadlines met",
                  "mean_jct_h": "mean JCT of those (h)", "queued_at_end": "queued at the end",
                  "gpu_util": "GPU allocation", "restarts": "restarts (all jobs)"}
        t = self.table.set_index("policy")[list(labels)].T
        t.index = [labels[i] for i in t.index]
        out = t.reset_index(names="over the horizon")
        for c in out.columns[1:]:
            out[c] = [_short(v, k) for v, k in zip(out[c], labels)]
        return out

    def summary(self) -> str:
        t = self.table.set_index("policy")
        a, b = t.iloc[0], t.iloc[1]
        parts = [f"completions {a.completed:.0f} → {b.completed:.0f}",
                 f"queued at end {a.queued_at_end:.0f} → {b.queued_at_end:.0f}"]
        if not (math.isnan(a.mean_jct_h) or math.isnan(b.mean_jct_h)):
            parts.append(f"mean JCT of those {a.mean_jct_h:.2f} h → {b.mean_jct_h:.2f} h")
        if a.deadline_jobs or b.deadline_jobs:
            parts.append(f"deadlines met {a.deadline_hits:.0f} → {b.deadline_hits:.0f}")
        return f"over the next {self.horizon / 3600:g} h: " + ", ".join(parts)


@dataclass
class WhatIfResult:
    start: float
    until: float | None
    table: pd.DataFrame  # one row per engine
    jct_h: dict[str, np.ndarray] = field(default_factory=dict)  # completed jobs' JCT per engine
    seconds: float = 0.0


class WorkbenchState(param.Parameterized):
    """The single source of truth of the app. No widgets in here."""

    policy = param.String(default="", doc="the engine scheduling now")
    candidate = param.Selector(default=None, objects=[], allow_None=True,
                               doc="an engine the user considers switching to")
    running = param.Boolean(default=False, doc="the simulator advances on every tick")
    speed = param.Number(default=600.0, bounds=(1.0, 1e7),
                         doc="simulated seconds per wall-clock second")
    period_ms = param.Integer(default=500, bounds=(50, 60_000), doc="tick period of the app")
    preview_horizon = param.Number(default=4 * 3600.0, bounds=(60.0, None),
                                   doc="how far ahead a switch preview looks (s)")
    what_if_budget_s = param.Number(default=60.0, bounds=(0.1, None),
                                    doc="wall-clock seconds each engine may run in a what-if")
    max_job_rows = param.Integer(default=500, doc="finished jobs beyond this many are not listed")

    now = param.Number(default=0.0, doc="backend clock, seconds")
    version = param.Integer(default=0, doc="bumped once per refresh; views watch it")
    layout_version = param.Integer(default=0, doc="bumped when the cluster itself changes")
    finished = param.Boolean(default=False)
    controls_locked = param.Boolean(default=False,
                                    doc="changing a real cluster needs authentication")
    busy = param.String(default="", doc="what long computation is running, if any")
    message = param.String(default="")

    cells = param.Parameter(default=None, doc="ClusterCells of the cluster view")
    summary = param.Dict(default={}, doc="headline numbers")
    engine = param.Dict(default={}, doc="the active engine's engine_view()")
    preview = param.Parameter(default=None, doc="SwitchPreview of `candidate`")
    what_if_result = param.Parameter(default=None, doc="WhatIfResult of the last what-if")

    def __init__(self, backend, policy: str | Any = "tiresias", *, controller: Controller | None = None,
                 workload: str = "", cluster: str = "", **params) -> None:
        super().__init__(**params)
        if not hasattr(backend, "fork") and controller is None:
            backend = ObservedBackend(backend)
        self.backend = backend
        pol = make_policy(policy) if isinstance(policy, str) else policy
        self.controller = controller or Controller(backend, pol)
        self.workload = workload
        self.cluster_name = cluster
        self.perf = getattr(backend, "perf", None)
        self.connection: dict[str, str] = {}  # a real cluster's kubeconfig, context, namespace
        self.time_origin = _time_origin(backend)
        self._forecaster = JobForecaster(self.perf)
        self._jobs_table = JobsTable(origin=self.time_origin)
        self._forecasts: dict[str, Any] = {}
        self._forecast_version = -1
        self._forecast_every = 1  # refreshes a forecast may lag behind (more when it is slow)
        self._jobs_df: pd.DataFrame | None = None
        self._jobs_version = -1
        self._listed: list[JobStatus] = []
        self.forecast_seconds = 0.0
        first = backend.observe() if self.simulated else backend.last_observed()
        self.layout: ClusterLayout = cluster_layout(list(first.nodes))
        self._painter = CellPainter(len(self.layout.nodes), self.layout.max_gpus)
        self._finished: list[JobStatus] = []  # newest last
        self._seen_jobs = 0
        self._active_before: dict[str, JobStatus] = {}
        self.param.candidate.objects = available() + [
            f"{e}+{p}" for e in placement_engines() for p in PLACEMENT_PLUGINS]
        self.engine_history: dict[str, list[tuple[float, Any]]] = {}
        self.last_action: dict[str, str] = {}
        self._decision_cursor = 0
        self.refresh_seconds = 0.0
        self.advance_seconds = 0.0
        self._last_tick = -math.inf
        self.policy = self.controller.policy.name
        self.refresh()

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, policy: str = "tiresias", *,
                        namespace: str | None = None, context: str | None = None,
                        clock_speed: float = 1.0, **params) -> WorkbenchState:
        """A real Kubernetes cluster (pods with schedulerName=workbench) from `kubeconfig`'s
        `context` (default: its current one), scheduled by `policy` once `play()` is called;
        nothing is touched before. `clock_speed`: the backend clock's speed-up (to match an
        emulated cluster's fast clock)."""
        from ..k8s.backend import K8sBackend, load_api_client

        api_client = load_api_client(kubeconfig, pool_size=24, context=context)
        _probe(api_client, context)  # one quick, clear error when it is not there
        try:
            backend = K8sBackend(api_client, namespace=namespace, serve=True, speed=clock_speed)
        except BaseException:
            api_client.close()
            raise
        where = str(kubeconfig or "kubeconfig") + (f" ({context})" if context else "")
        try:
            state = cls(backend, policy, workload=f"namespace {namespace or 'all'}",
                        cluster=where, **params)
        except BaseException:
            backend.close()
            raise
        state.connection = {"kubeconfig": str(kubeconfig or ""), "context": context or "",
                            "namespace": namespace or ""}
        return state

    @classmethod
    def from_workload(cls, trace: str = "default", cluster: str | None = "default",
                      policy: str = "tiresias", *, seed: int = 0, limit: int | None = None,
                      jobs: Sequence | None = None, nodes: Sequence | None = None,
                      **params) -> WorkbenchState:
        """A simulated cluster (`cluster` preset or NxG) running the jobs of `trace`."""
        from ..clusters import parse_cluster
        from ..sim import SimBackend
        from ..traces import load_trace

        sim_keys = {"restart_delay", "checkpoint_interval", "faults", "contention"}
        sim_options = {k: params.pop(k) for k in list(params) if k in sim_keys}
        if jobs is None:
            jobs = load_trace(trace, seed=seed)
            if limit is not None:
                jobs = sorted(jobs, key=lambda j: j.arrival)[:limit]
        if nodes is None:
            if cluster is None and str(trace).split(":")[0] == "philly":
                cluster = "philly"
            nodes = parse_cluster(cluster)
        backend = SimBackend(nodes, jobs, **sim_options)
        state = cls(backend, policy, workload=str(trace), cluster=str(cluster), **params)
        if jobs:  # the timeline's fragmentation, against the workload's task sizes
            state.recorder.fragmentation = FragmentationMeter(workload_of_jobs(jobs))
        return state

    def load(self, trace: str = "default", cluster: str | None = "default",
             policy: str | None = None, **options) -> None:
        """Start over on a new simulated cluster and workload (the views follow). Leaves a
        real cluster the store was on (its jobs stay as they are)."""
        self._require_control()
        fresh = WorkbenchState.from_workload(trace, cluster, policy or self.policy, **options)
        self.adopt(fresh, f"loaded {trace} on {cluster}")

    def connect(self, kubeconfig: str | None = None, context: str | None = None,
                namespace: str | None = None, policy: str | None = None, **options) -> None:
        """Switch to a real Kubernetes cluster: `kubeconfig`'s `context` (default its current
        one), jobs in `namespace` (None: every namespace), scheduled by `policy` once played
        (nothing is touched before). `options` go to `from_kubeconfig` (`clock_speed`). On
        failure (no such file or context, server unreachable) raises `ConfigError` with one
        line, and the store stays on its current backend."""
        self._require_control()
        fresh = self.prepare_connect(kubeconfig, context, namespace, policy, **options)()
        self.adopt(fresh)

    def prepare_connect(self, kubeconfig: str | None = None, context: str | None = None,
                        namespace: str | None = None, policy: str | None = None,
                        **options) -> Callable[[], WorkbenchState]:
        """A function that connects and returns a store on the cluster, for `adopt` (it touches
        nothing of this store, so it may run in a worker thread: connecting can take seconds)."""
        self._require_control()
        name = policy or self.policy
        _require_known(name)

        def run() -> WorkbenchState:
            return WorkbenchState.from_kubeconfig(kubeconfig or None, name, context=context or None,
                                                  namespace=namespace or None, **options)

        return run

    def adopt(self, fresh: WorkbenchState, message: str | None = None) -> None:
        """Take `fresh`'s backend, controller and derived state (a new simulation or a cluster
        connected to): the views follow. The backend left behind is closed."""
        self._require_control()
        self.close()
        self._scheduler, self.scheduler_error = None, ""
        self.backend, self.controller = fresh.backend, fresh.controller
        self.workload, self.cluster_name, self.perf = fresh.workload, fresh.cluster_name, fresh.perf
        self.time_origin, self.connection = fresh.time_origin, fresh.connection
        self._forecaster, self._forecasts = fresh._forecaster, {}
        self._forecast_version, self._jobs_version = -1, -1
        self.layout = fresh.layout
        self._painter, self._jobs_table = fresh._painter, fresh._jobs_table
        self._listed, self._finished, self._seen_jobs, self._active_before = [], [], 0, {}
        self.engine_history, self.last_action, self._decision_cursor = {}, {}, 0
        if message is None:
            message = (f"loaded {fresh.workload} on {fresh.cluster_name}" if fresh.simulated else
                       f"connected to {fresh.cluster_name}, {fresh.workload}: paused, press Run"
                       " to schedule its pending jobs")
        self.param.update(policy=self.controller.policy.name, finished=False, preview=None,
                          candidate=None, what_if_result=None, running=False, message=message)
        self.cluster_state = fresh.cluster_state
        self.layout_version += 1  # views redraw their geometry first, then their data
        self.refresh()

    # ---- facts ------------------------------------------------------------------------------

    @property
    def simulated(self) -> bool:
        """A simulator (it can fork and jump its clock); otherwise a real cluster."""
        return hasattr(self.backend, "fork")

    @property
    def recorder(self):
        return self.controller.recorder

    @property
    def kind(self) -> str:
        return "simulated" if self.simulated else "kubernetes"

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
        clock = getattr(self.backend, "clock", None)
        origin, speed = getattr(clock, "origin", None), getattr(clock, "speed", None)
        if origin is None or not speed:
            return t
        return origin + (t - origin) / speed

    @property
    def time_label(self) -> str:
        """The views' time axis."""
        return "simulated time (h)" if self.simulated else "hours since the console connected"

    def _require_control(self) -> None:
        if self.controls_locked:
            raise PermissionError("controls are locked: changing this cluster needs the access token")

    # ---- moving the clock -------------------------------------------------------------------

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

    def advance(self, seconds: float, max_rounds: int | None = 2000) -> None:
        """Run the simulator `seconds` forward (at most `max_rounds` rounds, to stay responsive)."""
        self._require_control()
        if not self.simulated:
            raise TypeError("only the simulator's clock can be moved; a real cluster runs on"
                            " its own (play/pause)")
        t0 = time.perf_counter()
        self.controller.run(until=self.backend.now + seconds, max_rounds=max_rounds)
        self.advance_seconds = time.perf_counter() - t0
        self._after_move()

    def run_to_end(self) -> None:
        self._require_control()
        if not self.simulated:
            raise TypeError("a real cluster has no end to run to")
        self.controller.run()
        self._after_move()

    def tick(self) -> None:
        """Called by the app's periodic callback: advance if running, then refresh. Several
        sessions may share one store and all tick it: only one tick per period counts."""
        now = time.monotonic()
        if now - self._last_tick < 0.8 * self.period_ms / 1000.0:
            return
        self._last_tick = now
        if not self.simulated:
            self.refresh()  # the scheduler thread moves a real cluster
        elif self.running and not self.finished and not self.busy:
            try:
                self.advance(self.speed * self.period_ms / 1000.0)
            except PermissionError:
                self.running = False

    def play(self) -> None:
        """Let the scheduler run: the simulator advances on each tick; on a real cluster a
        scheduler thread runs the Controller's loop until paused."""
        self._require_control()
        if self.finished:
            return
        self.running = True
        if not self.simulated and not self._scheduler_alive():
            self._scheduler = threading.Thread(target=self._schedule_loop, daemon=True,
                                               name="workbench-ui-scheduler")
            self._scheduler.start()

    def pause(self) -> None:
        """Stop scheduling (on a real cluster after the round or wait in progress)."""
        self.running = False

    _scheduler: threading.Thread | None = None

    def _scheduler_alive(self) -> bool:
        return self._scheduler is not None and self._scheduler.is_alive()

    def _schedule_loop(self) -> None:
        # Runs in its own thread; touches no parameter (their watchers drive Bokeh documents).
        while self.running:
            try:
                report = self.controller.step()
            except Exception as e:  # noqa: BLE001 - the console shows it; scheduling stops
                self.scheduler_error = f"scheduler stopped: {e}"
                return
            if report is None and self.backend.done():
                return

    scheduler_error = ""

    def close(self) -> None:
        """Stop scheduling and let go of the backend (a real cluster's watches and threads;
        the cluster itself and its jobs are left as they are)."""
        self.running = False
        if not self.simulated:
            self.backend.interrupt()  # a scheduler thread waiting for a change returns now
            if self._scheduler is not None:
                self._scheduler.join(timeout=30)
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()

    def _after_move(self) -> None:
        if self.backend.done():
            self.running = False
            self.finished = True
        self.refresh()

    # ---- policies ---------------------------------------------------------------------------

    def switch_policy(self, name: str) -> None:
        """Use engine `name` from the next round on; no job is touched by the switch itself."""
        self._require_control()
        new = _engine(name)
        name = new.name
        if name == self.controller.policy.name and self.controller._pending_switch is None:
            return
        self.controller.switch(new)
        self.engine_history = {}
        now = self.backend.now
        when = f"{self.hours(now):.2f} h" if self.simulated else \
            time.strftime("%H:%M:%S UTC", time.gmtime(self.wall_time(now)))
        self.param.update(policy=name, preview=None, candidate=None,
                          message=f"switched to {name} at {when}")
        # Take the switch now so the next round (and the timeline marker) is the new engine's.
        self.controller._take_switch()
        self.refresh()

    @param.depends("candidate", watch=True)
    def _preview_candidate(self) -> None:
        if self.candidate and self.candidate != self.policy and self.simulated:
            self.preview = self.preview_switch(self.candidate)
        else:
            self.preview = None

    def preview_switch(self, name: str, horizon: float | None = None) -> SwitchPreview:
        """Fork the simulator and run the current engine and `name` side by side for
        `horizon` seconds: what the switch is forecast to change."""
        return self.prepare_preview(name, horizon)()

    def prepare_preview(self, name: str, horizon: float | None = None
                        ) -> Callable[[], SwitchPreview]:
        """Fork now; return a function computing the preview on the fork (thread-safe: it
        touches nothing of this store)."""
        if not self.simulated:
            raise TypeError("a switch preview needs the simulator (it forks the state)")
        cur = self.controller.policy
        new = _engine(name)
        name = new.name
        if name == cur.name:
            raise ValueError(f"{name} is already the engine scheduling now")
        horizon = float(horizon or self.preview_horizon)
        try:
            keep = copy.deepcopy(cur)  # keeps the engine's learning state
        except Exception:  # noqa: BLE001 - an engine that cannot be copied starts afresh
            keep = make_policy(cur.name)
        base = self.backend.fork()
        start = base.now
        base_usage = copy.copy(getattr(base, "usage", None))

        def run() -> SwitchPreview:
            t0 = time.perf_counter()
            runs = Controller(base, keep).what_if({cur.name: keep, name: new},
                                                  until=start + horizon)
            rows, outcomes, decisions = [], {}, []
            for label, twin in runs.items():
                rows.append(_horizon_row(label, twin, start, base_usage))
                outcomes[label] = {j.name: j for j in twin.backend.jobs.values()}
                acts = [d for d in twin.recorder.decisions if d.action != "Wait"][:12]
                decisions += [{"policy": label, "time_h": d.time / 3600, "action": d.action,
                               "job": d.job, "reason": d.reason} for d in acts]
            changes = _job_changes(outcomes[cur.name], outcomes[name], cur.name, name, start)
            return SwitchPreview(cur.name, name, start, horizon, pd.DataFrame(rows), changes,
                                 pd.DataFrame(decisions, columns=["policy", "time_h", "action",
                                                                  "job", "reason"]),
                                 time.perf_counter() - t0)

        return run

    def what_if(self, policies: Sequence[str] | None = None, until: float | None = None,
                budget_s: float | None = None) -> WhatIfResult:
        """Fork the current state and run every engine (or `policies`) to the end (or `until`),
        each for at most `budget_s` seconds of wall time (default `what_if_budget_s`)."""
        result = self.prepare_what_if(policies, until, budget_s)()
        self.what_if_result = result
        return result

    def prepare_what_if(self, policies: Sequence[str] | None = None, until: float | None = None,
                        budget_s: float | None = None) -> Callable[[], WhatIfResult]:
        """Fork now; return a function that runs the engines on the fork. The function touches
        nothing of this store, so it may run in a worker thread while the app goes on."""
        if not self.simulated:
            raise TypeError("a what-if needs the simulator (it forks the state)")
        names = list(policies or available())
        unknown = [n for n in names if n not in available()]
        if unknown:
            raise KeyError(f"unknown engine(s) {', '.join(unknown)}; available: {', '.join(available())}")
        budget = float(self.what_if_budget_s if budget_s is None else budget_s)
        base = self.backend.fork()
        start = base.now

        def run() -> WhatIfResult:
            t0 = time.perf_counter()
            rows, jct = [], {}
            for name in names:
                twin = Controller(base.fork(), make_policy(name))  # each engine its own copy
                t_engine = time.perf_counter()
                complete = _run_within(twin, until, t_engine + budget)
                m = run_metrics(twin.backend)
                rows.append({"policy": name, **{k: m[k] for k in (
                    "completed", "rejected", "unfinished", "avg_jct_h", "median_jct_h", "p95_jct_h",
                    "makespan_h", "avg_queue_h", "deadline_hit_rate", "gpu_alloc_util",
                    "restarts")}, "stalled": len(twin.stalled),
                    "ran_to_h": twin.backend.now / 3600,
                    "note": "" if complete else f"stopped after {budget:g} s of wall time",
                    "wall_s": time.perf_counter() - t_engine})
                jct[name] = np.array([(j.finish_time - j.spec.arrival) / 3600
                                      for j in twin.backend.jobs.values()
                                      if j.state is JobState.COMPLETED])
            return WhatIfResult(start, until, pd.DataFrame(rows), jct, time.perf_counter() - t0)

        return run

    # ---- derived data -----------------------------------------------------------------------

    def refresh(self) -> None:
        """Observe the backend and recompute everything the views draw."""
        t0 = time.perf_counter()
        state = self._look()
        if len(state.nodes) != len(self.layout.nodes) or any(
                a.name != b.name for a, b in zip(state.nodes, self.layout.nodes)):
            self.layout = cluster_layout(list(state.nodes))  # nodes joined or left
            self._painter = CellPainter(len(self.layout.nodes), self.layout.max_gpus)
            self.cluster_state = state
            self.layout_version += 1
        self.cluster_state = state
        holders = gpu_holders(self.backend, state)
        cells: ClusterCells = self._painter.paint(state, holders)
        self._absorb_decisions()
        self._listed = self._listed_jobs()
        engine = self._engine_view(state.now)
        self.param.update(now=state.now, cells=cells, engine=engine,
                          summary=self._summary(state, cells), version=self.version + 1)
        self.refresh_seconds = time.perf_counter() - t0

    def _look(self):
        """The state to show. On a real cluster the scheduler thread's last observation while
        it runs (an observation of our own would hide changes from its next round); while it
        is paused nobody else observes, so the console does, or it would show a stale cluster."""
        if self.simulated or not self._scheduler_alive():
            return self.backend.observe()
        return self.backend.last_observed()

    @property
    def forecasts(self) -> dict[str, Any]:
        """Job name -> forecast, computed when first asked for after a refresh. When one costs
        more than FORECAST_BUDGET it is recomputed only every few refreshes (the jobs keep
        their last forecast in between), so an update stays fast on big clusters."""
        behind = self.version - self._forecast_version
        if behind > 0 and (behind >= self._forecast_every or self._forecast_version < 0):
            t0 = time.perf_counter()
            self._forecasts = self._forecaster(self.cluster_state)
            self.forecast_seconds = time.perf_counter() - t0
            self.forecast_time = self.cluster_state.now
            self._forecast_version = self.version
            self._forecast_every = min(10, max(1, math.ceil(self.forecast_seconds / FORECAST_BUDGET)))
        return self._forecasts

    @property
    def jobs(self) -> pd.DataFrame:
        """The jobs table (see `data.JOB_COLUMNS`), built when first asked for after a refresh."""
        if self._jobs_version != self.version or self._jobs_df is None:
            self._jobs_df = self._jobs_table.frame(self._listed, self.forecasts, self.last_action)
            self._jobs_version = self.version
        return self._jobs_df

    forecast_time = 0.0

    def _listed_jobs(self) -> list[JobStatus]:
        """Active jobs (running first, then in arrival order), then the most recently finished
        ones. Incremental on the simulator: only jobs that arrived or left since last time."""
        backend = self.backend
        all_jobs, active = getattr(backend, "jobs", None), getattr(backend, "active", None)
        if not isinstance(all_jobs, dict) or not isinstance(active, dict):
            jobs = list(self.cluster_state.jobs.values())
            return sorted(jobs, key=job_sort_key)
        # list()/dict() copies are atomic under the GIL: safe while a scheduler thread writes.
        everything, active = list(all_jobs.values()), dict(active)
        new = everything[self._seen_jobs:]
        self._seen_jobs = len(everything)
        left = [j for name, j in self._active_before.items() if name not in active]
        done = [j for j in left + new if j.state.finished]
        done.sort(key=lambda j: (j.finish_time or 0.0, j.name))
        self._finished.extend(done)
        del self._finished[:-self.max_job_rows]
        self._active_before = active
        rank = _STATE_RANK
        listed = sorted(active.values(), key=lambda j: rank.get(j.state, 5))  # stable: arrival
        return listed + self._finished[::-1]

    def _absorb_decisions(self) -> None:
        decisions = self.recorder.decisions
        for d in decisions[self._decision_cursor:]:
            self.last_action[d.job] = (f"{d.action}{'' if d.applied else ' (refused)'}"
                                       f" @ {self.hours(d.time):.2f} h")
        self._decision_cursor = len(decisions)

    def _engine_view(self, now: float) -> dict[str, Any]:
        try:
            view = dict(self.controller.policy.engine_view() or {})
        except Exception as e:  # noqa: BLE001 - a teaching view must never stop the console
            view = {"error": f"engine_view() failed: {e}"}
        for key, value in view.items():
            point = _numeric_point(value)
            if point is not None:
                series = self.engine_history.setdefault(key, [])
                if not series or series[-1][0] != now:
                    series.append((now, point))
                    del series[:-ENGINE_HISTORY]
        return view

    def _summary(self, state, cells: ClusterCells) -> dict[str, Any]:
        tl = self.recorder.timeline
        last = tl[-1] if tl else None
        all_jobs = getattr(self.backend, "jobs", state.jobs)
        counts = {s: 0 for s in JobState}
        for j in list(all_jobs.values()):
            counts[j.state] += 1
        up = state.node_up
        total_gpus = float(state.capacity[up, 2].sum())
        return {
            "now_h": self.hours(state.now),
            "policy": self.controller.policy.name,
            "gpus_used": float(state.allocated[:, 2].sum()),
            "gpus_total": total_gpus,
            "nodes_up": int(up.sum()),
            "nodes": len(state.nodes),
            "running": counts[JobState.RUNNING] + counts[JobState.RESTARTING],
            "queued": counts[JobState.PENDING] + counts[JobState.HOLDING],
            "completed": counts[JobState.COMPLETED],
            "rejected": counts[JobState.REJECTED],
            "to_arrive": int(getattr(self.backend, "pending_arrivals", lambda: 0)()),
            "deadline_hits": last.deadline_hits if last else 0,
            "deadline_misses": last.deadline_misses if last else 0,
        }

    # ---- tables for the views --------------------------------------------------------------

    def timeline_frame(self, start: int = 0) -> pd.DataFrame:
        """Timeline samples from index `start` on (the views stream only the new ones)."""
        origin = self.time_origin
        rows = [((s.time - origin) / 3600, s.policy,
                 s.gpus_allocated / s.gpus_total if s.gpus_total else 0.0,
                 s.cpus_allocated / s.cpus_total if s.cpus_total else 0.0, s.queued, s.running,
                 s.completed, s.deadline_hits, s.deadline_misses, fragmented_share(s))
                for s in self.recorder.timeline[start:]]
        return pd.DataFrame.from_records(rows, columns=TIMELINE_COLUMNS)

    def switches_frame(self) -> pd.DataFrame:
        return pd.DataFrame([{"time_h": self.hours(t), "from": a, "to": b}
                             for t, a, b in self.recorder.switches], columns=["time_h", "from", "to"])

    def decisions_frame(self, last: int = 200, job: str | None = None,
                        include_waits: bool = True) -> pd.DataFrame:
        ds = self.recorder.why(job) if job else self.recorder.decisions[-max(last * 4, last):]
        if not include_waits:
            ds = [d for d in ds if d.action != "Wait"]
        ds = ds[-last:]
        columns = ["time_h", "policy", "action", "job", "applied", "reason", "detail"]
        df = pd.DataFrame([{"time_h": self.hours(d.time), "policy": d.policy, "action": d.action,
                            "job": d.job, "applied": d.applied, "reason": d.reason,
                            "detail": d.detail} for d in reversed(ds)], columns=columns)
        if not self.simulated:  # a real cluster: when, on the wall clock, too
            df.insert(1, "at", [_clock(self.wall_time(d.time)) for d in reversed(ds)])
        return df


# ---- helpers --------------------------------------------------------------------------------


def _require_known(name: str) -> None:
    """A one-line KeyError unless `name`'s engine (before any `+plugin`) is registered."""
    if name.partition("+")[0] not in available():
        raise KeyError(f"unknown engine {name!r}; available: {', '.join(available())}")


def _engine(name: str):
    """A fresh engine `name` (`fifo`, or `fifo+fgd` with a placement plugin); a one-line
    KeyError (unknown engine) or ConfigError (unknown plugin, or an engine that takes none)."""
    _require_known(name)
    return make_policy(name)


def _time_origin(backend) -> float:
    """Where the console's hours count from: the trace start (0) on the simulator; on a real
    cluster, whose clock is Unix time, the moment the console connected (its clock's epoch)."""
    if hasattr(backend, "fork"):
        return 0.0
    origin = getattr(getattr(backend, "clock", None), "origin", None)
    return float(origin if origin is not None else backend.now)


def _clock(unix: float | None) -> str:
    return "" if unix is None else time.strftime("%H:%M:%S", time.gmtime(unix))


def _probe(api_client, context: str | None, timeout: float = 5.0) -> None:
    """Ask the API server for its version: a clear one-line `ConfigError` now when it cannot
    be reached or refuses our credentials, rather than a watch that times out later."""
    from kubernetes.client.exceptions import ApiException

    from ..errors import ConfigError
    from ..k8s.rest import Rest

    server = getattr(api_client.configuration, "host", "?")
    where = f"{server}" + (f" (context {context})" if context else "")
    try:
        Rest(api_client).request("GET", "/version", timeout=timeout)
    except ApiException as e:  # it answered: reachable; only unknown credentials stop us here
        if e.status == 401:
            api_client.close()
            raise ConfigError(f"the API server at {where} refused the credentials:"
                              f" {e.status} {e.reason}") from None
    except Exception as e:  # noqa: BLE001 - one line, never a traceback
        api_client.close()
        reason = str(getattr(e, "reason", "") or e).splitlines()[0][:160]
        raise ConfigError(f"cannot reach the API server at {where}: {reason}") from None


def _short(value: Any, key: str) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "–"
    if key == "gpu_util":
        return f"{value:.0%}"
    if key == "mean_jct_h":
        return f"{value:.2f}"
    return f"{value:.0f}"


def _numeric_point(value: Any) -> Any:
    """A value worth a history chart: a number, or a flat dict of numbers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, np.number)) and math.isfinite(float(value)):
        return float(value)
    if isinstance(value, dict) and value and len(value) <= 64 and all(
            v is None or (isinstance(v, (int, float, np.number)) and not isinstance(v, bool))
            for v in value.values()):
        return {str(k): float("nan") if v is None else float(v) for k, v in value.items()}
    return None


class ObservedBackend:
    """A real cluster's backend as the store sees it: the Controller's own observations are
    kept, and the console shows the last one. The console must not observe by itself: on
    Kubernetes an observation also marks the changes seen so far as handled by a round."""

    def __init__(self, backend) -> None:
        self._backend = backend
        self._last: Any = None
        self._lock = threading.Lock()

    def observe(self):
        state = self._backend.observe()
        with self._lock:
            self._last = state
        return state

    def last_observed(self):
        with self._lock:
            last = self._last
        return last if last is not None else self.observe()

    def __getattr__(self, name: str) -> Any:
        if name == "fork":  # no fork; every observation is kept
            raise AttributeError(name)
        return getattr(self._backend, name)


def _run_within(controller: Controller, until: float | None, deadline: float) -> bool:
    """Run to the end (or `until`) in slices, stopping at the wall-clock `deadline`: a slow
    engine must not hold the what-if hostage. True when it got there."""
    backend = controller.backend
    while not backend.done():
        before = (backend.now, controller.rounds)
        controller.run(until=until, max_rounds=50)
        if until is not None and backend.now >= until:
            return True
        if (backend.now, controller.rounds) == before or controller.stalled:
            return True  # nothing more will happen (the run ended or stalled)
        if time.perf_counter() > deadline:
            return False
    return True


def _horizon_row(label: str, twin: Controller, start: float, base_usage) -> dict[str, Any]:
    jobs = list(twin.backend.jobs.values())
    done = [j for j in jobs if j.state is JobState.COMPLETED and j.finish_time > start]
    deadline = [j for j in done if j.spec.deadline is not None]
    hits = sum(1 for j in deadline if j.finish_time <= j.spec.deadline + 1e-9)
    missed_late = sum(1 for j in jobs if j.spec.deadline is not None and j.spec.deadline > start
                      and j.spec.deadline <= twin.backend.now
                      and not (j.state is JobState.COMPLETED and j.finish_time <= j.spec.deadline))
    jct = [(j.finish_time - j.spec.arrival) / 3600 for j in done]
    util = float("nan")
    u = getattr(twin.backend, "usage", None)
    if u is not None and base_usage is not None:
        cap = u.gpu_capacity - base_usage.gpu_capacity
        util = (u.gpu_allocated - base_usage.gpu_allocated) / cap if cap > 0 else float("nan")
    queued = sum(1 for j in twin.backend.active.values()
                 if j.state in (JobState.PENDING, JobState.HOLDING)) if hasattr(
                     twin.backend, "active") else 0
    return {"policy": label, "completed": len(done), "deadline_jobs": len(deadline) + missed_late,
            "deadline_hits": hits, "mean_jct_h": float(np.mean(jct)) if jct else float("nan"),
            "queued_at_end": queued, "gpu_util": util,
            "restarts": sum(j.restarts for j in jobs), "rounds": twin.rounds}


def _job_changes(a: dict[str, JobStatus], b: dict[str, JobStatus], name_a: str, name_b: str,
                 start: float, top: int = 12) -> pd.DataFrame:
    rows = []
    for name in set(a) | set(b):
        ja, jb = a.get(name), b.get(name)
        if ja is None or jb is None:
            continue
        if ja.state.finished and (ja.finish_time or 0) <= start:
            continue  # finished before the fork: the switch cannot change it
        fa = ja.finish_time if ja.state is JobState.COMPLETED else None
        fb = jb.finish_time if jb.state is JobState.COMPLETED else None
        if fa is None and fb is None:
            delta = 0.0 if ja.state == jb.state else 1e9
            if (ja.fraction_done - jb.fraction_done) and not delta:
                delta = abs(ja.fraction_done - jb.fraction_done) * 1e3
        elif fa is None or fb is None:
            delta = 1e8
        else:
            delta = abs(fa - fb)
        if delta < 1.0:
            continue
        rows.append({"job": name,
                     f"{name_a}": _outcome(ja), f"{name_b}": _outcome(jb), "_delta": delta})
    rows.sort(key=lambda r: -r["_delta"])
    df = pd.DataFrame(rows[:top], columns=["job", name_a, name_b, "_delta"])
    return df.drop(columns="_delta")


def _outcome(j: JobStatus) -> str:
    if j.state is JobState.COMPLETED:
        return f"done at {j.finish_time / 3600:.2f} h"
    if j.state is JobState.REJECTED:
        return "rejected"
    return f"{j.state.value}, {j.fraction_done:.0%} done"
