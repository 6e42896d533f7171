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


HELD_OUT_SEED = 10_000  # training uses 1,000-1,200 and validation 5,000-5,010
PAPER_VS_DRF = 44.1  # % lower average JCT than DRF (Peng et al., DL2, arXiv 1909.06040)
PAPER_VS_OPTIMUS = 17.5


def run(args) -> int:
    from ..clusters import make_cluster
    from ..experiment import run_policy
    from ..output import emit
    from ..perf import default_perf
    from ..policies.dl2 import Dl2Policy, TrainConfig

    if args.seeds < 1:
        raise ConfigError(f"--seeds: expected a positive integer, got {args.seeds}")
    cfg = TrainConfig()
    perf = default_perf()
    nodes = make_cluster(args.nodes, args.gpus_per_node)
    gpus = args.nodes * args.gpus_per_node
    engines = {
        "dl2": lambda: Dl2Policy(perf=perf, weights=args.weights),
        "dl2-drf": lambda: Dl2Policy(perf=perf, weights=args.weights, teacher=True),
        "drf": lambda: "drf",
        "optimus": lambda: "optimus",
    }
    rows = []
    for k in range(args.seeds):
        seed = args.first_seed + k
        jobs = philly_ps_workload(args.jobs, seed=seed, load=args.load, cluster_gpus=gpus,
                                  perf=perf)
        for name, make in engines.items():
            r = run_policy(nodes, jobs, make())
            m = r.metrics
            rows.append({"seed": seed, "policy": name, "avg_jct_h": m["avg_jct_h"],
                         "completed": m["completed"], "makespan_h": m["makespan_h"],
                         "restarts": m["restarts"], "gpu_alloc_util": m["gpu_alloc_util"],
                         "wall_s": r.wall_seconds})
    by = {name: {r["seed"]: r for r in rows if r["policy"] == name} for name in engines}
    summary = []
    for name in engines:
        mine = list(by[name].values())
        summary.append({"policy": name,
                        "avg_jct_h": float(np.mean([r["avg_jct_h"] for r in mine])),
                        "makespan_h": float(np.mean([r["makespan_h"] for r in mine])),
                        "restarts": float(np.mean([r["restarts"] for r in mine])),
                        "gpu_alloc_util": float(np.mean([r["gpu_alloc_util"] for r in mine])),
                        "wall_s": float(np.mean([r["wall_s"] for r in mine]))})
    claims = []
    for base, paper in (("drf", PAPER_VS_DRF), ("optimus", PAPER_VS_OPTIMUS),
                        ("dl2-drf", None)):
        red = [100.0 * (1 - by["dl2"][s]["avg_jct_h"] / by[base][s]["avg_jct_h"]) for s in by[base]]
        wins = sum(by["dl2"][s]["avg_jct_h"] < by[base][s]["avg_jct_h"] for s in by[base])
        claims.append({"dl2 vs": base, "jct_reduction_pct": float(np.mean(red)),
                       "min_pct": float(np.min(red)), "max_pct": float(np.max(red)),
                       "wins": f"{wins}/{len(red)}",
                       "paper_pct": paper if paper is not None else float("nan")})
    result = {"bench": "dl2", "jobs": args.jobs, "load": args.load, "nodes": args.nodes,
              "gpus": gpus, "seeds": args.seeds, "first_seed": args.first_seed,
              "weights": args.weights or "shipped", "train_config": cfg.__dict__,
              "runs": rows, "summary": summary, "vs": claims}
    title = (f"DL2 on held-out Philly-derived PS workloads: {args.jobs} jobs, load {args.load:g},"
             f" {args.nodes} nodes / {gpus} GPUs, seeds {args.first_seed}.."
             f"{args.first_seed + args.seeds - 1} (means)")
    emit(result, as_json=args.json, tables={
        title: summary,
        "average JCT reduction of DL2 (per seed, %) beside the paper's claims": claims},
        notes=[("drf and optimus are the workbench engines (drf: gang at the submitted size;"
               " optimus: elastic workers, fixed PS); dl2-drf is DL2's own elastic DRF, the"
               " warm-up teacher, run by the same engine code.")])
    return 0


def register(sub) -> None:
    p = sub.add_parser("dl2", help="DL2 average JCT vs DRF and Optimus on held-out PS workloads")
    p.add_argument("--seeds", type=int, default=5, help="number of held-out workloads")
    p.add_argument("--first-seed", type=int, default=HELD_OUT_SEED)
    p.add_argument("--jobs", type=int, default=40, help="jobs per workload (training used 40)")
    p.add_argument("--load", type=float, default=1.5, help="offered load (training used 1.5)")
    p.add_argument("--nodes", type=int, default=4, help="nodes (training used 4)")
    p.add_argument("--gpus-per-node", type=int, default=4)
    p.add_argument("--weights", default=None, help="a weights file (default: the shipped ones)")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.set_defaults(func=run)
