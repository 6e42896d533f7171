"""A simulator workload from an Alibaba openb pod list: GPU-sharing jobs with real shapes.

Each job is one pod drawn uniformly with replacement from the list (seeded): one task with the
pod's CPU, memory and GPU request (a fraction of one GPU for a sharing pod, whole GPUs, or
none), arriving as a Poisson process with mean gap `interval` seconds, and running as long as
the pod ran (deletion - creation time, clipped to [`min_duration`, `max_duration`]). The work
is that duration at the ideal rate of one cifar10 worker, so a job that starts at once ends
after its pod's duration. `gpu_spec` (GPU model constraints) is dropped: the simulator's jobs
have none.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..model import JobSpec, Resources
from .common import Jobs, RateCache, default_perf
from .synthetic import MAX_JOBS
from .validate import beyond_time_limit

APPLICATION, BATCH = "cifar10", 128
OPTIONS = ("pods", "n", "interval", "seed", "max_duration")


def openb_jobs(pods: pd.DataFrame, *, n: int = 1000, interval: float = 30.0, seed: int = 0,
               min_duration: float = 60.0, max_duration: float = 24 * 3600.0, perf=None,
               source: str = "openb") -> Jobs:
    # NaN fails every comparison: `interval <= 0` let a NaN interval through to a hang
    if not (1 <= n <= MAX_JOBS and 0 < interval < math.inf and 0 < min_duration <= max_duration
            and seed >= 0):
        raise ConfigError(f"openb: expected n from 1 to {MAX_JOBS:,}, a finite interval > 0,"
                          " 0 < min_duration <= max_duration and seed >= 0, got"
                          f" n={n}, interval={interval}, max_duration={max_duration},"
                          f" seed={seed}")
    if not len(pods):
        raise ConfigError("openb: the pod list is empty")
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(pods), n)
    arrival = np.cumsum(rng.exponential(interval, n))
    if why := beyond_time_limit("the last job arrives", arrival[-1]):
        raise ConfigError(f"openb: at one job every {interval:g} s {why}; lower the interval")
    duration = (pods["deletion_time"] - pods["creation_time"]).to_numpy(np.float64)[pick]
    duration = np.clip(np.nan_to_num(duration, nan=min_duration), min_duration, max_duration)
    num = pods["num_gpu"].to_numpy(np.int64)[pick]
    milli = pods["gpu_milli"].to_numpy(np.int64)[pick]
    gpu = np.where(num > 1, num, num * milli / 1000.0)
    cpu = pods["cpu_milli"].to_numpy(np.int64)[pick] / 1000.0
    mem = pods["memory_mib"].to_numpy(np.int64)[pick] / 1024.0
    names = pods["name"].to_numpy()[pick]
    rate = RateCache(perf or default_perf())(APPLICATION, BATCH, 1)
    jobs = [JobSpec(name=f"{names[i]}-{i}", application=APPLICATION, arrival=float(arrival[i]),
                    total_work=float(duration[i]) * rate, batch_size=BATCH,
                    worker_demand=Resources(float(cpu[i]), float(mem[i]), float(gpu[i])))
            for i in range(n)]
    shared = int(((num == 1) & (milli < 1000)).sum())
    notes = [(f"{n} pods drawn with replacement (seed {seed}) from {len(pods)}; Poisson arrivals"
              f" every {interval:g} s on average; {shared} share a GPU, {int((num == 0).sum())}"
              " use none; gpu_spec dropped")]
    return Jobs(jobs, source=source, notes=notes)


def load_openb_jobs(arg: str, seed: int = 0) -> Jobs:
    """`openb:pods=NAME_OR_PATH,n=1000,interval=30,seed=0,max_duration=86400` (all optional)."""
    from .openb import DATA_ENV, load_openb_pods, resolve_pod_list

    options: dict = {"seed": seed}
    pods = None
    for item in filter(None, (s.strip() for s in arg.split(","))):
        key, eq, value = (p.strip() for p in item.partition("="))
        if key not in OPTIONS or not eq or not value:
            raise ConfigError(f"openb option {item!r}: expected KEY=VALUE with KEY one of "
                              f"{', '.join(OPTIONS)}")
        if key == "pods":
            pods = value
            continue
        try:
            options[key] = int(value) if key in ("n", "seed") else float(value)
        except ValueError:
            raise ConfigError(f"openb option {key}={value!r}: expected a number") from None
    # a trace spec has no --data option: say what it takes (the `openb` command's hint did)
    path = resolve_pod_list(pods, how=f"set ${DATA_ENV}=DIR or name a pod list, openb:pods=PATH")
    return openb_jobs(load_openb_pods(path), source=f"openb:{path.stem}", **options)
