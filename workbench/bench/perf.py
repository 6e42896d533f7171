"""`workbench bench perf`: fit/interpolation errors of the performance models, and how fast
`PerfModel.iteration_rate` is, cached and uncached, as a ratio against the cached anchor."""

from __future__ import annotations

import time

import numpy as np

from .. import argtypes, output
from ..model import JobKind, JobSpec, Placement


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "perf", help="performance-model fit errors and iteration_rate calls/s (cached vs uncached)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--calls", type=argtypes.count, default=20000,
                        help="iteration_rate calls per timing (default 20000)")
    parser.add_argument("--seed", type=argtypes.seed, default=0, help="seed of the random placements")
    parser.set_defaults(func=run)


def _workload(perf, n: int, seed: int) -> list[tuple[JobSpec, Placement, Placement]]:
    """`n` distinct-ish (job, workers, ps) triples over all apps, placements up to 16 × 4 GPUs."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        if rng.random() < 0.2:
            model = perf.ps_models[int(rng.integers(len(perf.ps_models)))]
            spec = JobSpec(name=f"ps{i}", application=model, arrival=0.0, total_work=1e4,
                           batch_size=32, max_workers=12, num_ps=1, kind=JobKind.PS)
            workers = {f"n{k}": 1 for k in range(int(rng.integers(1, 13)))}
            ps = {f"n{k}": 1 for k in range(int(rng.integers(1, 13)))}
        else:
            app = perf.applications[int(rng.integers(len(perf.applications)))]
            sizes = perf.measured_batch_sizes(app)
            spec = JobSpec(name=f"j{i}", application=app, arrival=0.0, total_work=1e4,
                           batch_size=int(sizes[int(rng.integers(len(sizes)))]), max_workers=64)
            nodes = int(rng.integers(1, 17))
            workers = {f"n{k}": int(rng.integers(1, 5)) for k in range(nodes)}
            ps = {}
        out.append((spec, workers, ps))
    return out


def _calls_per_s(perf, work, calls: int) -> float:
    rate = perf.iteration_rate
    n = len(work)
    start = time.perf_counter()
    for i in range(calls):
        spec, workers, ps = work[i % n]
        rate(spec, workers, ps)
    return calls / (time.perf_counter() - start)


def run(args) -> int:
    from ..perf import PerfModel

    cached = PerfModel.from_package(cached=True)
    uncached = PerfModel.from_package(cached=False)
    fit = cached.fit_report()
    work = _workload(cached, 500, args.seed)
    _calls_per_s(cached, work, len(work))  # warm the cache: the anchor measures hits
    anchor = _calls_per_s(cached, work, args.calls)
    timings = [("cached (anchor)", anchor), ("uncached", _calls_per_s(uncached, work, args.calls))]
    cold = PerfModel.from_package(cached=True)
    timings.append(("cached, first calls", _calls_per_s(cold, work, len(work))))

    interp_rows = []
    for app, kinds in fit["allreduce"].items():
        row = {"app": app}
        for kind in ("batch", "placement", "nodes"):
            row[f"{kind} median"] = kinds[kind]["median"]
            row[f"{kind} p90"] = kinds[kind]["p90"]
        row["points"] = sum(kinds[k]["n"] for k in kinds)
        interp_rows.append(row)
    ps_rows = [{"model": model, "points": f["points"], "dropped": f["dropped"],
                "median": f["median_rel_err"], "mean": f["mean_rel_err"],
                "p90": f["p90_rel_err"], "max": f["max_rel_err"],
                "mean w<=2": f["mean_rel_err_w_le_2"], "mean w>2": f["mean_rel_err_w_gt_2"]}
               for model, f in fit["ps"].items()]
    speed_rows = [{"variant": name, "calls/s": cps, "µs/call": 1e6 / cps, "ratio": cps / anchor}
                  for name, cps in timings]
    result = {"fit_report": fit, "iteration_rate": speed_rows, "calls": args.calls,
              "seed": args.seed}
    output.emit(result, as_json=args.json, tables={
        "step_time hold-out error (|predicted/measured - 1|)": interp_rows,
        "PS Optimus-form fit error (relative, speed)": ps_rows,
        "iteration_rate calls/s (ratio against the cached anchor)": speed_rows,
    }, notes=[("batch: a local batch left out of a measured placement; placement: a whole"
              " replicas-per-node multiset left out; nodes: a scalability node count left out.")])
    return 0
