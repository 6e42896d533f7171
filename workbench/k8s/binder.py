"""The workbench's writes to the API server: bindings, deletions, patches and Events.

Bindings go through the Binding subresource from a pool of threads (one request per pod;
the apiserver, not Python, is the limit, so many in flight approach the tuned kube-scheduler).
A 409 on a bind means the pod is already assigned: if to the node we asked for (a retried or
second bind) it counts as done, otherwise as a failure the caller rolls back. A bind that got
no answer (the connection broke: the request may have been carried out) is resolved by reading
the pod back; when even that gets no answer its outcome is `unknown`, and the caller holds the
pod's resources on that node until it knows. Events go out
from one background thread, so explaining a decision never slows carrying it out.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import logging
import os
import queue
import socket
import ssl
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlparse

from kubernetes.client.exceptions import ApiException

from .rest import MERGE, Rest

log = logging.getLogger("workbench.k8s.binder")

DISRUPTION_TARGET = "DisruptionTarget"  # the pod condition of a deliberate disruption


@dataclass(frozen=True)
class BindResult:
    pod: dict
    node: str
    ok: bool
    error: str = ""
    status: int | None = None  # HTTP status of a failed bind
    already: bool = False  # a 409 for the node we asked for: bound before (second bind)
    unknown: bool = False  # no answer, and none from reading the pod back: may be bound
    unanswered: bool = False  # the bind itself got no answer (it may still land: hold a while)


def pod_path(pod: dict) -> str:
    m = pod["metadata"]
    return f"/api/v1/namespaces/{m.get('namespace', 'default')}/pods/{m['name']}"


def _short(e: Exception) -> str:
    if isinstance(e, (ApiException, _PostError)):
        try:
            return f"{e.status} {json.loads(e.body).get('message', '')}"[:200]
        except Exception:  # noqa: BLE001 - not a JSON Status
            return f"{e.status} {getattr(e, 'reason', '') or ''}".strip()
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


class FastPost:
    """POSTs of small JSON bodies on one kept-alive HTTPS connection per thread, with the
    ApiClient's server, TLS and credentials: a third of the client's CPU per request, which is
    what a 2-core machine shared with the apiserver runs out of first. None when the
    configuration needs what this does not do (a proxy)."""

    @classmethod
    def create(cls, api_client) -> FastPost | None:
        cfg = api_client.configuration
        url = urlparse(cfg.host)
        if getattr(cfg, "proxy", None) or url.scheme not in ("https", "http"):
            return None
        try:
            return cls(cfg, url)
        except (OSError, ssl.SSLError, ValueError):
            return None

    def __init__(self, cfg, url) -> None:
        self.cfg = cfg
        self.https = url.scheme == "https"
        self.host, self.port = url.hostname, url.port or (443 if self.https else 80)
        self.prefix = url.path.rstrip("/")
        ctx = None
        if self.https:
            ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
            if cfg.cert_file:
                ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
            if not cfg.verify_ssl:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
        self.ctx = ctx
        self.local = threading.local()
        self._auth: dict[str, str] = {}
        self._auth_time = 0.0

    def _headers(self) -> dict[str, str]:
        if time.monotonic() - self._auth_time > 30:  # tokens may rotate (refresh hooks)
            hook = getattr(self.cfg, "refresh_api_key_hook", None)
            if hook is not None:
                hook(self.cfg)
            self._auth = {a["key"]: a["value"] for a in self.cfg.auth_settings().values()
                          if a.get("in") == "header" and a.get("value")}
            self._auth_time = time.monotonic()
        return {"Content-Type": "application/json", "Accept": "application/json", **self._auth}

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            if self.https:
                conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                                   timeout=30)
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            self.local.conn = conn
        return conn

    def post(self, path: str, body: dict) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        headers = self._headers()
        for attempt in range(2):
            conn = self._conn()
            try:
                conn.request("POST", self.prefix + path, data, headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                self.local.conn = None
                if attempt:  # a kept-alive connection the server closed gets one retry
                    raise
        raise AssertionError("unreachable")


class _PostError(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"{status}")
        self.status = status
        self.body = body.decode(errors="replace")


class Binder:
    def __init__(self, rest: Rest, threads: int = 16, events: bool = True,
                 component: str = "workbench", fast: bool = True) -> None:
        self.rest = rest
        self.threads = max(1, threads)
        self.pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="binder")
        self.stats: Counter = Counter()
        self._lock = threading.Lock()
        self.inflight = 0  # binds under way: Events wait for them
        self.fast = FastPost.create(rest.api_client) if fast else None
        self.events = EventRecorder(rest, component, busy=lambda: self.inflight > 0) \
            if events else None

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.events is not None:
            self.events.close()

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.stats[key] += n

    # -- binding --
    def _post_binding(self, path: str, body: dict) -> None:
        if self.fast is None:
            self.rest.post(path, body)
            return
        status, data = self.fast.post(path, body)
        if not 200 <= status <= 299:
            raise _PostError(status, data)

    def bind_one(self, pod: dict, node: str, annotations: dict | None = None) -> BindResult:
        path = pod_path(pod)
        try:
            if annotations:
                self.rest.patch(path, {"metadata": {"annotations": annotations}}, MERGE)
            self._post_binding(path + "/binding", {
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": pod["metadata"]["name"],
                             "namespace": pod["metadata"].get("namespace", "default")},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
            self._count("binds")
            return BindResult(pod, node, True)
        except (ApiException, _PostError) as e:
            if e.status == 409:
                self._count("bind_conflicts")
                return self._resolve(pod, node, e, 409)
            self._count("bind_failures")
            return BindResult(pod, node, False, _short(e), e.status)
        except Exception as e:  # noqa: BLE001 - no answer: the bind may or may not have happened
            self._count("binds_unanswered")
            return self._resolve(pod, node, e)

    def _resolve(self, pod: dict, node: str, error: Exception,
                 status: int | None = None) -> BindResult:
        """The outcome of a bind answered 409, or not answered at all (the request may have
        reached the API server before the connection broke): read the pod back, a few times
        with back-off. Bound to `node`: done. Unbound or elsewhere: failed. No answer: unknown,
        and the caller must hold the node's resources until it knows (issue #14, item 2)."""
        for delay in (0.0, 0.2, 0.5):
            time.sleep(delay)
            answered, now_on = self.read_node(pod)
            if not answered:
                continue
            if now_on == node:
                if status is None:  # our bind did happen; a 409's was an earlier one
                    self._count("binds")
                return BindResult(pod, node, True, already=True)
            self._count("bind_failures")
            why = f"already assigned to {now_on}" if now_on else _short(error)
            return BindResult(pod, node, False, why, status or (409 if now_on else None),
                              unanswered=status is None)
        self._count("bind_failures")
        return BindResult(pod, node, False, f"outcome unknown: {_short(error)}", status,
                          unknown=True, unanswered=status is None)

    def read_node(self, pod: dict) -> tuple[bool, str]:
        """(answered, node): the node the API server has the pod on now ('' for unbound or
        gone); answered is False when it could not be asked."""
        try:
            return True, (self.rest.get(pod_path(pod)).get("spec") or {}).get("nodeName") or ""
        except ApiException as e:
            if e.status == 404:
                return True, ""
            return False, ""
        except Exception:  # noqa: BLE001 - no answer
            return False, ""

    def bind_all(self, tasks: list[tuple[dict, str, dict | None]]) -> list[BindResult]:
        """Bind every (pod, node, annotations) at once on the pool; results in task order."""
        with self._lock:
            self.inflight += 1
        try:
            if len(tasks) == 1:
                return [self.bind_one(*tasks[0])]
            futures = [self.pool.submit(self.bind_one, *t) for t in tasks]
            return [f.result() for f in futures]
        finally:
            with self._lock:
                self.inflight -= 1

    # -- other writes --
    def delete_one(self, pod: dict) -> str | None:
        """Delete at once (no kubelet confirms a graceful end); None if done or already gone.
        A pod that has not ended is first marked as disrupted (`mark_disrupted`)."""
        if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            self.mark_disrupted(pod)
        try:
            self.rest.delete(pod_path(pod), grace_period_seconds=0)
            self._count("deletes")
            return None
        except ApiException as e:
            if e.status == 404:
                return None
            return _short(e)
        except Exception as e:  # noqa: BLE001
            return _short(e)

    def mark_disrupted(self, pod: dict) -> None:
        """Give the pod the `DisruptionTarget` condition, as kube-scheduler does before it
        preempts one: from Kubernetes 1.26 a Job counts a deleted pod as failed, towards its
        `backoffLimit`, unless its pod failure policy ignores that condition (the workbench's
        Jobs do: `manifests.IGNORE_DISRUPTIONS`; the re-creation back-off still grows from
        1.28); a checkpoint-restart is not a failure. Best effort: a pod already gone needs none."""
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"status": {"conditions": [{
            "type": DISRUPTION_TARGET, "status": "True", "reason": "WorkbenchRestart",
            "message": "deleted by the workbench scheduler for a checkpoint-restart",
            "lastTransitionTime": now}]}}
        try:
            self.rest.patch(pod_path(pod) + "/status", body)  # strategic: merged by type
            self._count("disruption marks")
        except Exception as e:  # noqa: BLE001 - the delete goes ahead either way
            if not (isinstance(e, ApiException) and e.status == 404):
                log.debug("mark %s disrupted: %s", pod["metadata"]["name"], _short(e))

    def delete_all(self, pods: list[dict]) -> list[str | None]:
        if len(pods) <= 1:
            return [self.delete_one(p) for p in pods]
        return list(self.pool.map(self.delete_one, pods))

    def create_pod(self, namespace: str, manifest: dict) -> dict | None:
        try:
            out = self.rest.post(f"/api/v1/namespaces/{namespace}/pods", manifest)
            self._count("creates")
            return out
        except Exception as e:  # noqa: BLE001 - retried by the backend's next sync
            log.warning("create pod in %s: %s", namespace, _short(e))
            return None

    def patch(self, path: str, body: dict) -> str | None:
        try:
            self.rest.patch(path, body, MERGE)
            self._count("patches")
            return None
        except Exception as e:  # noqa: BLE001
            return _short(e)

    def run(self, fn, *args):
        """Run `fn(*args)` on the pool (a write nobody waits for). A failure it returns (the
        error's text, as `patch` does) or raises is logged and counted (`writes_failed`):
        a checkpoint annotation that did not land was silent."""
        future = self.pool.submit(fn, *args)
        future.add_done_callback(lambda done: self._unwatched_write_done(fn, args, done))
        return future

    def _unwatched_write_done(self, fn, args: tuple, done) -> None:
        try:
            error = done.result()
        except Exception as e:  # noqa: BLE001
            error = _short(e)
        if isinstance(error, str) and error:
            self._count("writes_failed")
            log.warning("%s %s: %s", fn.__name__, args[0] if args else "", error)

    # -- events --
    def event(self, pod: dict, reason: str, message: str, warning: bool = False) -> None:
        if self.events is not None:
            self.events.post(pod, reason, message, warning)


class EventRecorder:
    """Posts core/v1 Events about pods from one background thread (what `kubectl describe pod`
    lists). A full queue drops events rather than slow scheduling down."""

    def __init__(self, rest: Rest, component: str = "workbench", limit: int = 20000,
                 busy=lambda: False) -> None:
        self.rest = rest
        self.busy = busy
        self.component = component
        self.instance = f"{socket.gethostname()}-{os.getpid()}"
        self.queue: queue.Queue = queue.Queue(maxsize=limit)
        self.posted = 0
        self.dropped = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="events")
        self._thread.start()

    def post(self, pod: dict, reason: str, message: str, warning: bool = False) -> None:
        meta = pod["metadata"]
        try:
            self.queue.put_nowait((meta.get("namespace", "default"), meta["name"],
                                   meta.get("uid", ""), reason, message[:1024], warning))
        except queue.Full:
            self.dropped += 1

    def flush(self, timeout: float = 10.0) -> None:
        """Wait until every queued event has been posted (tests)."""
        done = threading.Event()
        self.queue.put((None, None, None, None, done, None))
        done.wait(timeout)

    def close(self) -> None:
        self.queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            ns, name, uid, reason, message, warning = item
            if ns is None:
                message.set()
                continue
            waited = 0.0
            while self.busy() and waited < 5.0:  # binds first; explanations right after
                time.sleep(0.02)
                waited += 0.02
            now = dt.datetime.now(dt.UTC)
            stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
            body = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{name}.{now.strftime('%H%M%S%f')}{self.posted % 1000:03d}",
                             "namespace": ns},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name,
                                   "namespace": ns, "uid": uid},
                "reason": reason, "message": message, "type": "Warning" if warning else "Normal",
                "source": {"component": self.component},
                "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
                "reportingComponent": self.component, "reportingInstance": self.instance,
            }
            try:
                self.rest.post(f"/api/v1/namespaces/{ns}/events", body)
                self.posted += 1
            except Exception as e:  # noqa: BLE001 - an event is best effort
                self.failed += 1
                if self.failed <= 3:
                    log.warning("event %s on %s/%s: %s", reason, ns, name, _short(e))
