"""The operator's console tells the truth, without a browser: a job's current blocker computed
now, status words that follow pause, switch previews that show rejections and unfinished
jobs, say when they were computed, warn of harm and refresh; what-ifs per session."""

from __future__ import annotations

import pytest

from workbench.clusters import make_cluster
from workbench.model import JobSpec, JobState
from workbench.perf import default_perf
from workbench.session import load_jobs, load_nodes, simulate
from workbench.ui.state import WorkbenchState

PERF = default_perf()


def gang(name: str, arrival: float, workers: int, share: float) -> JobSpec:
    """A cifar10 job of exactly `workers` one-GPU workers and `share` of its full training."""
    return JobSpec(name, "cifar10", arrival, PERF.total_iterations("cifar10", 512) * share, 512,
                   initial_workers=workers, min_workers=workers, max_workers=workers)


@pytest.fixture
def freed():
    """A 16-GPU job has just completed (between two rounds); an 8-GPU job waits alone."""
    store = WorkbenchState.from_workload(jobs=[gang("big", 0, 16, 0.2), gang("next", 10, 8, 0.05)],
                                         nodes=make_cluster(2, 8), policy="tiresias")
    store.advance(120)
    big = store.backend.jobs["big"]
    while big.state is not JobState.COMPLETED:
        store.controller.run(until=store.backend.next_event_time() + 1)
    store.refresh()
    return store


# ---- item 7: why is this job waiting, now -------------------------------------------------


def test_a_waiting_job_that_fits_now_says_so_and_when_the_engine_looks(freed):
    job = freed.backend.jobs["next"]
    assert job.state is JobState.PENDING
    why = freed.why_now("next")
    assert why.startswith("fits now: needs 8 GPUs, 16 GPUs free (largest free block 8)")
    assert "it is the only job waiting" in why
    next_round = freed.controller.next_round_time()
    assert next_round is not None and 0 < next_round - freed.now <= 60
    assert f"at {freed.hours(next_round):.2f} h (in {next_round - freed.now:,.0f} s" in why
    assert job.reason in why or job.reason.removeprefix("waiting: ") in why  # the engine's word


def test_the_job_starts_at_that_round_even_when_the_run_moves_in_slices(freed):
    # The completion was played out by run(until=...) before any round saw it; the round it
    # is owed still comes (it used to be skipped, leaving the job beside 16 free GPUs).
    freed.advance(60)
    assert freed.backend.jobs["next"].state.placed
    assert freed.why_now("next").startswith(("restarting on", "running on"))


def test_a_job_that_does_not_fit_names_the_shortfall_and_its_place_in_the_queue():
    store = WorkbenchState.from_workload(
        jobs=[gang("a", 0, 12, 0.2), gang("b", 5, 8, 0.05), gang("c", 6, 4, 0.05)],
        nodes=make_cluster(2, 8), policy="fifo")
    store.advance(300)
    why = store.why_now("b")
    assert why.startswith("does not fit now: needs 8 GPUs, 4 free in the cluster")
    assert "first of 2 waiting jobs by arrival" in why
    assert "number 2 of 2 waiting jobs" in store.why_now("c")
    assert store.why_now("a").startswith(("running on", "restarting on"))
    assert store.why_now("nope") == "no such job"


def test_a_job_bigger_than_the_cluster_can_never_run():
    store = WorkbenchState.from_workload(jobs=[gang("huge", 0, 20, 0.1)],
                                         nodes=make_cluster(2, 8), policy="fifo")
    job = store.backend.jobs.get("huge")
    if job is None or job.state is JobState.REJECTED:
        assert store.why_now("huge").startswith(("rejected", "no such job"))
    else:
        assert store.why_now("huge").startswith("can never run on this cluster")


def test_a_sliced_run_decides_exactly_as_an_uninterrupted_one():
    """The console advances in ticks (run(until=...)); the decisions must not depend on it."""
    whole = simulate(load_nodes("default", "default"), load_jobs("default"), "tiresias")
    sliced = simulate(load_nodes("default", "default"), load_jobs("default"), "tiresias")
    whole.run(until=8 * 3600)
    for t in range(300, 8 * 3600 + 1, 300):
        sliced.run(until=t)

    def placed(c):
        return [(d.time, d.action, d.job) for d in c.recorder.decisions if d.action != "Wait"]

    assert placed(sliced) == placed(whole)


# ---- item 5: status words ----------------------------------------------------------------


def test_pausing_and_playing_redraw_the_headline():
    store = WorkbenchState.from_workload()
    v = store.version
    store.play()
    assert store.version > v
    v = store.version
    store.pause()
    assert store.version > v  # views redraw on version: the headline says "paused"


def test_the_console_headline_says_paused_after_pause():
    from bokeh.document import Document

    from workbench.ui.app import Workbench

    wb = Workbench("default", "default", "tiresias", inline=False)
    wb.layout.get_root(Document())
    wb.controls.play.value = True  # the Run toggle
    wb.tick()
    assert "· running" in wb.controls.clock.object
    wb.controls.play.value = False  # Pause
    wb.sync()
    assert "· paused" in wb.controls.clock.object and "running\n" not in wb.controls.clock.object
