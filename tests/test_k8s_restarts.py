"""`k8s.restarts.RestartMeter`: the restart delay a live cluster's restarts cost, in the
simulator's terms. Checked against the simulator itself (whose restarts cost exactly its
`restart_delay`) and on hand-built cluster-like reports that lose the work since the last
report, as pods deleted for a rescale do."""

from __future__ import annotations

from workbench.clusters import make_cluster
from workbench.k8s.restarts import RestartMeter, progress_now
from workbench.model import JobSpec, JobState, JobStatus, Place, Scale, Suspend
from workbench.sim import SimBackend


def _spec(name: str = "a") -> JobSpec:
    return JobSpec(name, "cifar10", 0.0, 1e6, 512, initial_workers=2, min_workers=1,
                   max_workers=4)


def test_the_meter_measures_the_simulators_own_restart_delay():
    sim = SimBackend(make_cluster(1, 4), [_spec()], restart_delay=45.0)
    meter = RestartMeter()
    sim.advance(0.0)
    job = sim.active["a"]
    for t, action in ((0.0, Place("a", "start", {"node-00": 2})),
                      (600.0, Scale("a", "grow", {"node-00": 4})),
                      (1500.0, Scale("a", "shrink", {"node-00": 1}))):
        sim.advance(t)
        estimate = job.progress  # the simulator knows its progress exactly
        assert all(o.applied for o in sim.apply([action]))
        meter.applied(action, job, sim.now, estimate)
        for dt in (20.0, 40.0, 50.0, 80.0):  # before the restart ends nothing is measured
            sim.advance(t + dt)
            meter.observed(sim.active, sim.now)
    assert [round(d, 6) for d in meter.delays] == [45.0, 45.0, 45.0]
    assert meter.delay(default=30.0) == 45.0


def _running(progress: float, throughput: float) -> JobStatus:
    st = JobStatus(_spec())
    st.state, st.progress, st.throughput = JobState.RUNNING, progress, throughput
    return st


def test_work_lost_since_the_last_report_counts_as_delay():
    meter = RestartMeter()
    job = _running(480.0, 2.0)  # last report: 480 iterations; 10 s later it is at ~500
    meter.applied(Scale("a", "grow", {"n": 4}), job, 100.0, estimate=500.0)
    job.state, job.throughput = JobState.RESTARTING, 0.0
    meter.observed([job], 120.0)
    job.state, job.throughput = JobState.RUNNING, 4.0  # new pods resumed from 480 ...
    job.progress = 480.0  # ... and have not passed it yet: nothing to measure
    meter.observed([job], 130.0)
    assert not meter.delays
    job.progress = 600.0  # at 160 s: 60 s after the rescale, 100 iterations past 500 at 4/s
    meter.observed([job], 160.0)
    assert list(meter.delays) == [60.0 - 100.0 / 4.0]
    assert meter.delay(default=30.0) == 30.0  # one measurement is not enough


def test_a_stopped_job_is_measured_from_its_resume_with_the_work_it_lost_when_stopped():
    meter = RestartMeter()
    job = _running(480.0, 2.0)
    meter.applied(Suspend("a", "preempted"), job, 100.0, estimate=500.0)
    job.state, job.throughput = JobState.PENDING, 0.0
    meter.observed([job], 200.0)  # waiting is not restart cost
    meter.applied(Place("a", "resume", {"n": 2}), job, 300.0, estimate=480.0)
    job.state, job.throughput, job.progress = JobState.RUNNING, 2.0, 540.0
    meter.observed([job], 350.0)
    assert list(meter.delays) == [50.0 - 40.0 / 2.0]


def test_finished_jobs_are_forgotten_and_the_median_is_used_once_enough_are_measured():
    meter = RestartMeter()
    gone = _running(0.0, 1.0)
    meter.applied(Place("a", "start", {"n": 2}), gone, 0.0, estimate=0.0)
    meter.observed([], 10.0)  # the job finished (no longer active): no mark is left
    assert not meter._marks and not meter.delays
    for d in (10.0, 50.0, 20.0):
        job = _running(0.0, 1.0)
        meter.applied(Place("a", "start", {"n": 2}), job, 0.0, estimate=0.0)
        job.progress = 100.0
        meter.observed([job], 100.0 + d)
    assert sorted(meter.delays) == [10.0, 20.0, 50.0]
    assert meter.delay(default=30.0) == 20.0


def test_progress_is_carried_forward_from_the_report_but_not_over_a_stop():
    job = _running(480.0, 2.0)
    job.last_start = 50.0
    assert progress_now(job, (480.0, 100.0), 110.0) == 500.0  # 10 s after the report, at 2/s
    assert progress_now(job, None, 110.0) == 480.0  # no report seen: the record
    # stopped at 120 s, resumed at 400 s from its checkpoint at the same 480: the report is
    # unchanged, but the 280 s it was stopped made no progress
    job.last_start = 400.0
    assert progress_now(job, (480.0, 100.0), 410.0) == 500.0
    job.state = JobState.RESTARTING
    assert progress_now(job, (480.0, 100.0), 410.0) == 480.0  # not running: its record
    job.state, job.last_start = JobState.RUNNING, 50.0
    assert progress_now(job, (480.0, 100.0), 1e9) == job.spec.total_work  # never past the end


def test_a_delay_is_measured_to_when_the_report_came_not_when_it_was_read():
    meter = RestartMeter()
    job = _running(480.0, 2.0)
    meter.applied(Scale("a", "grow", {"n": 4}), job, 100.0, estimate=500.0)
    job.state, job.throughput, job.progress = JobState.RUNNING, 4.0, 600.0
    # read at 190 s, a round after the report came at 160 s: 60 s after the rescale, 100
    # iterations past 500 at 4/s; 30 s more if it were measured when read
    meter.observed([job], 190.0, seen={"a": (600.0, 160.0)})
    assert list(meter.delays) == [60.0 - 100.0 / 4.0]
