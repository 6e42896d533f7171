"""`workbench bench k8s`: how fast pending pods get bound on a real apiserver.

One local control plane (`LocalCluster`) with 250 emulated 8-GPU nodes. Three runs, each on
2,000 pending pods of one GPU that were all created before the scheduler starts:

- kube-scheduler v1.20 with raised client limits (`--kube-api-qps`, the anchor; the issue
  measured 455-645 pods/s for it here, and 53 pods/s with its default limits, `--default-qps`);
- the workbench, plain: each pod its own job, placed pod by pod (`kube-default` engine);
- the workbench, gang: 250 jobs of 8 pods, each bound all or nothing (`fifo` engine).

Timed from the moment the scheduler starts (process launch, or `K8sBackend` construction:
its list of every pod included) until a separate watch has seen every pod bound; the steady
rate (first bind to last) is printed too. Ratios are against kube-scheduler in the same run.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import argtypes, output


def register(subparsers) -> None:
    p = subparsers.add_parser("k8s", help="pods/s binding 2,000 pending pods: kube-scheduler vs"
                              " the workbench (plain and gang) on 250 emulated 8-GPU nodes")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--nodes", type=argtypes.count, default=250)
    p.add_argument("--gpus-per-node", type=argtypes.count, default=8)
    p.add_argument("--pods", type=argtypes.count, default=2000)
    p.add_argument("--gang", type=argtypes.count, default=8, help="pods per gang job (default 8)")
    p.add_argument("--threads", type=argtypes.count, default=32, help="workbench bind threads")
    p.add_argument("--scheduler-qps", type=argtypes.positive, default=1000.0,
                   help="kube-scheduler --kube-api-qps for the anchor (burst: twice it)")
    p.add_argument("--default-qps", action="store_true",
                   help="also time kube-scheduler with its default client limits (slow: ~40 s)")
    p.add_argument("--no-events", action="store_true",
                   help="workbench posts no Events (kube-scheduler still does)")
    p.add_argument("--bin-dir", help="directory with etcd and kube-* binaries")
    p.set_defaults(func=run)


class BindWatch:
    """Counts the pods of a namespace and when each was first seen bound."""

    def __init__(self, api_client, namespace: str) -> None:
        from ..k8s.cache import Informer
        from ..k8s.rest import Rest

        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.bound: dict[str, float] = {}
        self.pods = 0
        self.changed = threading.Condition()
        self.informer = Informer(Rest(api_client), f"/api/v1/namespaces/{namespace}/pods",
                                 self.stop, self._on_event)

    def _on_event(self, kind, new, old) -> None:
        now = time.monotonic()
        with self.lock:
            if kind == "RESYNC":
                self.pods = len(self.informer.store)
                for key, pod in self.informer.store.items():
                    if pod["spec"].get("nodeName"):
                        self.bound.setdefault(key, now)
            elif kind == "ADDED":
                self.pods += 1
            elif kind == "DELETED":
                self.pods -= 1
                self.bound.pop(self.informer.key(new), None)
            if new is not None and kind != "DELETED" and new["spec"].get("nodeName"):
                self.bound.setdefault(self.informer.key(new), now)
        with self.changed:
            self.changed.notify_all()

    def start(self) -> BindWatch:
        self.informer.start()
        self.informer.synced.wait(30)
        return self

    def wait(self, check, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not check():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(min(left, 0.5))
        return True

    def close(self) -> None:
        self.stop.set()
        self.informer.restart_watch()


def _pod(name: str, scheduler: str, job: str | None = None, gang: int = 0) -> dict:
    from ..k8s import labels

    meta: dict = {"name": name}
    if job is not None:
        meta["labels"] = {labels.JOB: job, labels.ROLE: labels.ROLE_WORKER}
        meta["annotations"] = {labels.NUM_WORKERS: str(gang)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": scheduler, "restartPolicy": "Never",
                     "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "emulated", "resources": {
                         "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                         "limits": {"nvidia.com/gpu": "1"}}}]}}


def _namespace(rest, name: str) -> None:
    rest.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": name}})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            rest.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
            return
        except Exception:  # noqa: BLE001 - not created yet
            time.sleep(0.2)


def _create_pods(rest, namespace: str, pods: list[dict], threads: int = 16) -> None:
    def create(pod):
        for _ in range(5):
            try:
                rest.post(f"/api/v1/namespaces/{namespace}/pods", pod)
                return
            except Exception as e:  # noqa: BLE001 - retried; 409: created by a retry
                if getattr(e, "status", None) == 409:
                    return
                time.sleep(0.5)
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, pods))


def _clear(rest, watch: BindWatch, namespace: str) -> None:
    rest.delete(f"/api/v1/namespaces/{namespace}/pods", grace_period_seconds=0)
    watch.wait(lambda: watch.pods == 0, 120)


def _rates(watch: BindWatch, started: float, finished: float | None, n: int) -> dict:
    times = sorted(watch.bound.values())
    bound = len(times)
    total = (finished or time.monotonic()) - started
    steady = (bound - 1) / (times[-1] - times[0]) if bound > 1 and times[-1] > times[0] else None
    return {"pods": n, "bound": bound, "seconds": round(total, 3),
            "pods_per_s": round(bound / total, 1) if total > 0 else None,
            "first_bind_s": round(times[0] - started, 3) if times else None,
            "steady_pods_per_s": round(steady, 1) if steady else None}


def _kube_scheduler(cluster, qps: float | None, namespace: str, n: int, timeout: float) -> dict:
    from ..k8s.local.build import find_binaries
    from ..k8s.local.cluster import _free_port

    rest = cluster.rest
    _namespace(rest, namespace)
    watch = BindWatch(cluster.api_client, namespace).start()
    try:
        _create_pods(rest, namespace, [_pod(f"p-{i:05d}", "default-scheduler") for i in range(n)])
        watch.wait(lambda: watch.pods >= n, 120)
        binary = find_binaries(cluster.bin_dir)["kube-scheduler"]
        port = _free_port()
        args = [str(binary), f"--kubeconfig={cluster.directory / 'scheduler.kubeconfig'}",
                "--leader-elect=false", "--port=0", "--bind-address=127.0.0.1",
                f"--secure-port={port}", "--profiling=false"]
        if qps is not None:
            args += [f"--kube-api-qps={qps:g}", f"--kube-api-burst={int(qps * 2)}"]
        log = Path(cluster.directory) / "logs" / f"bench-kube-scheduler-{namespace}.log"
        started = time.monotonic()
        with open(log, "ab") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        try:
            ok = watch.wait(lambda: len(watch.bound) >= n, timeout)
            finished = time.monotonic() if ok else None
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        result = _rates(watch, started, finished, n)
        _clear(rest, watch, namespace)
        return result
    finally:
        watch.close()


def _workbench(cluster, engine: str, namespace: str, n: int, gang: int, threads: int,
               events: bool, timeout: float) -> dict:
    from ..control import Controller
    from ..k8s.backend import K8sBackend
    from ..k8s.labels import SCHEDULER_NAME
    from ..k8s.rest import client_from_kubeconfig
    from ..policies import make_policy

    rest = cluster.rest
    _namespace(rest, namespace)
    watch = BindWatch(cluster.api_client, namespace).start()
    try:
        if gang > 1:
            pods = [_pod(f"g{i // gang:04d}-{i % gang}", SCHEDULER_NAME, f"g{i // gang:04d}", gang)
                    for i in range(n)]
        else:
            pods = [_pod(f"p-{i:05d}", SCHEDULER_NAME) for i in range(n)]
        _create_pods(rest, namespace, pods)
        watch.wait(lambda: watch.pods >= n, 120)
        api_client = client_from_kubeconfig(cluster.kubeconfig, pool_size=threads + 8)
        started = time.monotonic()
        backend = K8sBackend(api_client, namespace=namespace, threads=threads, events=events,
                             serve=True)
        stop = threading.Event()
        controller = Controller(backend, make_policy(engine))
        rounds = []

        def loop():
            while not stop.is_set() and len(watch.bound) < n:
                report = controller.step()
                if report is not None:
                    rounds.append(report.seconds)
        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            ok = watch.wait(lambda: len(watch.bound) >= n, timeout)
            finished = time.monotonic() if ok else None
        finally:
            stop.set()
            backend.interrupt()
            thread.join(30)
            stats = dict(backend.binder.stats)
            backend.close()
            api_client.close()
        result = _rates(watch, started, finished, n)
        result.update(rounds=len(rounds), policy_seconds=round(sum(rounds), 3),
                      rollbacks=int(stats.get("rollbacks", 0)),
                      bind_failures=int(stats.get("bind_failures", 0)))
        _clear(rest, watch, namespace)
        return result
    finally:
        watch.close()


def run(args) -> int:
    from ..errors import ConfigError
    from ..k8s.local.cluster import LocalCluster

    if args.pods < 1 or args.nodes < 1 or args.gang < 1 or args.threads < 1:
        raise ConfigError("--pods, --nodes, --gang and --threads must be positive")
    if args.pods % args.gang:
        raise ConfigError(f"--pods {args.pods} is not a multiple of --gang {args.gang}")
    if args.pods > args.nodes * args.gpus_per_node:
        raise ConfigError(f"--pods {args.pods}: more than the {args.nodes * args.gpus_per_node}"
                          " GPUs of the cluster")
    say = (lambda m: None) if args.json else (lambda m: print(m, flush=True))
    timeout = max(120.0, args.pods / 10)
    t0 = time.monotonic()
    results: dict[str, dict] = {}
    with LocalCluster(nodes=args.nodes, gpus_per_node=args.gpus_per_node, cpus=64, mem=512,
                      racks=max(1, args.nodes // 25), scheduler=False, api_qps=400,
                      bin_dir=args.bin_dir, timeout=240) as cluster:
        say(f"cluster up: {args.nodes} emulated nodes x {args.gpus_per_node} GPUs"
            f" ({time.monotonic() - t0:.0f} s)")
        runs = [("kube-scheduler", lambda: _kube_scheduler(
            cluster, args.scheduler_qps, "bench-kube", args.pods, timeout))]
        if args.default_qps:
            runs.append(("kube-scheduler, default qps", lambda: _kube_scheduler(
                cluster, None, "bench-kube-default", args.pods, max(timeout, args.pods / 20))))
        runs.append(("workbench plain (kube-default)", lambda: _workbench(
            cluster, "kube-default", "bench-plain", args.pods, 1, args.threads,
            not args.no_events, timeout)))
        runs.append((f"workbench gang of {args.gang} (fifo)", lambda: _workbench(
            cluster, "fifo", "bench-gang", args.pods, args.gang, args.threads,
            not args.no_events, timeout)))
        for name, fn in runs:
            say(f"{name}: binding {args.pods} pending pods ...")
            results[name] = fn()
            say(f"  {results[name]['pods_per_s']} pods/s ({results[name]['seconds']} s)")
    anchor = results["kube-scheduler"]
    rows = []
    for name, r in results.items():
        ratio = r["pods_per_s"] / anchor["pods_per_s"] if r["pods_per_s"] and \
            anchor["pods_per_s"] else None
        steady_ratio = r["steady_pods_per_s"] / anchor["steady_pods_per_s"] if \
            r["steady_pods_per_s"] and anchor["steady_pods_per_s"] else None
        rows.append({"scheduler": name, "bound": r["bound"], "seconds": r["seconds"],
                     "pods_per_s": r["pods_per_s"], "ratio": round(ratio, 2) if ratio else None,
                     "steady_pods_per_s": r["steady_pods_per_s"],
                     "steady_ratio": round(steady_ratio, 2) if steady_ratio else None,
                     "first_bind_s": r["first_bind_s"]})
    result = {"nodes": args.nodes, "gpus_per_node": args.gpus_per_node, "pods": args.pods,
              "gang": args.gang, "threads": args.threads, "scheduler_qps": args.scheduler_qps,
              "cpus": os.cpu_count(), "results": results, "rows": rows,
              "wall_s": round(time.monotonic() - t0, 1)}
    output.emit(result, as_json=args.json, tables={
        f"binding {args.pods} pending 1-GPU pods on {args.nodes} emulated {args.gpus_per_node}"
        f"-GPU nodes (ratio: against kube-scheduler, --kube-api-qps {args.scheduler_qps:g})":
        rows}, notes=[
        ("pods_per_s: pods / (scheduler start -> every pod seen bound by a watch); steady: first"
        " bind -> last bind."),
        ("measured in the issue on this kind of machine: kube-scheduler 455-645 pods/s tuned,"
        " 53 default; a single-threaded Python binder 142-158, 8 threads 239-285.")])
    return 0
