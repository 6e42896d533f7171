"""`workbench k8s manifests|submit`: run the scheduler in a cluster; submit a trace as Jobs
(batch/v1, or PyTorchJobs, TFJobs or JobSets where their CRDs are installed)."""

from __future__ import annotations

import time

from .. import argtypes
from ..errors import ConfigError, WorkbenchError
from ..k8s.manifests import KINDS
from ..output import emit


def register(subparsers) -> None:
    parser = subparsers.add_parser("k8s", help="Kubernetes manifests and job submission")
    sub = parser.add_subparsers(dest="k8s_command", metavar="ACTION", required=True)

    m = sub.add_parser("manifests", help="print the objects that run `workbench schedule`"
                       " in-cluster with least privilege (ServiceAccount, ClusterRole,"
                       " ClusterRoleBinding, Deployment)")
    m.add_argument("--namespace", default="workbench-system", help="namespace of the scheduler")
    m.add_argument("--image", default="workbench:latest", help="container image with workbench")
    m.add_argument("--policy", default="tiresias")
    m.add_argument("--metrics-port", type=int, default=9090)
    m.add_argument("--training-namespace", default="default",
                   help="namespace whose training pods may report progress")
    m.add_argument("--json", action="store_true", help="a JSON list instead of YAML")
    m.set_defaults(func=_manifests)

    s = sub.add_parser("submit", help="create batch/v1 Jobs, PyTorchJobs, TFJobs or JobSets"
                       " (schedulerName workbench) from a trace")
    s.add_argument("trace", help="workload: default, philly[:PATH], pollux:PATH,"
                   " synthetic[:k=v,...], or a CSV path (as `workbench simulate --trace`)")
    s.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    s.add_argument("--namespace", default="default")
    s.add_argument("--limit", type=argtypes.count, default=None, help="only the first N jobs")
    s.add_argument("--kind", default="job", choices=KINDS,
                   help="what each job becomes: batch/v1 Jobs (default), a Kubeflow PyTorchJob"
                        " (all-reduce jobs; elastic when the job has a worker range), a TFJob,"
                        " or a JobSet")
    s.add_argument("--seed", type=argtypes.seed, default=0)
    s.add_argument("--image", default=None, help="training image (default: one for emulated nodes)")
    s.add_argument("--command", default=None, help="container command, as one shell string")
    s.add_argument("--service-account", default=None,
                   help="service account of the pods (e.g. workbench-trainer, to report progress)")
    s.add_argument("--replay", action="store_true",
                   help="keep the trace's arrival gaps: each job's `arrival` annotation is now +"
                        " its offset in the trace (divided by --time-scale); the scheduler"
                        " considers it from then on. Default: every job arrives now")
    s.add_argument("--time-scale", type=argtypes.positive, default=1.0,
                   help="with --replay: divide arrival gaps and deadlines by this")
    s.add_argument("--dry-run", action="store_true", help="print the Jobs, create nothing")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_submit)


def _manifests(args) -> int:
    import json

    from ..k8s.manifests import scheduler_manifests, to_yaml
    from ..policies import check_engine

    check_engine(args.policy, "--policy")  # a Deployment of an unknown engine crash-loops
    if not 0 < args.metrics_port < 65536:
        raise ConfigError(f"--metrics-port: expected 1..65535, got {args.metrics_port}")
    objects = scheduler_manifests(args.namespace, image=args.image, policy=args.policy,
                                  metrics_port=args.metrics_port,
                                  training_namespace=args.training_namespace)
    print(json.dumps(objects, indent=2) if args.json else to_yaml(objects), end="" if not
          args.json else "\n")
    return 0


def _submit(args) -> int:
    import shlex

    from ..k8s.manifests import DEFAULT_IMAGE, k8s_name, training_jobs
    from ..traces import load_trace

    jobs = sorted(load_trace(args.trace, seed=args.seed), key=lambda j: (j.arrival, j.name))
    if args.limit is not None:
        if args.limit < 1:
            raise ConfigError(f"--limit: expected a positive integer, got {args.limit}")
        jobs = jobs[: args.limit]
    if not jobs:
        raise ConfigError(f"{args.trace}: no jobs")
    names = [k8s_name(j.name) for j in jobs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{args.trace}: job names collide once made DNS-1123 names")
    now = time.time()
    first = jobs[0].arrival
    command = shlex.split(args.command) if args.command else None
    manifests = []
    for spec in jobs:
        offset = (spec.arrival - first) / args.time_scale if args.replay else 0.0
        deadline = None
        if spec.deadline is not None:
            deadline = now + offset + (spec.deadline - spec.arrival) / \
                (args.time_scale if args.replay else 1.0)
        spec = spec.with_(arrival=now + offset, deadline=deadline)
        try:
            manifests += training_jobs(spec, args.namespace, arrival=spec.arrival,
                                       image=args.image or DEFAULT_IMAGE, command=command,
                                       service_account=args.service_account, kind=args.kind)
        except ValueError as e:
            raise ConfigError(f"--kind {args.kind}: {e}") from None
    if args.dry_run:
        from ..k8s.manifests import to_yaml
        print(to_yaml(manifests), end="")
        return 0
    created = _create_all(args, manifests)
    rows = [{"job": n, "workers": j.initial_workers, "ps": j.num_ps,
             "gpus": j.initial_workers * j.worker_demand.gpu, "application": j.application,
             "arrives_in_s": round((j.arrival - first) / args.time_scale, 1) if args.replay else 0}
            for n, j in zip(names, jobs)]
    emit({"namespace": args.namespace, "jobs": rows, "objects_created": created},
         as_json=args.json,
         tables={f"{len(rows)} jobs submitted to namespace {args.namespace}"
                 f" ({created} {_KIND_NAMES[args.kind]})": rows[:50]},
         notes=[f"... and {len(rows) - 50} more"] if len(rows) > 50 else [])
    return 0


def _create_all(args, manifests: list[dict]) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from kubernetes.client.exceptions import ApiException

    from ..k8s.backend import load_api_client
    from ..k8s.manifests import manifest_path
    from ..k8s.rest import Rest

    rest = Rest(load_api_client(args.kubeconfig, pool_size=16))
    _check_installed(rest, manifests[0])

    def create(m: dict) -> str | None:
        try:
            rest.post(manifest_path(m), m)
            return None
        except ApiException as e:
            return f"{m['metadata']['name']}: {e.status} {e.reason}"
        except Exception as e:  # noqa: BLE001 - reported below
            return f"{m['metadata']['name']}: {e}"

    with ThreadPoolExecutor(8) as pool:
        errors = [e for e in pool.map(create, manifests) if e]
    if errors:
        raise WorkbenchError(f"{len(errors)} of {len(manifests)} objects not created; first:"
                             f" {errors[0]}")
    return len(manifests)


_KIND_NAMES = {"job": "batch/v1 Jobs", "pytorchjob": "PyTorchJobs", "tfjob": "TFJobs",
               "jobset": "JobSets"}


def _check_installed(rest, manifest: dict) -> None:
    """One line, before anything is created, when the cluster lacks the kind's CRD."""
    from kubernetes.client.exceptions import ApiException

    from ..k8s import kinds
    from ..k8s.cache import kind_served

    k = kinds.BY_KIND[manifest["kind"]]
    if k is kinds.BATCH_JOB:
        return
    try:
        served = kind_served(rest, k)
    except ApiException as e:
        raise WorkbenchError(f"cannot read the API group {k.api_version}: {e.status}"
                             f" {e.reason}") from None
    if not served:
        raise ConfigError(f"--kind {k.kind.lower()}: the cluster has no {k.kind} CRD"
                          f" ({k.plural}.{k.group}, {k.api_version}); install its operator"
                          f" first")
