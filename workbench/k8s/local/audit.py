"""The over-commit audit: an independent watch of a cluster's pods and nodes.

`Auditor` keeps its own ApiClient and `kubernetes.watch` streams (nothing of the backend's
cache or bookkeeping) and records, per node, the most cpu, memory and GPUs that bound pods
which have not ended held at any moment, every moment a node held more than its allocatable,
and any pod seen on two nodes: the check that would have caught the over-commits of issue #14.
Every Kubernetes integration test ends with it (`tests/k8s_helpers.py`), and `workbench bench
k8s-soak` reports from it.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Self

RESOURCES = ("cpu", "memory", "nvidia.com/gpu")


def _pod_requests(pod: dict) -> tuple[float, float, float]:
    """cpu, memory and GPUs a pod holds on its node (requests, else limits; init containers
    by the larger of their max and the sum of the others, as the kubelet counts them)."""
    from kubernetes.utils import parse_quantity

    def of(containers) -> list[tuple[float, ...]]:
        out = []
        for c in containers or []:
            res = c.get("resources") or {}
            req = {**(res.get("limits") or {}), **(res.get("requests") or {})}
            out.append(tuple(float(parse_quantity(req.get(r, "0"))) for r in RESOURCES))
        return out
    main = of(pod["spec"].get("containers"))
    total = tuple(sum(x[k] for x in main) for k in range(3))
    for init in of(pod["spec"].get("initContainers")):
        total = tuple(max(a, b) for a, b in zip(total, init))
    return total


class Auditor:
    """An independent watch of every pod and node (its own ApiClient and `kubernetes.watch`,
    nothing of the backend's cache or bookkeeping): per node, the most cpu, memory and GPUs
    held at any moment by bound pods that have not ended (from their bind until they succeed,
    fail or are gone), any moment a node held more than its allocatable, and any pod seen on
    two nodes. It survives apiserver restarts (reconnect; relist on 410 or a broken watch).

    `begin()` opens a window (a test); `check()` answers a fresh list, waits for the watch to
    catch up with it, and returns what went wrong in the window ([] if nothing);
    `assert_clean()` fails the test with it.
    """

    def __init__(self, kubeconfig: str | Path) -> None:
        from kubernetes import client, config

        self.api_client = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api(self.api_client)
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.capacity: dict[str, tuple[float, float, float]] = {}
        self.pods: dict[str, tuple[str, tuple[float, float, float]]] = {}  # uid -> node, held
        self.names: dict[str, str] = {}  # uid -> namespace/name
        self.witness: list[str] = []  # the pods on the node at the first over-commit seen
        self.nodes_of: dict[str, str] = {}  # uid -> the node it was first seen bound to
        self.counted: set[str] = set()  # uids counted in `binds`
        self.seen: dict[str, int] = {}  # uid -> the pod's latest resourceVersion seen
        self.used: dict[str, list[float]] = {}
        self.peak: dict[str, list[float]] = {}
        self.overcommits: list[tuple[float, str, str, float, float]] = []  # (t, node, what, ..)
        self.bound_twice: list[tuple[str, str, str]] = []  # (pod, first node, second node)
        self.binds: dict[str, int] = {}  # namespace -> pods seen bound (each pod once)
        self.bind_times: list[float] = []  # monotonic time each pod was first seen bound
        self.first_seen: dict[str, float] = {}  # uid -> monotonic time the pod was first seen
        self.worst = [0.0, 0.0, 0.0]  # most cpu, memory, GPUs above a node's allocatable
        self.relists = 0
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._run, args=(kind,), daemon=True,
                                         name=f"auditor {kind}") for kind in ("nodes", "pods")]

    # -- lifecycle --
    def __enter__(self) -> Self:
        for t in self.threads:
            t.start()
        if not _wait(lambda: self.relists >= 2, 30.0):
            raise TimeoutError(f"the auditor could not list pods and nodes: {self.errors[-3:]}")
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(timeout=5)
        self.api_client.close()

    # -- the windows --
    def begin(self) -> None:
        with self.lock:
            self.peak = {n: list(u) for n, u in self.used.items()}
            self.overcommits.clear()
            self.bound_twice.clear()
            self.witness = []
            self.worst = [0.0, 0.0, 0.0]

    def binds_in(self, namespace: str) -> int:
        return self.binds.get(namespace, 0)

    def most_gpus(self) -> dict[str, float]:
        with self.lock:
            return {n: p[2] for n, p in self.peak.items()}

    def check(self, settle: float = 5.0) -> list[str]:
        """What went wrong since `begin()`: over-commits seen by the watch or in a fresh list
        at the end, pods on two nodes, a watch that did not catch up."""
        problems = []
        try:
            pods = json.loads(self.core.list_pod_for_all_namespaces(
                _preload_content=False).data)
            nodes = json.loads(self.core.list_node(_preload_content=False).data)
        except Exception as e:  # noqa: BLE001 - reported
            return [f"the auditor's final list failed: {e}"]
        listed = {p["metadata"]["uid"]: int(p["metadata"]["resourceVersion"])
                  for p in pods["items"]}

        def behind() -> list[str]:
            return [u for u, v in listed.items() if self.seen.get(u, 0) < v]
        if not _wait(lambda: not behind(), settle):
            problems.append(f"the auditor's watch has not seen {len(behind())} pods as listed"
                            f" (errors {self.errors[-3:]})")
        capacity = {n["metadata"]["name"]: _capacity(n) for n in nodes["items"]}
        held: dict[str, list[float]] = {}
        for p in pods["items"]:
            node = p["spec"].get("nodeName")
            if node and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                row = held.setdefault(node, [0.0, 0.0, 0.0])
                for k, v in enumerate(_pod_requests(p)):
                    row[k] += v
        for node, row in held.items():
            for k, what in enumerate(RESOURCES):
                if node in capacity and row[k] > capacity[node][k] + 1e-6:
                    problems.append(f"at the end {node} holds {row[k]:g} {what} of"
                                    f" {capacity[node][k]:g}")
        with self.lock:
            for t, node, what, used, cap in self.overcommits[:6]:
                problems.append(f"{node} held {used:g} {what} of {cap:g} at"
                                f" {time.strftime('%H:%M:%S', time.localtime(t))}")
            for pod, first, second in self.bound_twice[:20]:
                problems.append(f"pod {pod} bound to {first}, then to {second}")
            if self.witness:
                problems.append(f"on the node then: {', '.join(self.witness)}")
        return problems

    def assert_clean(self) -> None:
        problems = self.check()
        assert not problems, "over-commit audit: " + "; ".join(problems)

    # -- the watches --
    def _run(self, kind: str) -> None:
        from kubernetes import watch

        lister = self.core.list_pod_for_all_namespaces if kind == "pods" else self.core.list_node
        version = None
        while not self.stop_event.is_set():
            try:
                if version is None:
                    listed = json.loads(lister(_preload_content=False).data)
                    version = listed["metadata"]["resourceVersion"]
                    self._relisted(kind, listed["items"])
                w = watch.Watch()
                for event in w.stream(lister, resource_version=version, timeout_seconds=20,
                                      allow_watch_bookmarks=True, deserialize=False):
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        version = None
                        break
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        with self.lock:
                            self._see(kind, event["type"], obj)
                    if self.stop_event.is_set():
                        w.stop()
            except Exception as e:  # noqa: BLE001 - apiserver down: reconnect, relist on 410
                self.errors.append(f"{kind}: {str(e).splitlines()[0][:120] if str(e) else e!r}")
                if getattr(e, "status", None) == 410 or isinstance(e, KeyError):
                    version = None  # a 410 ERROR event (its raw_object is not parsed)
                self.stop_event.wait(0.2)

    def _relisted(self, kind: str, items: list[dict]) -> None:
        with self.lock:
            if kind == "nodes":
                self.capacity = {}
            else:
                self.pods = {}
                self.used = {}
            for obj in items:
                self._see(kind, "ADDED", obj)
            self.relists += 1

    def _see(self, kind: str, event: str, obj: dict) -> None:
        meta = obj["metadata"]
        if kind == "nodes":
            if event == "DELETED":
                self.capacity.pop(meta["name"], None)
            else:
                self.capacity[meta["name"]] = _capacity(obj)
            return
        uid, node = meta["uid"], obj["spec"].get("nodeName")
        if uid not in self.first_seen:
            self.first_seen[uid] = time.monotonic()
        self.seen[uid] = max(self.seen.get(uid, 0), int(meta.get("resourceVersion") or 0))
        ended = event == "DELETED" or (obj.get("status") or {}).get("phase") in (
            "Succeeded", "Failed")
        if node:
            first = self.nodes_of.setdefault(uid, node)
            if first != node:
                self.bound_twice.append((f"{meta['namespace']}/{meta['name']}", first, node))
            if not ended and uid not in self.counted:
                self.counted.add(uid)
                ns = meta["namespace"]
                self.binds[ns] = self.binds.get(ns, 0) + 1
                self.bind_times.append(time.monotonic())
        old = self.pods.pop(uid, None)
        if old is not None:
            row = self.used[old[0]]
            for k in range(3):
                row[k] -= old[1][k]
        if ended or not node:
            return
        demand = _pod_requests(obj)
        self.pods[uid] = (node, demand)
        self.names[uid] = f"{meta['namespace']}/{meta['name']}"
        row = self.used.setdefault(node, [0.0, 0.0, 0.0])
        peak = self.peak.setdefault(node, [0.0, 0.0, 0.0])
        cap = self.capacity.get(node)
        for k in range(3):
            row[k] += demand[k]
            peak[k] = max(peak[k], row[k])
            if cap is not None and row[k] > cap[k] + 1e-6:
                self.worst[k] = max(self.worst[k], row[k] - cap[k])
                self.overcommits.append((time.time(), node, RESOURCES[k], row[k], cap[k]))
                if not self.witness:
                    self.witness = [self.names.get(u, u) for u, (n, _) in self.pods.items()
                                    if n == node]


def _capacity(node: dict) -> tuple[float, float, float]:
    from kubernetes.utils import parse_quantity

    status = node.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    return tuple(float(parse_quantity(alloc.get(r, "0"))) for r in RESOURCES)


def _wait(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


__all__ = ["RESOURCES", "Auditor"]
