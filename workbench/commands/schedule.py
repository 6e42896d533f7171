"""`workbench schedule`: run the Controller as a secondary scheduler on a Kubernetes cluster.

Pods that set `schedulerName: workbench` are placed by the chosen engine (gangs bound all or
nothing, scaling and migration by checkpoint-restart; see `workbench.k8s.backend`); every other
pod stays kube-scheduler's. An HTTP endpoint serves `/metrics` (Prometheus text format),
`/healthz`, and `/policy` (GET: the active engine; POST `?name=ENGINE`: switch engines between
rounds, losing no job).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from ..errors import ConfigError

log = logging.getLogger("workbench.schedule")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "schedule", help="place pods with schedulerName=workbench on a Kubernetes cluster",
        description="Run a scheduling engine as a secondary Kubernetes scheduler.")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config,"
                   " or the in-cluster service account)")
    p.add_argument("--policy", default="tiresias", help="engine (see `workbench policies`)")
    p.add_argument("--namespace", default=None,
                   help="only pods in this namespace (default: every namespace)")
    p.add_argument("--scheduler-name", default="workbench",
                   help="the schedulerName of the pods to place (default workbench)")
    p.add_argument("--metrics-port", type=int, default=9090,
                   help="port of /metrics, /healthz and /policy (0: none; default 9090)")
    p.add_argument("--metrics-address", default="0.0.0.0")
    p.add_argument("--round-interval", type=float, default=None,
                   help="seconds between periodic rounds (default: the engine's); a round also"
                        " runs as soon as a pod arrives or ends")
    p.add_argument("--speed", type=float, default=1.0,
                   help="clock speed-up, to match an emulated cluster's fast clock (default 1)")
    p.add_argument("--threads", type=int, default=16, help="concurrent API writes (default 16)")
    p.add_argument("--no-events", action="store_true", help="post no Events explaining decisions")
    p.add_argument("--until-done", action="store_true",
                   help="exit once every job seen has completed (default: run until stopped)")
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(func=run_schedule)


class SchedulerService:
    """A Controller on a K8sBackend, with the metrics endpoint and a stop switch."""

    def __init__(self, backend, policy, metrics_port: int | None = None,
                 metrics_address: str = "127.0.0.1") -> None:
        from ..control import Controller

        self.backend = backend
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

    def run(self, until_done: bool = False) -> None:
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
        self.backend.close()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def switch(self, name: str) -> str:
        from ..policies import available, make_policy

        if name not in available():
            raise ConfigError(f"unknown engine {name!r}; available: {', '.join(available())}")
        policy = make_policy(name)
        interval = getattr(self.controller.policy, "_cli_round_interval", None)
        if interval is not None:
            policy.round_interval = interval
            policy._cli_round_interval = interval
        self.controller.switch(policy)
        return name

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
                alive = not service.stop_event.is_set() and \
                    all(i.is_alive() for i in service.backend.cache.informers)
                self._send(200 if alive else 503, "ok\n" if alive else "stopped\n")
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


def make_policy_for(name: str, round_interval: float | None):
    from ..policies import available, make_policy

    if name not in available():
        raise ConfigError(f"--policy: unknown engine {name!r}; available: {', '.join(available())}")
    policy = make_policy(name)
    if round_interval is not None:
        if round_interval <= 0:
            raise ConfigError(f"--round-interval: expected > 0 seconds, got {round_interval}")
        policy.round_interval = round_interval
        policy._cli_round_interval = round_interval
    return policy


def run_schedule(args) -> int:
    from ..k8s.backend import K8sBackend, load_api_client

    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.speed <= 0:
        raise ConfigError(f"--speed: expected > 0, got {args.speed}")
    if args.threads < 1:
        raise ConfigError(f"--threads: expected >= 1, got {args.threads}")
    policy = make_policy_for(args.policy, args.round_interval)
    api_client = load_api_client(args.kubeconfig, pool_size=args.threads + 8)
    backend = K8sBackend(api_client, namespace=args.namespace, speed=args.speed,
                         threads=args.threads, events=not args.no_events,
                         serve=not args.until_done, scheduler_name=args.scheduler_name)
    port = args.metrics_port if args.metrics_port else None
    try:
        service = SchedulerService(backend, policy, port, args.metrics_address)
    except BaseException:
        backend.close()
        raise
    def _stop(*_):
        service.stop_event.set()
        backend.interrupt()
    signal.signal(signal.SIGTERM, _stop)
    log.info("scheduling pods with schedulerName=%s using %s%s", args.scheduler_name,
             policy.name, f"; metrics on :{service.port}/metrics" if service.port else "")
    try:
        service.run(until_done=args.until_done)
    finally:
        service.stop()
    done = sum(1 for j in backend.jobs.values() if j.state.value == "completed")
    print(f"stopped after {service.controller.rounds} rounds: {done} jobs completed,"
          f" {int(backend.binder.stats['binds'])} pods bound")
    return 0
