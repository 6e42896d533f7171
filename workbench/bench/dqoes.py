"""`workbench bench dqoes`: DQoES against the existing system (kube-default) and the other
baselines, counting satisfied models: jobs that reach their target metric by their deadline.

Workload (one per seed, `traces.deadlines.qoe_workload`): Pollux workload 1 (Philly-derived
arrivals, applications, sizes, batch sizes), each job kept with chance `--share`. Each job
gets a QoE target: the metric its application's measured curve reaches after a fraction q ~
U(`--target` LOW-HIGH) of the iterations to convergence at its batch size, and trains until it
reaches it (`total_work` = the first iteration at which the curve crosses the target). Its
deadline is arrival + `ALLOWANCE` + f × the ideal time to reach the target at its submitted
size, f ~ U(`--deadline` LOW-HIGH). Same seed, same workload for every engine.

Scenarios: constrained (`--constrained` nodes × 4 GPUs, default 8) and ample (`--ample`,
default 16). DQoES's "existing system" is the default scheduler: kube-default here.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..output import emit
from ..traces.deadlines import ALLOWANCE, qoe_workload
from .qos import _factors, cluster

BASELINES = ("kube-default", "fifo", "drf", "tiresias", "optimus", "qos")
PAPER_RATIO = 8.0  # "up to 8x more satisfied models than the existing system"


def satisfied(result) -> int:
    return sum(1 for j in result.backend.jobs.values()
               if j.state.value == "completed" and j.spec.deadline is not None
               and j.finish_time <= j.spec.deadline + 1e-9)


def run_bench(seeds: int, *, constrained: int = 8, ample: int = 16, share: float = 0.8,
              targets: tuple[float, float] = (0.5, 0.95), factors: tuple[float, float] = (0.7, 3.0),
              baselines: tuple[str, ...] = BASELINES) -> dict[str, Any]:
    from ..experiment import run_policy

    variants = [(b, b) for b in baselines] + [("dqoes", "dqoes")]
    scenarios = {"constrained": constrained, "ample": ample}
    runs = []
    for seed in range(seeds):
        jobs = qoe_workload(seed, share=share, targets=targets, factors=factors)
        for scenario, n in scenarios.items():
            nodes = cluster(n)
            for label, engine in variants:
                r = run_policy(nodes, jobs, engine)
                row = {"scenario": scenario, "seed": seed, "policy": label, "jobs": len(jobs),
                       "satisfied": satisfied(r), "completed": r.metrics["completed"],
                       "restarts": r.metrics["restarts"], "gpu_alloc_util": r.metrics["gpu_alloc_util"],
                       "wall_s": r.wall_seconds}
                if engine == "dqoes":
                    row["engine_satisfied"] = r.controller.policy.qoe_counts()["satisfied"]
                runs.append(row)
    summary = []
    for scenario in scenarios:
        base = {r["seed"]: r["satisfied"] for r in runs
                if r["scenario"] == scenario and r["policy"] == "kube-default"}
        for label, _ in variants:
            rows = [r for r in runs if r["scenario"] == scenario and r["policy"] == label]
            ratios = [r["satisfied"] / base[r["seed"]] for r in rows if base.get(r["seed"], 0) > 0]
            summary.append({
                "scenario": scenario, "policy": label,
                "satisfied": float(np.mean([r["satisfied"] for r in rows])),
                "jobs": float(np.mean([r["jobs"] for r in rows])),
                "satisfied_share": float(np.mean([r["satisfied"] / r["jobs"] for r in rows])),
                "x_kube_default_mean": float(np.mean(ratios)) if ratios else float("nan"),
                "x_kube_default_max": float(np.max(ratios)) if ratios else float("nan"),
                "zero_base_seeds": sum(1 for r in rows if base.get(r["seed"], 0) == 0),
                "restarts": float(np.mean([r["restarts"] for r in rows])),
            })
    by = {(s["scenario"], s["policy"]): s for s in summary}
    claims = []
    for scenario in scenarios:
        d = by[(scenario, "dqoes")]
        claims.append({"claim": f"{scenario}: satisfied models, DQoES / kube-default (up to)",
                       "paper": PAPER_RATIO, "measured_max": d["x_kube_default_max"],
                       "measured_mean": d["x_kube_default_mean"]})
        best = max((s for s in summary if s["scenario"] == scenario and s["policy"] != "dqoes"),
                   key=lambda s: s["satisfied"])
        claims.append({"claim": f"{scenario}: DQoES satisfied vs best baseline ({best['policy']})",
                       "paper": None, "measured_max": None,
                       "measured_mean": d["satisfied"] / best["satisfied"]
                       if best["satisfied"] else float("nan")})
    return {"seeds": seeds, "share": share, "targets": list(targets), "deadline_factors": list(factors),
            "clusters": {s: {"nodes": n, "gpus": 4 * n} for s, n in scenarios.items()},
            "runs": runs, "summary": summary, "claims": claims}


def run(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise ConfigError(f"--seeds: expected a positive integer, got {args.seeds}")
    started = time.perf_counter()
    result = run_bench(args.seeds, constrained=args.constrained, ample=args.ample,
                       share=args.share, targets=_factors(args.target),
                       factors=_factors(args.deadline))
    result["wall_s"] = time.perf_counter() - started
    tables = {}
    cols = ["policy", "satisfied", "jobs", "satisfied_share", "x_kube_default_mean",
            "x_kube_default_max", "zero_base_seeds", "restarts"]
    for scenario, c in result["clusters"].items():
        title = (f"{scenario}: {c['nodes']} nodes / {c['gpus']} GPUs, {args.seeds} seeds"
                 " (satisfied = target metric reached by the deadline)")
        tables[title] = [{k: r[k] for k in cols} for r in result["summary"]
                         if r["scenario"] == scenario]
    tables["DQoES (arXiv 2010.12728) claim vs measured"] = result["claims"]
    emit(result, as_json=args.json, tables=tables,
         notes=[(f"workload: Pollux workload 1 (Philly-derived), share {args.share}, target at"
                f" U({args.target}) of convergence, deadline = arrival + {ALLOWANCE:.0f} s +"
                f" U({args.deadline}) x ideal time to target; wall {result['wall_s']:.0f} s")])
    return 0


def register(sub) -> None:
    p = sub.add_parser("dqoes", help="DQoES vs kube-default and baselines: satisfied models")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--constrained", type=int, default=8, help="nodes (x4 GPUs)")
    p.add_argument("--ample", type=int, default=16, help="nodes (x4 GPUs)")
    p.add_argument("--share", type=float, default=0.8)
    p.add_argument("--target", default="0.5-0.95",
                   help="target = metric after this fraction of convergence, LOW-HIGH")
    p.add_argument("--deadline", default="0.7-3.0", help="deadline factor range LOW-HIGH")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
