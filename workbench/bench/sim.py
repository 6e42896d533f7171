"""`workbench bench sim`: replay the whole Philly trace under fifo and tiresias.

The cluster is the `philly` preset, 50 nodes x 8 GPUs = 400 GPUs: the trace's mean GPU
demand over its 109 days is 374 GPUs, so the offered load is about 0.94. The anchor is
the time to load the trace in the same run; each policy's wall time is printed as a ratio
to it, with simulated jobs per second and the peak memory Python allocated.
"""

from __future__ import annotations

import resource
import time

from .. import argtypes
from ..clusters import PRESETS, preset
from ..output import emit


def run(args) -> int:
    from ..experiment import run_policy
    from ..session import make_engine
    from ..traces import load_philly

    t0 = time.perf_counter()
    jobs = load_philly(args.trace, seed=args.seed, limit=args.limit)
    load_s = time.perf_counter() - t0
    load_peak = _peak_rss_mib()
    nodes = preset(args.cluster)
    rows = []
    policies = [p for p in args.policies.split(",") if p]
    # Each engine is made once before any replay is timed, then dropped (kept, one would hold
    # its run's jobs through the next run): making the first imports every registered engine's
    # module (scipy's among them), a process's one-time cost that the first policy's row carried.
    cpu_before = _cpu_s()
    for policy in policies:
        make_engine(policy)
    cpu = _cpu_s()
    import_s, cpu_before = cpu - cpu_before, cpu
    for policy in policies:
        # Per-job curve sampling is off: nothing reads 82k progress curves; the timeline is hourly.
        r = run_policy(nodes, jobs, policy, timeline_every=3600.0, history_interval=None)
        cpu = _cpu_s()
        m = r.metrics
        rows.append({
            "policy": policy, "jobs": m["jobs"], "completed": m["completed"],
            "wall_s": r.wall_seconds, "jobs_per_s": m["jobs"] / r.wall_seconds,
            "x_load_time": r.wall_seconds / load_s, "rounds": r.controller.rounds,
            "cpu_s": cpu - cpu_before, "peak_rss_mib": _peak_rss_mib(), "avg_jct_h": m["avg_jct_h"], "makespan_h": m["makespan_h"],
            "gpu_alloc_util": m["gpu_alloc_util"], "target_cpu_s": 10.0,
        })
        cpu_before = cpu
        del r  # one policy's run is not left for the collector to scan through the next's
    gpus = sum(n.gpus for n in nodes)
    result = {"trace": "philly", "jobs": len(jobs), "cluster": args.cluster, "nodes": len(nodes),
              "gpus": gpus, "load_seconds": load_s, "engine_import_cpu_s": import_s,
              "load_peak_rss_mib": load_peak, "results": rows,
              "cluster_note": PRESETS[args.cluster][-1]}
    emit(result, as_json=args.json,
         tables={f"Philly trace, {len(jobs)} jobs on {len(nodes)} nodes / {gpus} GPUs": rows},
         notes=[(f"anchor: loading the trace took {load_s:.2f} s (peak RSS {load_peak:.0f} MiB);"
                " x_load_time = policy wall time / that"), f"cluster: {PRESETS[args.cluster][-1]}",
                ("cpu_s: CPU seconds of the run (wall_s is higher on a busy machine);"
                " peak_rss_mib: the process's peak resident memory so far"),
                "target_cpu_s: #18's 10 s of CPU per policy for the whole trace",
                (f"before the runs: importing the engines took {import_s:.2f} s of CPU (not in"
                 " any row)")])
    return 0


def register(sub) -> None:
    p = sub.add_parser("sim", help="replay the whole Philly trace under fifo and tiresias")
    p.add_argument("--policies", default="fifo,tiresias")
    p.add_argument("--trace", default=None, help="Philly CSV (default: the shipped copy)")
    p.add_argument("--cluster", default="philly", choices=sorted(PRESETS))
    p.add_argument("--limit", type=argtypes.count, default=None, help="only the first N jobs")
    p.add_argument("--seed", type=argtypes.seed, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def _cpu_s() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
