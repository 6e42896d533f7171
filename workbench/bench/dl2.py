"""`workbench bench dl2`: DL2 against DRF and Optimus on held-out Philly-derived PS workloads
(`traces.ps_jobs.philly_ps_workload`, on seeds the training never saw)."""

from __future__ import annotations

import numpy as np

from .. import argtypes
from ..errors import ConfigError
from ..traces.ps_jobs import philly_ps_workload

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
    p.add_argument("--first-seed", type=argtypes.seed, default=HELD_OUT_SEED)
    p.add_argument("--jobs", type=int, default=40, help="jobs per workload (training used 40)")
    p.add_argument("--load", type=float, default=1.5, help="offered load (training used 1.5)")
    p.add_argument("--nodes", type=argtypes.count, default=4, help="nodes (training used 4)")
    p.add_argument("--gpus-per-node", type=argtypes.count, default=4)
    p.add_argument("--weights", default=None, help="a weights file (default: the shipped ones)")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.set_defaults(func=run)
