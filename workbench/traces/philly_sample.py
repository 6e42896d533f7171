"""A sample of the Philly trace drawn the way the Pollux workloads were: random jobs of at most
16 GPUs and 1 min-12 h, kept in trace order, arriving uniformly over a window set by the
offered load. Used by `bench specon` and, recast as PS jobs, by `bench dragon`."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import ConfigError


@lru_cache(maxsize=1)
def _philly():
    from .philly import load_philly

    return load_philly(seed=0)


def philly_sample(n: int, hours: float | None, seed: int, *, gpus: int = 64, load: float = 1.0,
                  max_gpus: int = 16, max_hours: float = 12.0, min_seconds: float = 60.0) -> list:
    """`n` Philly jobs picked at random (seeded), in trace order, arriving uniformly over `hours`.

    With `hours` None the window is set so that the jobs' GPU-hours (at their trace size and
    speed) over the window are `load` times the cluster's `gpus`.
    """
    from ..perf import default_perf

    if n < 1:
        raise ConfigError(f"--jobs: expected a positive integer, got {n}")
    if hours is not None and hours <= 0:
        raise ConfigError(f"--hours: expected a positive number, got {hours}")
    if not load > 0:
        raise ConfigError(f"--load: expected a positive number, got {load}")
    trace = _philly()
    perf = default_perf()
    rng = np.random.default_rng(seed)
    picked = []
    gpu_seconds = 0.0
    for idx in rng.permutation(len(trace)):
        spec = trace[int(idx)]
        if spec.initial_workers > max_gpus:
            continue
        run = spec.total_work / perf.ideal_rate(spec, spec.initial_workers)
        if min_seconds <= run <= max_hours * 3600:
            picked.append((int(idx), spec))
            gpu_seconds += run * spec.initial_workers
            if len(picked) == n:
                break
    picked.sort()
    if hours is None:
        hours = gpu_seconds / 3600.0 / (gpus * load)
    arrivals = np.sort(rng.uniform(0.0, hours * 3600.0, len(picked)))
    arrivals -= arrivals[0]
    return [spec.with_(name=f"{spec.application}-{k}", arrival=float(t))
            for k, ((_, spec), t) in enumerate(zip(picked, arrivals))]
