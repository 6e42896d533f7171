"""DRAGON's setting (`dragon-paper`): the TFJob shapes of its controller, the tf-operator
pod-by-pod start of the default scheduler (partial gangs, deadlock), and a seeded run
reproducing the direction of the paper's claims; the simulator's invariants with the
mechanism on."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.clusters import make_cluster
from workbench.control import Controller
from workbench.experiment import run_policy
from workbench.model import JobKind, JobSpec, JobState, Resources
from workbench.perf import default_perf
from workbench.policies import make_policy
from workbench.scenarios import get, run_scenario
from workbench.scenarios import dragon_paper as dp
from workbench.sim import SimBackend


@pytest.fixture(scope="module")
def runs():
    scenario = get("dragon-paper")
    return {label: run_scenario(scenario, label, seed=0) for label in scenario.engines}


def test_workload_has_the_controllers_two_tfjob_shapes_at_the_load():
    jobs = dp.jobs(0)
    assert len(jobs) == dp.N_JOBS
    shapes = {(j.num_ps, j.initial_workers, j.min_workers, j.max_workers) for j in jobs}
    assert shapes == {dp.LONG_SHAPE[:4], dp.SHORT_SHAPE[:4]}
    assert all(j.kind is JobKind.PS and j.worker_demand == dp.WORKER and j.ps_demand == dp.PS
               for j in jobs)
    perf = default_perf()
    gpu_s = sum(j.initial_workers * j.total_work
                / perf.ps_speed(j.application, j.initial_workers, j.num_ps) for j in jobs)
    gpus = sum(n.gpus for n in dp.nodes())
    assert gpu_s / (gpus * max(j.arrival for j in jobs)) == pytest.approx(dp.LOAD, rel=1e-6)
    assert [j.arrival for j in dp.jobs(0)] == [j.arrival for j in jobs]  # seeded
    assert [j.arrival for j in dp.jobs(1)] != [j.arrival for j in jobs]


def _two_gangs() -> list[JobSpec]:
    """A 2 x 4-GPU cluster full with `filler` until t=600; then the 8 GPUs come free for two
    TFJobs of 1 PS + 5 one-GPU workers each, submitted meanwhile (their PS bound, workers
    pending)."""
    w = Resources(cpu=4, mem=8, gpu=1)
    ps = Resources(cpu=4, mem=8, gpu=0)
    perf = default_perf()
    speed = perf.ps_speed("resnet-50", 5, 1)
    filler = JobSpec("filler", "resnet-50", 0.0, 600 * perf.ps_speed("resnet-50", 8, 1), 32,
                     8, 8, 8, num_ps=1, worker_demand=w, ps_demand=ps, kind=JobKind.PS)
    gangs = [JobSpec(f"gang-{x}", "resnet-50", t, 1800 * speed, 32, 5, 5, 5, num_ps=1,
                     worker_demand=w, ps_demand=ps, kind=JobKind.PS)
             for x, t in (("a", 100.0), ("b", 200.0))]
    return [filler, *gangs]


def test_tf_operator_start_deadlocks_two_half_bound_gangs_and_dragon_does_not():
    cluster = make_cluster(2, 4, cpus=48, mem=192)
    interleaved = run_policy(cluster, _two_gangs(), "kube-default",
                             policy_options={"tf_operator": True})
    states = {n: j.state for n, j in interleaved.backend.jobs.items()}
    assert states["filler"] is JobState.COMPLETED
    # Each gang got 4 of its 5 workers when the filler ended: neither can ever train.
    assert sorted(interleaved.controller.stalled) == ["gang-a", "gang-b"]
    for name in ("gang-a", "gang-b"):
        job = interleaved.backend.jobs[name]
        assert job.state is JobState.REJECTED and job.reason.startswith("stalled")
        assert "5/6 pods bound" in job.reason  # its PS and 4 of 5 workers
        assert job.progress == 0.0
    # Job by job (the option off: today's behaviour) the oldest gang takes all it needs first.
    in_order = run_policy(cluster, _two_gangs(), "kube-default")
    assert in_order.metrics["completed"] == 3 and not in_order.controller.stalled
    dragon = run_policy(cluster, _two_gangs(), "dragon")
    assert dragon.metrics["completed"] == 3 and not dragon.controller.stalled


def test_tf_operator_option_off_keeps_the_job_by_job_order():
    jobs = dp.jobs(1)
    plain = run_policy(dp.nodes(), jobs, "kube-default")
    explicit = run_policy(dp.nodes(), jobs, "kube-default", policy_options={"tf_operator": False})
    assert plain.metrics["avg_jct_h"] == explicit.metrics["avg_jct_h"]
    interleaved = run_policy(dp.nodes(), jobs, "kube-default", policy_options={"tf_operator": True})
    # Interleaving holds GPUs idle in partial gangs: less training per allocated GPU-hour.
    def busy(r):
        return r.metrics["gpu_effective_util"] / r.metrics["gpu_alloc_util"]
    assert busy(interleaved) < busy(plain)


def test_load_aware_scaling_acts_in_the_setting(runs):
    policy = runs["dragon"].controller.policy
    view = policy.engine_view()
    assert view["scale_downs"] + view["scale_ups"] > 0
    assert view["locality"]["started"] >= dp.N_JOBS


def test_short_run_reproduces_the_direction_of_the_claims(runs):
    scenario = get("dragon-paper")
    for claim in scenario.claims:
        gain = claim.gain(runs[scenario.claim_engine(claim)], runs[claim.baseline])
        assert gain > 0, (claim.label, gain)


class _CheckedBackend(SimBackend):
    """The real simulator, checking capacity after every change and counting the batches of
    actions that left a job half-bound (HOLDING)."""

    half_bound_rounds = 0

    def apply(self, actions):
        out = super().apply(actions)
        self._check_capacity()
        self.half_bound_rounds += any(j.state is JobState.HOLDING for j in self.active.values())
        return out

    def advance(self, until):
        super().advance(until)
        self._check_capacity()

    def _check_capacity(self):
        assert (self.allocated <= self.capacity + 1e-6).all(), "node over-allocated"
        assert (self.allocated >= -1e-6).all(), "negative allocation"


@pytest.mark.parametrize("label", ["dragon", "kube-default"])
@pytest.mark.parametrize("seed", [0, 2])
def test_invariants_hold_with_the_mechanism_on(label, seed):
    scenario = get("dragon-paper")
    engine, options = scenario.engines[label]
    jobs = dp.jobs(seed)
    backend = _CheckedBackend(dp.nodes(), jobs)
    Controller(backend, make_policy(engine, **options)).run(max_rounds=50_000)
    assert backend.done()
    # DRAGON starts a gang whole or not at all; tf-operator's start leaves gangs half-bound.
    assert (backend.half_bound_rounds == 0) == (label == "dragon")
    assert sorted(backend.jobs) == sorted(j.name for j in jobs)  # none lost
    assert len(backend.finished) == len({j.name for j in backend.finished}) == len(jobs)
    for job in backend.jobs.values():
        assert job.state in (JobState.COMPLETED, JobState.REJECTED), job
        assert job.reason, f"{job.name} ended without a reason"
        assert not job.workers and not job.ps
    assert np.allclose(backend.allocated, 0.0, atol=1e-6)


def test_elapsed_time_counts_a_stalled_job_until_it_was_ended():
    cluster = make_cluster(2, 4, cpus=48, mem=192)
    stuck = run_policy(cluster, _two_gangs(), "kube-default",
                       policy_options={"tf_operator": True})
    ends = [j.finish_time - j.spec.arrival for j in stuck.backend.jobs.values()]
    assert dp.job_elapsed_s(stuck) == pytest.approx(np.mean(ends))
    assert dp.stalled_jobs(stuck) == 2
