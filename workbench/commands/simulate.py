"""`workbench simulate` and `workbench compare`: run engines on a workload in the simulator."""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time

from ..clusters import PRESETS
from ..errors import ConfigError, check_number
from ..output import atomic_open, check_separate, check_writable, emit, write_json

SUMMARY_COLUMNS = ["policy", "jobs", "completed", "rejected", "avg_jct_h", "median_jct_h",
                   "p95_jct_h", "makespan_h", "avg_queue_h", "deadline_hit_rate",
                   "gpu_alloc_util", "gpu_effective_util", "gpu_frag_avg", "restarts", "wall_s"]


def add_workload_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", default="default",
                   help="workload: default (Pollux workload 1 with seeded deadlines;"
                        " default:deadlines=none without), philly[:PATH], pollux:PATH,"
                        " synthetic[:k=v,...], or a CSV path")
    p.add_argument("--cluster", default=None,
                   help=f"cluster preset ({', '.join(PRESETS)}) or NxG such as 16x4")
    p.add_argument("--nodes", type=int, default=None, help="number of nodes (overrides the preset)")
    p.add_argument("--gpus-per-node", type=int, default=None)
    p.add_argument("--seed", type=int, default=0, help="seed for every random choice")
    p.add_argument("--limit", type=int, default=None, help="only the first N jobs of the trace")
    p.add_argument("--restart-delay", type=float, default=30.0,
                   help="seconds a job loses when its allocation changes (default 30, as Pollux)")
    p.add_argument("--fault", action="append", default=[], metavar="NODE@T[+D]",
                   help="fail NODE at T seconds for D seconds (default 3600; D=inf: for good);"
                        " repeatable")
    p.add_argument("--placement", default=None, metavar="PLUGIN",
                   help="placement plugin choosing each task's node for every engine that takes"
                        " one: random, dot-product, gpu-clustering, gpu-packing, best-fit, fgd"
                        " (or name it per engine: fifo+fgd)")
    p.add_argument("--json", action="store_true", help="print results as JSON")
    p.add_argument("--scenario", default=None, metavar="NAME",
                   help="run in a paper's own setting (see `workbench scenarios`): its cluster,"
                        " jobs and mechanisms")


def parse_faults(specs: list[str], nodes) -> list:
    from ..sim import Fault

    names = {n.name for n in nodes}
    faults = []
    for spec in specs:
        node, _, when = spec.partition("@")
        at, _, dur = when.partition("+")
        try:
            t = float(at)
            d = None if dur == "inf" else float(dur or 3600.0)
        except ValueError:
            raise ConfigError(f"--fault {spec!r}: expected NODE@SECONDS[+SECONDS], e.g. node-03@7200+1800") from None
        if node not in names:
            raise ConfigError(f"--fault {spec!r}: no node {node!r} (nodes are {min(names)} … {max(names)})")
        if not 0 <= t < math.inf or (d is not None and not 0 < d < math.inf):  # NaN too
            raise ConfigError(f"--fault {spec!r}: time must be >= 0 and duration > 0")
        faults.append(Fault(t, node, d))
    return faults


def progress_printer(enabled: bool, horizon: float | None, stream=None):
    """A progress line on `stream` (stderr) for a run whose last job arrives at `horizon`:
    the share of the arrival window simulated, then, once every job has arrived, that the
    run is finishing the jobs left (a bar at 100 % for the last hours of a Philly replay,
    still running, said it was done)."""
    if not enabled:
        return None
    stream = stream or sys.stderr
    start = time.perf_counter()

    def show(now: float) -> None:
        wall = f"sim {now / 3600:8.1f} h  wall {time.perf_counter() - start:5.1f} s"
        if horizon and now >= horizon:
            line = f"all jobs arrived, finishing the rest: {wall}"
        else:
            frac = min(now / horizon, 1.0) if horizon else 0.0
            line = f"[{'#' * int(frac * 30):<30}] {frac:6.1%} of arrivals  {wall}"
        stream.write(f"\r{line:<84}")  # padded: a shorter line leaves none of the last one
        stream.flush()

    return show


def check_workload_options(args) -> None:
    """The options the workload commands (simulate, compare, serve) share, checked before
    anything is loaded or served: one line naming the option, exit 2. A negative, NaN or
    infinite delay or speed is never meant, and an output file must be writable before a
    long run, not after it."""
    if args.seed < 0:
        raise ConfigError(f"--seed: expected a non-negative integer, got {args.seed}")
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit: expected a positive integer, got {args.limit}")
    if getattr(args, "restart_delay", None) is not None:
        from ..sim.snapshot import MAX_RESTART_DELAY
        check_number("--restart-delay", args.restart_delay, minimum=0.0,
                     maximum=MAX_RESTART_DELAY)
    from ..traces.registry import trace_file

    outputs = [("--" + flag.replace("_", "-"), getattr(args, flag, None))
               for flag in ("csv", "out_json", "decisions")]
    for flag, path in outputs:
        if path:
            check_writable(path, flag)
    check_separate(outputs, [("--trace", trace_file(args.trace)),
                             ("--from-snapshot", getattr(args, "from_snapshot", None))])


def run_simulate(args) -> int:
    from ..experiment import run_policy
    from ..policies import check_engine
    from ..session import load_jobs, load_nodes

    check_workload_options(args)
    if args.policy is None:  # a scenario's runs are its engine and its baselines
        args.policy = ",".join(_scenario_labels(args)) if args.scenario else (
            "fifo" if args.command == "simulate" else DEFAULT_COMPARE)
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    flag = "--policies" if args.command == "compare" else "--policy"
    if twice := next((p for i, p in enumerate(policies) if p in policies[:i]), None):
        raise ConfigError(f"{flag}: {twice!r} is listed twice")  # (it ran, and showed, twice)
    if getattr(args, "scenario", None):
        return _run_scenario(args, policies)
    if not policies:
        raise ConfigError(f"{flag}: expected engine names (see `workbench policies`),"
                          f" got {args.policy!r}")
    for p in policies:
        check_engine(p, flag)
    if getattr(args, "from_snapshot", None):
        return _run_from_snapshot(args, [_engine(p, args.placement) for p in policies])
    jobs = load_jobs(args.trace, seed=args.seed, limit=args.limit)
    nodes = load_nodes(args.trace, args.cluster, args.nodes, args.gpus_per_node)
    faults = parse_faults(args.fault, nodes)
    engines = [_engine(p, args.placement) for p in policies]
    show_progress = sys.stderr.isatty() and not args.json and len(jobs) > 2000
    horizon = max(j.arrival for j in jobs) if jobs else None
    results = []
    for engine in engines:
        try:
            results.append(run_policy(nodes, jobs, engine, restart_delay=args.restart_delay,
                                      faults=faults,
                                      progress=progress_printer(show_progress, horizon)))
        finally:  # Ctrl-C too: "workbench: interrupted" on a line of its own
            if show_progress:
                sys.stderr.write("\n")
    rows = [r.row() for r in results]
    gpus = sum(n.gpus for n in nodes)
    result = {"trace": args.trace, "jobs": len(jobs), "nodes": len(nodes), "gpus": gpus,
              "seed": args.seed, "results": rows}
    title = f"{args.trace}: {len(jobs)} jobs on {len(nodes)} nodes / {gpus} GPUs (seed {args.seed})"
    return _report(args, results, result, title)


def _report(args, results: list, result: dict, title: str) -> int:
    """Write the runs' decisions, CSV and JSON where asked, and print the results table."""
    rows = result["results"]
    if getattr(args, "decisions", None):  # the largest first: a SIGINT in it leaves all three
        _write_decisions(args.decisions, results)
    if getattr(args, "csv", None):
        _write_csv(args.csv, rows)
    if getattr(args, "out_json", None):
        write_json(args.out_json, "--out-json", result)
    table = [{c: r.get(c) for c in SUMMARY_COLUMNS} for r in rows]
    emit(result, as_json=args.json, tables={title: table})
    return 0


DEFAULT_COMPARE = "kube-default,fifo,drf,tiresias,optimus"
SCENARIO_EXCLUDES = {"trace": "default", "cluster": None, "nodes": None,
                     "gpus_per_node": None, "limit": None, "fault": [], "placement": None,
                     "from_snapshot": None, "restart_delay": 30.0}


def _scenario_labels(args) -> list[str]:
    from ..scenarios import get

    scenario = get(args.scenario)
    return [scenario.engine] if args.command == "simulate" else list(scenario.engines)


def _run_scenario(args, labels: list[str]) -> int:
    """The runs `labels` name in the paper setting `--scenario` (its engine by default; with
    `compare`, its engine and every baseline), on its cluster and seeded jobs, with the
    mechanisms it switches on (see `workbench scenarios`)."""
    from ..scenarios import get, run_scenario

    scenario = get(args.scenario)
    for key, default in SCENARIO_EXCLUDES.items():
        if getattr(args, key, default) != default:
            raise ConfigError(f"--scenario: the workload, cluster and mechanisms come from the"
                              f" scenario; drop --{key.replace('_', '-')}")
    flag = "--policies" if args.command == "compare" else "--policy"
    for label in labels:
        if label not in scenario.engines:
            raise ConfigError(f"{flag}: scenario {scenario.name} runs"
                              f" {', '.join(scenario.engines)}; got {label!r}")
    results = [run_scenario(scenario, label, args.seed) for label in labels]
    nodes = list(scenario.nodes())
    gpus = sum(n.gpus for n in nodes)
    jobs = results[0].metrics.get("jobs") if results else 0
    result = {"scenario": scenario.name, "paper": scenario.paper, "jobs": jobs,
              "nodes": len(nodes), "gpus": gpus, "seed": args.seed,
              "results": [r.row() for r in results]}
    title = (f"{scenario.name} ({scenario.paper}): {jobs} jobs on {len(nodes)} nodes /"
             f" {gpus} GPUs (seed {args.seed})")
    return _report(args, results, result, title)


SNAPSHOT_EXCLUDES = {"trace": "default", "cluster": None, "nodes": None,
                     "gpus_per_node": None, "limit": None, "fault": []}


def _run_from_snapshot(args, engines: list) -> int:
    """Each engine run to the end from the cluster saved in `--from-snapshot` (its nodes,
    jobs, progress and restart delay: see `sim.restore`); a job that can never run there is
    rejected as `workbench simulate` rejects it (`session.refusals`)."""
    from ..errors import InputError
    from ..experiment import RunResult
    from ..metrics import run_metrics
    from ..session import AdmittingController, meter_fragmentation, refusals
    from ..sim.restore import from_snapshot
    from ..sim.snapshot import Snapshot

    for key, default in SNAPSHOT_EXCLUDES.items():
        if getattr(args, key) != default:
            raise ConfigError(f"--from-snapshot: the workload and cluster come from the snapshot;"
                              f" drop --{key.replace('_', '-')}")
    snapshot = Snapshot.load(args.from_snapshot)
    specs = [j.spec for j in snapshot.active] + snapshot.upcoming
    verdicts = refusals(specs, [r.node for r in snapshot.nodes])  # as `simulate` rejects them
    refused = [(s, verdicts[s.name]) for s in specs if s.name in verdicts]
    results = []
    for engine in engines:
        t0 = time.perf_counter()
        try:
            backend = from_snapshot(snapshot)
        except ValueError as e:  # a placement that does not fit its node
            raise InputError(str(e), file=args.from_snapshot) from None
        controller = AdmittingController(backend, engine, refused)
        # as `simulate` measures it: gpu_frag_avg was "-" here and a number there
        meter_fragmentation(controller, [s for s in specs if s.name not in verdicts])
        controller.run()
        metrics = run_metrics(backend, controller.recorder.timeline)
        metrics["stalled"] = len(controller.stalled)
        results.append(RunResult(engine.name, metrics, controller, time.perf_counter() - t0))
    gpus = sum(r.node.gpus for r in snapshot.nodes)
    result = {"snapshot": args.from_snapshot, "taken_at": snapshot.taken_at,
              "jobs": len(snapshot.jobs) + len(snapshot.upcoming), "nodes": len(snapshot.nodes),
              "gpus": gpus, "results": [r.row() for r in results]}
    title = f"{args.from_snapshot}: {snapshot.describe()}"
    return _report(args, results, result, title)


def _engine(name: str, placement: str | None):
    """Engine `name` (`fifo`, or `fifo+fgd` with a placement plugin), `--placement` applied."""
    from ..placement.plugins import check_plugin
    from ..policies import make_policy

    if placement:  # a plugin in the name was checked with the name (`check_engine`)
        check_plugin(placement, "--placement")
    return make_policy(name, **({"placement": placement} if placement else {}))


def _write_csv(path: str, rows: list[dict]) -> None:
    with atomic_open(path, "--csv", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _write_decisions(path: str, results) -> None:
    with atomic_open(path, "--decisions", newline="") as f:
        w = csv.writer(f)
        w.writerow(["policy", "time", "action", "job", "applied", "reason", "detail"])
        for r in results:
            for d in r.controller.recorder.decisions:
                w.writerow([r.policy, f"{d.time:.0f}", d.action, d.job, d.applied, d.reason,
                            d.detail])


def register(sub) -> None:
    p = sub.add_parser("simulate", help="simulate a trace under one engine and print its results")
    add_workload_arguments(p)
    p.add_argument("--policy", default=None,
                   help="engine name (see `workbench policies`; default fifo, or with"
                        " --scenario the paper's engine)")
    p.add_argument("--csv", help="also write the results table to this CSV file")
    p.add_argument("--out-json", help="also write the results to this JSON file")
    p.add_argument("--decisions", help="write every decision with its reason to this CSV file")
    p.add_argument("--from-snapshot", metavar="FILE",
                   help="start from a cluster saved by `workbench snapshot` (its nodes, jobs,"
                        " progress and restart delay) instead of a trace")
    p.set_defaults(func=run_simulate)

    c = sub.add_parser("compare", help="run several engines on the same workload side by side")
    add_workload_arguments(c)
    c.add_argument("--policies", dest="policy", default=None,
                   help=f"comma-separated engine names (default {DEFAULT_COMPARE}, or with"
                        " --scenario the paper's engine and baselines)")
    c.add_argument("--csv", help="also write the results table to this CSV file")
    c.add_argument("--out-json", help="also write the results to this JSON file")
    c.add_argument("--decisions", help="write every decision with its reason to this CSV file")
    c.add_argument("--from-snapshot", metavar="FILE",
                   help="start from a cluster saved by `workbench snapshot` instead of a trace")
    c.set_defaults(func=run_simulate)

    ls = sub.add_parser("policies", help="list the scheduling engines")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_list_policies)


def _list_policies(args) -> int:
    from ..policies import about, available, make_policy

    rows = []
    for name in available():
        try:
            doc = about(type(make_policy(name))).split(". ")[0].rstrip(".")  # its first sentence
        except Exception as e:  # noqa: BLE001 - an engine that needs options still lists
            doc = f"({e})"
        rows.append({"engine": name, "about": doc})
    emit({"policies": rows}, as_json=args.json, tables={"engines": rows})
    return 0
