"""Offered load of any workload, and the same workload at another load.

The definition is the one the Philly samples use (`philly_sample`, `philly_ps_workload`): the
jobs' GPU-seconds at their submitted sizes and ideal speeds, over the arrival window, divided
by the cluster's GPUs. `at_load` reaches a load by stretching or squeezing the arrival times
(and each deadline with its job), so the jobs themselves stay as the trace has them; a sweep's
`loads` axis goes through it for every workload without a load of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError
from ..model import JobSpec
from .validate import beyond_time_limit


def gpu_seconds(jobs: Sequence[JobSpec], perf=None) -> float:
    """The GPU-seconds `jobs` need at their submitted sizes and ideal speeds."""
    if perf is None:
        from ..perf import default_perf

        perf = default_perf()
    total = 0.0
    for job in jobs:
        try:
            rate = perf.ideal_rate(job, job.initial_workers)
        except KeyError as e:  # an application without a measured profile
            raise ConfigError(f"load: no speed model for job {job.name} ({e.args[0]})") from None
        gpus = job.initial_workers * job.worker_demand.gpu + job.num_ps * job.ps_demand.gpu
        total += job.total_work / rate * gpus if rate > 0 else 0.0
    return total


def offered_load(jobs: Sequence[JobSpec], cluster_gpus: float, perf=None) -> float:
    """GPU-seconds over the arrival window per cluster GPU (NaN for a window of no length)."""
    arrivals = [j.arrival for j in jobs]
    span = max(arrivals) - min(arrivals) if arrivals else 0.0
    return gpu_seconds(jobs, perf) / (cluster_gpus * span) if span > 0 else float("nan")


def load_factor(jobs: Sequence[JobSpec], cluster_gpus: float, load: float, perf=None,
                work: float | None = None) -> float | None:
    """What `at_load` multiplies the arrival window by (None: there is no window to scale),
    or the one-line `ConfigError` of a load it cannot reach. `work`: `gpu_seconds(jobs)`, when
    the caller has it (a sweep checks each of its loads on each cluster before any run)."""
    if not load > 0 or not np.isfinite(load):
        raise ConfigError(f"load: expected a positive number, got {load}")
    arrivals = [j.arrival for j in jobs]
    span = max(arrivals) - min(arrivals) if arrivals else 0.0
    if span <= 0:
        return None
    current = (gpu_seconds(jobs, perf) if work is None else work) / (cluster_gpus * span)
    if not np.isfinite(current) or current <= 0:
        return None
    factor = current / load
    if why := beyond_time_limit("the last job would arrive", min(arrivals) + span * factor):
        raise ConfigError(f"load {load:g}: {why}; raise the load")
    return factor


def at_load(jobs: Sequence[JobSpec], cluster_gpus: float, load: float, perf=None
            ) -> list[JobSpec]:
    """`jobs` with their arrivals (from the first) scaled so their `offered_load` on
    `cluster_gpus` GPUs is `load`; each deadline keeps its distance from its arrival."""
    factor = load_factor(jobs, cluster_gpus, load, perf)
    if factor is None:
        return list(jobs)  # all at one instant (or no work): no window to scale
    start = min(j.arrival for j in jobs)
    out = []
    for job in jobs:
        arrival = start + (job.arrival - start) * factor
        deadline = None if job.deadline is None else arrival + (job.deadline - job.arrival)
        out.append(job.with_(arrival=arrival, deadline=deadline))
    return out
