"""The app's state store: one `param.Parameterized` holding the backend, the controller and
everything the views draw. It holds no widgets; views watch its parameters (`version` bumps
once per refresh), read its properties and call its methods, never the backend's.

    state = WorkbenchState.from_workload(trace="default", cluster="default", policy="tiresias")
    state.step()                       # one scheduling round
    state.advance(3600)                # an hour of simulated time
    preview = state.preview_switch("fifo")   # what the switch is forecast to change
    state.switch_policy("fifo")        # live, from the next round on
    result = state.what_if()           # every engine from here to the end

On a real cluster (not the simulator) the controls that change it can be locked
(`controls_locked`); the methods that would change it then raise `PermissionError`. Previews
and what-ifs work there too, on a simulator restored from the cluster's snapshot
(`state.snapshot()`; the results say when it was taken).

    state.connect("~/.kube/config", context="prod", namespace="ml")   # now a real cluster
    state.load("default", "small")                                     # and a simulation again

Times: the backend's clock is in seconds; every view shows hours from `time_origin` (see
`hours`): the trace start (0) on the simulator, the moment the console connected on a real
cluster (whose clock is Unix time), so a cluster shows hours since then, not since 1970.
`wall_time` turns a real cluster's clock into Unix time for a wall-clock display.

Set-up is `workbench.session`'s, previews and what-ifs `workbench.whatif`'s, the clock and
the scheduler thread `runner`'s, reaching a real cluster `connection`'s, and what a refresh
derives incrementally `tracking`'s.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

import pandas as pd
import param

from .. import whatif
from ..backend import Forkable, Snapshottable
from ..control import Controller, Recorder
from ..errors import AnotherSchedulerLeads, ConfigError, as_keyword, check_number
from ..k8s.leader import DEFAULT_LEASE, LeaseHolder, read_lease
from ..model import ClusterState, JobStatus
from ..policies import about, available, check_engine, make_policy
from ..session import load_jobs, load_nodes, simulate
from ..sim import SimBackend
from ..sim.snapshot import Snapshot
from ..stop import StopRequest
from ..sweeps.executors import shared_pool
from ..whatif import SwitchPreview, WhatIfResult
from .busy import BackgroundWork
from .connection import ObservedBackend, connect_backend
from .data import (
    CellPainter,
    ClusterLayout,
    JobsTable,
    cluster_layout,
    decisions_frame,
    gpu_holders,
    switches_frame,
    timeline_frame,
)
from .runner import RunControls
from .tracking import EngineHistory, ForecastCache, JobListing, LastActions, summary
from .waiting import EngineWord, why_now

SIM_OPTIONS = {"restart_delay", "checkpoint_interval", "faults", "contention"}
# the store's parameters a caller sets (`Workbench(speed=...)`); the others are its own
SETTINGS = ("running", "speed", "period_ms", "controls_locked", "preview_horizon",
            "what_if_budget_s", "parallel_forks", "max_job_rows")


class WorkbenchState(RunControls):
    """The single source of truth of the app. No widgets in here. Running, pausing and
    moving the clock are `RunControls`'s."""

    policy = param.String(default="", doc="the engine scheduling now")
    preview_horizon = param.Number(default=4 * 3600.0, bounds=(60.0, None),
                                   doc="how far ahead a switch preview looks (s)")
    what_if_budget_s = param.Number(default=60.0, bounds=(0.1, None),
                                    doc="wall-clock seconds each engine may run in a what-if")
    parallel_forks = param.Boolean(default=True, doc="previews and what-ifs run their forks"
                                   " side by side on the shared process pool")
    max_job_rows = param.Integer(default=500, doc="finished jobs beyond this many are not listed")

    now = param.Number(default=0.0, doc="backend clock, seconds")
    version = param.Integer(default=0, doc="bumped once per refresh; views watch it")
    layout_version = param.Integer(default=0, doc="bumped when the cluster itself changes")
    message = param.String(default="")

    cells = param.Parameter(default=None, doc="ClusterCells of the cluster view")
    summary = param.Dict(default={}, doc="headline numbers")
    engine = param.Dict(default={}, doc="the active engine's engine_view()")
    what_if_result = param.Parameter(default=None, doc="WhatIfResult of the last what-if")

    def __init__(self, backend, policy: str | Any = "tiresias", *,
                 controller: Controller | None = None, workload: str = "", cluster: str = "",
                 **params) -> None:
        super().__init__(**params)
        self.refresh_seconds = 0.0  # wall time of the last refresh
        self.background = BackgroundWork()  # previews and what-ifs running now, for the consoles
        if not isinstance(backend, Forkable) and controller is None:
            backend = ObservedBackend(backend)
        pol = make_policy(policy) if isinstance(policy, str) else policy
        first = backend.observe() if isinstance(backend, Forkable) else backend.last_observed()
        self._attach(backend, controller or Controller(backend, pol), workload, cluster, {}, first)
        self.policy = self.controller.policy.name
        self.refresh()

    def _attach(self, backend, controller: Controller, workload: str, cluster: str,
                connection: dict[str, str], first: ClusterState) -> None:
        """Take a run: its backend and controller, and fresh derived state for it."""
        self.backend, self.controller = backend, controller
        self.workload, self.cluster_name = workload, cluster
        self.connection = connection  # a real cluster's kubeconfig, context, namespace
        self._lease: tuple[float, LeaseHolder | None | str] | None = None  # (expires, what)
        self.time_origin = float(backend.clock.origin)
        self.perf = backend.perf if isinstance(backend, SimBackend) else None
        self._forecasts = ForecastCache(self.perf)
        self._jobs_table = JobsTable(origin=self.time_origin)
        self._jobs_df: pd.DataFrame | None = None
        self._jobs_version = -1
        self._listing, self._listed = JobListing(), []
        self._actions, self._engine = LastActions(), EngineHistory()
        self.cluster_state = first
        self.layout: ClusterLayout = cluster_layout(list(first.nodes))
        self._painter = CellPainter(len(self.layout.nodes), self.layout.max_gpus)

    @classmethod
    def check_settings(cls, params: dict[str, Any]) -> None:
        """A one-line ConfigError naming a setting the store does not have, or a number out of
        its bounds, as the caller typed it (Param's own message names 'RunControls.speed')."""
        own = cls.param.objects()
        for name, value in params.items():
            if name not in own and name not in SIM_OPTIONS:
                known = sorted({*SETTINGS, *SIM_OPTIONS})
                raise ConfigError(f"{name}: unknown setting; known: {', '.join(known)}")
            bounds = getattr(own.get(name), "bounds", None)
            if isinstance(own.get(name), param.Number) and bounds is not None:
                check_number(name, value, minimum=bounds[0], maximum=bounds[1])

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, policy: str = "tiresias", *,
                        namespace: str | None = None, context: str | None = None,
                        clock_speed: float | None = None, **params) -> WorkbenchState:
        """A real Kubernetes cluster (pods with schedulerName=workbench) from `kubeconfig`'s
        `context` (default: its current one), scheduled by `policy` once `play()` is called;
        nothing is touched before. `clock_speed`: the backend clock's speed-up (None: the one
        its emulated nodes say, else 1)."""
        backend = connect_backend(kubeconfig, context=context, namespace=namespace,
                                  clock_speed=clock_speed)
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
        """A simulated cluster (`cluster` preset or NxG) running the jobs of `trace` (or
        `jobs` on `nodes`, when given). Simulator options (`restart_delay`, `faults`, ...) go
        to the simulator, the rest to the store."""
        cls.check_settings(params)
        sim_options = {k: params.pop(k) for k in list(params) if k in SIM_OPTIONS}
        try:
            if jobs is None:
                jobs = load_jobs(trace, seed=seed, limit=limit)
            if nodes is None:
                nodes = load_nodes(trace, cluster)
        except ConfigError as e:  # the session's messages name the CLI's flags
            raise as_keyword(e) from None
        controller = simulate(nodes, jobs, policy, **sim_options)
        return cls(controller.backend, controller.policy, controller=controller,
                   workload=str(trace), cluster=str(cluster), **params)

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
        self.adopt(self.prepare_connect(kubeconfig, context, namespace, policy, **options)())

    def prepare_connect(self, kubeconfig: str | None = None, context: str | None = None,
                        namespace: str | None = None, policy: str | None = None,
                        **options) -> Callable[[], WorkbenchState]:
        """A function that connects and returns a store on the cluster, for `adopt` (it touches
        nothing of this store, so it may run in a worker thread: connecting can take seconds)."""
        self._require_control()
        name = policy or self.policy
        check_engine(name)

        def run() -> WorkbenchState:
            return WorkbenchState.from_kubeconfig(kubeconfig or None, name, context=context or None,
                                                  namespace=namespace or None, **options)

        return run

    def adopt(self, fresh: WorkbenchState, message: str | None = None) -> None:
        """Take `fresh`'s backend and controller (a new simulation or a cluster connected
        to): the views follow. The backend left behind is closed."""
        self._require_control()
        self.close()
        self._scheduler = None
        self._attach(fresh.backend, fresh.controller, fresh.workload, fresh.cluster_name,
                     fresh.connection, fresh.cluster_state)
        if message is None:
            message = (f"loaded {fresh.workload} on {fresh.cluster_name}" if fresh.simulated else
                       f"connected to {fresh.cluster_name}, {fresh.workload}: paused, press Run"
                       " to schedule its pending jobs")
        self.param.update(policy=self.controller.policy.name, finished=False,
                          what_if_result=None, running=False, message=message)
        self.layout_version += 1  # views redraw their geometry first, then their data
        self.refresh()

    # ---- facts ------------------------------------------------------------------------------

    @property
    def recorder(self) -> Recorder:
        return self.controller.recorder

    @property
    def engine_name(self) -> str:
        """The engine scheduling now."""
        return self.controller.policy.name

    @property
    def engine_about(self) -> str:
        """The first paragraph of the active engine's docstring (or its module's)."""
        return about(type(self.controller.policy))

    @property
    def engine_history(self) -> dict[str, list[tuple[float, Any]]]:
        """Key of the engine view -> [(time, value), ...] of its numeric values."""
        return self._engine.series

    @property
    def can_look_ahead(self) -> bool:
        """Previews and what-ifs can run: the simulator forks, a live cluster is snapshotted
        (see `whatif.look_ahead_base`)."""
        return isinstance(self.backend, (Forkable, Snapshottable))

    def _forkable(self, what: str) -> Any:
        if not self.can_look_ahead:
            raise TypeError(f"{what} needs a backend that can fork or take a snapshot")
        return self.backend

    # ---- engines: switching, previews, what-ifs ----------------------------------------------

    def switch_policy(self, name: str) -> None:
        """Use engine `name` from the next round on; no job is touched by the switch itself."""
        self._require_control()
        new = make_policy(name)
        name = new.name
        if name == self.controller.policy.name and self.controller.pending_switch is None:
            return
        self.controller.switch(new)
        self._engine = EngineHistory()
        now = self.backend.now
        when = f"{self.hours(now):.2f} h" if self.simulated else \
            time.strftime("%H:%M:%S UTC", time.gmtime(self.wall_time(now)))
        self.param.update(policy=name, message=f"switched to {name} at {when}")
        # Take the switch now so the next round (and the timeline marker) is the new engine's.
        self.controller.switch_now()
        self.refresh()

    def preview_switch(self, name: str, horizon: float | None = None) -> SwitchPreview:
        """Fork the simulator (a live cluster: a simulator restored from its snapshot) and run
        the current engine and `name` side by side for `horizon` seconds: what the switch is
        forecast to change."""
        return self.prepare_preview(name, horizon)()

    def prepare_preview(self, name: str, horizon: float | None = None
                        ) -> Callable[[], SwitchPreview]:
        """Fork now; return a function computing the preview on the fork (thread-safe: it
        touches nothing of this store)."""
        backend = self._forkable("a switch preview")
        if horizon is not None:  # (-1 and NaN ran a preview; 0 was the default 4 h, silently)
            check_number("horizon", horizon, minimum=self.param.preview_horizon.bounds[0])
        return self.background.track(
            f"forecasting a switch to {name}",
            whatif.prepare_preview(backend, self.controller.policy, make_policy(name),
                                   float(horizon or self.preview_horizon), self.executor(),
                                   last_round=self.controller.last_round))

    # ---- a live cluster's identity, and who else schedules it ------------------------------

    scheduler_lease = DEFAULT_LEASE  # (namespace, name) a `workbench schedule` replica holds

    def lease_holder(self, max_age: float = 5.0) -> LeaseHolder | None | str:
        """Who holds the scheduler Lease on a live cluster (read at most every `max_age` s):
        a `LeaseHolder`, None when no scheduler ever led there, or a one-line reason it could
        not be read (no RBAC for leases, say). None on the simulator."""
        api_client = None if self.simulated else getattr(self.backend, "api_client", None)
        if api_client is None:
            return None
        if self._lease is None or time.monotonic() > self._lease[0] or max_age <= 0:
            try:
                found: LeaseHolder | None | str = read_lease(
                    api_client, self.scheduler_lease[1], self.scheduler_lease[0], timeout=2.0)
            except Exception as e:  # noqa: BLE001 - shown, never fatal: the console still works
                found = f"lease {'/'.join(self.scheduler_lease)} unreadable: {e}"
            # an unreachable server is asked again only after 30 s: the read blocks a tick
            self._lease = (time.monotonic() + (30.0 if isinstance(found, str) else max_age), found)
        return self._lease[1]

    def identity(self) -> str:
        """What the console is on, in one line: the simulated cluster and workload, or the
        live cluster's API server, context, namespace, and who leads its scheduling."""
        if self.simulated:
            return f"cluster {self.cluster_name} · workload {self.workload}"
        server = getattr(getattr(getattr(self.backend, "api_client", None), "configuration",
                                 None), "host", "") or "?"
        c = self.connection
        parts = [f"Kubernetes cluster {server}", f"context {c.get('context') or 'current'}",
                 f"namespace {c.get('namespace') or 'all'}"]
        holder = self.lease_holder()
        parts.append("this console schedules" if self.running else
                     holder if isinstance(holder, str) else
                     holder.describe() if holder else "no workbench scheduler has led here")
        return " · ".join(parts)

    def play(self) -> None:
        """Run; on a live cluster refused while a `workbench schedule` holds the Lease (two
        schedulers would bind the same pods)."""
        holder = self.lease_holder(max_age=0.0)
        if isinstance(holder, LeaseHolder) and holder.live and not self.running:
            raise AnotherSchedulerLeads(f"{holder.describe()}: this console only watches; stop"
                                        " that scheduler (or use its engine) to run from here")
        super().play()

    def executor(self) -> Executor | None:
        """Where previews and what-ifs run their forks: the process's shared pool
        (`sweeps.executors.shared_pool`, one worker per core), or None (one after another on
        the calling thread) when `parallel_forks` is off or the run is on a live cluster: forking a
        process that holds a cluster's watch threads and connections hung the console (CI)."""
        live = not isinstance(self.controller.backend, Forkable)
        return shared_pool() if self.parallel_forks and not live else None

    def fork_workers(self) -> int:
        """How many forks of a preview or what-if run side by side (see `executor`)."""
        executor = self.executor()
        return 1 if executor is None else executor._max_workers  # (the pool's own count)

    def snapshot(self) -> Snapshot:
        """The run's present as a `Snapshot` (save it, or replay it with `workbench simulate
        --from-snapshot`)."""
        return self._forkable("a snapshot").snapshot(self.controller.policy.name)

    def what_if(self, policies: Sequence[str] | None = None, until: float | None = None,
                budget_s: float | None = None) -> WhatIfResult:
        """Fork the current state and run every engine (or `policies`) to the end (or `until`),
        each for at most `budget_s` seconds of wall time (default `what_if_budget_s`)."""
        result = self.prepare_what_if(policies, until, budget_s)()
        self.what_if_result = result
        return result

    def prepare_what_if(self, policies: Sequence[str] | None = None, until: float | None = None,
                        budget_s: float | None = None, stop: StopRequest | None = None,
                        done: Callable[[str], None] | None = None,
                        so_far: Callable[[WhatIfResult], None] | None = None
                        ) -> Callable[[], WhatIfResult]:
        """Fork now; return a function that runs the engines on the fork. The function touches
        nothing of this store, so it may run in a worker thread while the app goes on. `stop`,
        `done` and `so_far`: see `whatif.prepare_what_if`."""
        backend = self._forkable("a what-if")
        # (a budget of -1 or NaN, an `until` of NaN ran; 'x' was float()'s ValueError)
        budget = float(self.what_if_budget_s if budget_s is None else check_number(
            "budget_s", budget_s, minimum=0.0))
        if until is not None:
            until = check_number("until", until)
        if isinstance(policies, str):  # one name, or names at commas ("fifo" ran 'f', 'i', ...)
            policies = [p.strip() for p in policies.split(",") if p.strip()] or [policies]
        names = list(policies or available())
        return self.background.track(f"what-if of {len(names)} engine{'s' * (len(names) > 1)}",
                                     whatif.prepare_what_if(backend, names, until, budget,
                                                            self.executor(), stop, done,
                                                            so_far))

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
        cells = self._painter.paint(state, gpu_holders(self.backend, state))
        self._actions.absorb(self.recorder, self.hours)
        self._listed = self._listing(self.backend, self.max_job_rows)
        engine = self._engine.view(self.controller.policy, state.now, state)
        headline = summary(state, self.backend, self.recorder, self.controller.policy.name,
                           self.hours)
        self.param.update(now=state.now, cells=cells, engine=engine, summary=headline,
                          version=self.version + 1)
        self.refresh_seconds = time.perf_counter() - t0

    def _between_rounds(self, _now: float) -> None:
        self._engine.sample(self.controller.policy, self.controller.last_state)

    def _look(self) -> ClusterState:
        """The state to show. On a real cluster the scheduler thread's last observation while
        it runs (an observation of our own would hide changes from its next round); while it
        is paused nobody else observes, so the console does, or it would show a stale cluster."""
        if self.simulated or not self._scheduler_alive():
            return self.backend.observe()
        return self.backend.last_observed()

    def job_cells(self, name: str) -> list[int]:
        """The GPU cells (flat node x GPU indices of `cells`) job `name` holds now."""
        return self._painter.cells_of(name)

    def known_job(self, name: str) -> JobStatus | None:
        """Job `name` as the backend knows it, finished or not (None: no such job)."""
        return self.backend.jobs.get(name)

    def why_now(self, name: str) -> str:
        """Why job `name` is where it is, from the cluster as last observed (`waiting.why_now`):
        its current blocker, not the engine's last (possibly stale) word alone."""
        job = self.backend.jobs.get(name)
        if job is None:
            return "no such job"
        last = self._actions.last.get(name)
        said = EngineWord(job.reason, last.time if last is not None and last.reason == job.reason
                          else None)
        if self.simulated:  # nothing else moves the simulator: asking for its next round is safe
            return why_now(job, self.cluster_state, said, self.hours,
                           next_round=self.controller.next_round_time())
        return why_now(job, self.cluster_state, said, self.hours,
                       round_interval=self.controller.policy.round_interval)

    @property
    def forecasts(self) -> dict[str, Any]:
        """Job name -> forecast, computed when first asked for after a refresh (and less often
        when forecasting is slow: see `tracking.ForecastCache`)."""
        return self._forecasts.get(self.cluster_state, self.version)

    @property
    def forecast_seconds(self) -> float:
        return self._forecasts.seconds

    @property
    def forecast_time(self) -> float:
        """The clock of the state the forecasts were made from (before now when they lag)."""
        return self._forecasts.time

    @property
    def jobs(self) -> pd.DataFrame:
        """The jobs table (see `data.JOB_COLUMNS`), built when first asked for after a refresh."""
        if self._jobs_version != self.version or self._jobs_df is None:
            self._jobs_df = self._jobs_table.frame(self._listed, self.forecasts,
                                                   self._actions.by_job)
            self._jobs_version = self.version
        return self._jobs_df

    # ---- tables for the views --------------------------------------------------------------

    def timeline_frame(self, start: int = 0) -> pd.DataFrame:
        """Timeline samples from index `start` on (the views stream only the new ones)."""
        return timeline_frame(self.recorder.timeline[start:], self.time_origin)

    def switches_frame(self) -> pd.DataFrame:
        return switches_frame(self.recorder.switches, self.hours)

    def decisions_frame(self, last: int = 200, job: str | None = None,
                        include_waits: bool = True) -> pd.DataFrame:
        """The `last` decisions (of `job`; without waits), newest first; on a real cluster
        with the wall-clock time too."""
        if isinstance(last, bool) or not isinstance(last, numbers.Integral) or last < 0:
            raise ConfigError(f"last: expected a count of decisions (0 or more), got {last!r}")
        ds = self.recorder.why(job) if job else self.recorder.decisions[-max(last * 4, last):]
        if not include_waits:
            ds = [d for d in ds if d.action != "Wait"]
        return decisions_frame(ds[-last:] if last else [], self.hours,  # ([-0:]: all of them)
                               None if self.simulated else self.wall_time)
