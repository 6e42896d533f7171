"""One run of a sweep, as a worker process (or a Dask worker) carries it out: build the
workload and cluster from the `RunConfig`, simulate the engine to the end through
`experiment.run_policy`, and return one flat row: the configuration, every metric, the JCT
percentiles (for the report's CDFs), the run's wall time and the package version.

A run depends on its configuration only (the workload's seed is in it; engines draw from
their own seeded generators), so its row is the same in any process, on any executor, in
any order; only `wall_s` and `sim_s` are measurements of the machine.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Any

import numpy as np

from .grid import RunConfig

PERCENTILES = np.arange(101)
# the only columns that differ between identical runs: `sim_s` is the simulation's wall time
# (`simulate` prints it as `wall_s`), `wall_s` the whole run with the workload's loading
WALL_COLUMNS = ("wall_s", "sim_s")


@lru_cache(maxsize=1)
def package_version() -> str:
    """The installed workbench's version (the package's own `__version__` is a layer above)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("workbench")
    except PackageNotFoundError:
        return "unknown"


def run_one(config: RunConfig) -> dict[str, Any]:
    """The row of `config`'s run, or `{"key", "error"}` if the run raised."""
    from ..experiment import run_policy
    from ..model import JobState
    from ..session import cluster_for, load_nodes
    from .workloads import workload_jobs

    start = time.perf_counter()
    cluster = cluster_for(config.workload, config.cluster)
    try:
        nodes = load_nodes(config.workload, cluster)
        jobs = workload_jobs(config.workload, config.seed, config.limit, config.load,
                             sum(n.gpus for n in nodes), config.trace_digest)
        result = run_policy(nodes, jobs, config.engine, restart_delay=config.restart_delay)
    except Exception as e:  # noqa: BLE001 - a failed run is reported, the sweep goes on
        return {"key": config.key, "error": f"{type(e).__name__}: {e}".splitlines()[0]}
    jct_h = [(j.finish_time - j.spec.arrival) / 3600 for j in result.backend.jobs.values()
             if j.state is JobState.COMPLETED]
    row: dict[str, Any] = {
        "key": config.key, "engine": config.engine, "workload": config.workload,
        "load": float("nan") if config.load is None else config.load, "cluster": cluster,
        "seed": config.seed, "limit": config.limit, "restart_delay": config.restart_delay,
        "gpus": int(sum(n.gpus for n in nodes)), "rounds": result.controller.rounds,
    }
    row.update(result.metrics)
    # an array, as a Parquet list column reads back: the same row in memory as on disk
    row["jct_pct_h"] = np.percentile(jct_h, PERCENTILES) if jct_h else np.empty(0)
    row["sim_s"] = result.wall_seconds
    row["wall_s"] = time.perf_counter() - start
    row["version"] = package_version()
    return row
