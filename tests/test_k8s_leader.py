"""Leader election (`workbench.k8s.leader`) and its wiring into `workbench schedule`.

Without a cluster: the election rules one attempt at a time on an in-memory Lease API with a
hand-moved clock (absent, held, expired by the observed-time rule, 409 means not won, release),
the renew deadline, the fence around the backend, the flags and the manifests.

On the local control plane (`integration`): two electors on one real Lease, sampled often,
never both lead; a leader that dies is replaced within lease duration + retry period; one that
releases, within about a retry period; a conflicting write is not a win. End to end, two
`workbench schedule --leader-elect` processes share emulated nodes; the leader is killed
(SIGKILL) mid-run; the independent `Auditor` checks that no node ever holds more GPUs than
it has, and every job completes exactly once.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from types import SimpleNamespace

import pytest
from k8s_helpers import auditor, no_overcommit, until  # noqa: F401 - fixtures

from workbench.bench.k8s_soak import scheduler_health
from workbench.k8s.leader import LeaderElector, LeadingOnly, LeaseRecord, NotLeading

# ---- an in-memory Lease API ------------------------------------------------------------------


class _Error(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"{status}")
        self.status, self.reason = status, "fake"


class FakeLeases:
    """The three calls of CoordinationV1Api the elector makes, on one Lease, with the API
    server's resourceVersion rule. `before_write` runs between a read and the write."""

    def __init__(self) -> None:
        self.lease = None
        self.version = 0
        self.lock = threading.Lock()
        self.down = False
        self.hang = 0.0  # seconds every read takes
        self.before_write = None
        self.writes: list[dict] = []

    def _object(self, body: dict):
        s = body["spec"]
        return SimpleNamespace(
            metadata=SimpleNamespace(resource_version=str(self.version)),
            spec=SimpleNamespace(holder_identity=s.get("holderIdentity"),
                                 lease_duration_seconds=s.get("leaseDurationSeconds"),
                                 acquire_time=s.get("acquireTime"), renew_time=s.get("renewTime"),
                                 lease_transitions=s.get("leaseTransitions")))

    def read_namespaced_lease(self, name, namespace, _request_timeout=None):
        if self.hang:  # as urllib3: a timeout ends the wait
            time.sleep(min(self.hang, _request_timeout or self.hang))
            if _request_timeout is not None and self.hang > _request_timeout:
                raise TimeoutError("read timed out")
        if self.down:
            raise OSError("connection refused")
        with self.lock:
            if self.lease is None:
                raise _Error(404)
            return copy.deepcopy(self.lease)

    def _write(self, body: dict, expect_version: str | None):
        if self.before_write is not None:
            hook, self.before_write = self.before_write, None
            hook()
        with self.lock:
            if expect_version != (None if self.lease is None else str(self.version)):
                raise _Error(409)
            self.version += 1
            self.lease = self._object(body)
            self.writes.append(body["spec"])
            return copy.deepcopy(self.lease)

    def create_namespaced_lease(self, namespace, body, _request_timeout=None):
        return self._write(body, None)

    def replace_namespaced_lease(self, name, namespace, body, _request_timeout=None):
        return self._write(body, body["metadata"]["resourceVersion"])


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _elector(api, identity: str, clock=time.monotonic, **kw) -> LeaderElector:
    durations = {"lease_duration": 3, "renew_deadline": 2, "retry_period": 0.5, **kw}
    e = LeaderElector(None, "sched", "ns", identity=identity, clock=clock, **durations)
    e.api = api
    return e


# ---- one attempt at a time -----------------------------------------------------------------


def test_an_absent_lease_is_created_and_renewing_keeps_its_acquisition():
    api, clock = FakeLeases(), FakeClock()
    a = _elector(api, "a", clock)
    assert a._try_acquire_or_renew(1)
    first = api.writes[-1]
    assert first["holderIdentity"] == "a" and first["leaseDurationSeconds"] == 3
    assert first["leaseTransitions"] == 0 and first["acquireTime"] == first["renewTime"]
    assert first["renewTime"].endswith("Z") and len(first["renewTime"]) == 27  # MicroTime
    time.sleep(0.002)
    assert a._try_acquire_or_renew(1)
    again = api.writes[-1]
    assert again["acquireTime"] == first["acquireTime"] and again["leaseTransitions"] == 0
    assert again["renewTime"] > first["renewTime"]
    assert a.leader == "a"


def test_a_held_lease_expires_by_the_candidates_own_observation_not_the_written_time():
    api, clock = FakeLeases(), FakeClock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert a._try_acquire_or_renew(1)
    # the holder's host clock is far behind: its renewTime looks ancient to anyone reading it
    api.lease.spec.renew_time = "2001-01-01T00:00:00.000000Z"
    assert not b._try_acquire_or_renew(1)  # first seen now: valid for 3 s from now
    clock.t += 2.9
    assert not b._try_acquire_or_renew(1)
    clock.t += 0.2
    assert b._try_acquire_or_renew(1)
    taken = api.writes[-1]
    assert taken["holderIdentity"] == "b" and taken["leaseTransitions"] == 1
    assert taken["acquireTime"] == taken["renewTime"]


def test_each_renewal_the_candidate_sees_restarts_the_lease_duration():
    api, clock = FakeLeases(), FakeClock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert a._try_acquire_or_renew(1)
    new_leaders = []
    b.on_new_leader = new_leaders.append
    for _ in range(5):
        assert not b._try_acquire_or_renew(1)
        clock.t += 2.0
        time.sleep(0.001)  # a new renewTime
        assert a._try_acquire_or_renew(1)
    assert not b._try_acquire_or_renew(1)  # 10 s after a took it, but renewed all along
    assert new_leaders == ["a"]


def test_a_conflicting_write_between_read_and_update_is_not_won():
    api, clock = FakeLeases(), FakeClock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert a._try_acquire_or_renew(1)
    clock.t += 10  # expired for b, who will read it, then lose the race to a's renewal
    api.before_write = lambda: a._try_acquire_or_renew(1)
    assert not b._try_acquire_or_renew(1)
    assert api.lease.spec.holder_identity == "a"
    # two candidates creating an absent Lease: the second create is a 409 too
    api2 = FakeLeases()
    c, d = _elector(api2, "c", clock), _elector(api2, "d", clock)
    api2.before_write = lambda: c._try_acquire_or_renew(1)
    assert not d._try_acquire_or_renew(1)
    assert api2.lease.spec.holder_identity == "c"


def test_a_released_lease_is_taken_at_the_next_attempt():
    api, clock = FakeLeases(), FakeClock()
    a, b = _elector(api, "a", clock), _elector(api, "b", clock)
    assert a._try_acquire_or_renew(1)
    assert not b._try_acquire_or_renew(1)
    assert a.release()
    assert "holderIdentity" not in api.writes[-1] and api.writes[-1]["leaseTransitions"] == 0
    assert b._try_acquire_or_renew(1)  # no wait for the lease duration
    assert api.writes[-1]["leaseTransitions"] == 1
    assert not a.release()  # not ours any more


def test_durations_must_nest():
    with pytest.raises(ValueError, match="lease duration > renew deadline > retry period"):
        _elector(FakeLeases(), "a", lease_duration=3, renew_deadline=3)
    with pytest.raises(ValueError, match="whole seconds"):
        _elector(FakeLeases(), "a", lease_duration=0.8, renew_deadline=0.5, retry_period=0.1)


def test_lease_record_reads_server_objects_and_empty_specs():
    import datetime as dt

    from kubernetes import client

    t = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    lease = client.V1Lease(spec=client.V1LeaseSpec(holder_identity="x", lease_duration_seconds=15,
                                                   acquire_time=t, renew_time=t,
                                                   lease_transitions=4))
    assert LeaseRecord.of(lease) == LeaseRecord("x", 15.0, "2026-01-02T03:04:05.000000Z",
                                                "2026-01-02T03:04:05.000000Z", 4)
    assert LeaseRecord.of(client.V1Lease()) == LeaseRecord()


# ---- running: threads and the clock ----------------------------------------------------------


@contextlib.contextmanager
def _running(*electors: LeaderElector):
    for e in electors:
        e.start()
    try:
        yield electors
    finally:
        for e in electors:
            e.stop(release=False, timeout=5)


def _sample_leaders(electors, seconds: float, every: float = 0.01) -> list[int]:
    counts = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        counts.append(sum(e.is_leader for e in electors))
        time.sleep(every)
    return counts


def test_two_electors_on_a_fake_lease_never_both_lead_and_one_takes_over():
    api = FakeLeases()
    events = []
    a = _elector(api, "a", on_started_leading=lambda: events.append("a+"),
                 on_stopped_leading=lambda: events.append("a-"))
    b = _elector(api, "b", on_started_leading=lambda: events.append("b+"),
                 on_stopped_leading=lambda: events.append("b-"))
    with _running(a, b):
        until("a leader", lambda: a.is_leader or b.is_leader, timeout=5, every=0.01)
        assert max(_sample_leaders((a, b), 1.5)) == 1
        leader, standby = (a, b) if a.is_leader else (b, a)
        assert standby.leader == leader.identity
        leader.stop(release=False)  # dies: no release
        died = time.monotonic()
        counts = _sample_leaders((a, b), 0.2)
        until("the standby to lead", lambda: standby.is_leader, timeout=3 + 0.5 * 1.2 + 2,
              every=0.01)
        assert time.monotonic() - died >= 2.5  # it waited for the lease to expire
        assert max(counts) <= 1 and not leader.is_leader
    assert events[:1] in (["a+"], ["b+"]) and len(events) >= 3


def test_a_leader_whose_renewals_hang_stops_by_the_clock_and_stays_stopped():
    api = FakeLeases()
    stopped = threading.Event()
    a = _elector(api, "a", on_stopped_leading=stopped.set)
    with _running(a):
        until("leading", lambda: a.is_leader, timeout=5, every=0.01)
        api.hang = 3.0  # longer than the renew deadline (2 s)
        led_until = a._last_renew + a.renew_deadline
        until("not leading", lambda: not a.is_leader, timeout=4, every=0.01)
        assert time.monotonic() >= led_until - 0.05
        assert stopped.wait(4)  # the election thread notices too
        api.hang = 0.0
        assert max(_sample_leaders((a,), 0.6)) == 0  # and does not come back
        assert not a.running


def test_leading_only_lets_nothing_through_once_leadership_is_gone():
    calls = []
    backend = SimpleNamespace(observe=lambda: calls.append("observe"),
                              advance=lambda t: calls.append("advance"),
                              apply=lambda a: calls.append("apply") or [], now=5.0)
    leading = [True]
    fenced = LeadingOnly(backend, lambda: leading[0])
    fenced.observe()
    fenced.advance(1.0)
    fenced.apply([])
    assert fenced.now == 5.0 and calls == ["observe", "advance", "apply"]
    leading[0] = False
    for call in (fenced.observe, lambda: fenced.advance(2.0), lambda: fenced.apply([])):
        with pytest.raises(NotLeading):
            call()
    assert fenced.now == 5.0 and len(calls) == 3


def test_the_service_waits_as_a_standby_and_reports_which_replica_leads():
    from workbench.k8s.service import SchedulerService
    from workbench.policies import make_policy

    api = FakeLeases()
    holder = _elector(api, "other")
    assert holder._try_acquire_or_renew(1)
    started = []
    backend = SimpleNamespace(start=lambda: started.append(1), interrupt=lambda: None,
                              close=lambda: None, done=lambda: False, stats=dict,
                              node_failures=[], cache=SimpleNamespace(informers=[]))
    elector = _elector(api, "me")
    service = SchedulerService(backend, make_policy("fifo"), elector=elector)
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    try:
        until("the standby to see the leader", lambda: service.leader_identity == "other",
              timeout=5, every=0.01)
        assert not service.is_leader and not started
        assert service.health() == (True, "ok: standby (leader: other)\n")
        assert 'workbench_leader{identity="me"} 0' in service.metrics()
    finally:
        service.stop()
        runner.join(5)
    assert not runner.is_alive() and not started and not service.lost_leadership


class _IdleBackend(SimpleNamespace):
    """Just what SchedulerService calls on a backend, with `advance` waiting for `interrupt`."""

    def __init__(self) -> None:
        super().__init__(started=0, advanced=[], node_failures=[],
                         cache=SimpleNamespace(informers=[]), woken=threading.Event())

    def start(self) -> None:
        self.started += 1

    def advance(self, until: float) -> None:
        self.advanced.append(time.monotonic())
        self.woken.wait(0.05)

    def interrupt(self) -> None:
        self.woken.set()

    def close(self) -> None:
        pass

    def done(self) -> bool:
        return False

    def stats(self) -> dict:
        return {}


def test_a_service_that_loses_the_lease_stops_scheduling_by_the_renew_deadline():
    from workbench.k8s.service import SchedulerService
    from workbench.policies import make_policy

    api, backend, stopped = FakeLeases(), _IdleBackend(), []
    elector = _elector(api, "me", on_stopped_leading=lambda: stopped.append(time.monotonic()))
    service = SchedulerService(backend, make_policy("fifo"), elector=elector)
    service.controller.step = lambda: service.controller.backend.advance(0.0)  # a round's wait
    runner = threading.Thread(target=service.run, daemon=True)
    runner.start()
    try:
        until("scheduling", lambda: service.is_leader and backend.advanced, timeout=5)
        assert backend.started == 1 and service.health()[1] == "ok: leader\n"
        api.hang = 5.0  # renewals hang past the renew deadline
        deadline = elector._last_renew + elector.renew_deadline
        runner.join(elector.renew_deadline + 2)
        assert not runner.is_alive() and service.lost_leadership
        assert max(backend.advanced) < deadline  # nothing went through the fence after it
        until("the election thread to notice", lambda: stopped, timeout=2)
        assert backend.woken.is_set()  # the callback chained to interrupt()
        assert stopped[0] - deadline < 0.5  # the hung renewal timed out at the deadline
    finally:
        service.stop()


def test_a_service_without_election_is_always_the_leader():
    from workbench.k8s.service import SchedulerService
    from workbench.policies import make_policy

    backend = SimpleNamespace(stats=dict, node_failures=[])
    service = SchedulerService(backend, make_policy("fifo"))
    assert service.is_leader and service.leader_identity is None
    assert "\nworkbench_leader 1\n" in service.metrics()


# ---- flags and manifests -------------------------------------------------------------------


def test_schedule_rejects_durations_that_do_not_nest(tmp_path):
    import subprocess
    import sys

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
                          "    server: https://127.0.0.1:1\ncontexts:\n- name: c\n  context:\n"
                          "    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n"
                          "  user:\n    token: t\n")
    out = subprocess.run([sys.executable, "-m", "workbench", "schedule", "--kubeconfig",
                          str(kubeconfig), "--leader-elect", "--leader-elect-renew-deadline",
                          "20"], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "--leader-elect: expected lease duration > renew deadline" \
        in out.stderr and "Traceback" not in out.stderr


def test_the_deployment_runs_two_electing_replicas_with_lease_rights():
    from workbench.k8s.manifests import scheduler_manifests

    objects = scheduler_manifests("wb-sys", name="wb")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-elect" in args
    assert args[args.index("--leader-elect-namespace") + 1] == "wb-sys"
    assert args[args.index("--leader-elect-lease-name") + 1] == "wb"
    role = next(o for o in objects if o["kind"] == "Role" and o["metadata"]["namespace"] == "wb-sys")
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update"]}]
    binding = next(o for o in objects if o["kind"] == "RoleBinding"
                   and o["roleRef"]["name"] == role["metadata"]["name"])
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "wb",
                                    "namespace": "wb-sys"}]


# ---- on the local control plane --------------------------------------------------------------

SPEED = 50.0
WORK_S = 300.0  # emulated seconds of training per job: 6 s of real time at SPEED
LEASE, RENEW, RETRY = 3, 2.0, 0.5


@pytest.fixture(scope="module")
def cluster():
    from k8s_helpers import small_cluster

    with small_cluster(SPEED) as c:
        yield c


@pytest.fixture
def namespace(cluster):
    from k8s_helpers import fresh_namespace

    with fresh_namespace(cluster.rest, "le") as ns:
        yield ns


def _real(cluster, namespace: str, identity: str, **kw) -> LeaderElector:
    """An elector on the real Lease `namespace/sched`, recording when it started leading."""
    e = LeaderElector(cluster.api_client, "sched", namespace, identity=identity,
                      lease_duration=LEASE, renew_deadline=RENEW, retry_period=RETRY, **kw)
    e.led_at = []
    e.on_started_leading = lambda: e.led_at.append(time.monotonic())
    return e


@contextlib.contextmanager
def _leader_and_standby(cluster, namespace: str):
    """Two running electors on the real Lease, once one of them leads: (leader, standby)."""
    a, b = _real(cluster, namespace, "a"), _real(cluster, namespace, "b")
    with _running(a, b):
        until("a leader", lambda: a.is_leader or b.is_leader, timeout=10, every=0.01)
        yield (a, b) if a.is_leader else (b, a)


def _lease(cluster, namespace: str) -> dict:
    return cluster.rest.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/sched")


@pytest.mark.integration
def test_two_electors_on_a_real_lease_never_both_lead(cluster, namespace):
    with _leader_and_standby(cluster, namespace) as (leader, standby):
        counts = _sample_leaders((leader, standby), 6.0, every=0.005)  # two lease durations
        assert max(counts) == 1, "two leaders at once"
        assert counts.count(1) >= 0.95 * len(counts), "the leader lost the lease while alive"
        assert leader.is_leader
        spec = _lease(cluster, namespace)["spec"]
        assert spec["holderIdentity"] == leader.identity and spec["leaseDurationSeconds"] == LEASE
        assert spec["leaseTransitions"] == 0 and spec["renewTime"] >= spec["acquireTime"]
        assert standby.leader == leader.identity


@pytest.mark.integration
def test_a_dead_leaders_lease_is_taken_after_it_expires(cluster, namespace):
    with _leader_and_standby(cluster, namespace) as (dead, standby):
        time.sleep(1.2)  # a few renewals
        dead.stop(release=False)  # dies: stops renewing, releases nothing
        died = time.monotonic()
        last_renewal = dead._last_renew
        counts = _sample_leaders((dead, standby), 1.0)
        until("the standby to lead", lambda: standby.is_leader, timeout=LEASE + RETRY * 1.2 + 5,
              every=0.01)
        assert max(counts) <= 1 and not dead.is_leader
        # not before the lease expired (counted from when the standby saw the last renewal)
        assert standby.led_at[0] - last_renewal >= LEASE
        assert standby.led_at[0] - died <= LEASE + RETRY * 1.2 + 2.0
        spec = _lease(cluster, namespace)["spec"]
        assert spec["holderIdentity"] == standby.identity and spec["leaseTransitions"] == 1


@pytest.mark.integration
def test_a_released_lease_is_taken_within_about_a_retry_period(cluster, namespace):
    with _leader_and_standby(cluster, namespace) as (leader, standby):
        until("the standby to see it", lambda: standby.leader == leader.identity, timeout=5)
        leader.stop(release=True)
        released = time.monotonic()
        assert not leader.is_leader
        until("the standby to lead", lambda: standby.is_leader, timeout=RETRY * 1.2 + 3,
              every=0.01)
        assert standby.led_at[0] - released <= RETRY * 1.2 + 1.0
        spec = _lease(cluster, namespace)["spec"]
        assert spec["holderIdentity"] == standby.identity and spec["leaseTransitions"] == 1


@pytest.mark.integration
def test_a_conflicting_write_on_the_real_lease_is_not_won(cluster, namespace):
    clock = FakeClock()
    a = _real(cluster, namespace, "a")
    b = _real(cluster, namespace, "b", clock=clock)
    # both create the absent Lease: a's create lands between b's read (404) and b's create
    create = b.api.create_namespaced_lease
    b.api.create_namespaced_lease = lambda *args, **kw: (a._try_acquire_or_renew(2),
                                                         create(*args, **kw))[1]
    assert not b._try_acquire_or_renew(2)
    assert _lease(cluster, namespace)["spec"]["holderIdentity"] == "a"
    del b.api.create_namespaced_lease
    # b sees a's lease expire on its own clock; a renews between b's read and b's update
    assert not b._try_acquire_or_renew(2)
    clock.t += LEASE + 1
    replace = b.api.replace_namespaced_lease
    b.api.replace_namespaced_lease = lambda *args, **kw: (a._try_acquire_or_renew(2),
                                                          replace(*args, **kw))[1]
    assert not b._try_acquire_or_renew(2)
    del b.api.replace_namespaced_lease
    spec = _lease(cluster, namespace)["spec"]
    assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 0
    # without the race, the lease is b's once it has seen it unchanged for LEASE seconds
    assert not b._try_acquire_or_renew(2)
    clock.t += LEASE + 1
    assert b._try_acquire_or_renew(2)
    spec = _lease(cluster, namespace)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1


# ---- end to end: two `workbench schedule --leader-elect`, the leader killed ---------------------


def _schedule_process(cluster, namespace: str, port: int, log_path):
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "workbench", "schedule", "--kubeconfig", str(cluster.kubeconfig),
         "--namespace", namespace, "--policy", "tiresias", "--speed", str(SPEED),
         "--metrics-port", str(port), "--metrics-address", "127.0.0.1", "--log-level", "INFO",
         "--leader-elect", "--leader-elect-namespace", namespace,
         "--leader-elect-lease-duration", str(LEASE), "--leader-elect-renew-deadline",
         str(RENEW), "--leader-elect-retry-period", str(RETRY)],
        stdout=subprocess.PIPE, stderr=open(log_path, "w"), text=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _training_jobs(t0: float, n: int) -> list:
    from workbench.perf import default_perf
    from workbench.traces import synthetic_workload

    perf = default_perf()
    out = []
    for i, j in enumerate(synthetic_workload(n, arrival_rate=1 / 30, max_workers=4, seed=14,
                                             ps_jobs=0.0, gpus_per_node=4)):
        rate = perf.iteration_rate(j, {"a": j.initial_workers}, {})
        out.append(j.with_(name=f"le-{i}", arrival=t0, total_work=rate * WORK_S, deadline=None))
    return out


@pytest.mark.integration
def test_killing_the_leading_scheduler_loses_no_job_and_never_overcommits(cluster, namespace,
                                                                        tmp_path,
                                                                        auditor):  # noqa: F811
    import signal

    from workbench.k8s import labels
    from workbench.k8s.manifests import training_jobs

    rest = cluster.rest
    specs = _training_jobs(time.time(), 16)
    for spec in specs:
        for manifest in training_jobs(spec, namespace):
            rest.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", manifest)
    ports = [_free_port(), _free_port()]
    procs = [_schedule_process(cluster, namespace, p, tmp_path / f"sched-{i}.log")
             for i, p in enumerate(ports)]
    try:
        def one_leader():
            states = [scheduler_health(p) for p in ports]
            leaders = [i for i, s in enumerate(states) if s.startswith("ok: leader")]
            standbys = [i for i, s in enumerate(states) if s.startswith("ok: standby")]
            return leaders if len(leaders) == 1 and len(standbys) == 1 else None
        leader = until("one leader and one standby", one_leader, timeout=60, every=0.1)[0]
        standby = 1 - leader
        # kill it mid-run: some pods bound, some jobs still waiting for GPUs
        until("the leader's first binds", lambda: auditor.binds_in(namespace) >= 4, timeout=60,
              every=0.05)
        pending = [p for p in rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
                   if not p["spec"].get("nodeName")]
        assert pending, "every job was placed before the kill: nothing left for the standby"
        procs[leader].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        procs[leader].wait(10)
        binds_at_kill = auditor.binds_in(namespace)
        until("the standby to lead",
              lambda: scheduler_health(ports[standby]).startswith("ok: leader"),
              timeout=LEASE + RETRY * 1.2 + 20, every=0.05)
        took_over = time.monotonic() - killed

        def complete():
            jobs = rest.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
            done = [j for j in jobs if any(c["type"] == "Complete" and c["status"] == "True"
                                           for c in j.get("status", {}).get("conditions", []))]
            return len(done) == len(specs)
        until("every job complete", complete, timeout=240, every=0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        outs = [p.communicate(timeout=30)[0] for p in procs]
    logs = {i: (tmp_path / f"sched-{i}.log").read_text() for i in range(2)}
    assert procs[standby].returncode == 0, logs[standby][-3000:]
    assert "lost the lease" not in logs[standby], logs[standby][-3000:]
    assert auditor.binds_in(namespace) > binds_at_kill, "the new leader bound nothing"
    assert took_over <= LEASE + RETRY * 1.2 + 10
    capacity = {n.name: n.gpus for n in cluster.node_specs}
    most = auditor.most_gpus()  # (and the `no_overcommit` fixture checks every resource)
    assert most and all(g <= capacity[n] for n, g in most.items()), most
    # every job ran to completion exactly once: no pod failed, and each Job's controller
    # counted a succeeded pod. (Its own count, kept once Complete: the pod itself may be gone,
    # deleted by a restart that raced the end, as in CI on 2026-11-25.)
    pods = rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    assert not [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Failed"]
    jobs = rest.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    assert not [j["metadata"]["name"] for j in jobs if j.get("status", {}).get("failed")]
    succeeded = {j["metadata"]["labels"][labels.JOB] for j in jobs
                 if j.get("status", {}).get("succeeded")}
    assert succeeded == {s.name for s in specs}, outs


@pytest.mark.integration
def test_the_manifests_let_the_scheduler_elect_and_no_more(cluster, namespace):
    """The ServiceAccount and its Role on leases from `workbench k8s manifests`, applied in a
    namespace: its token acquires, renews and releases the Lease there, and may not delete
    it or touch Leases elsewhere."""
    import json

    from workbench.k8s.manifests import scheduler_manifests
    from workbench.k8s.rest import client_from_kubeconfig

    rest, name = cluster.rest, f"wb-{namespace}"
    paths = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings"}
    for obj in scheduler_manifests(namespace, name=name):
        if obj["kind"] in paths and obj["metadata"].get("namespace") == namespace and \
                obj["metadata"]["name"] in (name, f"{name}-leader"):
            group = "/api/v1" if obj["kind"] == "ServiceAccount" else \
                "/apis/rbac.authorization.k8s.io/v1"
            rest.post(f"{group}/namespaces/{namespace}/{paths[obj['kind']]}", obj)
    token = rest.post(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                       "spec": {"expirationSeconds": 600}})["status"]["token"]
    config = json.loads(cluster.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    path = cluster.directory / f"{namespace}-leader.kubeconfig"
    path.write_text(json.dumps(config))
    api = client_from_kubeconfig(path)

    def elector(ns: str) -> LeaderElector:
        return LeaderElector(api, name, ns, identity="sa", lease_duration=LEASE,
                             renew_deadline=RENEW, retry_period=RETRY)
    e = elector(namespace)
    until("the Role to apply", lambda: e._try_acquire_or_renew(2), timeout=10)  # create
    assert e._try_acquire_or_renew(2)  # get + update
    assert e.release()
    with pytest.raises(Exception) as denied:
        e.api.delete_namespaced_lease(name, namespace)
    assert getattr(denied.value, "status", None) == 403
    assert not elector("default")._try_acquire_or_renew(2)  # no rights outside its namespace
    with pytest.raises(Exception) as denied:
        e.api.read_namespaced_lease(name, "default")
    assert getattr(denied.value, "status", None) == 403
