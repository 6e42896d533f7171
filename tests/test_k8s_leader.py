"""Leader election (`workbench.k8s.leader`) and its wiring into `workbench schedule`.

Without a cluster: the election rules one attempt at a time on an in-memory Lease API with a
hand-moved clock (absent, held, expired by the observed-time rule, 409 means not won, release),
the renew deadline, the fence around the backend, the flags and the manifests.

On the local control plane (`integration`): two electors on one real Lease, sampled often,
never both lead; a leader that dies is replaced within lease duration + retry period; one that
releases, within about a retry period; a conflicting write is not a win. End to end, two
`workbench schedule --leader-elect` processes share emulated nodes; the leader is killed
(SIGKILL) mid-run; an independent watch of pods checks that no node ever holds more GPUs than
it has, and every job completes exactly once.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from types import SimpleNamespace

import pytest
from k8s_helpers import until

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
        if self.hang:
            time.sleep(self.hang)
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
        assert 'workbench_leader{identity="me",holder="other"} 0' in service.metrics()
    finally:
        service.stop()
        runner.join(5)
    assert not runner.is_alive() and not started and not service.lost_leadership


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
