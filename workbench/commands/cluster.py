"""`workbench cluster build|up|down|status`: a real local Kubernetes control plane with
emulated GPU nodes (see `workbench.k8s.local`)."""

from __future__ import annotations

import json
import time


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "cluster", help="build, start and stop a local Kubernetes control plane",
        description="A local kube-apiserver, controller-manager, scheduler and etcd on"
                    " 127.0.0.1, with emulated GPU nodes.")
    sub = parser.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)

    b = sub.add_parser("build", help="fetch and build the control plane binaries once")
    b.add_argument("--bin-dir", help="use binaries from this directory (built only if missing)")
    b.add_argument("--force", action="store_true", help="rebuild even if binaries are found")
    b.add_argument("--jobs", type=int, default=2, help="parallel compile jobs (default 2)")
    b.add_argument("--clean", action="store_true",
                   help="after building, delete the sources and Go cache (~2.3 GB)")
    b.set_defaults(func=_build)

    u = sub.add_parser("up", help="start the control plane and emulated nodes")
    u.add_argument("--nodes", type=int, default=3)
    u.add_argument("--gpus-per-node", type=int, default=8)
    u.add_argument("--cpus", type=float, default=64, help="CPU cores per node")
    u.add_argument("--mem", type=float, default=256, help="memory per node, GiB")
    u.add_argument("--racks", type=int, default=1)
    u.add_argument("--gpu-model", default="V100")
    u.add_argument("--speed", type=float, default=1.0,
                   help="emulated seconds per real second for training progress")
    u.add_argument("--api-qps", type=float, default=None,
                   help="client QPS of controller-manager and scheduler (default: theirs)")
    u.add_argument("--no-scheduler", action="store_true",
                   help="do not start kube-scheduler (the workbench binds pods itself)")
    u.add_argument("--no-operators", action="store_true",
                   help="no PyTorchJob, TFJob and JobSet CRDs nor their local operator")
    u.add_argument("--dir", help="state directory (default ~/.cache/workbench/cluster)")
    u.add_argument("--bin-dir", help="directory with etcd and kube-* binaries")
    u.set_defaults(func=_up)

    d = sub.add_parser("down", help="stop every process `cluster up` started")
    d.add_argument("--dir", help="state directory (default ~/.cache/workbench/cluster)")
    d.set_defaults(func=_down)

    s = sub.add_parser("status", help="what runs, its memory, the kubeconfig")
    s.add_argument("--dir", help="state directory (default ~/.cache/workbench/cluster)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_status)


def _say(msg: str) -> None:
    print(msg, flush=True)


def _build(args) -> int:
    from ..k8s.local.build import build

    t0 = time.monotonic()
    paths = build(args.bin_dir, force=args.force, progress=_say, jobs=args.jobs,
                               clean=args.clean)
    _say(f"ready in {time.monotonic() - t0:.1f} s: "
         + ", ".join(f"{k}={v}" for k, v in paths.items()))
    return 0


def _up(args) -> int:
    from ..k8s.local.cluster import up

    cluster = up(
        args.dir, nodes=args.nodes, gpus_per_node=args.gpus_per_node, cpus=args.cpus,
        mem=args.mem, racks=args.racks, gpu_model=args.gpu_model, speed=args.speed,
        api_qps=args.api_qps, scheduler=not args.no_scheduler, bin_dir=args.bin_dir,
        operators=not args.no_operators, progress=_say)
    _say(f"{len(cluster.node_specs)} emulated nodes × {args.gpus_per_node} GPUs"
         f" ({args.racks} rack{'s' if args.racks != 1 else ''}), speed {args.speed:g}x")
    _say(f"export KUBECONFIG={cluster.kubeconfig}")
    _say(f"stop with: workbench cluster down{f' --dir {args.dir}' if args.dir else ''}")
    return 0


def _down(args) -> int:
    from ..k8s.local.cluster import down

    stopped = down(args.dir)
    _say(f"stopped {', '.join(stopped)}" if stopped else "nothing was running")
    return 0


def _status(args) -> int:
    from ..k8s.local.cluster import status

    info = status(args.dir)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0 if info else 1
    if info is None:
        _say("no cluster (run `workbench cluster up`)")
        return 1
    age = time.time() - (info["started"] or time.time())
    _say(f"cluster in {info['directory']}: {info['server']}, {info['nodes']} emulated nodes,"
         f" up {age:.0f} s")
    _say(f"kubeconfig {info['kubeconfig']}")
    for name, c in info["components"].items():
        mem = f"{c['rss_mb']:.0f} MB" if c["rss_mb"] is not None else "-"
        _say(f"  {name:<24} pid {c['pid']:<8} {'running' if c['running'] else 'STOPPED':<8} {mem}")
    return 0 if all(c["running"] for c in info["components"].values()) else 1
