"""What the store derives from a run at each refresh, kept up incrementally so a refresh
costs little on big clusters and long traces: the jobs to list, each job's last action,
the active engine's teaching view with its history, the forecasts, the headline numbers.
One of each per run: the store makes new ones when it moves to another backend."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Backend, Forkable
from ..control import Decision, Recorder
from ..model import ClusterState, JobState, JobStatus
from ..policies.base import Policy
from ..policies.teaching import engine_view_of, stands_for_none
from .forecasting import JobForecaster

STATE_RANK = {JobState.RUNNING: 0, JobState.RESTARTING: 1, JobState.HOLDING: 2,
              JobState.PENDING: 3}
FORECAST_BUDGET = 0.025  # seconds of forecasting per refresh, amortised
ENGINE_HISTORY = 2000  # samples of each numeric engine-view series kept for the charts


class JobListing:
    """Active jobs (running first, then in arrival order), then the `max_rows` most recently
    finished ones. Reads only the jobs that arrived or left since the last call."""

    def __init__(self) -> None:
        self._finished: list[JobStatus] = []  # newest last
        self._seen_jobs = 0
        self._active_before: dict[str, JobStatus] = {}

    def __call__(self, backend: Backend, max_rows: int) -> list[JobStatus]:
        # list()/dict() copies are atomic under the GIL: safe while a scheduler thread writes.
        everything, active = list(backend.jobs.values()), dict(backend.active)
        new = everything[self._seen_jobs:]
        self._seen_jobs = len(everything)
        left = [j for name, j in self._active_before.items() if name not in active]
        done = [j for j in left + new if j.state.finished]
        done.sort(key=lambda j: (j.finish_time or 0.0, j.name))
        self._finished.extend(done)
        del self._finished[:-max_rows]
        self._active_before = active
        listed = sorted(active.values(), key=lambda j: STATE_RANK.get(j.state, 5))  # stable
        return listed + self._finished[::-1]


class LastActions:
    """Job name -> its last decision as the jobs table shows it ("Place @ 1.25 h"), and the
    decision itself (`last`: when the engine last spoke about the job, and what it said)."""

    def __init__(self) -> None:
        self.by_job: dict[str, str] = {}
        self.last: dict[str, Decision] = {}
        self._cursor = 0

    def absorb(self, recorder: Recorder, hours: Callable[[float], float]) -> None:
        decisions = recorder.decisions
        for d in decisions[self._cursor:]:
            self.by_job[d.job] = (f"{d.action}{'' if d.applied else ' (refused)'}"
                                  f" @ {hours(d.time):.2f} h")
            self.last[d.job] = d
        self._cursor = len(decisions)


class EngineHistory:
    """The active engine's `engine_view()`, and the history of its numeric values (a number,
    or a flat dict of numbers) for the charts: key -> [(time, value), ...]."""

    def __init__(self) -> None:
        self.series: dict[str, list[tuple[float, Any]]] = {}
        self.seconds = 0.0  # what the last view cost
        self._taken_at = -math.inf  # (wall clock)

    def view(self, policy: Policy, now: float, state: ClusterState | None = None
             ) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            view = engine_view_of(policy, state)
        except Exception as e:  # noqa: BLE001 - a teaching view must never stop the console
            view = {"error": f"engine_view() failed: {e}"}
        for key, value in view.items():
            point = numeric_point(value)
            if point is not None:
                series = self.series.setdefault(key, [])
                if not series or series[-1][0] != now:
                    series.append((now, point))
                    del series[:-ENGINE_HISTORY]
        self._taken_at = time.perf_counter()
        self.seconds = self._taken_at - t0
        return view

    def sample(self, policy: Policy, state: ClusterState | None) -> None:
        """A point of the history as rounds run between two redraws (Run to end crossed 22
        simulated hours in a few redraws, and each chart drew one straight line over them),
        unless the views would then cost more than a tenth of the run's wall time."""
        if state is not None and time.perf_counter() - self._taken_at >= 10 * self.seconds:
            self.view(policy, state.now, state)


def numeric_point(value: Any) -> Any:
    """A value worth a history chart: a number, or a flat dict of numbers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, np.number)) and math.isfinite(float(value)):
        return float(value)
    if isinstance(value, dict) and value and len(value) <= 64 and all(
            v is None or (isinstance(v, (int, float, np.number)) and not isinstance(v, bool))
            for v in value.values()):
        # a point with no series when the dict only says there is none ("(no job running)")
        return {str(k): float("nan") if v is None else float(v) for k, v in value.items()
                if not stands_for_none(k)}
    return None


class ForecastCache:
    """Job name -> forecast, recomputed when asked for after the store's version moved. When
    one costs more than FORECAST_BUDGET it is recomputed only every few versions (the jobs
    keep their last forecast in between), so an update stays fast on big clusters; but never
    left covering fewer than half of the active jobs: running to the end of the Philly trace,
    a version moves days, and forecasts 10 versions old (240 simulated hours) covered half of
    the jobs, or none."""

    def __init__(self, perf: Any) -> None:
        self._forecaster = JobForecaster(perf)
        self.forecasts: dict[str, Any] = {}
        self.version = -1
        self._every = 1  # versions a forecast may lag behind (more when it is slow)
        self.seconds = 0.0
        self.time = 0.0  # the clock of the snapshot forecast from

    def get(self, state: ClusterState, version: int) -> dict[str, Any]:
        behind = version - self.version
        if behind > 0 and (behind >= self._every or self.version < 0 or
                           2 * sum(map(self.forecasts.__contains__, state.jobs)) < len(state.jobs)):
            t0 = time.perf_counter()
            self.forecasts = self._forecaster(state)
            self.seconds = time.perf_counter() - t0
            self.time = state.now
            self.version = version
            self._every = min(10, max(1, math.ceil(self.seconds / FORECAST_BUDGET)))
        return self.forecasts


def summary(state: ClusterState, backend: Backend, recorder: Recorder, policy: str,
            hours: Callable[[float | None], float]) -> dict[str, Any]:
    """The headline numbers: GPUs and nodes in use, jobs by state, deadlines met so far. Its
    times are hours as the views show them (`hours` of a backend time)."""
    tl = recorder.timeline
    last = tl[-1] if tl else None
    counts = {s: 0 for s in JobState}
    for j in list(backend.jobs.values()):  # a scheduler thread may write
        counts[j.state] += 1
    up = state.node_up
    nxt = backend.next_arrival_time() if isinstance(backend, Forkable) else None
    return {
        "now_h": hours(state.now),
        "policy": policy,
        "gpus_used": float(state.allocated[:, 2].sum()),
        "gpus_total": float(state.capacity[up, 2].sum()),
        "nodes_up": int(up.sum()),
        "nodes": len(state.nodes),
        "running": counts[JobState.RUNNING] + counts[JobState.RESTARTING],
        "queued": counts[JobState.PENDING] + counts[JobState.HOLDING],
        "completed": counts[JobState.COMPLETED],
        "rejected": counts[JobState.REJECTED],
        "to_arrive": int(backend.pending_arrivals()),
        # a trace's quiet stretch (Philly's first 65 h hold one job): when the next one comes
        "next_arrival_h": None if nxt is None else hours(nxt),
        "deadline_hits": last.deadline_hits if last else 0,
        "deadline_misses": last.deadline_misses if last else 0,
    }
