"""The rules tiresias and optimus take from the Pollux OSDI'21 artifact (petuum/adaptdl,
osdi21-artifact: simulator/tiresias.py, optimus.py, simulator.py), one test each, and a
regression pin of the reference bench on workload 6."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from workbench.bench.reference import (
    REFERENCE,
    find_data_dir,
    load_jobs,
    run_one,
    workload_path,
)
from workbench.clusters import make_cluster
from workbench.control import Controller
from workbench.errors import ConfigError, InputError
from workbench.model import JobSpec, JobState, JobStatus, Place, Scale, Suspend
from workbench.perf import PerfModel, artifact_perf, default_perf
from workbench.perf.artifact import artifact_batch
from workbench.perf.goodput import artifact_iterations
from workbench.placement.ledger import Ledger
from workbench.policies import make_policy
from workbench.policies.common import in_applicable_order, most_free_first
from workbench.policies.optimus import MIN_LOCAL_BSZ
from workbench.sim import SimBackend
from workbench.traces import load_pollux_workload
from workbench.traces.common import WORKER_DEMAND

PERF = default_perf()


def spec(name, arrival=0.0, workers=1, app="cifar10", bsz=512, work=None, max_workers=None):
    total = work if work is not None else PERF.total_iterations(app, bsz)
    return JobSpec(name, app, arrival, total, bsz, initial_workers=workers, min_workers=1,
                   max_workers=max_workers or max(workers, 64), worker_demand=WORKER_DEMAND)


def backend_with(nodes: int, placed: dict[str, dict[str, int]], waiting=()) -> SimBackend:
    """A 4-GPU-node cluster with jobs already placed as given, and jobs waiting."""
    specs = [spec(n, workers=sum(p.values())) for n, p in placed.items()] + list(waiting)
    b = SimBackend(make_cluster(nodes, 4), specs)
    b.advance(0)
    out = b.apply([Place(n, "test", p) for n, p in placed.items()])
    assert all(o.applied for o in out)
    return b


def data_dir() -> Path:
    try:
        return find_data_dir()
    except InputError:
        pytest.skip("the Pollux workloads (../shared/data/pollux) are not here")


# ---- placement: the node with the most free GPUs first ------------------------------------

def test_most_free_first_takes_the_node_with_most_free_gpus_first():
    # tiresias.py / optimus.py: `free_gpus.most_common(1)` until placed; ties: the lowest index
    b = backend_with(4, {"x": {"node-00": 2}, "y": {"node-02": 1}})
    ledger = Ledger(b.observe())  # free GPUs: 2, 4, 3, 4
    assert most_free_first(ledger, WORKER_DEMAND, 6) == {"node-01": 4, "node-03": 2}
    assert most_free_first(ledger, WORKER_DEMAND, 3) == {"node-01": 3}
    assert most_free_first(ledger, WORKER_DEMAND, 14) is None


def test_tiresias_starts_a_job_on_the_most_free_node_and_pack_is_a_variant():
    waiting = [spec("new", arrival=0.0, workers=1)]
    for order, node in (("most-free", "node-01"), ("pack", "node-00")):
        b = backend_with(2, {"big": {"node-00": 3}}, waiting)
        actions = make_policy("tiresias", node_order=order).schedule(b.observe())
        assert [(type(a), a.workers) for a in actions] == [(Place, {node: 1})]


# ---- Tiresias: queues, their order, no promotion -------------------------------------------

def test_tiresias_defaults_are_the_artifacts():
    # tiresias.py: `_queue_threshold = 3600 * 16`; simulator.py `--interval 60`
    t = make_policy("tiresias")
    assert t.queue_thresholds == (3600.0 * 16,) and t.round_interval == 60.0
    assert t.node_order == "most-free"
    assert SimBackend(make_cluster(1, 4), []).restart_delay == 30.0  # Job.reallocate


def test_tiresias_lower_queue_runs_in_the_order_jobs_entered_it_and_nobody_is_promoted():
    """A (1 GPU, first) and B (2 GPUs, later) both run; B reaches the threshold first. When C
    (2 GPUs, first queue) arrives, two GPUs are left: B, demoted first, keeps them and A waits
    (by arrival it would be the other way round: the artifact appends to `_queue_1`). A waits
    until C has had its first-queue service however long it waited (`_solve_starvation = 0`)."""
    long = 1e9
    jobs = [spec("A", 0.0, 1, work=long), spec("B", 1.0, 2, work=long),
            spec("C", 700.0, 2, work=long)]
    b = SimBackend(make_cluster(1, 4), jobs)
    policy = make_policy("tiresias", queue_thresholds=(600.0,))
    controller = Controller(b, policy)
    controller.run(until=800.0)
    assert b.jobs["C"].state.placed and b.jobs["B"].state.placed
    assert b.jobs["A"].state is JobState.PENDING
    controller.run(until=5_000.0)
    # back only once C, in the first queue, has had its service too: nobody is promoted
    assert policy.queue_of(b.jobs["A"]) == 1 and policy.queue_of(b.jobs["C"]) == 1
    assert b.jobs["A"].last_start >= 700.0 + 30.0 + 600.0 / 2


def test_tiresias_view_between_rounds_shows_the_jobs_its_last_round_started():
    """A round starts a job and nothing happens for hours (the Philly trace's first 65 h):
    the engine's view in between counts it running in the first queue and says when it
    drops. Read from the ranking the engine keeps, it showed no job running until the next
    round, since a round ranks the jobs it started only at the next one."""
    b = SimBackend(make_cluster(1, 4), [spec("A", 0.0, 2, work=1e9)])
    policy = make_policy("tiresias", queue_thresholds=(4 * 3600.0,))
    controller = Controller(b, policy)
    controller.run(until=3600.0)
    assert controller.rounds == 1 and b.jobs["A"].state is JobState.RUNNING
    view = policy.engine_view(b.observe())
    assert view["jobs_per_queue"]["queue 0 running"] == 1
    left = (4 * 3600.0 - b.jobs["A"].attained_service) / 2  # seconds, at 2 GPUs
    assert view["hours_to_next_queue"] == {"A": pytest.approx(left / 3600.0)}
    controller.run(until=4 * 3600.0)  # demoted: in the last queue, it drops no further
    view = policy.engine_view(b.observe())
    assert view["jobs_per_queue"]["queue 1 running"] == 1
    assert view["hours_to_next_queue"] == {"(no running job drops a queue)": 0.0}


def test_tiresias_tells_a_job_that_arrives_and_cannot_start_why_it_waits():
    """A arrives first and takes three of four GPUs; B (2 GPUs) arrives later and waits. The
    simulator's 'arrived, not yet scheduled' was all B said until it started; the reason
    names its queue, its GPUs and who comes first, is given once (not every round), and a job
    that starts is not told it waits."""
    jobs = [spec("A", 0.0, 3, work=1e9), spec("B", 30.0, 2, work=1e9), spec("C", 30.0, 1)]
    b = SimBackend(make_cluster(1, 4), jobs)
    controller = Controller(b, make_policy("tiresias"))
    controller.run(until=3600.0)
    assert b.jobs["B"].state is JobState.PENDING
    assert b.jobs["B"].reason == "waiting: queue 0, needs 2 GPUs; earlier arrivals come first"
    waits = [d for d in controller.recorder.decisions if d.action == "Wait"]
    assert [(d.job, d.applied) for d in waits] == [("B", True)]  # once, and not for C
    assert b.jobs["C"].first_start is not None


def test_tiresias_keeps_the_reason_of_a_job_found_with_service_it_has_had():
    """A job a restarted scheduler finds with a checkpoint and service (on a live cluster) has
    run before, though not under this scheduler: its 'found with a checkpoint' stays, as a
    preempted job's reason does, rather than being replaced by an arrival's."""
    b = backend_with(1, {"A": {"node-00": 4}}, [spec("B", 0.0, 2, work=1e9)])
    found = "waiting: found with a checkpoint at 500 iterations, not yet scheduled"
    b.restore_job(JobStatus(spec=b.jobs["B"].spec, attained_service=3600.0, reason=found))
    assert b.jobs["B"].first_start is None
    actions = make_policy("tiresias").schedule(b.observe())
    assert [a for a in actions if a.job == "B"] == [] and b.jobs["B"].reason == found


# ---- Optimus: cap, gain, prediction, free reallocation ----------------------------------------

def test_optimus_caps_replicas_at_batch_over_the_smallest_local_batch():
    # simulator.py get_optimus_job_info: `target_batch_size // min_local_bsz`; ncf 1
    o = make_policy("optimus")
    status = _status
    assert o.cap(status(spec("c", app="cifar10", bsz=512))) == 512 // 32
    assert o.cap(status(spec("c", app="cifar10", bsz=512, max_workers=8))) == 8
    assert o.cap(status(spec("n", app="ncf", bsz=32768))) == 1
    assert o.cap(status(spec("b", app="bert", bsz=48))) == 12
    assert make_policy("optimus", replica_cap="spec").cap(
        status(spec("c", app="cifar10", bsz=512, max_workers=5))) == 5


def _status(s):
    b = SimBackend(make_cluster(1, 4), [s])
    b.advance(s.arrival)
    return b.jobs[s.name]


def test_optimus_min_local_batches_are_the_profiles_smallest():
    profiles = data_dir() / "profiles"
    for app, smallest in MIN_LOCAL_BSZ.items():
        with open(profiles / app / "placements.csv", newline="") as f:
            assert min(int(float(r["local_bsz"])) for r in csv.DictReader(f)) == smallest


def test_optimus_predicts_the_artifacts_step_time():
    # optimus.py predict_step_time: packed 4 per node, one replica accumulates at least once
    o = make_policy("optimus")
    job = _status(spec("c", app="cifar10", bsz=512))
    st, sy = PERF.step_and_sync("cifar10", (1,), 256)
    assert o.step_time(job, 1, 4) == pytest.approx(st + (st - sy))
    st, sy = PERF.step_and_sync("cifar10", (4, 2), math.ceil(512 / 6))
    assert o.step_time(job, 6, 4) == pytest.approx(st)


def test_optimus_gain_is_step_time_drop_times_remaining_iterations():
    # optimus.py: `(predict_step_time(n) - predict_step_time(n + 1)) * job.remaining`
    o = make_policy("optimus")
    job = _status(spec("c", app="cifar10", bsz=512))
    per_epoch = job.spec.total_work / PERF.max_epochs("cifar10")
    assert o.remaining_iterations(job) == pytest.approx(job.spec.total_work - per_epoch)
    drop = o.step_time(job, 2, 4) - o.step_time(job, 3, 4)
    assert o.gain(job, 2, 4) == pytest.approx(drop * o.remaining_iterations(job))


def test_optimus_gives_minimums_oldest_first_then_gpus_by_gain():
    o = make_policy("optimus")
    b = SimBackend(make_cluster(1, 4), [spec("old", 0.0, bsz=512), spec("mid", 1.0, bsz=512),
                                        spec("young", 2.0, bsz=512, work=10.0)])
    b.advance(2.0)
    jobs = sorted(b.active.values(), key=lambda j: j.spec.arrival)
    # two GPUs: the two oldest get one each, the youngest none
    assert o.allocate(jobs, 2.0, 4) == {"old": 1, "mid": 1, "young": 0}
    # four: the short job (little remaining) gets no extra GPU; the tie goes to the older
    alloc = o.allocate(jobs, 4.0, 4)
    assert alloc["young"] == 1 and alloc["old"] >= alloc["mid"] and sum(alloc.values()) == 4


def test_optimus_reallocates_freely_every_round():
    """A running job shrinks at once when a newcomer needs its minimum, however small the
    change (no 10 % gain rule), and every round is a decision round (optimus.py: from scratch)."""
    o = make_policy("optimus")
    assert o.min_gain == 0.0
    b = SimBackend(make_cluster(1, 4), [spec("a", 0.0, bsz=512), spec("b", 120.0, bsz=512)])
    controller = Controller(b, o)
    controller.run(until=100.0)
    assert b.jobs["a"].num_workers == 4
    controller.run(until=200.0)
    assert b.jobs["b"].state.placed and b.jobs["a"].num_workers < 4
    assert all(d.applied for d in controller.recorder.decisions)


@pytest.mark.parametrize("trace, cluster", [("default", "default"),
                                            ("synthetic:n=120,ps=0.5", "small")])
def test_optimus_skips_only_the_rounds_that_could_change_nothing(trace, cluster):
    """The artifact optimizes every interval; between arrivals and completions only a job
    completing an epoch (its remaining iterations) or Optimus's own last moves can change the
    allocation, so the rounds between are skipped (`next_wakeup`): the same decisions at the
    same times as a round every interval, in a fraction of the rounds. With a node failing."""
    from workbench.session import load_jobs, load_nodes, simulate
    from workbench.sim.engine import Fault

    def run(every_round: bool):
        engine = make_policy("optimus")
        engine.needs_every_round = every_round
        nodes = load_nodes(trace, cluster)
        controller = simulate(nodes, load_jobs(trace), engine,
                              faults=[Fault(2 * 3600.0, nodes[1].name, 3600.0)])
        controller.run()
        return list(controller.recorder.decisions._rows), controller.rounds

    skipping, rounds = run(False)
    every, all_rounds = run(True)
    assert skipping == every
    assert rounds < all_rounds, (rounds, all_rounds)  # Philly, 3,000 jobs: 16,700 of 74,718


def test_a_round_of_moves_is_applied_in_an_order_the_backend_accepts():
    """Two jobs swapping nodes is a cycle: one is suspended first and placed afresh."""
    b = backend_with(2, {"a": {"node-00": 4}, "b": {"node-01": 4}})
    state = b.observe()
    actions = in_applicable_order(state, [Scale("a", "swap", {"node-01": 4}),
                                          Scale("b", "swap", {"node-00": 4})])
    assert [type(a) for a in actions] == [Suspend, Scale, Place]
    assert all(o.applied for o in b.apply(actions))
    assert b.jobs["a"].workers == {"node-01": 4} and b.jobs["b"].workers == {"node-00": 4}


# ---- step times looked up as the artifact does (`--throughput artifact`) --------------------------

def profile_rows(app: str, name: str) -> list[dict]:
    path = data_dir().parent / "pollux" / "profiles" / app / name
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_measured_sequence_is_its_smallest_rotations_rows_linear_in_batch():
    # applications.py get_throughput: nodes filled most-free-first give 4,4,2,2, whose smallest
    # rotation is 2244 (not 2424, measured too); its own rows, linear in the local batch
    measured = profile_rows("cifar10", "placements.csv")
    rows = {float(r["local_bsz"]): r for r in measured if r["placement"] == "2244"}
    other = {float(r["local_bsz"]): r for r in measured if r["placement"] == "2424"}
    art, ours = artifact_perf(), default_perf()
    step, sync = art.step_and_sync("cifar10", (4, 4, 2, 2), 257)
    assert step == pytest.approx(float(rows[257]["step_time"]), rel=1e-5)
    assert sync == pytest.approx(float(rows[257]["sync_time"]), rel=1e-5)
    halfway = (float(rows[257]["step_time"]) + float(rows[363]["step_time"])) / 2
    assert art.step_time("cifar10", (4, 4, 2, 2), 310) == pytest.approx(halfway, rel=1e-5)
    # the project's model averages every measured rotation of the multiset: 2244 and 2424
    mean = (float(rows[257]["step_time"]) + float(other[257]["step_time"])) / 2
    assert ours.step_time("cifar10", (4, 4, 2, 2), 257) == pytest.approx(mean, rel=1e-5)
    assert abs(mean / step - 1) > 0.01


def test_an_unmeasured_sequence_interpolates_over_nodes_replicas_and_batch():
    # more than 4 nodes: the scalability rows, here at a measured vertex, then between two
    row = next(r for r in profile_rows("cifar10", "scalability.csv")
               if (r["num_nodes"], r["num_replicas"], r["local_bsz"]) == ("6", "6", "32"))
    art = artifact_perf()
    assert art.step_time("cifar10", (1,) * 6, 32) == pytest.approx(float(row["step_time"]),
                                                                 rel=1e-5)
    a, b = art.step_time("cifar10", (1,) * 6, 45), art.step_time("cifar10", (1,) * 8, 45)
    assert min(a, b) <= art.step_time("cifar10", (1,) * 7, 45) <= max(a, b)
    with pytest.raises(ValueError, match="throughput must be one of project, artifact"):
        PerfModel.from_package(throughput="exact")


def test_a_fixed_batch_runs_as_the_artifacts_job_rounds_it():
    # simulator.py update_local_bsz: bert 384 on 12 replicas: local 32 > max local 12, so
    # 2 extra micro-steps of ceil(32 / 3) = 11, capped at 384 // 36 = 10: a batch of 360
    assert artifact_batch(384, 12, 12, 12, 384) == (10, 2, 360)
    # one replica above the smallest batch accumulates at least once; at it, not
    assert artifact_batch(1024, 1, 1024, 128, 4096) == (512, 1, 1024)
    assert artifact_batch(128, 1, 1024, 128, 4096) == (128, 0, 128)
    art = artifact_perf()
    step, sync = art.step_and_sync("bert", (4, 4, 4), 10)
    assert art.accumulated_step_time("bert", (4, 4, 4), 384) == pytest.approx(
        step + 2 * (step - sync))
    # the bench's Tiresias jobs train at that batch, for as many iterations as it needs
    bert = [s for s in load_jobs(data_dir(), "1.0", 1, "tiresias", "artifact", "artifact")
            if s.application == "bert" and s.initial_workers == 12]
    assert bert and all(s.batch_size == 360 for s in bert)
    assert bert[0].total_work == pytest.approx(artifact_iterations("bert", 360))


# ---- job lengths and the bench ---------------------------------------------------------------

@pytest.mark.parametrize("app, bsz, iterations", [
    # (completion time - 30 s) / step time of the job alone in the artifact's simulator
    ("yolov3", 128, 9716), ("imagenet", 3200, 42849), ("deepspeech2", 160, 4050),
    ("bert", 48, 3748)])
def test_artifact_iterations_match_the_artifacts_simulator(app, bsz, iterations):
    assert artifact_iterations(app, bsz) == pytest.approx(iterations, rel=0.005)


def test_artifact_length_of_bert_at_48_by_hand(tmp_path):
    # bert (2 epochs, smallest measured batch 12): epochs end at progress 7387 and 14774 (the
    # least `progress` of rows 0 and 1 over its validation files); validation-48's gradient
    # statistics (sqr, var) are (5.72863e13, 6.87564e15) in epoch 0 and (6.90551e10,
    # 4.39619e13) in epoch 1. At batch 48 (scale 4) an iteration gains (var + sqr) /
    # (var / 4 + sqr): 3.90324 and 3.98127, so the job runs 7387 / 3.90324 + 7387 / 3.98127
    # iterations (the validation table says 3732).
    gains = [(var + sqr) / (var / 4 + sqr)
             for sqr, var in ((5.72863e13, 6.87564e15), (6.90551e10, 4.39619e13))]
    by_hand = 7387 / gains[0] + 7387 / gains[1]
    assert gains == pytest.approx([3.90324, 3.98127], abs=1e-5)
    assert by_hand == pytest.approx(3747.97, abs=0.01)
    assert artifact_iterations("bert", 48) == pytest.approx(by_hand, rel=1e-6)
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\nb,0,bert,4,48\n")
    assert load_pollux_workload(path)[0].total_work == pytest.approx(by_hand, rel=1e-6)
    project = load_pollux_workload(path, lengths="project")[0].total_work
    assert project == pytest.approx(3732) == PERF.total_iterations("bert", 48)
    with pytest.raises(ConfigError):
        load_pollux_workload(path, lengths="paper")


def test_rounds_on_the_artifacts_grid_from_time_zero():
    # the artifact's simulate loop: Cluster.step(60) advances 60 s, then decides; so rounds
    # fall at 60, 120, ... and a job arriving at 1,427 s is first seen at 1,440 s
    jobs = [spec("a", arrival=1427.0, work=1e6), spec("b", arrival=1500.0, work=1e6)]

    def round_times(origin):
        policy = make_policy("tiresias")
        policy.round_origin = origin
        c = Controller(SimBackend(make_cluster(2, 4), jobs), policy)
        return [c.step().time for _ in range(3)]

    zero, first = round_times(0.0), round_times(None)
    assert zero[:2] == [1440.0, 1500.0] and zero[2] % 60 == 0  # the third: a later event's
    assert first[:2] == [1427.0, 1547.0] and (first[2] - 1427) % 60 == 0  # ours: from 1,427 s


# What `workbench bench reference --loads 1.0 --workloads 6` prints (the artifact's round grid,
# the default), with the project's and the artifact's job lengths and step times
# (`--throughput`); a change to tiresias or optimus, or to either throughput model, that moves
# these must say why.
PINNED_WORKLOAD_6 = {
    ("tiresias", "project", "artifact"): 3232.3, ("tiresias", "artifact", "artifact"): 3479.9,
    ("tiresias", "project", "project"): 3237.3, ("tiresias", "artifact", "project"): 3443.7,
    ("optimus", "project", "artifact"): 4960.3, ("optimus", "artifact", "artifact"): 5310.4,
    ("optimus", "project", "project"): 5010.3, ("optimus", "artifact", "project"): 5229.8}


@pytest.mark.parametrize("engine, lengths, throughput", sorted(PINNED_WORKLOAD_6))
def test_workload_6_averages_stay_where_the_bench_put_them(engine, lengths, throughput):
    data = data_dir()
    assert workload_path(data, "1.0", 6).exists()
    row = run_one(data, engine, "1.0", 6, lengths, throughput=throughput)
    assert row["reference_s"] == REFERENCE[engine]["1.0"][5]
    assert row["ours_s"] == pytest.approx(PINNED_WORKLOAD_6[engine, lengths, throughput], rel=0.01)
    assert row["refused"] == 0


def test_drf_stops_its_walk_only_where_the_rest_would_change_nothing(monkeypatch):
    """DRF stops walking its queue once no shape of a job that may wait fits and its 200
    reasons are given (`MAX_SHAPES`). Three users sharing a queue of hundreds on a small
    cluster, a node failing: the same decisions as walking every job (the stop turned off)."""
    import dataclasses

    from workbench.policies import drf
    from workbench.session import load_jobs, load_nodes, simulate
    from workbench.sim.engine import Fault

    jobs = [dataclasses.replace(j, user=f"user-{i % 3}")
            for i, j in enumerate(load_jobs("synthetic:n=600,ps=0.3,rate=0.05"))]
    nodes = load_nodes("synthetic", "small")

    def decisions():
        controller = simulate(nodes, jobs, "drf", faults=[Fault(4 * 3600.0, nodes[0].name, 3600.0)])
        controller.run()
        return list(controller.recorder.decisions._rows)

    stopping = decisions()
    monkeypatch.setattr(drf, "MAX_SHAPES", -1)  # no shape judged: every job walked
    walked = decisions()
    assert stopping == walked
    assert sum(d[2] == "Wait" for d in walked) > 200 and len({d[3] for d in walked}) == 600
