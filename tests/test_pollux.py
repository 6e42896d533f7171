"""The pollux engine and its goodput model (Pollux OSDI'21, as the petuum/adaptdl osdi21-artifact
simulator runs it): the goodput formula on measured points, the agent's batch and fit, the
allocation's rules and objective, a live switch, and a regression pin of workload 6."""

from __future__ import annotations

import json
import math
from importlib import resources

import numpy as np
import pytest

from workbench.bench.reference import REFERENCE, run_one, workload_path
from workbench.clusters import make_cluster
from workbench.control import Controller
from workbench.model import JobSpec, JobState, Place
from workbench.perf import default_perf
from workbench.perf.goodput import (
    adaptive_rate,
    app_goodput,
    fit_params,
    gain,
    predict_step,
)
from workbench.policies import make_policy
from workbench.policies.pollux import PolluxPolicy
from workbench.sim import SimBackend
from workbench.traces.common import WORKER_DEMAND

from test_reference_baselines import data_dir

PERF = default_perf()
VALIDATION = json.loads((resources.files("workbench.perf") / "data" / "pollux.json")
                        .read_text())["apps"]


def adaptive(name: str, app: str = "cifar10", arrival: float = 0.0, gpus: int = 64) -> JobSpec:
    a = app_goodput(PERF, app)
    return JobSpec(name, app, arrival, a.total, a.init_batch, 1, 1, gpus,
                   worker_demand=WORKER_DEMAND, adaptive_batch=True)


# ---- goodput on measured points ---------------------------------------------------------------

def test_gain_is_the_artifacts_formula_on_a_measured_validation_row():
    # cifar10 at batch 512 (a measured validation file) in epoch 10: scale 512 / 128 = 4
    row = VALIDATION["cifar10"]["validation"]["512"]
    sqr, var = row["grad_sqr"][10], row["grad_var"][10]
    expected = (var + sqr) / (var / 4 + sqr)
    assert app_goodput(PERF, "cifar10").gains([512])[0, 10] == pytest.approx(expected, rel=1e-9)
    assert float(gain(sqr, var, 1.0)) == pytest.approx(1.0)  # the initial batch gains nothing


def test_an_epoch_takes_its_progress_over_the_measured_goodput_of_its_batch():
    # imagenet on one node x 4 GPUs, epoch 60 (long epochs, a steady batch): the trajectory's
    # time for the epoch is its progress span / (gain / (step + accum (step - sync)))
    app = app_goodput(PERF, "imagenet")
    run = app.trajectory((4,))
    e = 60
    assert (run.atomic[e], run.accum[e]) == (run.atomic[e - 1], run.accum[e - 1])
    atomic, accum = int(run.atomic[e]), int(run.accum[e])
    step, sync = PERF.step_and_sync("imagenet", (4,), atomic)
    batch = 4 * atomic * (accum + 1)
    good = app.gains([batch])[0, e] / (step + accum * (step - sync))
    span = app.epoch_ends[e] - app.epoch_ends[e - 1]
    assert run.times[e] - run.times[e - 1] == pytest.approx(span / good, abs=1.0)


# (completion time in s) of one adaptive job alone on a fixed placement in the artifact's own
# simulator.Job (osdi21-artifact c793c70, python 3.11, scipy 1.11, autograd; target batch None,
# reallocate(placement) then step(60) until done), run 2026-11-23
ARTIFACT_ALONE = {("cifar10", (4,)): 1168, ("cifar10", (4, 4)): 843,
                  ("yolov3", (4, 4)): 15369, ("deepspeech2", (4,)): 5315,
                  ("deepspeech2", (4, 4, 4, 4)): 2030, ("bert", (4, 4)): 2514,
                  ("imagenet", (4, 4)): 80580, ("imagenet", (4, 4, 4, 4)): 42861}


@pytest.mark.parametrize("app, counts", sorted(ARTIFACT_ALONE))
def test_an_adaptive_job_alone_takes_as_long_as_in_the_artifact(app, counts):
    ours = 30 + app_goodput(PERF, app).time_to_finish(counts, 0.0)
    assert ours == pytest.approx(ARTIFACT_ALONE[app, counts], rel=0.01)


def test_the_simulator_runs_an_adaptive_job_at_its_goodput():
    spec = adaptive("a", "deepspeech2")
    b = SimBackend(make_cluster(1, 4), [spec])
    b.advance(0)
    assert b.apply([Place("a", "t", {"node-00": 4})])[0].applied
    c = Controller(b, make_policy("fifo"))  # fifo leaves a running job alone
    c.run()
    expected = 30 + app_goodput(PERF, "deepspeech2").time_to_finish((4,), 0.0)
    assert b.jobs["a"].finish_time == pytest.approx(expected, rel=1e-6)
    # halfway through, the rate is the work left over the time left
    rate = adaptive_rate(PERF, spec, (4,), spec.total_work / 2)
    left = app_goodput(PERF, "deepspeech2").time_to_finish((4,), spec.total_work / 2)
    assert rate == pytest.approx(spec.total_work / 2 / left)


# ---- the agent: its fit and its batch ------------------------------------------------------------

def points(app, configs):
    out = []
    for counts, atomic in configs:
        step, sync = PERF.step_and_sync(app, counts, atomic)
        out.append((len(counts), sum(counts), atomic, step, sync))
    return tuple(out)


def test_the_fit_follows_the_measured_step_times_it_was_given():
    pts = points("cifar10", [((1,), 128), ((2,), 64), ((4,), 64), ((4, 4), 64), ((4, 4), 128)])
    p = fit_params(pts)
    n, r, a, step, _ = np.array(pts).T
    pred = predict_step(p, n, r, a, np.zeros_like(a))
    assert np.sqrt(np.mean(np.log(pred / step) ** 2)) < 0.1
    assert 1.0 <= p.gamma <= 10.0


def test_the_fit_keeps_the_artifacts_priors_with_few_points():
    pts = points("cifar10", [((1,), 128)])
    p = fit_params(pts)
    compute = pts[0][3] - pts[0][4]
    assert p.alpha_c == pytest.approx(compute / 2)  # one atomic batch seen: alpha_c fixed
    assert p.beta_r == 1e-8  # no point over 2 replicas: the floor
    # no multi-node point: the inter-node terms are raised to 1.1 x the intra-node ones
    assert (p.alpha_n, p.beta_n) == pytest.approx((1.1 * p.alpha_r, 1.1e-8))


def test_batch_candidates_follow_the_artifacts_accumulation_rules():
    one = app_goodput(PERF, "cifar10").candidates(1)
    local = one.eval_batch / (one.accum + 1)
    assert (one.accum[local > 128] >= 1).all()  # one replica above the initial batch accumulates
    yolo = app_goodput(PERF, "yolov3").candidates(4)
    assert (yolo.atomic[yolo.valid] <= 8).all()  # yolov3's max local batch 8
    assert (yolo.batch <= 512).all()  # never above the largest measured batch


def test_the_agent_grows_its_batch_with_gpus_and_with_training():
    app = app_goodput(PERF, "cifar10")
    one, sixteen = app.trajectory((1,)), app.trajectory((4, 4, 4, 4))
    batch = lambda run, e, r: r * run.atomic[e] * (run.accum[e] + 1)  # noqa: E731
    assert batch(one, 0, 1) == 128  # before its first fit: the initial batch
    assert batch(sixteen, 99, 16) > batch(sixteen, 1, 16)
    assert batch(sixteen, 99, 16) > batch(one, 99, 1)


# ---- the allocation ---------------------------------------------------------------------------

def test_greedy_gives_every_job_a_gpu_before_any_job_a_second():
    pol = PolluxPolicy()
    # per job: (GPUs, cost) options; p = -1: cost (speedup + 1e-3)^-1
    opts = [[(0, pol.cost(0.0), None), (1, pol.cost(0.25), None), (2, pol.cost(0.45), None)]
            for _ in range(3)]
    assert pol.choose(opts, 3) == [1, 1, 1]
    picked = pol.choose(opts, 4)
    assert sorted(picked) == [1, 1, 2]


def test_greedy_looks_past_a_dip_to_keep_a_placement():
    pol = PolluxPolicy()
    # keeping 4 GPUs (no restart penalty) beats moving to 1-3 GPUs at a heavy penalty
    opts = [[(0, pol.cost(0.0), None), (1, pol.cost(0.01), None), (2, pol.cost(0.02), None),
             (4, pol.cost(1.0), {"node-00": 4})]]
    assert pol.choose(opts, 4) == [3]


def test_restart_penalty_and_caps_are_the_artifacts():
    b = SimBackend(make_cluster(4, 4), [adaptive("a"), adaptive("n", "ncf")])
    b.advance(600)
    state = b.observe()
    pol = PolluxPolicy()
    a, n = state.jobs["a"], state.jobs["n"]
    assert pol.restart_factor(a, 600.0) == pytest.approx(600 / 630)
    a.restarts = 3
    assert pol.restart_factor(a, 600.0) == pytest.approx(510 / 630)
    assert pol.cap(a, pol.agent(a), 16) == 1  # nothing profiled yet: max(2 x 0, 1)
    pol.agent(a).profile((1, 2, 64), (0.1, 0.01))
    assert pol.cap(a, pol.agent(a), 16) == 4  # 2 x the most replicas profiled
    assert pol.cap(n, pol.agent(n), 16) == 1  # ncf: one replica


def test_a_round_places_multi_node_jobs_on_whole_nodes_one_per_node():
    jobs = [adaptive(f"j{i}", "imagenet", arrival=0.0) for i in range(3)]
    b = SimBackend(make_cluster(4, 4), jobs)
    c = Controller(b, make_policy("pollux"))
    c.run(until=4 * 3600)
    assert not any(d for d in c.recorder.decisions if not d.applied)
    for _ in range(3):
        for job in b.active.values():
            if len(job.workers) > 1:  # a multi-node job holds whole nodes
                assert all(v == 4 for v in job.workers.values())
        c.step()
    assert len(b.finished) == 0 or all(j.state is JobState.COMPLETED for j in b.finished)


def test_a_job_no_pollux_size_fits_is_rejected_at_once_saying_why():
    """Pollux sizes a job 1 to a node's GPUs or whole nodes: a rigid 7-worker job on 4-GPU
    nodes has no size. It waited, told that jobs with more speedup had the GPUs, until the
    run stalled with every GPU free; a rigid 8-worker job (two whole nodes) runs."""
    seven = adaptive("seven").with_(initial_workers=7, min_workers=7, max_workers=7)
    eight = adaptive("eight", arrival=1.0).with_(initial_workers=8, min_workers=8, max_workers=8)
    b = SimBackend(make_cluster(4, 4), [seven, eight])
    c = Controller(b, make_policy("pollux"))
    c.run(max_rounds=2_000)
    assert b.jobs["seven"].state is JobState.REJECTED
    assert "1 to 4 GPUs on one node or whole 4-GPU nodes" in b.jobs["seven"].reason
    assert b.jobs["seven"].finish_time == 0.0  # at its first round, not when the run stalled
    assert b.jobs["eight"].state is JobState.COMPLETED and not c.stalled


def test_the_objective_of_the_greedy_beats_keeping_the_allocation_unchanged():
    jobs = [adaptive(f"j{i}", app, arrival=60.0 * i)
            for i, app in enumerate(["cifar10", "yolov3", "deepspeech2", "bert", "cifar10"] * 2)]
    b = SimBackend(make_cluster(4, 4), jobs)
    pol = make_policy("pollux")
    c = Controller(b, pol)
    c.run(until=1800)
    state = b.observe()
    before = {j.name: dict(j.workers) for j in state.active}
    pol.schedule(state)
    plan = {name: p for name, p in pol.last_placements.items()}
    assert pol.objective(state, plan) >= pol.objective(state, before) - 1e-12


def _eager_choice(pol: PolluxPolicy, state, jobs, gpus: int, gpn: int) -> list[tuple]:
    """Every job's options made as `options` makes them, and the greedy's choice on them."""
    fair = math.ceil(gpus / len(jobs))
    share = sum(1 for g in state.capacity[state.node_up][:, 2] if g > 0) / gpus
    full = [pol.options(j, pol.agent(j), gpus, gpn, fair, share, state.now) for j in jobs]
    return [opts[t][:2] for opts, t in zip(full, pol.choose(full, gpus))]


def test_a_round_chooses_as_if_every_jobs_options_were_made():
    # the round leaves most options unmade (waiting jobs' behind a bound, placed jobs' behind
    # their kept placement): its choices equal the greedy's on every job's options made
    jobs = [adaptive(f"j{i}", app, arrival=90.0 * i, gpus=8)
            for i, app in enumerate(["cifar10", "deepspeech2", "bert", "yolov3", "ncf"] * 6)]
    b = SimBackend(make_cluster(4, 4), jobs)
    pol = make_policy("pollux")
    seen, lazy = [], 0
    place = pol.place

    def checked(state, round_jobs, options, chosen, gpn, *placed):
        nonlocal lazy
        lazy += sum(1 for o in options if None in o or len(o) == 1)
        seen.append(([options[j][t][:2] for j, t in enumerate(chosen)],
                     _eager_choice(pol, state, round_jobs, 16, gpn)))
        return place(state, round_jobs, options, chosen, gpn, *placed)

    pol.place = checked
    c = Controller(b, pol)
    c.run(until=6 * 3600)
    assert len(seen) > 100 and lazy > 0
    for ours, eager in seen:
        assert ours == eager


@pytest.mark.parametrize("seed", range(20))
def test_the_greedy_with_bounded_entries_chooses_as_with_every_option_made(seed):
    rng = np.random.default_rng(seed)
    pol = PolluxPolicy()
    zero = (0, pol.cost(0.0), None)
    full = []
    for _ in range(int(rng.integers(5, 40))):
        sizes = sorted({int(g) for g in rng.integers(1, 9, size=int(rng.integers(1, 4)))})
        full.append([zero, *[(g, pol.cost(float(rng.uniform(0.01, 1.0)) * g), None)
                             for g in sizes]])
    budget = int(rng.integers(1, 40))
    eager = pol.choose([list(o) for o in full], budget)
    lazy_of = [j for j in range(len(full)) if rng.random() < 0.6]
    entries = []
    for j in lazy_of:  # a loose bound: the best first move's ratio, raised
        best = max((zero[1] - c) / g for g, c, _ in full[j][1:])
        entries.append((-(best * float(rng.uniform(1.0, 1.5)) + 1e-9), j, -2 - budget))
    options = [[zero] if j in lazy_of else list(o) for j, o in enumerate(full)]
    made = [j for j in range(len(full)) if j not in lazy_of]
    assert pol.choose(options, budget, (entries, lambda j: list(full[j]), made, {})) == eager


# ---- live switch and the bench pin --------------------------------------------------------------

def test_live_switch_to_pollux_and_back_finishes_every_job():
    jobs = [adaptive(f"j{i}", app, arrival=120.0 * i)
            for i, app in enumerate(["cifar10", "deepspeech2", "bert", "yolov3"] * 3)]
    b = SimBackend(make_cluster(2, 4), jobs)
    c = Controller(b, make_policy("tiresias"))
    c.run(until=900)
    placed = {n: j.restarts for n, j in b.active.items() if j.state.placed}
    c.switch(make_policy("pollux"))
    c.step()
    assert c.policy.name == "pollux"
    moved = {d.job for d in c.recorder.decisions if d.policy == "pollux" and d.applied}
    for name, restarts in placed.items():  # the switch itself touches no job
        if name not in moved and not b.jobs[name].state.finished:
            assert b.jobs[name].restarts == restarts
    c.run(until=b.now + 3600)
    c.switch(make_policy("optimus"))
    c.run()
    assert len(b.finished) == len(jobs)
    assert all(d.applied for d in c.recorder.decisions if d.policy == "pollux")


def test_what_if_forks_run_pollux_without_touching_the_live_run():
    from workbench.whatif import run_forks

    jobs = [adaptive(f"j{i}", app, arrival=90.0 * i)
            for i, app in enumerate(["cifar10", "deepspeech2", "bert", "yolov3"] * 2)]
    b = SimBackend(make_cluster(2, 4), jobs)
    Controller(b, make_policy("tiresias")).run(until=600)
    now, progress = b.now, {n: j.progress for n, j in b.active.items()}
    runs = run_forks(b, {"pollux": "pollux", "tiresias": "tiresias"})
    assert b.now == now and {n: j.progress for n, j in b.active.items()} == progress
    for run in runs:
        twin = run.controller.backend
        assert run.complete and twin.done() and len(twin.finished) == len(jobs)


# What `workbench bench reference --engines pollux --loads 1.0 --workloads 6` prints (the
# artifact's round grid, the default), with the step times looked up as the artifact does (the
# default) and the project's (`--throughput`);
# a change to the pollux engine, the goodput model or a throughput model that moves it must
# say why. The same code gives other figures on another CPU: 2315.3 and 2334.3 on an AMD EPYC
# without AVX-512 (2026-12-03; commit 80c1439 too, which passed on the machines before, with
# the same packages): a CPU's floating-point paths (most likely numpy's vector loops; not
# proven) tip Pollux's near-tied choices; so 2 %, not 1 %.
PINNED_WORKLOAD_6 = {"artifact": 2324.1, "project": 2310.6}
PINNED_ACROSS_CPUS = 0.02


@pytest.mark.parametrize("throughput", sorted(PINNED_WORKLOAD_6))
def test_workload_6_average_stays_where_the_bench_put_it(throughput):
    data = data_dir()
    assert workload_path(data, "1.0", 6).exists()
    row = run_one(data, "pollux", "1.0", 6, "artifact", throughput=throughput)
    assert row["reference_s"] == REFERENCE["pollux"]["1.0"][5]
    assert row["ours_s"] == pytest.approx(PINNED_WORKLOAD_6[throughput], rel=PINNED_ACROSS_CPUS)
    assert row["refused"] == 0 and row["completed"] == 160
    assert math.isfinite(row["seconds"])


# ---- on Kubernetes (the local control plane and emulated nodes) ----------------------------------

K8S_SPEED = 50.0  # emulated seconds per real second


@pytest.fixture(scope="module")
def k8s_cluster():
    from k8s_helpers import small_cluster

    with small_cluster(K8S_SPEED) as c:
        yield c


@pytest.mark.integration
def test_pollux_on_kubernetes_rescales_by_restart_and_finishes_every_job(k8s_cluster):
    from k8s_helpers import fresh_namespace

    from workbench.k8s.backend import K8sBackend

    with fresh_namespace(k8s_cluster.rest, "px") as ns:
        backend = K8sBackend(k8s_cluster.api_client, namespace=ns, speed=K8S_SPEED)
        try:
            t0 = backend.now
            specs = []
            for i, (app, bsz) in enumerate([("cifar10", 512), ("deepspeech2", 160),
                                            ("cifar10", 1024), ("bert", 96)]):
                probe = JobSpec(f"px-{i}", app, t0, 1.0, bsz, 1, 1, 4,  # up to a node's GPUs
                                worker_demand=WORKER_DEMAND)
                rate = PERF.iteration_rate(probe, {"a": 1}, {})
                specs.append(probe.with_(total_work=rate * 240))  # ~4 emulated min on 1 GPU
            for s in specs:
                backend.submit(s)
            controller = Controller(backend, make_policy("pollux"))
            controller.run(until=backend.now + 10_000)  # a restart here takes minutes
            assert backend.done(), {j.name: (j.state.value, j.reason, j.restarts)
                                    for j in backend.active.values()}
            assert sorted(j.name for j in backend.finished) == sorted(s.name for s in specs)
            assert all(j.state is JobState.COMPLETED for j in backend.finished)
            kinds = {(d.action, d.applied) for d in controller.recorder.decisions}
            assert ("Place", True) in kinds
            assert ("Scale", True) in kinds  # grown once profiled: a restart on the cluster
            assert not any(not d.applied for d in controller.recorder.decisions
                           if d.action in ("Place", "Scale", "Suspend"))
        finally:
            backend.close()
