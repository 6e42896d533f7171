"""The workloads a sweep names: any trace `traces.load_trace` reads (`default`, `philly`,
`pollux:PATH`, `synthetic:n=200,deadline=2.0`, a CSV path, …) and the benches' scenarios,
`scenario:NAME[:n=JOBS]`:

- `deadline`: Pollux workload 1 with deadlines (`bench qos`, `traces.deadlines`);
- `qoe`: Pollux workload 1 trained to quality targets (`bench dqoes`);
- `philly-sample`: Philly jobs sampled as the Pollux workloads were (`bench specon`), n=160;
- `philly-ps`: Philly jobs as elastic parameter-server jobs (`bench oasis`, `bench dl2`), n=60.

A load, when the grid gives one, is the generator's own where it has one (the two Philly
scenarios draw their arrival window for it) and `traces.load.at_load` otherwise.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from functools import lru_cache

from ..errors import ConfigError
from ..model import JobSpec

SCENARIOS: dict[str, str] = {
    "deadline": "Pollux workload 1 with deadlines (bench qos)",
    "qoe": "Pollux workload 1 trained to quality targets (bench dqoes)",
    "philly-sample": "Philly jobs sampled as the Pollux workloads were (bench specon), n=160",
    "philly-ps": "Philly jobs as elastic parameter-server jobs (bench oasis/dl2), n=60",
}
NATIVE_LOAD = ("philly-sample", "philly-ps")


def check_workload(workload: str, seed: int) -> None:
    """Raise the workload's own one-line error if `workload` cannot be read."""
    if workload.startswith("scenario:"):
        _scenario(workload)
        return
    from ..traces import load_trace

    load_trace(workload, seed=seed, limit=1)


def check_loads(workload: str, seed: int, limit: int | None, loads: list[float],
                cluster_gpus: dict[str, int], digest: str | None = None) -> None:
    """Raise the one-line error a run of `workload` at one of `loads` on one of the clusters
    (name -> GPUs) fails with (`traces.load.load_factor`, as `at_load` applies it), before
    any run. The jobs are `seed`'s: a synthetic workload's other seeds may differ a little."""
    if workload.startswith("scenario:") and _scenario(workload)[0] in NATIVE_LOAD:
        return  # its generator takes the load itself
    from ..traces.load import gpu_seconds, load_factor

    jobs = workload_jobs(workload, seed, limit, None, next(iter(cluster_gpus.values())), digest)
    work = gpu_seconds(jobs)
    for cluster, gpus in cluster_gpus.items():
        for load in loads:
            try:
                load_factor(jobs, gpus, load, work=work)
            except ConfigError as e:
                raise ConfigError(f"{load:g} (workload {workload!r} on cluster {cluster}): "
                                  f"{str(e).removeprefix(f'load {load:g}: ')}") from None


def trace_digest(workload: str) -> str | None:
    """16 hex digits of a SHA-256 of the file `workload` reads (a CSV path, `pollux:PATH`,
    `philly:PATH`), None for a workload named rather than read from a file of the user's."""
    kind, _, arg = workload.partition(":")
    path = workload if os.path.isfile(workload) else arg if kind in ("pollux", "philly") else ""
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


@lru_cache(maxsize=16)
def workload_jobs(workload: str, seed: int, limit: int | None, load: float | None,
                  cluster_gpus: int, digest: str | None = None) -> tuple[JobSpec, ...]:
    """The jobs of one run's workload. Cached per worker process: the engines of a grid point
    share them (job specs are immutable), so a trace is read once, not once per engine.
    `digest` (the file's, `trace_digest`) is in the cache's key: a file edited between two
    sweeps in one process (`serial=True` in a notebook) is read again."""
    if workload.startswith("scenario:"):
        name, n = _scenario(workload)
        jobs = _generate(name, n, seed, cluster_gpus, load)
        native = name in NATIVE_LOAD
    else:
        from ..session import load_jobs

        jobs, native = load_jobs(workload, seed=seed, limit=limit), False
    if limit is not None:
        jobs = sorted(jobs, key=lambda j: j.arrival)[:limit]
    if load is not None and not native:
        from ..traces.load import at_load

        jobs = at_load(jobs, cluster_gpus, load)
    return tuple(jobs)


def _scenario(workload: str) -> tuple[str, int | None]:
    """`scenario:NAME[:n=JOBS]` -> (NAME, JOBS or None), checked."""
    _, _, rest = workload.partition(":")
    name, _, option = rest.partition(":")
    if name not in SCENARIOS:
        raise ConfigError(f"unknown scenario {name!r}; expected one of {', '.join(SCENARIOS)}")
    if not option:
        return name, None
    key, _, value = option.partition("=")
    if key.strip() != "n" or not value.strip().isdigit() or int(value) < 1:
        raise ConfigError(f"scenario option {option!r}: expected n=JOBS (a positive integer)")
    return name, int(value)


def _generate(name: str, n: int | None, seed: int, gpus: int, load: float | None
              ) -> list[JobSpec]:
    from ..traces.deadlines import deadline_workload, qoe_workload
    from ..traces.philly_sample import philly_sample
    from ..traces.ps_jobs import philly_ps_workload

    makers: dict[str, Callable[[], list[JobSpec]]] = {
        "deadline": lambda: deadline_workload(seed),
        "qoe": lambda: qoe_workload(seed),
        "philly-sample": lambda: philly_sample(n or 160, None, seed, gpus=gpus, load=load or 1.0),
        "philly-ps": lambda: philly_ps_workload(n or 60, seed=seed, cluster_gpus=gpus,
                                                load=load or 1.0),
    }
    jobs = list(makers[name]())
    return jobs[:n] if n is not None and name not in NATIVE_LOAD else jobs
