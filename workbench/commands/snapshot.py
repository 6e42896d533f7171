"""`workbench snapshot`: save a live Kubernetes cluster's present as a simulator state.

    workbench snapshot --kubeconfig ~/.kube/config -o cluster.json
    workbench simulate --from-snapshot cluster.json --policy tiresias

The file (`sim.snapshot`) holds the nodes, every training job (pods with `schedulerName:
workbench`) with its requests, deadline, worker range, placement, progress and measured
throughput, and the jobs waiting; `workbench simulate --from-snapshot` replays it offline
under any engine. Reading the cluster changes nothing on it.
"""

from __future__ import annotations

from ..errors import check_number
from ..output import atomic_path, check_writable, emit


def register(sub) -> None:
    p = sub.add_parser("snapshot", help="save a live cluster's present as a simulator state"
                                        " (replay it with simulate --from-snapshot)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config,"
                   " or the in-cluster service account)")
    p.add_argument("--context", default=None, help="kubeconfig context (default: its current)")
    p.add_argument("--namespace", default=None,
                   help="only jobs in this namespace (default: every namespace)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the snapshot's JSON file")
    p.add_argument("--engine", default="", help="the engine scheduling the cluster, to record")
    p.add_argument("--restart-delay", type=float, default=30.0,
                   help="seconds a job loses per restart in the replay (default 30; 0 on the"
                        " emulated local cluster, whose pods start the moment they are bound)")
    p.add_argument("--speed", type=float, default=1.0,
                   help="clock speed-up, to match an emulated cluster's fast clock (default 1)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run_snapshot)


def run_snapshot(args) -> int:
    from ..k8s.backend import K8sBackend
    from ..sim.snapshot import MAX_RESTART_DELAY
    check_number("--restart-delay", args.restart_delay, minimum=0.0, maximum=MAX_RESTART_DELAY)
    check_number("--speed", args.speed, minimum=1e-9)
    check_writable(args.output, "--output")
    if args.engine:  # before connecting, which a dead API server retries for good
        from ..policies import check_engine

        check_engine(args.engine, "--engine")
    with K8sBackend(kubeconfig=args.kubeconfig, context=args.context, namespace=args.namespace,
                    speed=args.speed, serve=True, restart_delay=args.restart_delay) as backend:
        snapshot = backend.snapshot(args.engine)
    with atomic_path(args.output, "--output") as tmp:  # an interrupt leaves any old file whole
        snapshot.save(tmp)
    states: dict[str, int] = {}
    for job in snapshot.jobs:
        states[job.state.value] = states.get(job.state.value, 0) + 1
    result = {"file": args.output, "taken_at": snapshot.taken_at,
              "wall_time": snapshot.wall_time, "nodes": len(snapshot.nodes),
              "jobs": states, "upcoming": len(snapshot.upcoming)}
    emit(result, as_json=args.json,
         tables={snapshot.describe(): [{"state": k, "jobs": v} for k, v in states.items()]})
    return 0
