"""A KWOK-style node emulator: GPU nodes without kubelets, and the training jobs on them.

It keeps every node labelled `workbench.io/emulated=true` Ready (a `kube-node-lease` Lease
renewed every 10 s, Ready/pressure conditions in the node status), and runs the pods bound to
those nodes: a bound pod goes Running at once (status subresource), a training pod (see
`labels`) advances with the performance model the simulator uses and reports
`workbench.io/progress`; when its job's work is done its pods go Succeeded. Plain pods run until
deleted, or for `workbench.io/duration` seconds. Pods being deleted are removed with
`gracePeriodSeconds=0`, since no kubelet will confirm. A node annotated `workbench.io/down=true`
stops heartbeating and reports NotReady (fault tests).

The emulator's clock runs `speed` times faster than real time: progress, durations and the
`time` in progress reports follow it (Unix seconds, starting from the wall clock at start-up).

    python -m workbench.k8s.local.emulator --kubeconfig DIR/kubeconfig [--speed 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ... import argtypes
from ...model import JobSpec, Node, Placement
from .. import kinds, labels
from ..cache import (
    Clock,
    Informer,
    bound_placement,
    checkpoint_of,
    job_key,
    progress_of,
    role_of,
    spec_from_pods,
)
from ..outage import OUTAGES, no_answer
from ..quantity import cpu_quantity, mem_quantity
from ..rest import MERGE, Rest
from .daemon import run_daemon

log = logging.getLogger("workbench.k8s.local.emulator")

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION = 40
NODE_DOWN = labels.NODE_DOWN
EMULATOR_VERSION = "v1.20.2-workbench-emulated"


# ---- manifests -------------------------------------------------------------------------------


def _rfc3339(t: float | None = None) -> str:
    return dt.datetime.fromtimestamp(time.time() if t is None else t, dt.UTC) \
        .strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_time(t: float | None = None) -> str:
    return dt.datetime.fromtimestamp(time.time() if t is None else t, dt.UTC) \
        .strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_address(index: int) -> str:
    """A loopback address per node (the emulated node has no network of its own)."""
    return f"127.100.{index // 250}.{index % 250 + 1}"


def node_conditions(ready: bool = True, now: str | None = None) -> list[dict]:
    now = now or _rfc3339()
    pressure = [("MemoryPressure", "KubeletHasSufficientMemory"),
                ("DiskPressure", "KubeletHasNoDiskPressure"),
                ("PIDPressure", "KubeletHasSufficientPID")]
    conds = [{"type": t, "status": "False", "reason": r, "message": "emulated",
              "lastHeartbeatTime": now, "lastTransitionTime": now} for t, r in pressure]
    conds.append({"type": "Ready", "status": "True" if ready else "False",
                  "reason": "KubeletReady" if ready else "KubeletNotReady",
                  "message": "emulated by workbench" if ready else "emulated node is down",
                  "lastHeartbeatTime": now, "lastTransitionTime": now})
    return conds


def node_capacity(node: Node, max_pods: int = 256) -> dict[str, str]:
    return {"cpu": cpu_quantity(node.cpus), "memory": mem_quantity(node.mem),
            labels.GPU_RESOURCE: str(int(node.gpus)), "pods": str(max_pods),
            "ephemeral-storage": "1Ti"}


def node_manifest(node: Node, index: int | None = None, speed: float = 1.0) -> dict:
    """The Node object for an emulated node: capacity, rack and GPU-model labels, Ready, and
    the emulator's clock `speed`."""
    if index is None:
        digits = "".join(ch for ch in node.name if ch.isdigit())
        index = int(digits[-6:]) if digits else 0
    capacity = node_capacity(node)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": {
                "kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", labels.EMULATED: "true",
                labels.RACK: node.rack, labels.GPU_MODEL: node.gpu_model,
                "topology.kubernetes.io/zone": node.rack,
                "nvidia.com/gpu.product": node.gpu_model,
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            labels.CLOCK_SPEED: f"{speed:g}"},
        },
        "spec": {},
        "status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": node_conditions(True),
            "addresses": [{"type": "InternalIP", "address": node_address(index)},
                          {"type": "Hostname", "address": node.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": EMULATOR_VERSION, "kubeProxyVersion": EMULATOR_VERSION,
                         "operatingSystem": "linux", "architecture": "amd64",
                         "containerRuntimeVersion": "workbench-emulator://0.1",
                         "osImage": "emulated", "kernelVersion": "emulated",
                         "machineID": "", "systemUUID": "", "bootID": ""},
        },
    }


# ---- the performance model, in one place --------------------------------------------------

_perf_model = None
_perf_warned = False


def _perf():
    global _perf_model, _perf_warned
    if _perf_model is None:
        try:
            from ...perf import default_perf
            _perf_model = default_perf()
        except Exception as e:  # noqa: BLE001 - the emulator keeps running without it
            if not _perf_warned:
                log.warning("performance model unavailable (%s): training pods advance at"
                            " 1 iteration/s per worker", e)
                _perf_warned = True
            return None
    return _perf_model


def iteration_rate(spec: JobSpec, workers: Placement, ps: Placement) -> float:
    """Iterations per second of `spec` at this placement, from the simulator's model."""
    perf = _perf()
    if perf is None:
        return float(sum(workers.values()))
    try:
        return float(perf.iteration_rate(spec, workers, ps))
    except KeyError as e:  # an application the profiles do not know
        log.warning("job %s: %s; advancing at 1 iteration/s per worker", spec.name, e)
        return float(sum(workers.values()))


def metric_at(spec: JobSpec, iterations: float) -> float | None:
    perf = _perf()
    if perf is None:
        return None
    try:
        return float(perf.metric_at(spec.application, spec.batch_size, iterations))
    except (KeyError, AttributeError, ValueError, ZeroDivisionError):
        return None


# ---- the emulator -------------------------------------------------------------------------


@dataclass
class _JobRun:
    key: tuple[str, str]  # (namespace, job)
    spec: JobSpec
    iterations: float
    last_time: float
    rate: float = 0.0
    placement: tuple = ()
    last_report: float = 0.0  # monotonic
    done: bool = False
    pods: set[str] = field(default_factory=set)


def _is_training(pod: dict) -> bool:
    meta = pod["metadata"]
    # a job's pod: by the workbench's label or its operator's (a PyTorchJob's, a JobSet's)
    pod_labels = meta.get("labels") or {}
    return (labels.JOB in pod_labels or kinds.group_label(pod_labels) is not None) and \
        labels.TOTAL_WORK in (meta.get("annotations") or {})


def _gang_size(pods: list[dict]) -> tuple[int, int]:
    """Workers and PS a job needs before it trains: its annotations, else all its pods."""
    ann: dict[str, str] = {}
    for p in pods:
        ann.update(p["metadata"].get("annotations") or {})
    workers = sum(1 for p in pods if role_of(p) == labels.ROLE_WORKER)
    ps = len(pods) - workers
    return (max(int(ann.get(labels.NUM_WORKERS, 0) or workers), 1),
            int(ann.get(labels.NUM_PS, 0) or ps))


class NodeEmulator:
    def __init__(self, api_client, speed: float = 1.0,
                 selector: str = f"{labels.EMULATED}=true", lease_interval: float = 10.0,
                 status_interval: float = 60.0, report_interval: float = 2.0,
                 tick: float = 0.2, threads: int = 8) -> None:
        self.rest = Rest(api_client)
        self.clock = Clock(speed)
        self.selector = selector
        self.lease_interval = lease_interval
        self.status_interval = status_interval
        self.report_interval = report_interval
        self.tick = tick
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="emulator")
        self.nodes = Informer(self.rest, "/api/v1/nodes", self.stop_event, self._on_event,
                              timeout_seconds=120, labelSelector=selector)
        self.pods = Informer(self.rest, "/api/v1/pods", self.stop_event, self._on_event,
                             timeout_seconds=120, fieldSelector="spec.nodeName!=")
        self._lock = threading.Lock()
        self._inflight: set[tuple[str, str]] = set()
        self._lease_due: dict[str, float] = {}  # node -> monotonic time of next renewal
        self._status_due: dict[str, float] = {}
        self._node_up: dict[str, bool] = {}
        self._running: dict[str, float] = {}  # pod uid -> emulated start time
        self._finished: set[str] = set()  # uids patched to a terminal phase
        self._deleted: set[str] = set()
        self._jobs: dict[tuple[str, str], _JobRun] = {}
        self.stats = {"running": 0, "succeeded": 0, "failed": 0, "deleted": 0, "leases": 0,
                      "errors": 0}

    # -- plumbing --
    def _on_event(self, kind: str, new: dict | None, old: dict | None) -> None:
        self.wake.set()

    def _submit(self, key: tuple[str, str], fn: Callable, *args) -> None:
        with self._lock:
            if key in self._inflight:
                return
            self._inflight.add(key)

        def run():
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001 - logged; retried on a later tick
                status = getattr(e, "status", None)
                if no_answer(e):  # the apiserver is down: one line for the outage
                    self.stats["errors"] += 1
                    OUTAGES.failed(str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
                elif status not in (404, 409):
                    self.stats["errors"] += 1
                    log.warning("%s %s: %s", key[1], key[0], str(e).splitlines()[0][:300])
                self._on_error(key, status)
            finally:
                with self._lock:
                    self._inflight.discard(key)
        self.pool.submit(run)

    def _on_error(self, key: tuple[str, str], status) -> None:
        what, action = key
        if action == "run":
            self._running.pop(what, None)
        elif action in ("succeed", "fail"):
            if status != 404:
                self._finished.discard(what)
        elif action == "delete" and status != 404:
            self._deleted.discard(what)
        elif action in ("status", "lease") and what in self._node_up:
            due = self._status_due if action == "status" else self._lease_due
            due[what] = time.monotonic() + 2.0  # retry soon, not after a full interval

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()

    def run(self) -> None:
        self.nodes.start()
        self.pods.start()
        self.nodes.synced.wait(30)
        log.info("emulating nodes with %s (speed %gx)", self.selector, self.clock.speed)
        while not self.stop_event.is_set():
            self.wake.wait(self.tick)
            self.stop_event.wait(0.05)  # batch bursts of watch events into one round
            self.wake.clear()
            try:
                self.step()
            except Exception:
                log.exception("emulator step failed")
                self.stop_event.wait(1.0)
        self.pool.shutdown(wait=True, cancel_futures=True)

    # -- one round --
    def step(self) -> None:
        nodes = {n["metadata"]["name"]: n for n in self.nodes.snapshot()}
        self._heartbeat(nodes)
        now = self.clock.now()
        pods = self.pods.snapshot()
        live_uids = set()
        training: dict[tuple[str, str], list[dict]] = {}
        ended: set[tuple[str, str]] = set()  # training jobs one of whose pods succeeded
        for pod in pods:
            meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
            uid = meta["uid"]
            live_uids.add(uid)
            if spec.get("nodeName") not in nodes:
                continue
            if meta.get("deletionTimestamp"):
                if uid not in self._deleted:
                    self._deleted.add(uid)
                    self._submit((uid, "delete"), self._delete_pod, pod)
                continue
            phase = status.get("phase", "Pending")
            if phase == "Succeeded" and _is_training(pod):
                ended.add(job_key(pod))
            if uid in self._finished or phase in ("Succeeded", "Failed"):
                continue
            if uid not in self._running:
                self._running[uid] = now
                if phase != "Running":
                    self._submit((uid, "run"), self._run_pod, pod)
            if _is_training(pod):
                job = job_key(pod)
                training.setdefault(job, []).append(pod)
            else:
                self._plain_pod(pod, now)
        self._advance_jobs(training, now, ended)
        # forget pods that are gone
        for store in (self._running,):
            for uid in [u for u in store if u not in live_uids]:
                store.pop(uid, None)
        self._finished &= live_uids
        self._deleted &= live_uids

    def _plain_pod(self, pod: dict, now: float) -> None:
        ann = pod["metadata"].get("annotations") or {}
        if labels.DURATION not in ann:
            return
        uid = pod["metadata"]["uid"]
        if now - self._running[uid] >= float(ann[labels.DURATION]):
            code = int(ann.get(labels.EXIT_CODE, 0) or 0)
            self._finish(pod, code)

    def _finish(self, pod: dict, exit_code: int, annotations: dict | None = None) -> None:
        """End a pod once its Running status has been seen (so the two patches cannot cross)."""
        uid = pod["metadata"]["uid"]
        if uid in self._finished or pod.get("status", {}).get("phase") != "Running":
            return
        self._finished.add(uid)
        self._submit((uid, "succeed" if exit_code == 0 else "fail"), self._end_pod, pod,
                     exit_code, self._running.get(uid, self.clock.now()), annotations)

    # -- training jobs --
    def _advance_jobs(self, training: dict[tuple[str, str], list[dict]], now: float,
                      ended: set[tuple[str, str]] = frozenset()) -> None:
        """Advance each training job at its placement's rate; end its pods when its work is
        done, or when one of its pods has already succeeded (the work was done before, e.g.
        by a run this emulator forgot across an apiserver restart: the rest of the gang must
        not run on forever)."""
        for key in [k for k in self._jobs if k not in training]:
            del self._jobs[key]
        for key, pods in training.items():
            run = self._jobs.get(key)
            if run is None:
                try:
                    spec = spec_from_pods(f"{key[0]}/{key[1]}", pods, arrival=0.0)
                except (ValueError, KeyError) as e:
                    log.warning("job %s/%s: bad annotations (%s); running it as a plain pod",
                                key[0], key[1], e)
                    continue
                start = max(progress_of(p).iterations for p in pods)
                if start >= spec.total_work - 1e-3:  # a report rounded below the end is the end
                    start = spec.total_work
                run = _JobRun(key, spec, min(start, spec.total_work), now)
                self._jobs[key] = run
            else:
                new = {p["metadata"]["uid"] for p in pods} - run.pods
                for p in pods:
                    if p["metadata"]["uid"] in new:
                        run.iterations = max(run.iterations, checkpoint_of(p))
            run.pods = {p["metadata"]["uid"] for p in pods}
            # advance at the rate of the placement held since the last round
            if run.rate > 0 and not run.done:
                run.iterations = min(run.spec.total_work,
                                     run.iterations + run.rate * (now - run.last_time))
            run.last_time = now
            workers, ps = bound_placement(pods)
            need_w, need_ps = _gang_size(pods)
            if sum(workers.values()) >= need_w and sum(ps.values()) >= need_ps:
                placement = (tuple(sorted(workers.items())), tuple(sorted(ps.items())))
                if placement != run.placement:
                    run.placement = placement
                    run.rate = iteration_rate(run.spec, workers, ps)
            else:
                run.placement, run.rate = (), 0.0  # a gang not all placed does not train
            if key in ended:
                run.iterations = run.spec.total_work
            if run.iterations >= run.spec.total_work:
                run.done, run.rate = True, 0.0
                final = {labels.PROGRESS: self._progress_json(run)}
                for p in pods:  # the final report goes with the pod's end, in one task
                    self._finish(p, 0, final)
            else:
                self._report(run, pods)

    def _progress_json(self, run: _JobRun) -> str:
        return json.dumps({"iterations": run.iterations,  # unrounded: the end stays the end
                           "throughput": round(run.rate, 6),
                           "metric": metric_at(run.spec, run.iterations),
                           "time": round(self.clock.now(), 3)})

    def _report(self, run: _JobRun, pods: list[dict]) -> None:
        mono = time.monotonic()
        if mono - run.last_report < self.report_interval:
            return
        run.last_report = mono
        progress = self._progress_json(run)
        for p in pods:
            self._submit((p["metadata"]["uid"], "report"), self._annotate, p,
                         {labels.PROGRESS: progress})

    # -- API writes (run in the pool) --
    def _pod_path(self, pod: dict) -> str:
        m = pod["metadata"]
        return f"/api/v1/namespaces/{m['namespace']}/pods/{m['name']}"

    def _annotate(self, pod: dict, annotations: dict[str, str]) -> None:
        self.rest.patch(self._pod_path(pod), {"metadata": {"annotations": annotations}}, MERGE)

    def _host_ip(self, pod: dict) -> str | None:
        node = self.nodes.store.get("/" + pod["spec"]["nodeName"])
        for a in (node or {}).get("status", {}).get("addresses", []):
            if a.get("type") == "InternalIP":
                return a["address"]
        return None

    def _run_pod(self, pod: dict) -> None:
        now = _rfc3339()
        conds = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                 for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")]
        status = {
            "phase": "Running", "startTime": now, "conditions": conds,
            "containerStatuses": [
                {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True,
                 "restartCount": 0, "started": True, "containerID": "",
                 "state": {"running": {"startedAt": now}}}
                for c in pod["spec"].get("containers", [])],
            "initContainerStatuses": [
                {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": True,
                 "restartCount": 0, "state": {"terminated": {
                     "exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}}
                for c in pod["spec"].get("initContainers", []) or []],
        }
        host_ip = self._host_ip(pod)
        if host_ip:
            status["hostIP"] = host_ip
        self.rest.patch(self._pod_path(pod) + "/status", {"status": status})
        self.stats["running"] += 1

    def _end_pod(self, pod: dict, exit_code: int, started: float,
                 annotations: dict | None = None) -> None:
        if annotations:
            self._annotate(pod, annotations)
        now = _rfc3339()
        ok = exit_code == 0
        reason = "PodCompleted"
        conds = [{"type": t, "status": "False", "reason": reason, "lastProbeTime": None,
                  "lastTransitionTime": now} for t in ("Ready", "ContainersReady")]
        status = {
            "phase": "Succeeded" if ok else "Failed", "conditions": conds,
            "containerStatuses": [
                {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False,
                 "restartCount": 0, "started": False, "containerID": "",
                 "state": {"terminated": {"exitCode": exit_code,
                                          "reason": "Completed" if ok else "Error",
                                          "startedAt": _rfc3339(min(started, time.time())),
                                          "finishedAt": now}}}
                for c in pod["spec"].get("containers", [])],
        }
        self.rest.patch(self._pod_path(pod) + "/status", {"status": status})
        self.stats["succeeded" if ok else "failed"] += 1

    def _delete_pod(self, pod: dict) -> None:
        self.rest.delete(self._pod_path(pod), grace_period_seconds=0)
        self.stats["deleted"] += 1

    # -- nodes --
    def _heartbeat(self, nodes: dict[str, dict]) -> None:
        mono = time.monotonic()
        for name, node in nodes.items():
            annotations = node["metadata"].get("annotations") or {}
            down = annotations.get(NODE_DOWN) == "true"
            was_up = self._node_up.get(name)
            if was_up is None and annotations.get(labels.CLOCK_SPEED) != f"{self.clock.speed:g}":
                self._submit((name, "speed"), self._mark_speed, name)  # registered by another
            if was_up is None or was_up == down:  # first sight, or went down/up
                self._node_up[name] = not down
                self._status_due[name] = 0.0
                self._lease_due[name] = 0.0
            if mono >= self._status_due.get(name, 0.0):
                self._status_due[name] = mono + self.status_interval
                self._submit((name, "status"), self._node_status, node, not down)
            if not down and mono >= self._lease_due.get(name, 0.0):
                self._lease_due[name] = mono + self.lease_interval
                self._submit((name, "lease"), self._renew_lease, node)
        for name in [n for n in self._node_up if n not in nodes]:
            for d in (self._node_up, self._status_due, self._lease_due):
                d.pop(name, None)

    def _mark_speed(self, name: str) -> None:
        """Say this emulator's clock speed on its node, for schedulers to match it."""
        said = {labels.CLOCK_SPEED: f"{self.clock.speed:g}"}
        self.rest.patch(f"/api/v1/nodes/{name}", {"metadata": {"annotations": said}}, MERGE)

    def _node_status(self, node: dict, ready: bool) -> None:
        name = node["metadata"]["name"]
        body = {"status": {"conditions": node_conditions(ready)}}
        self.rest.patch(f"/api/v1/nodes/{name}/status", body)

    def _renew_lease(self, node: dict) -> None:
        name = node["metadata"]["name"]
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases/{name}"
        now = _micro_time()
        try:
            self.rest.patch(path, {"spec": {"renewTime": now, "holderIdentity": name}}, MERGE)
        except Exception as e:
            if getattr(e, "status", None) != 404:
                raise
            self.rest.post(f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": name,
                     "uid": node["metadata"]["uid"]}]},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION,
                         "renewTime": now}})
        self.stats["leases"] += 1


# ---- command line --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.k8s.local.emulator",
                                     description="Emulate GPU nodes and their pods (no kubelet).")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--speed", type=float, default=1.0,
                        help="emulated seconds per real second (default 1)")
    parser.add_argument("--selector", default=f"{labels.EMULATED}=true",
                        help="label selector of the nodes to emulate")
    parser.add_argument("--lease-interval", type=float, default=10.0)
    parser.add_argument("--report-interval", type=float, default=2.0,
                        help="real seconds between progress annotations of a job")
    parser.add_argument("--threads", type=argtypes.count, default=8)
    argtypes.add_log_level(parser)
    args = parser.parse_args(argv)
    if args.speed <= 0:
        print("emulator: --speed must be > 0", file=sys.stderr)
        return 2
    return run_daemon("emulator", args.kubeconfig, args.threads + 4, args.log_level,
                      lambda api_client: NodeEmulator(
                          api_client, speed=args.speed, selector=args.selector,
                          lease_interval=args.lease_interval,
                          report_interval=args.report_interval, threads=args.threads), log)


if __name__ == "__main__":
    sys.exit(main())
