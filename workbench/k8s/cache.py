"""A watch-based cache of nodes, pods and the objects that own training pods (batch/v1 Jobs, and
PyTorchJobs, TFJobs and JobSets where their CRDs are installed: `kinds`), and the
`ClusterState` it describes.

Each kind is kept by an `Informer`: list, then watch from the list's resourceVersion; on 410
Gone (the version expired, e.g. after an apiserver restart or etcd compaction) list again; on
any other error reconnect with a growing back-off. Objects stay plain dicts (through the
official client's `ApiClient`, without its model classes: thousands of pods are parsed per
second when a cluster fills).

`ClusterCache.cluster_state(now)` turns a snapshot into the same `ClusterState` the simulator
produces: nodes (sorted by name) with capacity from `allocatable` cpu/memory/`nvidia.com/gpu`,
allocation from the requests of bound pods that have not ended, and one `JobStatus` per
training job, its pods grouped by the `workbench.io/job` label (else their operator's job-name
label, `kinds.group_label`; a pod with neither is a job of its own), its progress from the
`workbench.io/progress` annotation. `K8sBackend` builds on the same pieces and keeps each job's
history across rounds (`reconcile`).

The node emulator (`local.emulator`) reads the cluster with the same `Informer`, pod helpers
(`spec_from_pods`, `progress_of`, `role_of`, `bound_placement`) and sped-up `Clock`, so the
emulated cluster and the scheduler read pods and time alike.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from kubernetes.client.exceptions import ApiException

from ..errors import ConfigError
from ..model import ClusterState, JobKind, JobSpec, JobState, JobStatus, Node, Placement, Resources
from . import kinds, labels
from .outage import OUTAGES, no_answer
from .quantity import GIB, parse_quantity
from .rest import Rest, event_batches

log = logging.getLogger("workbench.k8s.cache")

TERMINAL = ("Succeeded", "Failed")


class Clock:
    """Seconds on a sped-up clock: Unix time, running `speed` times faster from start (the
    backend's clock, and the node emulator's, so the two agree on a fast emulated cluster)."""

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ConfigError(f"speed must be > 0, got {speed}")
        self.speed = speed
        self.origin = time.time()
        self.mono0 = time.monotonic()

    def now(self) -> float:
        return self.origin + (time.monotonic() - self.mono0) * self.speed

    def from_unix(self, t: float) -> float:
        return self.origin + (t - self.origin) * self.speed

    def real(self, seconds: float) -> float:
        return seconds / self.speed

    def at_monotonic(self, mono: float) -> float:
        """This clock's time at the `time.monotonic()` reading `mono`."""
        return self.origin + (mono - self.mono0) * self.speed


# ---- informers -------------------------------------------------------------------------------


class _Relist(Exception):
    pass


class Informer(threading.Thread):
    """Keeps `store` (namespace/name -> object) in step with the API server.

    `on_event(kind, new, old)` is called after each change (kind ADDED, MODIFIED, DELETED, or
    RESYNC after a list, with new = old = None). Counters say how often it listed, relisted on
    410 and reconnected, for tests and metrics.
    """

    def __init__(self, rest: Rest, path: str, stop: threading.Event,
                 on_event: Callable[[str, dict | None, dict | None], None] | None = None,
                 timeout_seconds: int = 240, **query) -> None:
        super().__init__(daemon=True, name=f"informer {path}")
        self.rest, self.path, self.stop_event, self.query = rest, path, stop, query
        self.on_event = on_event or (lambda kind, new, old: None)
        self.timeout_seconds = timeout_seconds
        self.lock = threading.Lock()
        self.store: dict[str, dict] = {}
        self.synced = threading.Event()
        self.resource_version = ""
        self.lists = 0
        self.expired = 0  # watches answered 410 Gone
        self.reconnects = 0  # watches that failed (connection, apiserver down)
        self.last_error = ""
        self._response = None
        self._force_version: str | None = None

    @staticmethod
    def key(obj: dict) -> str:
        m = obj["metadata"]
        return f"{m.get('namespace', '')}/{m['name']}"

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.store.values())

    def get(self, key: str) -> dict | None:
        with self.lock:
            return self.store.get(key)

    def restart_watch(self, resource_version: str | None = None) -> None:
        """End the current watch; the next one starts from `resource_version` if given (an
        expired one makes the server answer 410, which is how tests exercise the relist)."""
        self._force_version = resource_version
        resp = self._response
        if resp is not None:
            with contextlib.suppress(Exception):  # already closed
                resp.shutdown()

    def run(self) -> None:
        backoff = 0.2
        need_list = True
        while not self.stop_event.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                if self._force_version is not None:
                    self.resource_version, self._force_version = self._force_version, None
                self._watch()
                backoff = 0.2
            except _Relist:
                self.expired += 1
                need_list = True
                log.info("%s: watch expired (410), relisting", self.path)
            except ApiException as e:
                if e.status == 410:
                    self.expired += 1
                    need_list = True
                    continue
                self._failed(e, backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception as e:  # noqa: BLE001 - reconnect on anything
                if self.stop_event.is_set():
                    return
                self._failed(e, backoff)
                backoff = min(backoff * 2, 5.0)

    def _failed(self, e: Exception, backoff: float) -> None:
        self.reconnects += 1
        self.last_error = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        # a forced restart is not an error worth a line; the server being down is one line
        # for the whole outage (`outage.OUTAGES`), not one per reconnection
        quiet = self._force_version is not None or no_answer(e)
        if no_answer(e):
            OUTAGES.failed(self.last_error)
        log.log(logging.DEBUG if quiet else logging.WARNING, "%s: %s; reconnecting in %.1f s",
                self.path, self.last_error, backoff)
        self.stop_event.wait(backoff)

    def _list(self) -> None:
        listed = self.rest.get(self.path, **self.query)
        with self.lock:
            self.store = {self.key(o): o for o in listed["items"]}
            self.resource_version = listed["metadata"]["resourceVersion"]
        self.lists += 1
        self.synced.set()
        self.on_event("RESYNC", None, None)

    def _watch(self) -> None:
        resp = self.rest.request("GET", self.path, query={
            "watch": "true", "resourceVersion": self.resource_version,
            "timeoutSeconds": self.timeout_seconds, "allowWatchBookmarks": "true", **self.query},
            timeout=(10, self.timeout_seconds + 30), stream=True)
        self._response = resp
        try:
            for events in event_batches(resp):
                for event in events:
                    self._handle(event)
                if self.stop_event.is_set() or self._force_version is not None:
                    return
        finally:
            self._response = None
            with contextlib.suppress(Exception):  # a shut-down socket
                resp.release_conn()

    def _handle(self, event: dict) -> None:
        kind, obj = event["type"], event["object"]
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Relist()
            raise RuntimeError(obj.get("message", "watch error"))
        self.resource_version = obj["metadata"]["resourceVersion"]
        if kind == "BOOKMARK":
            return
        key = self.key(obj)
        with self.lock:
            old = self.store.get(key)
            if kind == "DELETED":
                self.store.pop(key, None)
            else:
                self.store[key] = obj
        self.on_event(kind, obj, old)


# ---- the cache -------------------------------------------------------------------------------


class ClusterCache:
    """Nodes, pods and batch/v1 Jobs, watched. `version` counts every change; `decisive`
    counts the ones a scheduling decision may depend on (a pod to place, a pod ended or gone,
    a node added, removed, or changed readiness), which is what `wait()` wakes up for."""

    def __init__(self, api_client, namespace: str | None = None,
                 scheduler_name: str = labels.SCHEDULER_NAME, jobs: bool = True,
                 watch_timeout: int = 240) -> None:
        self.rest = Rest(api_client)
        self.namespace = namespace
        self.scheduler_name = scheduler_name
        self.stop_event = threading.Event()
        self.changed = threading.Condition()
        self.version = 0
        self.decisive = 0
        ns = f"/namespaces/{namespace}" if namespace else ""
        self.nodes = Informer(self.rest, "/api/v1/nodes", self.stop_event, self._on_node,
                              watch_timeout)
        self.pods = Informer(self.rest, f"/api/v1{ns}/pods", self.stop_event, self._on_pod,
                             watch_timeout)
        self.jobs = Informer(self.rest, f"/apis/batch/v1{ns}/jobs", self.stop_event,
                             self._on_job, watch_timeout) if jobs else None
        self.watch_timeout = watch_timeout
        self._wanted_kinds = kinds.CUSTOM_KINDS if jobs else ()
        self.custom: dict[str, Informer] = {}  # kind -> informer, for the CRDs installed
        # pod uid -> time.monotonic() when its progress report last changed in the watch
        self.report_arrivals: dict[str, float] = {}
        self.not_installed: list[str] = []  # kinds whose CRD the cluster does not have
        self._demand: dict[str, Resources] = {}  # pod uid -> requests (immutable per pod)

    @property
    def informers(self) -> list[Informer]:
        return [i for i in (self.nodes, self.pods, self.jobs, *self.custom.values())
                if i is not None]

    def watch_installed_kinds(self) -> list[Informer]:
        """An informer for each custom kind whose CRD is installed (returned, not started);
        a kind that is not is reported once and not watched (a watch on a missing resource
        would fail forever). A kind whose API group could not be read (the API server down)
        is asked about again at the next call."""
        added = []
        for k in self._wanted_kinds:
            if k.kind in self.custom or k.kind in self.not_installed:
                continue
            installed = self._installed(k)
            if installed:
                added.append(Informer(self.rest, k.path(self.namespace), self.stop_event,
                                      self._on_job, self.watch_timeout))
                self.custom[k.kind] = added[-1]
            elif installed is False:
                self.not_installed.append(k.kind)
                log.info("%s: CRD %s.%s (%s) not installed; %ss are not read", k.kind, k.plural,
                         k.group, k.api_version, k.kind)
        return added

    def _installed(self, k: kinds.OwnerKind) -> bool | None:
        """Whether the cluster serves `k` (None: could not tell)."""
        try:
            return kind_served(self.rest, k)
        except Exception:  # noqa: BLE001 - no answer: asked again later
            return None

    def start_new_kinds(self) -> None:
        """Watch the custom kinds that could not be asked about when the cache started."""
        if len(self.custom) + len(self.not_installed) == len(self._wanted_kinds):
            return
        for inf in self.watch_installed_kinds():
            inf.start()

    def owner_object(self, kind: str, namespace: str, name: str) -> dict | None:
        """The object of `kind` (`Job` or a custom kind) that owns a job's pods, if cached."""
        inf = self.jobs if kind == kinds.BATCH_JOB.kind else self.custom.get(kind)
        return inf.get(f"{namespace}/{name}") if inf is not None else None

    def start(self, timeout: float = 30.0) -> ClusterCache:
        self.watch_installed_kinds()
        for inf in self.informers:
            inf.start()
        deadline = time.monotonic() + timeout
        for inf in self.informers:
            if not inf.synced.wait(max(deadline - time.monotonic(), 0.0)):
                raise TimeoutError(f"no list of {inf.path} within {timeout:.0f} s"
                                   f" ({inf.last_error or 'no answer'})")
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for inf in self.informers:
            inf.restart_watch()
        with self.changed:
            self.changed.notify_all()

    # -- change tracking --
    def _bump(self, decisive: bool) -> None:
        with self.changed:
            self.version += 1
            if decisive:
                self.decisive += 1
                self.changed.notify_all()

    def wait(self, since: int, timeout: float) -> bool:
        """Wait up to `timeout` s for a decisive change after version `since`; True if any."""
        with self.changed:
            if self.decisive != since:
                return True
            self.changed.wait(max(timeout, 0.0))
            return self.decisive != since

    def _on_node(self, kind: str, new: dict | None, old: dict | None) -> None:
        decisive = kind != "MODIFIED" or node_condition(new) != node_condition(old)
        self._bump(decisive)

    def _on_pod(self, kind: str, new: dict | None, old: dict | None) -> None:
        if kind == "RESYNC":
            self._bump(True)
            return
        if kind != "DELETED" and \
                _annotation(new, labels.PROGRESS) != _annotation(old, labels.PROGRESS):
            self.report_arrivals[new["metadata"]["uid"]] = time.monotonic()
        if kind == "DELETED":
            self._demand.pop(new["metadata"]["uid"], None)
            self.report_arrivals.pop(new["metadata"]["uid"], None)
            decisive = bool(new["spec"].get("nodeName")) or self.is_ours(new)
        elif kind == "ADDED":
            decisive = self.is_ours(new) and not new["spec"].get("nodeName")
        else:
            phase = new.get("status", {}).get("phase")
            old_phase = (old or {}).get("status", {}).get("phase")
            decisive = (phase in TERMINAL and phase != old_phase) or (
                bool(new["metadata"].get("deletionTimestamp"))
                and not (old or {}).get("metadata", {}).get("deletionTimestamp"))
        self._bump(decisive)

    def _on_job(self, kind: str, new: dict | None, old: dict | None) -> None:
        self._bump(kind in ("RESYNC", "DELETED"))

    def is_ours(self, pod: dict) -> bool:
        return pod["spec"].get("schedulerName") == self.scheduler_name

    def demand(self, pod: dict) -> Resources:
        uid = pod["metadata"]["uid"]
        d = self._demand.get(uid)
        if d is None:
            d = self._demand[uid] = pod_demand(pod)
        return d

    # -- snapshots --
    def snapshot(self) -> tuple[list[dict], list[dict], dict[tuple[str, str, str], dict]]:
        """Nodes, pods, and the owning objects by (kind, namespace, name)."""
        owners = {}
        sources = [(kinds.BATCH_JOB.kind, self.jobs), *self.custom.items()]
        for kind, inf in sources:
            for o in inf.snapshot() if inf is not None else ():
                owners[(kind, o["metadata"].get("namespace", ""), o["metadata"]["name"])] = o
        return self.nodes.snapshot(), self.pods.snapshot(), owners

    def cluster_state(self, now: float | None = None) -> ClusterState:
        """A stateless view: every job's status as its pods show it now (no history)."""
        now = time.time() if now is None else now
        node_objs, pods, _ = self.snapshot()
        view = NodeView.build(node_objs)
        allocated = view.allocation(pods, self.demand)
        jobs: dict[str, JobStatus] = {}
        for key, group in group_pods(pods, self.scheduler_name).items():
            name = job_name(key, self.namespace)
            try:
                spec = spec_from_pods(name, group.pods, arrival=group.created)
            except ValueError as e:
                log.warning("job %s: %s", name, e)
                continue
            status = JobStatus(spec=spec, target_workers=spec.initial_workers,
                               target_ps=spec.num_ps)
            status.workers, status.ps = group.bound(labels.ROLE_WORKER), group.bound(labels.ROLE_PS)
            report = group.progress()
            status.progress = min(report.iterations, spec.total_work)
            status.throughput, status.metric = report.throughput, report.metric
            if group.succeeded and not group.live:
                status.state = JobState.COMPLETED
            elif not status.workers and not status.ps:
                status.state = JobState.PENDING
            elif status.num_workers < status.target_workers or status.num_ps < status.target_ps:
                status.state = JobState.HOLDING
            else:
                status.state = JobState.RUNNING if group.all_running else JobState.RESTARTING
            jobs[name] = status
        active = {n: j for n, j in jobs.items() if not j.state.finished}
        return view.state(now, allocated, active)


# ---- nodes -------------------------------------------------------------------------------------


def node_condition(node: dict | None) -> tuple:
    """What about a node matters to a decision: readiness, cordon, taints, allocatable."""
    if node is None:
        return ()
    status, spec = node.get("status", {}), node.get("spec", {})
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions", []))
    taints = tuple(sorted((t.get("key", ""), t.get("effect", "")) for t in spec.get("taints") or []))
    return ready, bool(spec.get("unschedulable")), taints, \
        tuple(sorted((status.get("allocatable") or {}).items()))


_BLOCKING_TAINTS = ("NoSchedule", "NoExecute")


def node_ready(node: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in node.get("status", {}).get("conditions", []))


def node_schedulable(node: dict) -> bool:
    """Ready, not cordoned, and no NoSchedule/NoExecute taint (GPU pods tolerate none here)."""
    spec = node.get("spec", {})
    if spec.get("unschedulable"):
        return False
    if any(t.get("effect") in _BLOCKING_TAINTS for t in spec.get("taints") or []):
        return False
    return node_ready(node)


def node_from_k8s(obj: dict) -> Node:
    """The model `Node` a Kubernetes Node object describes (capacity and workbench labels)."""
    meta, status = obj["metadata"], obj.get("status", {})
    alloc = status.get("allocatable") or status.get("capacity") or {}
    lab = meta.get("labels") or {}
    return Node(name=meta["name"], cpus=parse_quantity(alloc.get("cpu", "0")),
                mem=parse_quantity(alloc.get("memory", "0")) / GIB,
                gpus=int(parse_quantity(alloc.get(labels.GPU_RESOURCE, "0"))),
                gpu_model=lab.get(labels.GPU_MODEL, "unknown"), rack=lab.get(labels.RACK, "rack-0"))


@dataclass
class NodeView:
    """The nodes in name order, as the model's arrays."""

    nodes: list[Node]
    capacity: np.ndarray
    node_up: np.ndarray
    ready: np.ndarray
    node_index: dict[str, int]

    @classmethod
    def build(cls, node_objs: Iterable[dict]) -> NodeView:
        objs = sorted(node_objs, key=lambda n: n["metadata"]["name"])
        nodes = [node_from_k8s(o) for o in objs]
        capacity = np.array([[n.cpus, n.mem, n.gpus] for n in nodes], dtype=float).reshape(-1, 3)
        return cls(nodes, capacity, np.array([node_schedulable(o) for o in objs], dtype=bool),
                   np.array([node_ready(o) for o in objs], dtype=bool),
                   {n.name: i for i, n in enumerate(nodes)})

    def allocation(self, pods: Iterable[dict], demand: Callable[[dict], Resources],
                   skip: set[str] = frozenset()) -> np.ndarray:
        """Requests of bound pods that have not ended, per node (any scheduler's pods)."""
        allocated = np.zeros_like(self.capacity)
        index = self.node_index
        for pod in pods:
            node = pod["spec"].get("nodeName")
            if not node or node not in index:
                continue
            if pod.get("status", {}).get("phase") in TERMINAL or pod["metadata"]["uid"] in skip:
                continue
            d = demand(pod)
            row = allocated[index[node]]
            row[0] += d.cpu
            row[1] += d.mem
            row[2] += d.gpu
        return allocated

    def gpu_free(self, allocated: np.ndarray) -> np.ndarray:
        """Free fraction per physical GPU: whole GPUs only (Kubernetes cannot share one)."""
        width = max((n.gpus for n in self.nodes), default=0) or 1
        out = np.full((len(self.nodes), width), np.nan)
        for i, n in enumerate(self.nodes):
            used = min(int(np.ceil(allocated[i, 2] - 1e-9)), n.gpus)
            out[i, :used] = 0.0
            out[i, used:n.gpus] = 1.0
        return out

    def state(self, now: float, allocated: np.ndarray, jobs: dict[str, JobStatus],
              queue: Iterable[JobStatus] | None = None) -> ClusterState:
        return ClusterState(now=now, nodes=self.nodes, capacity=self.capacity.copy(),
                            allocated=allocated, gpu_free=self.gpu_free(allocated),
                            node_up=self.node_up.copy(), jobs=jobs, node_index=self.node_index,
                            queue=queue)


# ---- pods and jobs -----------------------------------------------------------------------------


def pod_demand(pod: dict) -> Resources:
    """A pod's requests (limits where no request is given, as Kubernetes defaults them)."""
    cpu = mem = gpu = 0.0
    for c in pod["spec"].get("containers", []):
        res = c.get("resources") or {}
        req = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        cpu += parse_quantity(req.get("cpu", 0))
        mem += parse_quantity(req.get("memory", 0)) / GIB
        gpu += parse_quantity(req.get(labels.GPU_RESOURCE, 0))
    return Resources(cpu, mem, gpu)


def kind_served(rest: Rest, k: kinds.OwnerKind) -> bool:
    """Whether the cluster serves `k`: its API group lists its resource (a group the cluster
    does not have, 404, is False; any other error is raised)."""
    try:
        found = rest.get(f"/apis/{k.group}/{k.version}")
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return any(r.get("name") == k.plural for r in found.get("resources") or [])


def role_of(pod: dict) -> str:
    """`worker` or `ps`: the `workbench.io/role` label, else what its operator's labels say."""
    pod_labels = pod["metadata"].get("labels") or {}
    role = pod_labels.get(labels.ROLE) or kinds.role_label(pod_labels)
    return labels.ROLE_PS if role == labels.ROLE_PS else labels.ROLE_WORKER


def owner_of(pod: dict) -> tuple[str, str] | None:
    """(kind, name) of the object that controls the pod and re-creates it (a batch/v1 Job,
    a PyTorchJob, a TFJob), or None: a bare pod, or one owned by a kind the workbench does not
    scale."""
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") in kinds.BY_KIND:
            return ref["kind"], ref["name"]
    return None


def bound_placement(pods: Iterable[dict]) -> tuple[Placement, Placement]:
    """Workers and PS per node of bound pods."""
    workers: Placement = {}
    ps: Placement = {}
    for p in pods:
        target = ps if role_of(p) == labels.ROLE_PS else workers
        node = p["spec"]["nodeName"]
        target[node] = target.get(node, 0) + 1
    return workers, ps


def parse_time(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def job_key(pod: dict) -> tuple[str, str]:
    """(namespace, job): the `workbench.io/job` label, else its operator's job-name label (a
    PyTorchJob's, TFJob's or JobSet's), else the pod's own name."""
    meta = pod["metadata"]
    pod_labels = meta.get("labels") or {}
    job = pod_labels.get(labels.JOB) or kinds.group_label(pod_labels) or meta["name"]
    return meta.get("namespace", "default"), job


def job_name(key: tuple[str, str], namespace: str | None) -> str:
    """A job's name in the model: bare within the backend's namespace, else namespace/job."""
    return key[1] if key[0] == namespace else f"{key[0]}/{key[1]}"


@dataclass
class Report:
    iterations: float = 0.0
    throughput: float = 0.0
    metric: float | None = None
    time: float = 0.0
    uid: str = ""  # the reporting pod's (empty: no report, the checkpoint)


def progress_of(pod: dict) -> Report:
    """The pod's latest progress report (its checkpoint when it has not reported yet)."""
    ann = pod["metadata"].get("annotations") or {}
    checkpoint = checkpoint_of(pod)
    raw = ann.get(labels.PROGRESS)
    if not raw:
        return Report(checkpoint)
    try:
        data = json.loads(raw)
        metric = data.get("metric")
        return Report(max(float(data.get("iterations", 0.0)), checkpoint),
                      float(data.get("throughput") or 0.0),
                      None if metric is None else float(metric), float(data.get("time") or 0.0),
                      pod["metadata"].get("uid", ""))
    except (ValueError, TypeError, AttributeError):
        return Report(checkpoint)


def _annotation(obj: dict | None, key: str) -> str | None:
    return ((obj or {}).get("metadata", {}).get("annotations") or {}).get(key)


def checkpoint_of(pod: dict) -> float:
    """The iterations a (re-created) pod resumes from: its `checkpoint` annotation, or 0."""
    return _float((pod["metadata"].get("annotations") or {}).get(labels.CHECKPOINT), 0.0)


def attained_service_of(obj: dict) -> float:
    """The GPU-seconds a job had received when the scheduler last stopped it (its
    `attained-service` annotation, on its owner or a re-created bare pod), or 0."""
    return _float((obj["metadata"].get("annotations") or {}).get(labels.SERVICE), 0.0)


def restarts_of(obj: dict) -> int:
    """How many times the scheduler had restarted a job when it last stopped it (its
    `restarts` annotation, kept with the checkpoint), or 0."""
    try:
        return max(int((obj["metadata"].get("annotations") or {}).get(labels.RESTARTS, 0)), 0)
    except (TypeError, ValueError):
        return 0


def running_since(pods: list[dict]) -> float | None:
    """When the last of `pods` started running (Unix seconds): the latest `startedAt` of their
    running containers. None unless every pod is Running with every container running (a gang
    trains only once all its pods run)."""
    latest = None
    for pod in pods:
        status = pod.get("status") or {}
        containers = status.get("containerStatuses") or []
        if status.get("phase") != "Running" or not containers:
            return None
        for c in containers:
            started = parse_time(((c.get("state") or {}).get("running") or {}).get("startedAt"))
            if started is None:
                return None
            latest = started if latest is None else max(latest, started)
    return latest


def _float(text, default):
    try:
        return float(text) if text not in (None, "") else default
    except (TypeError, ValueError):
        return default


@dataclass
class PodGroup:
    """The pods of one training job, split by what a scheduler needs to know."""

    key: tuple[str, str]
    pods: list[dict] = field(default_factory=list)  # every pod, ended ones included
    live: list[dict] = field(default_factory=list)  # not ended, not being deleted
    pending: dict[str, list[dict]] = field(default_factory=dict)  # role -> unbound live pods
    succeeded: int = 0
    failed: int = 0
    created: float | None = None  # earliest creation (Unix seconds)

    def bound(self, role: str) -> Placement:
        out: Placement = {}
        for p in self.live:
            node = p["spec"].get("nodeName")
            if node and role_of(p) == role:
                out[node] = out.get(node, 0) + 1
        return out

    def count(self, role: str) -> int:
        return sum(1 for p in self.live if role_of(p) == role)

    @property
    def all_running(self) -> bool:
        return all(p.get("status", {}).get("phase") == "Running" for p in self.live)

    def progress(self) -> Report:
        best = Report()
        for p in self.pods:
            r = progress_of(p)
            if r.iterations > best.iterations or (r.iterations == best.iterations
                                                   and r.time > best.time):
                best = r
        return best

    def annotations(self) -> dict[str, str]:
        """The job's annotations: workers' over PS', newest pods' over older ones."""
        ann: dict[str, str] = {}
        for p in sorted(self.pods, key=lambda p: (role_of(p) == labels.ROLE_WORKER,
                                                  p["metadata"].get("creationTimestamp", ""))):
            ann.update(p["metadata"].get("annotations") or {})
        return ann


def group_pods(pods: Iterable[dict], scheduler_name: str = labels.SCHEDULER_NAME,
               skip: set[str] = frozenset()) -> dict[tuple[str, str], PodGroup]:
    """The pods this scheduler places, by job. `skip`: uids being deleted (count as gone)."""
    groups: dict[tuple[str, str], PodGroup] = {}
    for pod in pods:
        if pod["spec"].get("schedulerName") != scheduler_name:
            continue
        meta = pod["metadata"]
        key = job_key(pod)
        g = groups.get(key)
        if g is None:
            g = groups[key] = PodGroup(key)
        g.pods.append(pod)
        created = parse_time(meta.get("creationTimestamp"))
        if created is not None and (g.created is None or created < g.created):
            g.created = created
        phase = pod.get("status", {}).get("phase")
        if phase == "Succeeded":
            g.succeeded += 1
            continue
        if phase == "Failed":
            g.failed += 1
            continue
        if meta["uid"] in skip or meta.get("deletionTimestamp"):
            continue
        g.live.append(pod)
        if not pod["spec"].get("nodeName"):
            g.pending.setdefault(role_of(pod), []).append(pod)
    return groups


def spec_from_pods(name: str, pods: list[dict], arrival: float | None = None,
                   workers: int | None = None, ps: int | None = None,
                   worker_range: tuple[int, int] | None = None) -> JobSpec:
    """The JobSpec a job's pods describe (see `labels`). `workers`/`ps`: the counts the job
    asks for when its annotations do not say (e.g. a batch/v1 Job's parallelism);
    `worker_range`: (min, max) workers when they do not say (a PyTorchJob's elastic policy)."""
    ann: dict[str, str] = {}
    for p in sorted(pods, key=lambda p: role_of(p) == labels.ROLE_WORKER):
        ann.update(p["metadata"].get("annotations") or {})
    worker_pods = [p for p in pods if role_of(p) == labels.ROLE_WORKER]
    ps_pods = [p for p in pods if role_of(p) == labels.ROLE_PS]
    n_workers = int(_float(ann.get(labels.NUM_WORKERS), 0) or workers or len(worker_pods) or 1)
    n_ps = int(_float(ann.get(labels.NUM_PS), 0) or ps or len(ps_pods))
    lo0, hi0 = worker_range or (1, n_workers)
    lo = max(min(int(_float(ann.get(labels.MIN_WORKERS), lo0)), n_workers), 1)
    hi = max(int(_float(ann.get(labels.MAX_WORKERS), hi0)), n_workers)
    deadline = _float(ann.get(labels.DEADLINE), None)
    target = _float(ann.get(labels.TARGET_METRIC), None)
    total_work = _float(ann.get(labels.TOTAL_WORK), None)
    if total_work is None or total_work <= 0:
        total_work = 1e12  # a pod that runs until it ends by itself (finite: policies divide)
    return JobSpec(
        name=name, application=ann.get(labels.APPLICATION, "unknown"),
        arrival=_float(ann.get(labels.ARRIVAL), arrival if arrival is not None else 0.0),
        total_work=total_work, batch_size=int(_float(ann.get(labels.BATCH_SIZE), 128)),
        initial_workers=n_workers, min_workers=lo, max_workers=hi, num_ps=n_ps,
        worker_demand=pod_demand(worker_pods[0]) if worker_pods else Resources(4, 16, 1),
        ps_demand=pod_demand(ps_pods[0]) if ps_pods else Resources(2, 8, 0),
        deadline=deadline, priority=int(_float(ann.get(labels.PRIORITY), 0)),
        user=ann.get(labels.USER, "default"),
        kind=JobKind.PS if n_ps > 0 else JobKind.ALLREDUCE,
        target_metric=target, cpu_burst=_float(ann.get(labels.CPU_BURST), 1.0))


__all__ = [
    "Clock",
    "ClusterCache",
    "Informer",
    "NodeView",
    "PodGroup",
    "attained_service_of",
    "bound_placement",
    "checkpoint_of",
    "group_pods",
    "job_key",
    "job_name",
    "kind_served",
    "node_from_k8s",
    "node_schedulable",
    "owner_of",
    "pod_demand",
    "progress_of",
    "restarts_of",
    "role_of",
    "running_since",
    "spec_from_pods",
]
