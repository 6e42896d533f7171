"""`workbench sweep`: every combination of engines, workloads, loads, clusters and seeds, on a
process pool (default), in this process (`--serial`) or on Dask (`--dask ADDRESS|local`),
into one resumable Parquet table, with a summary (mean ± 95 % CI over seeds) and plots.

    workbench sweep --engines fifo tiresias optimus --workloads default synthetic:n=200 \\
        --loads 0.5 1 1.5 --seeds 10 --out runs.parquet --report runs.html
    workbench sweep examples/sweep.yaml --dask tcp://scheduler:8786

Every option is checked before anything runs: a bad value is one line naming its key, exit 2,
and no file written. Running the same command again runs only the runs not in `--out`.
"""

from __future__ import annotations

import sys

from .. import argtypes
from ..errors import ConfigError
from ..output import check_writable, emit

AXIS_OPTIONS = ("engines", "workloads", "loads", "clusters", "seeds")


def grid_values(args) -> dict:
    """The sweep file's keys (if any) with the command line's options over them."""
    from ..sweeps.grid import read_grid_file

    values = read_grid_file(args.file) if args.file else {}
    for axis in AXIS_OPTIONS:
        given = getattr(args, axis)
        if given is not None:
            values[axis] = given[0] if len(given) == 1 else given
    if args.limit is not None:
        values["limit"] = args.limit
    if args.restart_delay is not None:
        values["restart_delay"] = args.restart_delay
    if "engines" not in values:
        raise ConfigError("--engines: missing; name engines here or in a sweep file")
    return values


def run(args) -> int:
    from ..sweeps import make_grid, run_sweep
    from ..sweeps.driver import check_files
    from ..sweeps.grid import describe
    from ..sweeps.summary import METRICS, check_metrics, rejection_notes, summarize, text_rows

    metrics = check_metrics([m.strip() for m in args.metrics.split(",") if m.strip()]
                            ) or list(METRICS)
    for flag, path in (("--csv", args.csv), ("--report", args.report)):
        if path:
            check_writable(path, flag)
    grid = make_grid(grid_values(args), args.file or "")
    check_files(grid, args.out, args.csv, args.report, args.file)
    progress = not args.no_progress and sys.stderr.isatty() and not args.json
    try:
        outcome = run_sweep(grid, out=args.out, csv=args.csv, serial=args.serial,
                            workers=args.workers, dask=args.dask, progress=progress)
    except KeyboardInterrupt:
        print(f"workbench: sweep interrupted; every finished run is in {args.out}: run the"
              " same command again to do the rest", file=sys.stderr)
        return 130
    table = outcome.table
    summary = summarize(table, metrics) if len(table) else None
    if args.report and len(table):
        from ..sweeps.report import write_report

        write_report(args.report, table, metrics, describe(grid))
    failures = [{"engine": c.engine, "workload": c.workload, "load": c.load,
                 "cluster": c.cluster, "seed": c.seed, "key": c.key, "error": e}
                for c, e in outcome.failures]
    result = {"grid": grid.axes(), "runs": len(grid.runs()), "ran": outcome.ran,
              "skipped": outcome.skipped, "failed": failures, "out": args.out,
              "wall_s": outcome.wall_s,
              "summary": [] if summary is None else summary.to_dict("records")}
    notes = [(f"{describe(grid)}: ran {outcome.ran}, {outcome.skipped} already in {args.out},"
              f" {len(failures)} failed, in {outcome.wall_s:.1f} s")]
    notes += [f"failed: {f['engine']} on {f['workload']} seed {f['seed']}: {f['error']}"
              for f in failures[:10]]
    notes += rejection_notes(table)
    if args.report and not len(table):  # it was left out without a word
        notes.append(f"--report {args.report}: not written, no run of the grid finished")
    tables = {} if summary is None else {
        "mean ± 95% CI over seeds": text_rows(summary, metrics)}
    emit(result, as_json=args.json, tables=tables, notes=notes)
    return 1 if failures else 0


def register(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid of engines × workloads × loads × clusters ×"
                                     " seeds into one resumable table")
    p.add_argument("file", nargs="?", help="a YAML or TOML sweep file (keys: engines,"
                                           " workloads, loads, clusters, seeds, limit,"
                                           " restart_delay); options given here override it")
    p.add_argument("--engines", nargs="+", help="engine names, e.g. fifo tiresias fifo+fgd")
    p.add_argument("--workloads", nargs="+", metavar="WORKLOAD",
                   help="one per argument (a synthetic spec has commas): default, philly,"
                        " pollux:PATH, synthetic:n=200,deadline=2.0, a CSV,"
                        " scenario:deadline|qoe|philly-sample|philly-ps (default: default)")
    p.add_argument("--loads", nargs="+", help="offered loads (GPU demand over the arrival"
                                              " window / cluster GPUs); 'trace': as the"
                                              " workload has it (default)")
    p.add_argument("--clusters", nargs="+", help="cluster presets or NxG (default: the"
                                                 " workload's usual cluster)")
    p.add_argument("--seeds", nargs="+", help="a count (10: seeds 0-9), a range (3-7) or seeds")
    p.add_argument("--limit", type=int, help="only the first N jobs of each workload")
    p.add_argument("--restart-delay", type=float, help="seconds a job loses when resized"
                                                       " (default 30)")
    p.add_argument("--out", default="sweep.parquet",
                   help="the results table, written as runs finish (default sweep.parquet);"
                        " runs already in it are skipped")
    p.add_argument("--csv", help="also write the table as CSV (without the JCT percentiles)")
    p.add_argument("--report", help="write plots (JCT CDFs, metric vs load) to this HTML file")
    p.add_argument("--metrics", default="", help="metrics to summarise, comma-separated"
                                                 " (default avg_jct_h, p95_jct_h, …)")
    p.add_argument("--workers", type=argtypes.workers,
                   help="worker processes (default: all cores; never more than runs to do)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--serial", action="store_true", help="run in this process, one by one")
    where.add_argument("--dask", metavar="ADDRESS", help="run on a Dask cluster"
                       " (tcp://host:8786), or 'local' to start a LocalCluster")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.set_defaults(func=run)
