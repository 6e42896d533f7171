"""`workbench bench qos`: the QoS framework's two claims, measured against kube-default and the
other baselines on a real-trace-derived workload with deadlines.

Workload (one per seed, `traces.deadlines.deadline_workload`): Pollux workload 1 (160 jobs
sampled from the Philly trace: arrivals, applications, sizes, batch sizes; `--trace
pollux:PATH` for another), each job kept with chance `--share` (seeded), with deadline = arrival + `ALLOWANCE` + f × its ideal run time at its
submitted size (packed), f uniform in `--deadline LOW-HIGH` (seeded). The allowance (one
scheduling round plus one restart, which every engine pays before a job trains) keeps the
many one-minute jobs of the trace from having deadlines no scheduler could meet; f < 1 makes
some deadlines reachable only by scaling the job up (jobs may use up to twice their submitted
workers). `--cpu` makes every worker a CPU worker (4 cores, no GPU) on CPU-only nodes of 16
cores, the QoS paper's setting; the performance model is per worker count, so the rates are
the same.

Scenarios: insufficient resources (`--insufficient` nodes × 4 GPUs, default 8: offered load
well above capacity) and sufficient (`--sufficient`, default 32: 128 GPUs, the queue rarely
forms). The completion rate is the paper's: jobs finished by their deadline / all jobs. Relative gains
are ratios of the seeds' mean rates.
"Allocated CPUs utilised" is the share of allocated CPU-time held by jobs that were training
(not waiting for the rest of a gang or paying a restart): the simulator's
cpu_effective / cpu_allocated.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..output import emit
from ..traces.deadlines import ALLOWANCE, deadline_workload

BASELINES = ("kube-default", "fifo", "drf", "tiresias", "optimus")
QOS_VARIANTS: tuple[tuple[str, dict], ...] = (
    ("qos: neither (gang, arrival order)", {"scheduling": False, "autoscaling": False}),
    ("qos: scheduling only", {"autoscaling": False}),
    ("qos: autoscaling only", {"scheduling": False}),
    ("qos", {}),
)
PAPER = {"scheduling_gain_pct": 26.0, "autoscaling_completion": 1.0, "cpu_utilisation": 1.0}


def cluster(nodes: int, cpu: bool = False) -> list:
    from ..clusters import make_cluster

    if nodes < 1:
        raise ConfigError(f"expected a positive number of nodes, got {nodes}")
    if cpu:
        return make_cluster(nodes, 0, cpus=16, mem=192, prefix="cpu")
    return make_cluster(nodes, 4)


def _row(label: str, m: dict[str, Any], wall: float) -> dict[str, Any]:
    alloc = m["cpu_alloc_util"]
    return {"policy": label, "completion_rate": m["deadline_hit_rate"],
            "completed": m["completed"], "jobs": m["jobs"], "rejected": m["rejected"],
            "alloc_cpu_busy": m["cpu_effective_util"] / alloc if alloc > 0 else float("nan"),
            "gpu_alloc_util": m["gpu_alloc_util"], "cpu_alloc_util": alloc,
            "avg_jct_h": m["avg_jct_h"], "restarts": m["restarts"], "wall_s": wall}


def run_bench(seeds: int, *, insufficient: int = 8, sufficient: int = 32, share: float = 0.8,
              factors: tuple[float, float] = (0.7, 3.0), cpu: bool = False,
              baselines: tuple[str, ...] = BASELINES, trace: str | None = None,
              progress=None) -> dict[str, Any]:
    from ..experiment import run_policy

    variants = [(b, b, {}) for b in baselines] + [(lbl, "qos", o) for lbl, o in QOS_VARIANTS]
    scenarios = {"insufficient": insufficient, "sufficient": sufficient}
    runs: list[dict[str, Any]] = []
    for seed in range(seeds):
        jobs = deadline_workload(seed, trace=trace, share=share, factors=factors, cpu=cpu)
        for scenario, n_nodes in scenarios.items():
            nodes = cluster(n_nodes, cpu)
            for label, engine, options in variants:
                r = run_policy(nodes, jobs, engine, policy_options=options)
                row = {"scenario": scenario, "seed": seed, **_row(label, r.metrics, r.wall_seconds)}
                runs.append(row)
                if progress:
                    progress(row)
    summary = _summary(runs, [v[0] for v in variants])
    return {"seeds": seeds, "share": share, "deadline_factors": list(factors),
            "allowance_s": ALLOWANCE, "cpu_only": cpu,
            "clusters": {s: {"nodes": n, "gpus": 0 if cpu else 4 * n, "cpus": (16 if cpu else 48) * n}
                         for s, n in scenarios.items()},
            "runs": runs, "summary": summary, "claims": _claims(runs, summary)}


def _summary(runs: list[dict], labels: list[str]) -> list[dict]:
    out = []
    for scenario in ("insufficient", "sufficient"):
        base = {r["seed"]: r["completion_rate"] for r in runs
                if r["scenario"] == scenario and r["policy"] == "kube-default"}
        for label in labels:
            rows = [r for r in runs if r["scenario"] == scenario and r["policy"] == label]
            if not rows:
                continue
            rate = np.array([r["completion_rate"] for r in rows])
            base_mean = float(np.mean([base[r["seed"]] for r in rows if r["seed"] in base])) \
                if base else 0.0
            rel = [100.0 * (float(rate.mean()) / base_mean - 1.0)] if base_mean > 0 else []
            out.append({
                "scenario": scenario, "policy": label,
                "completion_rate": float(rate.mean()), "min": float(rate.min()),
                "max": float(rate.max()),
                "vs_kube_default_pts": 100.0 * float(np.mean(
                    [r["completion_rate"] - base[r["seed"]] for r in rows if r["seed"] in base]))
                if base else float("nan"),
                "vs_kube_default_%": float(np.mean(rel)) if rel else float("nan"),
                "alloc_cpu_busy": float(np.mean([r["alloc_cpu_busy"] for r in rows])),
                "gpu_alloc_util": float(np.mean([r["gpu_alloc_util"] for r in rows])),
                "avg_jct_h": float(np.nanmean([r["avg_jct_h"] for r in rows])),
                "restarts": float(np.mean([r["restarts"] for r in rows])),
            })
    return out


def _claims(runs: list[dict], summary: list[dict]) -> list[dict]:
    s = {(r["scenario"], r["policy"]): r for r in summary}

    def get(scenario: str, policy: str, key: str) -> float | None:
        row = s.get((scenario, policy))
        return None if row is None else row[key]

    def rel(scenario: str, policy: str, base: str) -> float | None:
        pairs = {}
        for r in runs:
            if r["scenario"] == scenario and r["policy"] in (policy, base):
                pairs.setdefault(r["seed"], {})[r["policy"]] = r["completion_rate"]
        both = [p for p in pairs.values() if policy in p and base in p]
        b = float(np.mean([p[base] for p in both])) if both else 0.0
        return 100.0 * (float(np.mean([p[policy] for p in both])) / b - 1.0) if b > 0 else None

    return [
        {"claim": "scheduling alone, insufficient resources: completion rate vs default (+%)",
         "paper": PAPER["scheduling_gain_pct"],
         "measured": get("insufficient", "qos: scheduling only", "vs_kube_default_%"),
         "note": "relative gain over kube-default: mean rate / mean kube-default rate - 1"},
        {"claim": "  same, in percentage points",
         "paper": None, "measured": get("insufficient", "qos: scheduling only", "vs_kube_default_pts"),
         "note": "kube-default partially binds gangs and can deadlock"},
        {"claim": "  same, vs a gang FIFO (qos with both parts off) (+%)", "paper": None,
         "measured": rel("insufficient", "qos: scheduling only", "qos: neither (gang, arrival order)"),
         "note": "what the deadline ordering adds beyond gang placement"},
        {"claim": "autoscaling, sufficient resources: completion rate", "paper":
            PAPER["autoscaling_completion"],
         "measured": get("sufficient", "qos", "completion_rate"),
         "note": f"min over seeds {get('sufficient', 'qos', 'min')}"},
        {"claim": "  kube-default, sufficient resources: completion rate", "paper": None,
         "measured": get("sufficient", "kube-default", "completion_rate"), "note": ""},
        {"claim": "allocated CPUs utilised (qos, sufficient)", "paper": PAPER["cpu_utilisation"],
         "measured": get("sufficient", "qos", "alloc_cpu_busy"),
         "note": "training share of allocated CPU-time; restarts cost the rest"},
        {"claim": "  same, kube-default", "paper": None,
         "measured": get("sufficient", "kube-default", "alloc_cpu_busy"), "note": ""},
        {"claim": "autoscaling, insufficient resources: completion rate (qos vs scheduling only)",
         "paper": None, "measured": get("insufficient", "qos", "completion_rate"),
         "note": f"scheduling only: {get('insufficient', 'qos: scheduling only', 'completion_rate')}"},
    ]


def _factors(text: str) -> tuple[float, float]:
    try:
        lo, _, hi = text.partition("-")
        return float(lo), float(hi or lo)
    except ValueError:
        raise ConfigError(f"--deadline: expected LOW-HIGH such as 0.7-3.0, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise ConfigError(f"--seeds: expected a positive integer, got {args.seeds}")
    baselines = tuple(b.strip() for b in args.baselines.split(",") if b.strip())
    from ..policies import check_engine

    for b in baselines:
        check_engine(b, "--baselines")
    if "kube-default" not in baselines:
        baselines = ("kube-default", *baselines)  # the paper's anchor
    started = time.perf_counter()
    result = run_bench(args.seeds, insufficient=args.insufficient, sufficient=args.sufficient,
                       share=args.share, factors=_factors(args.deadline), cpu=args.cpu,
                       baselines=baselines, trace=args.trace)
    result["wall_s"] = time.perf_counter() - started
    cols = ["policy", "completion_rate", "min", "max", "vs_kube_default_%", "vs_kube_default_pts",
            "alloc_cpu_busy", "gpu_alloc_util", "avg_jct_h", "restarts"]
    tables = {}
    for scenario in ("insufficient", "sufficient"):
        c = result["clusters"][scenario]
        unit = f"{c['cpus']} CPUs" if args.cpu else f"{c['gpus']} GPUs"
        title = (f"{scenario} resources: {c['nodes']} nodes / {unit}, {args.seeds} seeds"
                 f" (completion rate = deadlines met / jobs)")
        tables[title] = [{k: r[k] for k in cols} for r in result["summary"]
                         if r["scenario"] == scenario]
    tables["QoS paper (IJCNN'19) claims vs measured"] = result["claims"]
    emit(result, as_json=args.json, tables=tables,
         notes=[(f"workload: Pollux workload 1 (Philly-derived), share {args.share}, deadline ="
                f" arrival + {ALLOWANCE:.0f} s + U({args.deadline}) x ideal run time;"
                f" wall {result['wall_s']:.0f} s")])
    return 0


def register(sub) -> None:
    p = sub.add_parser("qos", help="QoS scheduling/autoscaling vs kube-default and baselines,"
                       " beside the paper's claims")
    p.add_argument("--seeds", type=int, default=3, help="workloads (deadlines, job subset)")
    p.add_argument("--insufficient", type=int, default=8, help="nodes (x4 GPUs) when short")
    p.add_argument("--sufficient", type=int, default=32, help="nodes (x4 GPUs) when ample")
    p.add_argument("--share", type=float, default=0.8, help="share of the trace's jobs per seed")
    p.add_argument("--deadline", default="0.7-3.0",
                   help="deadline factor range LOW-HIGH over the ideal run time")
    p.add_argument("--baselines", default=",".join(BASELINES))
    p.add_argument("--trace", default=None, help="pollux:PATH (default: the shipped workload 1)")
    p.add_argument("--cpu", action="store_true", help="CPU-only workers and nodes (4-core workers)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


__all__ = ["cluster", "register", "run_bench"]
