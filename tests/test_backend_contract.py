"""The backend contract: the simulator declares every member callers use, only it is
Forkable, and both backends refuse an action through the one rule book (`refusal`)."""

from __future__ import annotations

import pytest

from workbench.backend import Backend, Forkable, refusal
from workbench.clusters import make_cluster
from workbench.control import Controller
from workbench.k8s.backend import K8sBackend
from workbench.model import JobSpec, JobState, JobStatus, Migrate, Place, Scale, Suspend
from workbench.perf import default_perf
from workbench.policies import make_policy
from workbench.sim import SimBackend

PERF = default_perf()


def spec(name="a", workers=2, **kw):
    return JobSpec(name, "cifar10", 0.0, PERF.total_iterations("cifar10", 512) / 50, 512,
                   initial_workers=workers, min_workers=1, max_workers=4, **kw)


def test_the_simulator_has_every_member_of_the_contract():
    sim = SimBackend(make_cluster(1, 4), [spec()])
    members = [m for m in dir(Backend) if not m.startswith("_")] + list(Backend.__annotations__)
    missing = [m for m in members if not hasattr(sim, m)]
    assert not missing
    assert isinstance(sim, Forkable)
    assert sim.clock.origin == 0.0 and sim.clock.speed is None


def test_the_kubernetes_backend_declares_every_method_and_cannot_fork():
    methods = [m for m in dir(Backend) if not m.startswith("_")]
    assert not [m for m in methods if not hasattr(K8sBackend, m)]
    assert not hasattr(K8sBackend, "fork") and not hasattr(K8sBackend, "gpu_holders")


@pytest.mark.parametrize("state, action, words", [
    (JobState.PENDING, Suspend("a", "r"), "a: not placed, nothing to suspend"),
    (JobState.RUNNING, Place("a", "r", {"n": 2}), "a: already running"),
    (JobState.HOLDING, Place("a", "r", {"n": 2}), "holding a partial placement"),
    (JobState.PENDING, Place("a", "r", {"n": 3}, partial=True), "a: more pods than the job has"),
    (JobState.PENDING, Place("a", "r", {"n": 9}), "a: 9 workers outside [1, 4]"),
    (JobState.PENDING, Scale("a", "r", {"n": 2}), "a: not running, cannot scale"),
    (JobState.RUNNING, Migrate("a", "r", {"m": 3}), "a migration keeps the task counts"),
])
def test_refusal_names_the_job_and_the_rule(state, action, words):
    job = JobStatus(spec=spec(), state=state, workers={"n": 2} if state.placed else {})
    assert words in refusal(job, action)


def test_refusal_lets_valid_actions_through_and_binding_blocks_a_second_place():
    job = JobStatus(spec=spec(), state=JobState.PENDING)
    assert refusal(job, Place("a", "r", {"n": 2})) is None
    assert refusal(job, Place("a", "r", {"n": 2}), binding=True) == "a: already pending"
    running = JobStatus(spec=spec(), state=JobState.RUNNING, workers={"n": 2})
    assert refusal(running, Scale("a", "r", {"n": 3})) is None
    assert refusal(running, Migrate("a", "r", {"m": 2})) is None


def test_the_simulator_refuses_in_the_rule_books_words():
    b = SimBackend(make_cluster(1, 4), [spec()])
    b.advance(0)
    (o,) = b.apply([Suspend("a", "r")])
    assert not o.applied and o.detail == refusal(b.jobs["a"], Suspend("a", "r"))


def test_switch_now_is_public_and_pending_until_taken():
    b = SimBackend(make_cluster(1, 4), [spec()])
    c = Controller(b, make_policy("fifo"))
    new = make_policy("drf")
    c.switch(new)
    assert c.pending_switch is new and c.policy.name == "fifo"
    c.switch_now()
    assert c.pending_switch is None and c.policy is new
    assert c.recorder.switches == [(b.now, "fifo", "drf")]


@pytest.mark.parametrize("action, words", [
    (Suspend("a", "r"), "a: finishing; not suspended"),
    (Scale("a", "r", {"n": 3}), "a: finishing; not scaled"),
    (Migrate("a", "r", {"m": 2}), "a: finishing; not migrated"),
])
def test_the_kubernetes_backend_stops_no_job_at_its_end(action, words):
    # Deleting a finishing job's pods would race their Succeeded (and lose their logs).
    from workbench.k8s.actions import Actuator, Refused
    from workbench.k8s.reconcile import TrackedJob
    st = JobStatus(spec=spec(), state=JobState.RUNNING, workers={"n": 2})
    ending = TrackedJob(("ns", "a"), st)
    st.progress = st.spec.total_work * 0.9995
    with pytest.raises(Refused, match=words):
        Actuator._refuse_if_finishing(ending, action)
    succeeded = TrackedJob(("ns", "a"), JobStatus(spec=spec(), state=JobState.RUNNING,
                                                   workers={"n": 2}),
                           bound_pods=[{"status": {"phase": "Succeeded"}}, {"status": {}}])
    with pytest.raises(Refused, match=words):
        Actuator._refuse_if_finishing(succeeded, action)
    midway = TrackedJob(("ns", "a"), JobStatus(spec=spec(), state=JobState.RUNNING,
                                                workers={"n": 2}, progress=10.0))
    Actuator._refuse_if_finishing(midway, action)  # not at its end: goes through


def test_a_planned_placement_outlives_a_pod_deleted_under_its_bind():
    # After a Scale the job's Job may make pods for the old count and trim them when it sees
    # the new one; a bind can reach a trimmed pod (404). That pod is gone, not the placement:
    # rolling the gang back sent the job to waiting and the engine placed it again, an extra
    # restart the simulator never makes.
    from workbench.k8s.actions import Actuator, Gang
    from workbench.k8s.binder import BindResult
    from workbench.k8s.reconcile import JobBook, TrackedJob
    st = JobStatus(spec=spec(), state=JobState.RESTARTING, workers={"n": 2}, target_workers=2)
    job = TrackedJob(("ns", "a"), st, plan=({"n": 2}, {}))
    book = JobBook()
    actuator = Actuator(book, None, None, None, plan_timeout=30.0)  # a 404 calls none of them
    kept, gone = ({"metadata": {"uid": uid, "name": f"a-{uid}"}, "spec": {"nodeName": None}}
                  for uid in ("kept", "gone"))
    actuator._bind_failed(Gang(job, Place("a", "r"), [(kept, "n", None), (gone, "n", None)],
                               None, "", [BindResult(kept, "n", True),
                                          BindResult(gone, "n", False, "not found", 404)]))
    assert job.plan == ({"n": 2}, {}) and st.state is JobState.RESTARTING
    assert st.workers == {"n": 2}
    assert [p["metadata"]["uid"] for p in job.bound_pods] == ["kept"]
    assert "kept" in book.assumed
