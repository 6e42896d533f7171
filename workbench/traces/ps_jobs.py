"""Parameter-server workloads made from real traces: Philly (and Pollux) jobs recast as
elastic PS jobs on the DL2 PS models, with the fitted PS speed as their rate.

- `philly_ps_workload`: consecutive Philly jobs with deadlines and utility weights, the
  workload both PS engines (OASiS, DL2) are trained and measured on.
- `ps_workload`: DRAGON's bench workload, TensorFlow-style PS jobs from the Philly sample of
  `philly_sample` or from Pollux workload 1.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..errors import ConfigError
from ..model import JobKind, JobSpec, Resources
from .common import WORKER_DEMAND, Jobs
from .philly_sample import philly_sample
from .synthetic import PS_BATCH_PER_WORKER, PS_RUN_TIME


@lru_cache(maxsize=1)
def _philly() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import pandas as pd

    from .philly import shipped_philly_path

    t = pd.read_csv(shipped_philly_path(), comment="#")
    t = t.sort_values("arrival", kind="stable")
    return (t["arrival"].to_numpy(float), t["duration"].to_numpy(float),
            t["num_gpus"].to_numpy(np.int64))


def philly_ps_workload(n_jobs: int = 60, *, seed: int = 0, cluster_gpus: int = 64,
                       load: float = 1.0, max_workers: int = 12, ps_per_worker: float = 0.5,
                       deadline_factor: tuple[float, float] = (1.5, 4.0), perf=None) -> Jobs:
    """`n_jobs` consecutive Philly jobs from a seeded random start, as elastic PS jobs.

    - Arrivals: the Philly submission times of the window, shifted to start at 0 and stretched
      or squeezed so that the offered load (GPU-seconds at the submitted sizes over the arrival
      span × `cluster_gpus`) is `load`.
    - Size: workers = min(num_gpus, `max_workers`) as submitted (`initial_workers`), PS =
      ceil(`ps_per_worker` × workers); elastic engines may use 1..`max_workers` workers.
    - Model: uniform over the DL2 PS models; total_work = clipped Philly duration (10 min-4 h)
      × the fitted PS speed at the submitted size, so at that size it runs as long as on Philly.
    - Deadline: arrival + U(`deadline_factor`) × that run time; utility weight (`priority`)
      uniform in 1..100, as in the OASiS evaluation.
    """
    if n_jobs < 1:
        raise ConfigError(f"n_jobs must be >= 1, got {n_jobs}")
    if not load > 0:
        raise ConfigError(f"load must be > 0, got {load}")
    if perf is None:
        from ..perf import default_perf

        perf = default_perf()
    arrival, duration, gpus = _philly()
    rng = np.random.default_rng(seed)
    start = int(rng.integers(0, len(arrival) - n_jobs))
    models = list(perf.ps_models)
    pick = rng.integers(0, len(models), n_jobs)
    factor = rng.uniform(*deadline_factor, n_jobs)
    weight = rng.integers(1, 101, n_jobs)
    a = arrival[start:start + n_jobs] - arrival[start]
    d = np.clip(duration[start:start + n_jobs], *PS_RUN_TIME)  # Philly's, into 10 min-4 h
    w = np.minimum(gpus[start:start + n_jobs], max_workers)
    demand = float((w * d).sum())
    span = float(a[-1]) if a[-1] > 0 else 1.0
    a = a * demand / (load * cluster_gpus * span)
    jobs = Jobs(source=f"philly-ps:seed={seed}")
    for i in range(n_jobs):
        model = models[int(pick[i])]
        workers = int(w[i])
        ps = max(1, math.ceil(ps_per_worker * workers - 1e-9))
        speed = float(perf.ps_speed(model, workers, ps))
        jobs.append(JobSpec(
            name=f"{model}-{i}", application=model, arrival=float(a[i]),
            total_work=float(d[i]) * speed, batch_size=PS_BATCH_PER_WORKER.get(model, 32),
            initial_workers=workers, min_workers=1, max_workers=max(max_workers, workers),
            num_ps=ps, worker_demand=WORKER_DEMAND, kind=JobKind.PS, priority=int(weight[i]),
            deadline=float(a[i] + factor[i] * d[i])))
    jobs.notes.append(
        f"{n_jobs} Philly jobs from row {start} (seed {seed}) as elastic PS jobs, load {load:g}"
        f" on {cluster_gpus} GPUs")
    return jobs


def ps_workload(n: int, seed: int, gpus: int, load: float, trace: str = "philly") -> list:
    """`trace` "pollux": the first `n` jobs of Pollux workload 1; "philly": `philly_sample(n,
    None, seed, gpus=gpus, load=load)`. Each becomes a PS job on a DL2 model drawn at random
    (seeded), workers = the trace's GPUs capped at 12 (DL2 measured 1-12), ceil(workers / 4)
    parameter servers, elastic between ceil(workers / 2) and min(2 x workers, 12) workers;
    total work = its run time at its trace size x the fitted PS speed at the new size."""
    from ..perf import default_perf

    perf = default_perf()
    models = list(perf.ps_models)
    rng = np.random.default_rng(10_000 + seed)
    jobs = []
    if trace == "pollux":
        from .registry import default_workload

        source = sorted(default_workload(deadlines=False), key=lambda j: (j.arrival, j.name))[:n]
    elif trace == "philly":
        source = philly_sample(n, None, seed, gpus=gpus, load=load)
    else:
        raise ConfigError(f"--trace: expected philly or pollux, got {trace!r}")
    for spec in source:
        run = spec.total_work / perf.ideal_rate(spec, spec.initial_workers)
        model = models[int(rng.integers(len(models)))]
        w = min(spec.initial_workers, 12)
        ps = math.ceil(w / 4)
        jobs.append(spec.with_(
            name=f"{model}-{spec.name.rsplit('-', 1)[-1]}", application=model, kind=JobKind.PS,
            batch_size=PS_BATCH_PER_WORKER.get(model, 32), initial_workers=w,
            min_workers=math.ceil(w / 2), max_workers=min(2 * w, 12), num_ps=ps,
            worker_demand=WORKER_DEMAND, ps_demand=Resources(cpu=2, mem=8, gpu=0),
            total_work=run * perf.ps_speed(model, w, ps)))
    return jobs
