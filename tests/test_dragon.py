"""DRAGON: gangs with task dependencies, locality, load-aware scaling; kube-default's deadlock."""

from __future__ import annotations

from workbench.clusters import make_cluster
from workbench.control import Controller
from workbench.experiment import run_policy
from workbench.model import JobKind, JobSpec, JobState, Place, Resources
from workbench.placement.ledger import Ledger
from workbench.policies import make_policy
from workbench.policies.dragon import locality_place
from workbench.sim import SimBackend
from workbench.traces import synthetic_workload

G1 = Resources(cpu=4, mem=16, gpu=1)
G2 = Resources(cpu=8, mem=32, gpu=2)


def two_big_jobs() -> list[JobSpec]:
    """A small job fragments a 2 x 4-GPU cluster; then two big jobs arrive together.

    Pod by pod, big-a (3 x 2-GPU workers) gets 2 workers and big-b (5 x 1-GPU) 2; when the
    small job ends big-b takes the 2 freed single GPUs and both hold 4 GPUs, waiting forever.
    """
    return [
        JobSpec("small", "cifar10", 0.0, 2000, 256, 2, 2, 2, worker_demand=G1),
        JobSpec("big-a", "cifar10", 1.0, 20000, 512, 3, 3, 3, worker_demand=G2),
        JobSpec("big-b", "cifar10", 2.0, 20000, 512, 5, 5, 5, worker_demand=G1),
    ]


def test_dragon_avoids_the_deadlock_kube_default_hits():
    nodes = make_cluster(2, 4, 48, 192)
    kube = run_policy(nodes, two_big_jobs(), "kube-default")
    assert sorted(kube.controller.stalled) == ["big-a", "big-b"]
    assert kube.metrics["completed"] == 1
    dragon = run_policy(nodes, two_big_jobs(), "dragon")
    assert dragon.controller.stalled == []
    assert dragon.metrics["completed"] == 3


def test_dragon_never_starts_a_partial_gang():
    jobs = synthetic_workload(24, arrival_rate=1 / 60, ps_jobs=True, deadline_factor=None, seed=3)
    jobs = [j.with_(min_workers=max(1, j.initial_workers // 2)) for j in jobs]
    backend = SimBackend(make_cluster(3, 4, 48, 192), jobs)
    controller = Controller(backend, make_policy("dragon"))
    while controller.step() is not None:
        assert not any(j.state is JobState.HOLDING for j in backend.active.values())
    specs = {j.name: j for j in jobs}
    places = [d for d in controller.recorder.decisions if d.action == "Place" and d.applied]
    assert places
    for d in places:
        job = backend.jobs[d.job]
        assert job.spec.num_ps >= 1
        assert "gang started" in d.reason
    for d in controller.recorder.decisions:
        if d.action == "Scale" and d.applied:
            assert "PS kept" in d.reason or "scaled up" in d.reason
    assert all(backend.jobs[n].state is JobState.COMPLETED for n in specs)


def _state_with(nodes, running: list[tuple[JobSpec, dict, dict]], waiting: list[JobSpec]):
    backend = SimBackend(nodes, [s for s, _, _ in running] + waiting)
    backend.advance(0.0)
    backend.apply([Place(s.name, "test", w, p) for s, w, p in running])
    backend.advance(31.0)
    return backend


def test_locality_puts_a_fitting_job_on_one_node():
    nodes = make_cluster(4, 4, 48, 192)
    other = JobSpec("other", "cifar10", 0.0, 1e6, 256, 3, 3, 3, worker_demand=G1)
    job = JobSpec("ps-job", "resnet-50", 0.0, 1e5, 32, 3, 3, 3, num_ps=1, kind=JobKind.PS,
                  worker_demand=G1)
    # node-00 and node-01 partly used, node-02 and node-03 free: the job fits whole on one node.
    backend = _state_with(nodes, [(other, {"node-00": 2, "node-01": 1}, {})], [job])
    state = backend.observe()
    plan = locality_place(Ledger(state), state.jobs["ps-job"], 3, 3, state.racks)
    workers, ps = plan
    assert len(set(workers) | set(ps)) == 1
    assert workers == {"node-01": 3} and ps == {"node-01": 1}  # the tightest node that holds it all
    # Too big for one node: fewest nodes, starting from the roomiest, PS with the workers.
    big = JobSpec("big", "resnet-50", 0.0, 1e5, 32, 6, 6, 6, num_ps=1, kind=JobKind.PS,
                  worker_demand=G1)
    backend = _state_with(nodes, [(other, {"node-00": 2, "node-01": 1}, {})], [big])
    state = backend.observe()
    workers, ps = locality_place(Ledger(state), state.jobs["big"], 6, 6, state.racks)
    assert len(workers) == 2 and set(workers) <= {"node-02", "node-03"}
    assert set(ps) <= set(workers)


def test_scales_down_toward_min_to_admit_a_waiting_job():
    nodes = make_cluster(1, 4, 48, 192)
    elastic = JobSpec("elastic", "resnet-50", 0.0, 1e6, 32, 4, 1, 4, num_ps=1, kind=JobKind.PS,
                      worker_demand=G1)
    late = JobSpec("late", "resnet-50", 100.0, 2e4, 32, 2, 2, 2, num_ps=1, kind=JobKind.PS,
                   worker_demand=G1)
    backend = SimBackend(nodes, [elastic, late])
    controller = Controller(backend, make_policy("dragon"))
    controller.run(until=400.0)
    decisions = controller.recorder.decisions
    scale = [d for d in decisions if d.action == "Scale" and d.job == "elastic"]
    assert scale and "to admit late" in scale[0].reason
    assert scale[0].time >= 100.0 + 30.0  # DRAGON waits 30 s before scaling anyone down
    start = [d for d in decisions if d.action == "Place" and d.job == "late" and d.applied]
    assert start and start[0].time == scale[0].time
    job = backend.jobs["elastic"]
    assert job.spec.min_workers <= job.num_workers == 2
    assert job.num_ps == 1  # the PS is never scaled away


def test_scales_up_when_idle():
    nodes = make_cluster(1, 4, 48, 192)
    job = JobSpec("grow", "cifar10", 0.0, 5e5, 512, 1, 1, 4, worker_demand=G1)
    backend = SimBackend(nodes, [job])
    policy = make_policy("dragon")
    controller = Controller(backend, policy)
    controller.run(until=300.0)
    ups = [d for d in controller.recorder.decisions if d.action == "Scale"]
    assert ups and ups[0].time >= 60.0 and "scaled up" in ups[0].reason
    assert backend.jobs["grow"].num_workers > 1
    assert policy.engine_view()["scale_ups"] >= 1


def test_scale_actions_keep_ps_placement():
    nodes = make_cluster(1, 4, 48, 192)
    elastic = JobSpec("elastic", "resnet-50", 0.0, 1e6, 32, 4, 1, 4, num_ps=1, kind=JobKind.PS,
                      worker_demand=G1)
    late = JobSpec("late", "resnet-50", 100.0, 2e4, 32, 2, 2, 2, num_ps=1, kind=JobKind.PS,
                   worker_demand=G1)
    backend = SimBackend(nodes, [elastic, late])
    policy = make_policy("dragon")
    state_ps = None
    controller = Controller(backend, policy)
    while backend.now < 400 and controller.step() is not None:
        job = backend.jobs.get("elastic")
        if job is not None and job.ps:
            state_ps = state_ps or dict(job.ps)
            assert job.ps == state_ps
    assert policy.engine_view()["scale_downs"] >= 1


def test_gangs_view_follows_placement_changes_and_checks_each_arrival():
    """The teaching view's rows are kept across rounds only while a job's placement is the
    same, and a job that can never run is rejected even among jobs already found fine."""
    nodes = make_cluster(1, 4, 48, 192)
    elastic = JobSpec("elastic", "resnet-50", 0.0, 1e6, 32, 4, 1, 4, num_ps=1, kind=JobKind.PS,
                      worker_demand=G1)
    late = JobSpec("late", "resnet-50", 100.0, 2e4, 32, 2, 2, 2, num_ps=1, kind=JobKind.PS,
                   worker_demand=G1)
    huge = JobSpec("huge", "resnet-50", 120.0, 2e4, 32, 8, 8, 8, worker_demand=G1)
    backend = SimBackend(nodes, [elastic, late, huge])
    policy = make_policy("dragon")
    controller = Controller(backend, policy)
    controller.run(until=60.0)
    assert policy.gangs["elastic"]["workers"] == {"node-00": 4}
    controller.run(until=400.0)
    assert policy.gangs["elastic"]["workers"] == {"node-00": 2}  # scaled down for late
    assert policy.gangs["late"]["workers"] == {"node-00": 2}
    rejected = [d for d in controller.recorder.decisions if d.action == "Reject"]
    assert [d.job for d in rejected] == ["huge"]
