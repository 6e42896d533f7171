"""Per-job completion forecasts for the app: `JobForecaster`.

On the simulator (which has a performance model) they are `workbench.forecast.Forecaster`'s.
A real cluster's backend has no performance model, and a forecast may fail on a job the model
does not know: then a simple estimate from what is observed (`simple_forecasts`): a running
job finishes after its remaining work at its current rate; a waiting job starts once the
GPU-work queued ahead of it drains and then runs at the rate the performance model (if any)
gives for its requested workers packed on few nodes. The band widens with the uncertainty
of each part; the probability of meeting a deadline treats the finish time as normal with
the band as its central 90%.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..forecast import Forecaster
from ..model import ClusterState, JobState

Z90 = 1.6449  # half-width of the central 90% of a standard normal


@dataclass(frozen=True)
class SimpleForecast:
    finish: float
    low: float
    high: float
    p_meet_deadline: float | None
    min_workers_to_meet: int | None
    source: str


class JobForecaster:
    """Keeps `workbench.forecast.Forecaster` (and its caches of model rates) between calls
    when there is a performance model `perf`; `simple_forecasts` without one, or when the
    forecaster fails."""

    def __init__(self, perf: Any = None) -> None:
        self.perf = perf
        self.error: str | None = None
        self._forecaster = Forecaster(perf) if perf is not None else None

    def __call__(self, state: ClusterState) -> dict[str, Any]:
        if self._forecaster is not None:
            try:
                return self._forecaster.run(state)
            except Exception as e:  # noqa: BLE001 - a forecast bug must not take the console down
                self.error = f"forecast failed, using the simple estimate: {e}"
        return simple_forecasts(state, self.perf)


def simple_forecasts(state: ClusterState, perf: Any = None) -> dict[str, SimpleForecast]:
    out: dict[str, SimpleForecast] = {}
    now = state.now
    up = state.node_up
    total_gpus = max(float(state.capacity[up, 2].sum()), 1.0)
    gpus_per_node = int(max(state.capacity[:, 2].max(), 1))
    # GPU-seconds still owed to running jobs: the queue drains behind them.
    backlog = 0.0
    for j in list(state.jobs.values()):
        if j.state is JobState.RUNNING and j.throughput > 0:
            eta = j.remaining_work / j.throughput
            backlog += eta * j.spec.worker_demand.gpu * j.num_workers
            out[j.name] = _make(j, now + eta, now + 0.9 * eta, now + 1.25 * eta, "rate")
        elif j.state in (JobState.RESTARTING, JobState.HOLDING) and j.num_workers:
            rate = _rate(perf, j, j.num_workers, gpus_per_node)
            if rate > 0:
                eta = j.remaining_work / rate
                backlog += eta * j.spec.worker_demand.gpu * j.num_workers
                out[j.name] = _make(j, now + eta, now + 0.9 * eta, now + 1.4 * eta, "model")
    waiting = sorted((j for j in list(state.jobs.values()) if j.state is JobState.PENDING),
                     key=lambda j: (j.spec.arrival, j.name))
    for j in waiting:
        rate = _rate(perf, j, j.spec.initial_workers, gpus_per_node)
        if rate <= 0:
            continue
        run = j.remaining_work / rate
        start = backlog / total_gpus
        gpus = j.spec.worker_demand.gpu * j.spec.initial_workers
        backlog += run * gpus
        finish = now + start + run
        out[j.name] = _make(j, finish, now + 0.5 * start + 0.9 * run, now + 2.0 * start + 1.3 * run,
                            "queue")
    return out


def _rate(perf: Any, job, workers: int, gpus_per_node: int) -> float:
    if perf is None or workers <= 0:
        return 0.0
    try:
        return float(perf.ideal_rate(job.spec, workers, gpus_per_node))
    except Exception:  # noqa: BLE001 - an app the model does not know
        return 0.0


def _make(job, finish: float, low: float, high: float, source: str) -> SimpleForecast:
    p = None
    d = job.spec.deadline
    if d is not None:
        sigma = max((high - low) / (2 * Z90), 1e-6)
        p = 0.5 * (1.0 + math.erf((d - finish) / (sigma * math.sqrt(2))))
    return SimpleForecast(finish, low, high, p, None, f"ui-{source}")
