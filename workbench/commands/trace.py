"""`workbench trace show SPEC [--json]`: what a workload holds (jobs, span, GPU demand, apps)."""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

from .. import argtypes
from ..output import emit


def register(subparsers) -> None:
    parser = subparsers.add_parser("trace", help="inspect workloads and traces")
    sub = parser.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="summarise a workload: jobs, span, GPU demand, app mix",
                          description="SPEC: default, philly, philly:PATH, pollux:PATH,"
                          " synthetic, synthetic:n=200,rate=0.01,deadline=2.0, or a CSV path")
    show.add_argument("spec", metavar="SPEC", help="the workload (default: %(default)s)",
                      nargs="?", default="default")
    show.add_argument("--seed", type=argtypes.seed, default=0, help="seed for random choices (default 0)")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=show_trace)


def summarize(jobs) -> dict:
    """Counts and ranges of a job list, plain data (JSON-ready)."""
    n = len(jobs)
    arrivals = np.array([j.arrival for j in jobs], dtype=float)
    workers = np.array([j.initial_workers for j in jobs], dtype=int)
    gpus = np.array([j.initial_workers * j.worker_demand.gpu for j in jobs], dtype=float)
    deadlines = sum(j.deadline is not None for j in jobs)
    span = float(arrivals.max() - arrivals.min()) if n else 0.0
    histogram = Counter(workers.tolist())
    apps = Counter(j.application for j in jobs)
    kinds = Counter(j.kind.value for j in jobs)
    return {
        "source": getattr(jobs, "source", ""),
        "jobs": n,
        "first_arrival_s": float(arrivals.min()) if n else None,
        "last_arrival_s": float(arrivals.max()) if n else None,
        "span_s": span,
        "span_h": span / 3600,
        "gpus_requested": float(gpus.sum()),
        "max_job_gpus": float(gpus.max()) if n else 0.0,
        "with_deadline": int(deadlines),
        "kinds": dict(kinds),
        "skipped": dict(getattr(jobs, "skipped", {})),
        "gpu_histogram": {str(k): v for k, v in sorted(histogram.items())},
        "applications": dict(sorted(apps.items())),
        "notes": list(getattr(jobs, "notes", [])),
    }


def show_trace(args: argparse.Namespace) -> int:
    from ..traces import load_trace

    jobs = load_trace(args.spec, seed=args.seed)
    summary = summarize(jobs)
    n = max(summary["jobs"], 1)
    overview = [{"field": k, "value": v} for k, v in summary.items()
                if k in ("source", "jobs", "span_h", "gpus_requested", "max_job_gpus",
                         "with_deadline")]
    overview.append({"field": "kinds", "value": ", ".join(f"{k} {v}" for k, v in
                                                           summary["kinds"].items())})
    overview.append({"field": "skipped", "value": sum(summary["skipped"].values())})
    gpu_rows = [{"workers": int(k), "jobs": v, "share_%": round(100 * v / n, 2)}
                for k, v in summary["gpu_histogram"].items()]
    app_rows = [{"application": a, "jobs": v, "share_%": round(100 * v / n, 2)}
                for a, v in summary["applications"].items()]
    emit(summary, as_json=args.json,
         tables={f"workload {args.spec}": overview, "initial workers (GPUs)": gpu_rows,
                 "applications": app_rows},
         notes=summary["notes"])
    return 0
