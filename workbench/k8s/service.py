"""The scheduler daemon: a Controller on a `K8sBackend`, run until stopped, and its HTTP
endpoint.

`SchedulerService` runs scheduling rounds, counts decisions for `/metrics` and keeps the
recorder's lists to a window (a service may run for weeks). The endpoint serves `/metrics`
(Prometheus text format), `/healthz` (the watches are alive), and `/policy` (GET: the active
engine; POST `?name=ENGINE`: switch engines between rounds, losing no job). `workbench
schedule` only parses its arguments and wires these together.

With a `LeaderElector` (`--leader-elect`) the service is one of several replicas: it waits as
a standby until it holds the Lease, starts the backend's watches then, and schedules only
while leading. Losing the Lease ends `run()` at once (`lost_leadership`), as kube-scheduler
exits: a deposed leader's state may be stale, so it comes back as a fresh standby. A clean
`stop()` ends the last round, then releases the Lease so a standby takes over at once.
`is_leader` and `leader_identity` say which replica leads; `/healthz` and `/metrics` show it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from ..errors import ConfigError
from .leader import LeadingOnly, NotLeading

log = logging.getLogger("workbench.k8s.service")


class SchedulerService:
    """A Controller on a K8sBackend, with the metrics endpoint and a stop switch.

    With an `elector` (a `LeaderElector`, not yet started) pass a backend made with
    `start=False`: the service starts its watches once it leads, and takes over the elector's
    `on_stopped_leading` (chaining one already set)."""

    def __init__(self, backend, policy, metrics_port: int | None = None,
                 metrics_address: str = "127.0.0.1", elector=None,
                 round_interval: float | None = None) -> None:
        from ..control import Controller

        self.backend = backend
        self.round_interval = round_interval  # the operator's --round-interval, kept on a switch
        self.elector = elector
        self.lost_leadership = False
        self._run_done = threading.Event()
        self._run_done.set()
        if elector is not None:
            backend = LeadingOnly(backend, lambda: elector.is_leader)
            elector.on_stopped_leading = _then(self.backend.interrupt, elector.on_stopped_leading)
        self.controller = Controller(backend, policy)
        self.stop_event = threading.Event()
        self.started = time.time()
        self.round_seconds = 0.0
        self.decisions: Counter = Counter()
        self.server: ThreadingHTTPServer | None = None
        self.lock = threading.Lock()
        if metrics_port is not None:
            self.server = _serve(self, metrics_address, metrics_port)

    @property
    def port(self) -> int | None:
        return self.server.server_address[1] if self.server else None

    @property
    def is_leader(self) -> bool:
        """Whether this replica schedules now (always, without leader election)."""
        return self.elector is None or self.elector.is_leader

    @property
    def leader_identity(self) -> str | None:
        """The holder of the Lease as last seen ('' if none; None without leader election)."""
        return None if self.elector is None else self.elector.leader

    def run(self, until_done: bool = False) -> None:
        """Schedule until stopped (or done); with an elector, only once and while leading."""
        self._run_done.clear()
        try:
            if self.elector is not None and not self._wait_to_lead():
                return
            self._schedule(until_done)
        except NotLeading:
            self.lost_leadership = True
            log.error("lost the lease %s/%s: stopped scheduling", self.elector.namespace,
                      self.elector.name)
        finally:
            self._run_done.set()

    def _wait_to_lead(self) -> bool:
        self.elector.start()
        while not self.stop_event.is_set():
            if self.elector.wait_leading(0.2):
                log.info("leading as %s: starting the watches", self.elector.identity)
                self.backend.start()
                return True
        return False

    def _schedule(self, until_done: bool) -> None:
        c = self.controller
        seen = 0
        while not self.stop_event.is_set():
            if until_done and self.backend.done():
                break
            report = c.step()
            if report is None:
                if self.backend.done():
                    break
                continue
            with self.lock:
                self.round_seconds += report.seconds
                for d in c.recorder.decisions[seen:]:
                    self.decisions[(d.action, d.applied)] += 1
                seen = len(c.recorder.decisions)
                if len(c.recorder.decisions) > 100_000:  # a long-running service keeps a window
                    del c.recorder.decisions[:50_000]
                    seen = len(c.recorder.decisions)
                if len(c.recorder.timeline) > 100_000:
                    del c.recorder.timeline[:50_000]

    def stop(self) -> None:
        self.stop_event.set()
        self.backend.interrupt()
        if self.elector is not None:  # the last round ends before a standby may start
            self._run_done.wait(self.elector.renew_deadline)
        self.backend.close()
        if self.elector is not None:
            self.elector.stop(release=True)
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def switch(self, name: str) -> str:
        from ..policies import make_policy

        policy = make_policy(name)  # a one-line ConfigError for an unknown engine
        if self.round_interval is not None:
            policy.round_interval = self.round_interval
        self.controller.switch(policy)
        return name

    def health(self) -> tuple[bool, str]:
        """For /healthz: whether the service works (the watches of a leader are alive; the
        elector of a standby runs), and a line saying so and whether it leads."""
        if self.stop_event.is_set():
            return False, "stopped\n"
        if self.elector is None:
            alive = all(i.is_alive() for i in self.backend.cache.informers)
            return alive, "ok\n" if alive else "stopped\n"
        if self.is_leader:
            alive = all(i.is_alive() for i in self.backend.cache.informers)
            return alive, "ok: leader\n" if alive else "starting: leader\n"
        alive = self.elector.running
        return alive, f"ok: standby (leader: {self.leader_identity or 'none'})\n" if alive \
            else "stopped: standby\n"

    def metrics(self) -> str:
        """Prometheus text exposition (version 0.0.4)."""
        b, c = self.backend, self.controller
        stats = b.stats()
        lines: list[str] = []

        def metric(name, kind, help_, samples):
            lines.append(f"# HELP workbench_{name} {help_}")
            lines.append(f"# TYPE workbench_{name} {kind}")
            for labels_, value in samples:
                lab = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels_.items())
                lines.append(f"workbench_{name}{{{lab}}} {float(value):g}" if lab else
                             f"workbench_{name} {float(value):g}")

        with self.lock:
            decisions = dict(self.decisions)
            round_seconds = self.round_seconds
        metric("info", "gauge", "The active engine.", [({"policy": c.policy.name}, 1)])
        metric("leader", "gauge", "1 on the replica that schedules, 0 on a standby.",
               [({"identity": self.elector.identity} if self.elector else {},
                 int(self.is_leader))])
        metric("rounds_total", "counter", "Scheduling rounds run.", [({}, c.rounds)])
        metric("round_duration_seconds_total", "counter",
               "Time spent observing, deciding and applying.", [({}, round_seconds)])
        metric("decisions_total", "counter", "Actions by type and whether they were carried out.",
               [({"action": a, "applied": str(ok).lower()}, n)
                for (a, ok), n in sorted(decisions.items())])
        metric("policy_switches_total", "counter", "Live engine switches.",
               [({}, len(c.recorder.switches))])
        metric("jobs", "gauge", "Jobs by state.",
               [({"state": k[5:]}, v) for k, v in stats.items() if k.startswith("jobs_")])
        metric("binds_total", "counter", "Pods bound through the Binding API.",
               [({}, stats.get("binds", 0))])
        metric("bind_conflicts_total", "counter", "Binds answered 409 (already assigned).",
               [({}, stats.get("bind_conflicts", 0))])
        metric("bind_failures_total", "counter", "Binds that failed.",
               [({}, stats.get("bind_failures", 0))])
        metric("gang_rollbacks_total", "counter", "Gangs unbound after a failed bind.",
               [({}, stats.get("rollbacks", 0))])
        metric("pod_deletes_total", "counter", "Pods deleted for checkpoint-restart.",
               [({}, stats.get("deletes", 0))])
        metric("node_failures_total", "counter", "Jobs sent back to waiting by a NotReady node.",
               [({}, len(b.node_failures))])
        metric("gpus", "gauge", "GPUs on schedulable nodes and allocated to pods.",
               [({"kind": "total"}, stats.get("gpus_total", 0)),
                ({"kind": "allocated"}, stats.get("gpus_allocated", 0))])
        metric("nodes", "gauge", "Nodes seen and Ready.",
               [({"kind": "all"}, stats.get("nodes", 0)),
                ({"kind": "ready"}, stats.get("nodes_ready", 0))])
        for what, help_ in (("lists", "Full lists by the watch cache."),
                            ("expired", "Watches answered 410 Gone (then relisted)."),
                            ("reconnects", "Watches that failed and reconnected.")):
            metric(f"watch_{what}_total", "counter", help_,
                   [({"resource": k.rsplit("_", 1)[1]}, v) for k, v in stats.items()
                    if k.startswith(f"watch_{what}_")])
        metric("events_posted_total", "counter", "Events explaining decisions.",
               [({}, stats.get("events_posted", 0))])
        metric("uptime_seconds", "gauge", "Seconds since start.", [({}, time.time() - self.started)])
        return "\n".join(lines) + "\n"


def _then(first, second):
    """A callback calling `first`, then `second` if any."""
    def both(*args) -> None:
        first()
        if second is not None:
            second(*args)
    return both


def _escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _serve(service: SchedulerService, address: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: str, ctype: str = "text/plain; charset=utf-8") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path = urlparse(self.path).path
            if path == "/metrics":
                self._send(200, service.metrics(), "text/plain; version=0.0.4; charset=utf-8")
            elif path == "/healthz":
                alive, body = service.health()
                self._send(200 if alive else 503, body)
            elif path == "/policy":
                self._send(200, service.controller.policy.name + "\n")
            else:
                self._send(404, "not found\n")

        def do_POST(self) -> None:
            url = urlparse(self.path)
            if url.path != "/policy":
                self._send(404, "not found\n")
                return
            name = (parse_qs(url.query).get("name") or [""])[0]
            try:
                self._send(200, f"switching to {service.switch(name)} from the next round\n")
            except ConfigError as e:
                self._send(400, f"{e}\n")

        def log_message(self, *args) -> None:
            pass

    try:
        server = ThreadingHTTPServer((address, port), Handler)
    except OSError as e:
        raise ConfigError(f"--metrics-port {port}: cannot listen on {address} ({e.strerror})")
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="metrics").start()
    return server
