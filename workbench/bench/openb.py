"""`workbench bench openb`: the whole openb replay (pods up to 130% of the GPU capacity of the
1,213-node GPU node list, about 10,000 pods on the default list) once per placement plugin,
timed; ratios against `random`, the cheapest plugin, measured in the same run."""

from __future__ import annotations

import time

from .. import argtypes


def register(subparsers) -> None:
    from ..placement.plugins import PLACEMENT_PLUGINS

    parser = subparsers.add_parser(
        "openb", help="seconds per openb replay (130%% load, 1,213 nodes) for each plugin")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--data", help="directory of the openb CSVs (default ../shared/data/openb)")
    parser.add_argument("--pods", default="default", help="pod list: CSV path or variant name")
    parser.add_argument("--nodes", help="node list CSV (default: the GPU node list in --data)")
    parser.add_argument("--plugins", default=",".join(PLACEMENT_PLUGINS),
                        help="plugins to time, comma-separated (default all)")
    parser.add_argument("--seed", type=argtypes.seed, default=0)
    parser.set_defaults(func=run)


def run(args) -> int:
    from ..commands.openb import _inputs, _plugins
    from ..output import emit
    from ..placement import replay
    from ..traces.openb import load_openb_nodes, load_openb_pods

    plugins = _plugins(args.plugins)
    if "random" not in plugins:
        plugins.insert(0, "random")  # the anchor
    node_path, pod_lists = _inputs(args)
    name, path = pod_lists[0]
    t0 = time.perf_counter()
    nodes = load_openb_nodes(node_path)
    pods = load_openb_pods(path)
    workload = replay.prepare_workload(pods, name)
    load_seconds = time.perf_counter() - t0
    rows = []
    for plugin in plugins:
        start = time.perf_counter()
        r = replay.replay(nodes, workload, plugin, args.seed)
        rows.append({"plugin": plugin, "seconds": time.perf_counter() - start,
                     "placing seconds": r.seconds, "pods": len(r.placed), "failed": r.failed,
                     "alloc@130%": r.allocated_at(1.3)})
    anchor = next(r["seconds"] for r in rows if r["plugin"] == "random")
    for r in rows:
        r["ratio to random"] = r["seconds"] / anchor
    result = {"trace": name, "nodes": len(nodes), "gpus": sum(n.gpus for n in nodes),
              "load_seconds": load_seconds, "seed": args.seed, "runs": rows}
    emit(result, as_json=args.json, tables={f"openb {name}: one replay to 130% per plugin": rows},
         notes=[(f"reading and preparing the CSVs: {load_seconds:.2f} s; anchor: random "
                f"{anchor:.2f} s")])
    return 0
