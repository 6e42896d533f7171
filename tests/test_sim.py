"""The simulator's mechanics on hand-built cases: rates, restart delay, gangs, faults,
refusals, live policy switching and what-if forks."""

from __future__ import annotations

import pytest

from workbench.clusters import make_cluster
from workbench.control import Controller
from workbench.model import JobSpec, JobState, Migrate, Place, Scale, Suspend
from workbench.perf import default_perf
from workbench.policies import make_policy
from workbench.sim import Fault, SimBackend
from workbench.whatif import run_forks

PERF = default_perf()


def job(name, arrival=0.0, workers=2, work=None, app="cifar10", bsz=512, **kw):
    total = work if work is not None else PERF.total_iterations(app, bsz) / 20
    return JobSpec(name, app, arrival, total, bsz, initial_workers=workers, min_workers=1,
                   max_workers=max(workers, 8), **kw)


def test_job_runs_at_the_modelled_rate_after_the_restart_delay():
    spec = job("a", workers=4)
    b = SimBackend(make_cluster(2, 4), [spec], restart_delay=30)
    b.advance(0)
    out = b.apply([Place("a", "test", {"node-00": 4})])
    assert out[0].applied
    rate = PERF.iteration_rate(spec, {"node-00": 4}, {})
    b.advance(1e9)
    j = b.jobs["a"]
    assert j.state is JobState.COMPLETED
    assert j.finish_time == pytest.approx(30 + spec.total_work / rate, rel=1e-9)


def test_spreading_over_nodes_is_slower_as_measured():
    spec = job("a", workers=4)
    packed = PERF.iteration_rate(spec, {"n0": 4}, {})
    spread = PERF.iteration_rate(spec, {"n0": 1, "n1": 1, "n2": 1, "n3": 1}, {})
    assert spread < packed


def test_over_allocation_is_refused_with_a_reason():
    b = SimBackend(make_cluster(1, 4), [job("a", workers=4), job("b", workers=2)])
    b.advance(0)
    ok, refused = b.apply([Place("a", "t", {"node-00": 4}), Place("b", "t", {"node-00": 2})])
    assert ok.applied and not refused.applied
    assert "does not fit on node-00" in refused.detail
    assert b.allocated[0, 2] == 4


def test_gang_place_must_respect_worker_range():
    b = SimBackend(make_cluster(2, 4), [job("a", workers=2)])
    b.advance(0)
    (o,) = b.apply([Place("a", "t", {"node-00": 4, "node-01": 4, "x": 0}) ])
    assert o.applied  # 8 workers = max_workers
    b2 = SimBackend(make_cluster(3, 4), [job("a", workers=2)])
    b2.advance(0)
    (o2,) = b2.apply([Place("a", "t", {"node-00": 4, "node-01": 4, "node-02": 1})])
    assert not o2.applied and "outside" in o2.detail


def test_scale_and_migrate_cost_a_restart_and_keep_progress():
    spec = job("a", workers=2, work=1e7)
    b = SimBackend(make_cluster(2, 4), [spec], restart_delay=30)
    b.advance(0)
    b.apply([Place("a", "t", {"node-00": 2})])
    b.advance(1000)
    before = b.observe().jobs["a"].progress
    assert before > 0
    (o,) = b.apply([Scale("a", "grow", {"node-00": 4})])
    assert o.applied
    j = b.jobs["a"]
    assert j.state is JobState.RESTARTING and j.restarts == 1 and j.progress == before
    b.advance(1020)
    assert b.observe().jobs["a"].progress == before  # still in the restart delay
    b.advance(1100)
    assert b.observe().jobs["a"].progress > before
    (m,) = b.apply([Migrate("a", "move", {"node-01": 4})])
    assert m.applied and b.jobs["a"].nodes == {"node-01"}
    (bad,) = b.apply([Migrate("a", "move", {"node-00": 2})])
    assert not bad.applied and "keeps the task counts" in bad.detail


def test_node_failure_sends_jobs_back_with_checkpointed_progress():
    spec = job("a", workers=4, work=1e8)
    b = SimBackend(make_cluster(2, 4), [spec], restart_delay=0, checkpoint_interval=600,
                   faults=[Fault(1000, "node-00", duration=500)])
    b.advance(0)
    b.apply([Place("a", "t", {"node-00": 4})])
    rate = PERF.iteration_rate(spec, {"node-00": 4}, {})
    b.advance(1000)
    j = b.jobs["a"]
    assert j.state is JobState.PENDING and not j.workers
    assert j.progress == pytest.approx(600 * rate)  # last checkpoint at 600 s of training
    assert not b.observe().node_up[0]
    (o,) = b.apply([Place("a", "t", {"node-00": 4})])
    assert not o.applied and "down" in o.detail
    b.advance(1500)
    assert b.observe().node_up[0]


def test_suspend_returns_resources_and_queue_keeps_arrival_order():
    b = SimBackend(make_cluster(1, 4), [job("a", 0, 4, work=1e7), job("b", 10, 4)])
    b.advance(10)
    b.apply([Place("a", "t", {"node-00": 4})])
    assert [j.name for j in b.observe().waiting] == ["b"]
    b.apply([Suspend("a", "preempted")])
    assert [j.name for j in b.observe().waiting] == ["a", "b"]
    assert b.allocated.sum() == 0


def test_policy_switch_mid_run_loses_and_restarts_nothing():
    jobs = [job(f"j{i}", arrival=i * 120.0, workers=1 + i % 4) for i in range(12)]
    b = SimBackend(make_cluster(2, 4), jobs)
    c = Controller(b, make_policy("fifo"))
    c.run(until=900)
    running = {n: (dict(j.workers), j.restarts) for n, j in b.active.items() if j.state.placed}
    assert running
    c.switch(make_policy("tiresias"))
    c.step()
    assert c.policy.name == "tiresias" and c.recorder.switches[-1][1:] == ("fifo", "tiresias")
    # The switch itself touches no job: placements and restart counts are as they were.
    for name, (workers, restarts) in running.items():
        j = b.jobs[name]
        if j.state.placed:
            assert j.restarts == restarts
    c.run()
    assert len(b.finished) == len(jobs)


def test_what_if_forks_do_not_touch_the_live_run():
    jobs = [job(f"j{i}", arrival=i * 60.0, workers=2) for i in range(10)]
    b = SimBackend(make_cluster(2, 4), jobs)
    c = Controller(b, make_policy("fifo"))
    c.run(until=600)
    now, done = b.now, len(b.finished)
    runs = run_forks(b, {"fifo": make_policy("fifo"), "tiresias": make_policy("tiresias")})
    assert b.now == now and len(b.finished) == done
    for run in runs:
        twin = run.controller
        assert twin.backend.done() and len(twin.backend.finished) == len(jobs)


def test_forks_share_the_finished_jobs_and_no_engine_changes_one():
    """A fork holds the live run's finished jobs themselves, not copies (a Philly fork made
    ~50 k copies, a third of its time): sound only while nothing changes a job once it has
    finished. Every engine run to the end on forks of the default run, with a node failing,
    leaves each finished job exactly as it was."""
    from workbench.policies import available
    from workbench.session import load_jobs, load_nodes, simulate
    from workbench.sim.engine import Fault

    controller = simulate(load_nodes("default", "default"), load_jobs("default"), "tiresias",
                          faults=[Fault(4 * 3600.0, "node-03", 1800.0)])
    controller.run(until=3 * 3600)
    live = controller.backend
    before = {id(j): ({k: v for k, v in vars(j).items() if k != "history"}, list(j.history))
              for j in live.finished}
    assert len(before) > 20
    twin = live.fork()
    assert all(a is b for a, b in zip(live.finished, twin.finished))
    runs = run_forks(live, {name: name for name in available()}, until=30 * 3600)
    assert all(len(run.controller.backend.finished) > len(before) for run in runs)
    controller.run(until=6 * 3600)  # the live run goes on too
    for job in live.finished[:len(before)]:
        fields, history = before[id(job)]
        assert {k: v for k, v in vars(job).items() if k != "history"} == fields, job.name
        assert job.history == history, job.name


def test_a_forks_active_jobs_equal_deep_copies_and_share_nothing_that_changes():
    """`LiveJobStatus.fork_copy` (a fork's active jobs, copied field by field for speed)
    makes what `copy.deepcopy` made: equal fields, its spec shared, its clock the fork's,
    and no dict or list shared with the live job, so running the fork changes none."""
    import copy

    from workbench.session import load_jobs, load_nodes, simulate

    controller = simulate(load_nodes("default", "default"), load_jobs("default"), "optimus")
    controller.run(until=5 * 3600)
    live = controller.backend
    assert len(live.active) > 5
    twin = live.fork()
    deep = copy.deepcopy(live)
    for name, job in live.active.items():
        forked, copied = twin.jobs[name], deep.jobs[name]
        assert forked is twin.active[name] and forked is not job
        assert forked.spec is job.spec and forked._clock is twin
        fields = {k: v for k, v in vars(forked).items() if k not in ("_clock", "spec")}
        assert fields == {k: v for k, v in vars(copied).items() if k not in ("_clock", "spec")}
        for key, value in vars(forked).items():
            if isinstance(value, (dict, list, set)):
                assert value is not vars(job)[key], (name, key)
    before = {name: copy.deepcopy({k: v for k, v in vars(j).items()
                                   if k not in ("_clock", "spec")})
              for name, j in live.active.items()}
    Controller(twin, make_policy("optimus")).run(until=12 * 3600)
    assert twin.finished and len(twin.finished) > len(live.finished)
    for name, job in live.active.items():
        assert {k: v for k, v in vars(job).items() if k not in ("_clock", "spec")} == before[name]


def test_kube_default_holds_partial_gangs_and_the_controller_reports_the_deadlock():
    # Two 4-worker jobs on 6 GPUs: pod-by-pod binding gives each 3 GPUs; neither can start.
    jobs = [job("a", 0, 4, work=1e6), job("b", 0, 4, work=1e6)]
    b = SimBackend(make_cluster(2, 3), jobs)
    c = Controller(b, make_policy("kube-default"))
    c.run()
    assert sorted(c.stalled) == ["a", "b"]
    assert all(j.state is JobState.REJECTED and j.reason.startswith("stalled") for j in b.jobs.values())
    # The gang-aware FIFO finishes both on the same cluster.
    b2 = SimBackend(make_cluster(2, 3), jobs)
    c2 = Controller(b2, make_policy("fifo"))
    c2.run()
    assert all(j.state is JobState.COMPLETED for j in b2.jobs.values())


def test_fractional_gpu_tasks_share_one_gpu():
    from workbench.model import Resources

    specs = [JobSpec(f"s{i}", "ncf", 0, 1000, 256, worker_demand=Resources(2, 4, 0.25)) for i in range(4)]
    b = SimBackend(make_cluster(1, 2), specs)
    b.advance(0)
    out = b.apply([Place(s.name, "t", {"node-00": 1}) for s in specs])
    assert all(o.applied for o in out)
    state = b.observe()
    assert sorted(state.gpu_free[0].tolist()) == [0.0, 1.0]  # best fit: all four on one GPU


def test_run_until_just_after_a_placement_is_not_a_stall():
    b = SimBackend(make_cluster(1, 4), [job("a", 0, 2, work=1e6)], restart_delay=30)
    c = Controller(b, make_policy("fifo"))
    c.run(until=10)  # placed at 0, restart ends at 30: nothing decisive before `until`
    assert not c.stalled and b.jobs["a"].state is JobState.RESTARTING and b.now == 10
    c.run(until=100)
    assert b.jobs["a"].state is JobState.RUNNING


def test_progress_and_service_are_current_whenever_read_between_events():
    """Running jobs are not brought up to date each round; reading them must still give the
    values at the simulator's current time, and they stop growing when the job stops."""
    spec = job("a", workers=2, work=1e9)
    b = SimBackend(make_cluster(1, 4), [spec], restart_delay=30, history_interval=None)
    b.advance(0)
    b.apply([Place("a", "test", {"node-00": 2})])
    rate = PERF.iteration_rate(spec, {"node-00": 2}, {})
    j = b.jobs["a"]
    for t in (30.0, 100.0, 1000.0):
        b.advance(t)
        assert j.progress == pytest.approx(rate * (t - 30), rel=1e-12)
        assert j.executed_time == pytest.approx(t - 30, rel=1e-12)
        assert j.attained_service == pytest.approx(2 * (t - 30), rel=1e-12)
    b.apply([Suspend("a", "test")])
    b.advance(5000.0)
    assert j.state is JobState.PENDING
    assert j.attained_service == pytest.approx(2 * 970, rel=1e-12)
    assert j.progress <= rate * 970 + 1e-6  # back to its checkpoint at most
    twin = b.fork()
    twin.apply([Place("a", "test", {"node-00": 2})])
    twin.advance(6000.0)
    assert twin.jobs["a"].attained_service > j.attained_service  # the fork's clock, not ours
    assert j.attained_service == pytest.approx(2 * 970, rel=1e-12)


def test_waiting_queue_keeps_arrival_order_through_returns():
    from workbench.model import JobStatus
    from workbench.sim.queue import WaitingQueue

    jobs = [JobStatus(spec=job(f"j{i}", arrival=float(i))) for i in range(6)]
    q = WaitingQueue()
    for j in (jobs[1], jobs[4], jobs[5], jobs[0], jobs[3], jobs[3]):
        q.add(j)
    view = iter(q)  # a live view, read within a round
    assert [j.name for j in view] == ["j0", "j1", "j3", "j4", "j5"]
    q.discard("j3")
    q.discard("missing")
    q.add(jobs[2])
    assert [j.name for j in q] == ["j0", "j1", "j2", "j4", "j5"]
    assert [j.name for j in reversed(q)] == ["j5", "j4", "j2", "j1", "j0"]
    assert len(q) == 5 and "j2" in q and "j3" not in q


def test_a_copied_tiresias_starts_with_a_fresh_view_of_the_cluster():
    """The UI's switch preview deep-copies the running engine onto a fork: the copy must not
    carry (and copy) the live run's jobs, and must run correctly on the fork."""
    import copy

    specs = [job(f"j{i}", arrival=60.0 * i, workers=2) for i in range(6)]
    b = SimBackend(make_cluster(1, 4), specs, history_interval=None)
    live = make_policy("tiresias")
    c = Controller(b, live)
    c.run(until=400.0)
    assert live._view.placed  # it has ranked the jobs holding GPUs
    twin = copy.deepcopy(live)
    assert twin._view.placed == [] and twin._view.jobs is None
    fork = Controller(b.fork(), twin)
    fork.run()
    assert fork.backend.done() and not b.done()
    assert all(j.state is JobState.COMPLETED for j in fork.backend.jobs.values())


class _SlowApplySim_fake(SimBackend):
    """A simulator whose applying takes 5 s of its clock, as a live cluster's API calls take
    time: a fake of a slow backend."""

    def apply(self, actions):
        outcomes = super().apply(actions)
        self.advance(self.now + 5.0)
        return outcomes


def every_round(name: str):
    """The engine `name` asking for a round every `round_interval` (and at arrivals), as the
    artifact's simulator runs Optimus; ours skips the rounds that can change nothing."""
    engine = make_policy(name)
    engine.needs_every_round = True
    return engine


def test_rounds_stay_on_the_grid_when_applying_takes_time():
    """A round is at the time it observed: on a backend where deciding and applying take time
    the next round is still `round_interval` after it (counting from the end of applying
    slipped the grid by that time every round: 65 s apart instead of 60)."""
    jobs = [job("a", 0.0, 2, work=1e7), job("b", 100.0, 2, work=1e7)]
    backend = _SlowApplySim_fake(make_cluster(2, 4), jobs, restart_delay=0)
    policy = every_round("optimus")
    rounds = []
    schedule = policy.schedule
    policy.schedule = lambda state: (rounds.append(state.now), schedule(state))[1]
    Controller(backend, policy).run(until=400.0)
    assert rounds == [0.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0], rounds


def _round_times(policy):
    """`policy` with the time of each round it is asked for recorded in the returned list."""
    rounds = []
    schedule = policy.schedule
    policy.schedule = lambda state: (rounds.append(state.now), schedule(state))[1]
    return policy, rounds


def test_a_backend_whose_rounds_do_not_wait_for_the_grid_rounds_at_each_event():
    """A live cluster's controller rounds as soon as a decisive change is seen; a backend
    saying so (`events_wait_for_grid = False`: Kubernetes, a replay of its snapshot) gets a
    round at the arrival, then 60 s after it; the simulator waits for the grid point."""
    times = {}
    for wait in (True, False):
        backend = SimBackend(make_cluster(2, 4), [job("a", 0.0, 2, work=1e7),
                                                   job("b", 100.0, 2, work=1e7)], restart_delay=0)
        backend.events_wait_for_grid = wait
        policy, times[wait] = _round_times(every_round("optimus"))
        Controller(backend, policy).run(until=300.0)
    assert times[True] == [0.0, 60.0, 120.0, 180.0, 240.0, 300.0]
    assert times[False] == [0.0, 60.0, 100.0, 160.0, 220.0, 280.0]


def test_a_replay_carries_on_the_live_runs_rounds_and_owes_one_for_an_arrival_since():
    """A replay of a live run under a copy of its engine (`Controller.carry_on`) rounds where
    the live run would: not at once at the fork, but on the live grid; a job that arrived
    since the live run's last round is owed a round at once on a cluster's replay."""
    import copy

    from workbench.sim.restore import from_snapshot
    from workbench.sim.snapshot import take

    jobs = [job("a", 0.0, 2, work=1e7), job("b", 100.0, 2, work=1e7)]
    backend = SimBackend(make_cluster(2, 4), jobs, restart_delay=0)
    live = Controller(backend, every_round("optimus"))
    live.run(until=150.0)
    assert live.last_round == 120.0
    twin, rounds = _round_times(copy.deepcopy(live.policy))
    replay = Controller(backend.fork(), twin)
    replay.carry_on(live.last_round)
    replay.run(until=300.0)
    assert rounds == [180.0, 240.0, 300.0]  # without carry_on: 150, 210, 270

    late = SimBackend(make_cluster(2, 4), jobs + [job("c", 130.0, 2, work=1e7)], restart_delay=0)
    live = Controller(late, every_round("optimus"))
    live.run(until=150.0)  # c arrived at 130; the grid's round for it is at 180
    snapshot = take(late, late.observe(), source="kubernetes")
    twin, rounds = _round_times(copy.deepcopy(live.policy))
    replay = Controller(from_snapshot(snapshot), twin)
    replay.carry_on(live.last_round)
    replay.run(until=300.0)
    assert rounds == [150.0, 210.0, 270.0]


def test_a_job_submitted_during_a_run_arrives_in_time_order_with_the_trace():
    # the next arrival's time is kept apart from the spec list: a submission must move it
    b = SimBackend(make_cluster(2, 4), [job("first", arrival=0.0),
                                        job("late", arrival=500.0)])
    b.advance(100)
    assert b.next_decision_time() == 500.0
    b.submit(job("early", arrival=200.0))
    assert b.next_decision_time() == 200.0
    b.advance(300)
    assert set(b.jobs) == {"first", "early"}
    b.advance(600)
    assert set(b.jobs) == {"first", "early", "late"}
    assert b.next_decision_time() is None and b.next_event_time() is None
    b.submit(job("after-the-trace", arrival=50.0))  # in the past: arrives now
    assert b.next_event_time() == 600.0
    b.advance(600)
    assert "after-the-trace" in b.jobs and b.pending_arrivals() == 0
