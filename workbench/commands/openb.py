"""`workbench openb`: the FGD paper's replay protocol on an Alibaba openb pod list.

Per plugin and seed it prints the allocated GPU share when the requested GPUs reach 100% and
130% of the cluster's capacity, the fragmentation ratio (fragmented ÷ unallocated GPU capacity,
measured against the pod list's task shapes) at both points, and the failed pods; then the
mean ± sd over seeds. `--plot` writes the curves (.svg, .csv, or .png with matplotlib).
`--protocol artifact` replays as the FGD paper's simulator does instead (docs/openb-results.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .. import argtypes
from ..errors import ConfigError


def register(subparsers) -> None:
    from ..placement.plugins import PLACEMENT_PLUGINS

    parser = subparsers.add_parser(
        "openb", help="replay an Alibaba openb pod list with GPU-sharing placement plugins",
        description="Pods drawn uniformly with replacement (seeded) until requested GPUs reach "
                    "130% of the GPU node list's capacity; each placed once on arrival, never "
                    "leaving; failures counted (FGD, USENIX ATC '23); --protocol artifact "
                    "replays as the FGD artifact's simulator does. The openb files are not "
                    "shipped: by default they are read from ../shared/data/openb.")
    parser.add_argument("--data", help="directory of the openb CSVs (default ../shared/data/openb)")
    parser.add_argument("--pods", default="default",
                        help="pod list: a CSV path, or variant names separated by commas "
                             "(default, gpushare40, multigpu20, gpuspec10, cpu050, ...)")
    parser.add_argument("--nodes", help="node list CSV (default: the GPU node list in --data)")
    parser.add_argument("--plugins", default=",".join(PLACEMENT_PLUGINS),
                        help=f"placement plugins, comma-separated (default all: "
                             f"{','.join(PLACEMENT_PLUGINS)})")
    parser.add_argument("--seeds", type=argtypes.count, default=1,
                        help="number of seeds (default 1)")
    parser.add_argument("--first-seed", type=argtypes.seed, default=0,
                        help="first seed (default 0)")
    parser.add_argument("--load", type=float, default=1.3,
                        help="stop when requested GPUs reach this share of capacity (1.3)")
    parser.add_argument("--coverage", type=float, default=None,
                        help="share of pods whose shapes form FGD's target workload, most "
                             "popular first (default 1.0: all; 0.95 under --protocol artifact, "
                             "as the paper's simulator)")
    parser.add_argument("--protocol", default="default",
                        help="default: pods drawn with replacement and shuffled, our plugin "
                             "scores; artifact: the FGD artifact's workload tuning, integer "
                             "scores, ties to a node order fixed per run and bucketed "
                             "allocation (docs/openb-results.md)")
    parser.add_argument("--plot", metavar="FILE",
                        help="write the mean curves: .svg, .csv, or .png (needs matplotlib)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=run)


def _inputs(args):
    from ..traces.openb import NODE_FILE, default_data_dir, resolve_pod_list

    data_dir = Path(args.data) if args.data else None
    if data_dir is not None and not data_dir.is_dir():
        raise ConfigError(f"--data: {data_dir} is not a directory")
    pods = [p.strip() for p in str(args.pods).split(",") if p.strip()]
    if not pods:
        raise ConfigError("--pods: name at least one pod list")
    needs_dir = args.nodes is None or any(not p.endswith(".csv") for p in pods)
    if needs_dir and data_dir is None:
        data_dir = default_data_dir()
    nodes = Path(args.nodes) if args.nodes else data_dir / NODE_FILE
    return nodes, [(Path(p).stem.replace("openb_pod_list_", ""), resolve_pod_list(p, data_dir))
                   for p in pods]


def _plugins(text: str) -> list[str]:
    from ..placement.plugins import PLACEMENT_PLUGINS

    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in PLACEMENT_PLUGINS]
    if unknown or not names:
        raise ConfigError(f"--plugins: unknown {', '.join(unknown) or '(none given)'}; known: "
                          f"{', '.join(PLACEMENT_PLUGINS)}")
    return names


def run(args) -> int:
    from ..output import emit
    from ..placement import curves, replay
    from ..traces.openb import load_openb_nodes, load_openb_pods

    if args.seeds < 1:
        raise ConfigError("--seeds must be at least 1")
    if not 0 < args.load <= 5:
        raise ConfigError("--load must be in (0, 5]")
    protocol = replay.check_protocol(args.protocol)
    coverage = args.coverage
    if coverage is None:
        coverage = replay.ARTIFACT_COVERAGE if protocol == "artifact" else 1.0
    if not 0 < coverage <= 1:
        raise ConfigError("--coverage must be in (0, 1]")
    plugins = _plugins(args.plugins)
    if args.plot:
        _check_plot(args.plot)
    node_path, pod_lists = _inputs(args)
    nodes = load_openb_nodes(node_path)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    loads = (1.0, args.load) if args.load > 1.0 else (args.load,)

    def progress(r) -> None:
        if not args.quiet:
            print(f"  {r.workload} {r.plugin} seed {r.seed}: allocated "
                  f"{r.allocated_at(args.load):.4f} at {args.load:.0%}, {r.seconds:.1f} s",
                  file=sys.stderr, flush=True)

    replays = []
    for name, path in pod_lists:
        workload = replay.prepare_workload(load_openb_pods(path), name, coverage)
        replays += replay.run(nodes, workload, plugins, seeds, load=args.load, progress=progress,
                              protocol=protocol)
    per_seed = [r.summary(loads) for r in replays]
    means = replay.mean_rows(replays, loads)
    result = {
        "nodes": str(node_path), "pod_lists": {n: str(p) for n, p in pod_lists},
        "gpus": replays[0].capacity_gpus, "load": args.load, "coverage": coverage,
        "protocol": protocol,
        "seeds": list(seeds), "runs": per_seed, "mean": means,
    }
    when = ("mean over the pods whose requested GPUs round to that % of capacity"
            if protocol == "artifact" else "once requested GPUs reach that share of capacity")
    notes = [(f"cluster: {len(nodes)} nodes, {replays[0].capacity_gpus:g} GPUs ({node_path}); "
             f"protocol {protocol}; alloc = allocated GPUs ÷ all GPUs, {when}; "
             f"frag = fragmented ÷ unallocated GPU capacity")]
    if args.plot:
        for name, _ in pod_lists:
            target = args.plot
            if len(pod_lists) > 1:
                stem = Path(args.plot)
                target = str(stem.with_name(f"{stem.stem}-{name}{stem.suffix}"))
            data = replay.curves([r for r in replays if r.workload == name])
            kind = curves.write_curves(target, data, f"openb {name}: {len(seeds)} seed(s)")
            result.setdefault("plots", []).append(target)
            notes.append(f"curves written to {target} ({kind})")
    emit(result, as_json=args.json,
         tables={"per seed": per_seed, "mean ± sd over seeds": [_pretty(r) for r in means]},
         notes=notes)
    return 0


def _check_plot(path: str) -> None:
    """Refuse a plot file we cannot write before spending time on the runs."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".svg", ".csv", ".png"):
        raise ConfigError(f"--plot: unknown file type {path!r}; use .svg, .csv or .png")
    if suffix == ".png":
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            raise ConfigError("--plot: .png needs matplotlib, which is not installed; "
                              "use a .svg or .csv file")
    parent = Path(path).parent
    if not parent.is_dir():
        raise ConfigError(f"--plot: no directory {parent}")


def _pretty(row: dict) -> dict:
    out = {}
    for key, value in row.items():
        if key.endswith(" sd"):
            continue
        sd = row.get(key + " sd")
        if sd is None:
            out[key] = value
        elif key == "failed":
            out[key] = f"{value:.0f} ± {sd:.0f}"
        elif key == "seconds":
            out[key] = f"{value:.2f} ± {sd:.2f}"
        else:
            out[key] = f"{value:.4f} ± {sd:.4f}"
    return out
