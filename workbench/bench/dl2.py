"""`workbench bench dl2`: DL2 against DRF and Optimus on held-out Philly-derived PS workloads.

Also home of `philly_ps_workload`, the parameter-server workload both PS engines (OASiS, DL2)
are trained and measured on: real Philly arrivals and sizes mapped onto the DL2 PS models.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..errors import ConfigError
from ..model import JobKind, JobSpec
from ..traces.common import WORKER_DEMAND, Jobs
from ..traces.synthetic import PS_BATCH_PER_WORKER

PS_RUN_TIME = (600.0, 4 * 3600.0)  # seconds: Philly durations are clipped into this range


@lru_cache(maxsize=1)
def _philly() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import pandas as pd

    from ..traces.philly import shipped_philly_path

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
    d = np.clip(duration[start:start + n_jobs], *PS_RUN_TIME)
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


def run(args) -> int:
    raise ConfigError("bench dl2: not ready yet")


def register(sub) -> None:
    p = sub.add_parser("dl2", help="DL2 against DRF and Optimus on held-out PS workloads")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
