"""`workbench schedule`: run the Controller as a secondary scheduler on a Kubernetes cluster.

Pods that set `schedulerName: workbench` are placed by the chosen engine (gangs bound all or
nothing, scaling and migration by checkpoint-restart; see `workbench.k8s.backend`); every other
pod stays kube-scheduler's. An HTTP endpoint serves `/metrics` (Prometheus text format),
`/healthz`, and `/policy` (GET: the active engine; POST `?name=ENGINE`: switch engines between
rounds, losing no job). The daemon and its endpoint live in `workbench.k8s.service`; this
module parses the arguments and wires them together.

`--leader-elect` runs it as one of several replicas (as kube-scheduler's flag of that name):
only the holder of a coordination.k8s.io Lease schedules; a standby takes over when the
leader stops renewing (`workbench.k8s.leader`). A replica that loses the Lease exits 1, to
be restarted as a standby with fresh state.
"""

from __future__ import annotations

import logging
import signal

from .. import argtypes
from ..errors import ConfigError
from ..k8s.leader import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD

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
    p.add_argument("--round-interval", type=argtypes.positive, default=None,
                   help="seconds between periodic rounds (default: the engine's); a round also"
                        " runs as soon as a pod arrives or ends")
    p.add_argument("--speed", type=argtypes.positive, default=None,
                   help="clock speed-up (default: the speed the emulated nodes say, else 1)")
    p.add_argument("--threads", type=int, default=16, help="concurrent API writes (default 16)")
    p.add_argument("--no-events", action="store_true", help="post no Events explaining decisions")
    p.add_argument("--until-done", action="store_true",
                   help="exit once every job seen has completed (default: run until stopped)")
    argtypes.add_log_level(p)
    e = p.add_argument_group("leader election (several replicas, one scheduling)")
    e.add_argument("--leader-elect", action="store_true",
                   help="schedule only while holding the Lease; wait as a standby otherwise")
    e.add_argument("--leader-elect-lease-name", default="workbench-scheduler",
                   help="name of the Lease (default workbench-scheduler)")
    e.add_argument("--leader-elect-namespace", default="default",
                   help="namespace of the Lease (default: default)")
    e.add_argument("--leader-elect-lease-duration", type=float, default=LEASE_DURATION,
                   help="seconds a standby waits after the last renewal it saw before taking"
                        f" over (whole seconds; default {LEASE_DURATION:g})")
    e.add_argument("--leader-elect-renew-deadline", type=float, default=RENEW_DEADLINE,
                   help="seconds the leader keeps scheduling without a successful renewal"
                        f" (default {RENEW_DEADLINE:g})")
    e.add_argument("--leader-elect-retry-period", type=float, default=RETRY_PERIOD,
                   help=f"seconds between attempts to acquire or renew (default {RETRY_PERIOD:g})")
    p.set_defaults(func=run_schedule)


def make_policy_for(name: str, round_interval: float | None):
    from ..policies import check_engine, make_policy

    check_engine(name, "--policy")
    policy = make_policy(name)
    if round_interval is not None:
        if round_interval <= 0:
            raise ConfigError(f"--round-interval: expected > 0 seconds, got {round_interval}")
        policy.round_interval = round_interval
    return policy


def run_schedule(args) -> int:
    from ..k8s.backend import K8sBackend, load_api_client
    from ..k8s.service import SchedulerService

    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # checked before connecting: a dead API server is retried for good
    if not 0 <= args.metrics_port < 65536:
        raise ConfigError(f"--metrics-port: expected 0 (none) to 65535, got {args.metrics_port}")
    if args.threads < 1:
        raise ConfigError(f"--threads: expected >= 1, got {args.threads}")
    policy = make_policy_for(args.policy, args.round_interval)
    api_client = load_api_client(args.kubeconfig, pool_size=args.threads + 8)
    elector = _elector(args, api_client) if args.leader_elect else None
    backend = K8sBackend(api_client, namespace=args.namespace, speed=args.speed,
                         threads=args.threads, events=not args.no_events,
                         serve=not args.until_done, scheduler_name=args.scheduler_name,
                         start=elector is None)  # a standby watches nothing until it leads
    port = args.metrics_port if args.metrics_port else None
    try:
        service = SchedulerService(backend, policy, port, args.metrics_address, elector,
                                   args.round_interval)
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
    if service.lost_leadership:
        log.error("lost the lease: exiting, to come back as a standby")
        return 1
    return 0


def _elector(args, api_client):
    from ..k8s.leader import LeaderElector

    try:
        return LeaderElector(api_client, args.leader_elect_lease_name,
                             args.leader_elect_namespace,
                             lease_duration=args.leader_elect_lease_duration,
                             renew_deadline=args.leader_elect_renew_deadline,
                             retry_period=args.leader_elect_retry_period)
    except ValueError as e:
        raise ConfigError(f"--leader-elect: {e}") from None
