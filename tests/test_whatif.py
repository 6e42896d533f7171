"""The operator's console tells the truth, without a browser: a job's current blocker computed
now, status words that follow pause, switch previews that show rejections and unfinished
jobs, say when they were computed, warn of harm and refresh; what-ifs per session."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
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


# ---- item 6: switch previews --------------------------------------------------------------


@pytest.fixture(scope="module")
def at_1_44h():
    store = WorkbenchState.from_workload()  # tiresias on the 160 Philly jobs, 64 GPUs
    store.advance(1.44 * 3600)
    return store


def test_a_preview_shows_rejections_and_unfinished_jobs_and_warns_of_an_engine_that_cannot_run_them(
        at_1_44h):
    p = at_1_44h.preview_switch("dl2")
    rows = p.comparison().set_index("over the horizon")
    assert {"jobs rejected", "unfinished at the end"} <= set(rows.index)
    t = p.table.set_index("policy")
    assert t.loc["tiresias", "rejected"] == 0 and t.loc["dl2", "rejected"] > t.loc["dl2",
                                                                                   "completed"]
    assert rows.loc["jobs rejected", "dl2"] == f"{t.loc['dl2', 'rejected']:.0f}"
    assert (t.unfinished >= t.queued_at_end).all()
    assert "rejected 0 → " in p.summary()
    first = p.warnings()[0]
    assert first.startswith("dl2 cannot run most of this workload: it rejects")
    assert "parameter-server jobs only" in first  # the engine's own reason, most common first
    assert p.harmful


def test_a_previews_comparison_in_a_notebook_heads_no_column_policy(at_1_44h):
    """Its columns kept the name "policy" from the transposed table: a notebook showed it as
    the head of the row numbers, above "over the horizon"."""
    shown = at_1_44h.preview_switch("fifo").comparison()._repr_html_()
    assert "<th>policy</th>" not in shown and "over the horizon" in shown


def test_a_what_if_that_stops_before_every_job_ends_has_no_makespan(at_1_44h):
    """A makespan is the time until every job has ended: a what-if over a horizon that leaves
    jobs unfinished does not know it (it showed the last end so far: 0.00 h when nothing had
    ended); run to the end, it has one."""
    short = at_1_44h.what_if(["fifo", "tiresias"], until=at_1_44h.now + 600).table
    assert (short.unfinished > 0).all() and short.makespan_h.isna().all()
    whole = at_1_44h.what_if(["fifo"]).table
    assert (whole.unfinished == 0).all() and (whole.makespan_h > 1.44).all()


def test_a_preview_says_when_it_was_computed_for_and_goes_stale(at_1_44h):
    p = at_1_44h.preview_switch("fifo")
    assert p.start == at_1_44h.now and not p.stale(at_1_44h.now)
    assert p.harmful and (f"fewer jobs completed: {p.table.completed[0]:.0f} →"
                          f" {p.table.completed[1]:.0f}") in p.warnings()
    assert p.stale(at_1_44h.now + 1)


def console(store, locked=False):
    from bokeh.document import Document

    from workbench.ui.app import Workbench

    wb = Workbench(state=store, inline=False, locked=locked)
    wb.layout.get_root(Document())
    return wb.console


def settle(panel, timeout=60.0):
    """Wait for the preview an async watcher computes in a worker thread."""
    import time

    end = time.monotonic() + timeout
    while panel.preview is None and time.monotonic() < end:
        time.sleep(0.1)
    return panel.preview


def test_a_harmful_switch_needs_confirmation():
    import asyncio

    store = WorkbenchState.from_workload()
    store.advance(1.44 * 3600)
    sw = console(store).controls.switch
    sw.candidate.value = "dl2"
    p = settle(sw)
    assert p is not None and p.harmful
    assert "predicted to do harm" in sw.warning.object  # the alert is its pane's text
    assert "cannot run most of this workload" in sw.warning.object
    assert sw.confirm.visible and sw.apply.disabled  # not until the operator confirms
    assert "Computed for 1.4" in sw.age.object and "as it is now" in sw.age.object
    sw.apply_choice()  # what a browser could send anyway: refused on the server
    assert store.policy == "tiresias" and "Not applied" in sw.preview_text.object
    sw.confirm.value = True
    assert not sw.apply.disabled
    asyncio.run(sw._on_apply(None))  # fresh (the run has not moved): applied at once
    assert store.policy == "dl2" and sw.preview is None


def test_apply_recomputes_a_stale_preview_first():
    import asyncio

    store = WorkbenchState.from_workload(policy="fifo")
    store.advance(2 * 3600)
    sw = console(store).controls.switch
    sw.candidate.value = "tiresias"
    p = settle(sw)
    assert p is not None and not p.harmful
    store.advance(3600)  # the run moves on: the preview goes stale and says so
    sw.sync()
    assert "the run is at 3.0" in sw.age.object and "Apply recomputes it first" in sw.age.object
    n_switches = len(store.recorder.switches)
    asyncio.run(sw._on_apply(None))
    assert store.policy == "tiresias" and len(store.recorder.switches) == n_switches + 1
    assert store.recorder.switches[-1][0] == store.now  # applied on the run as it is now


def test_a_stale_preview_that_turns_harmful_is_not_applied_without_confirmation():
    import asyncio

    store = WorkbenchState.from_workload()
    store.advance(1.44 * 3600)
    sw = console(store).controls.switch
    sw.candidate.value = "fifo"
    settle(sw)
    for measure in ("completed", "deadline_hits"):  # say it was forecast harmless
        sw.preview.table.loc[1, measure] = sw.preview.table.loc[0, measure]
    sw.show(sw.preview)
    assert not sw.preview.harmful and not sw.apply.disabled
    store.advance(1800)
    asyncio.run(sw._on_apply(None))
    assert store.policy == "tiresias"  # the fresh forecast predicts harm: shown, not applied
    assert sw.preview.start == store.now and sw.preview.harmful and sw.confirm.visible
    assert "Not applied yet" in sw.preview_text.object


# ---- item 3: a shared store ---------------------------------------------------------------


def test_a_read_only_session_cannot_preview_or_run_what_ifs():
    import asyncio

    store = WorkbenchState.from_workload()
    viewer = console(store, locked=True)
    assert viewer.controls.switch.candidate.disabled
    assert viewer.what_if.run_button.disabled and "read-only" in viewer.what_if.status.object
    viewer.controls.switch.candidate.value = "fifo"  # what a browser could send anyway
    assert viewer.controls.switch.preview is None
    assert "read-only session cannot preview" in viewer.controls.switch.preview_text.object
    asyncio.run(viewer.what_if._run(None))
    assert viewer.what_if.result is None and "Not done" in viewer.what_if.status.object


def test_each_session_sees_its_own_what_if_and_one_runs_at_a_time():
    import asyncio
    import threading

    from workbench.whatif import Busy

    store = WorkbenchState.from_workload(limit=40)
    a, b = console(store), console(store)
    a.what_if.engines.value = b.what_if.engines.value = ["fifo"]
    asyncio.run(a.what_if._run(None))
    assert a.what_if.result is not None and b.what_if.result is None
    a.what_if.sync()
    b.what_if.sync()
    assert list(a.what_if.table.value.policy) == ["fifo"] and b.what_if.table.value.empty
    # the JCT chart shows with a result; before, it was a blank box a third of the tab high
    assert a.what_if.chart.visible and not b.what_if.chart.visible
    asyncio.run(b.what_if._run(None))
    assert b.what_if.result is not a.what_if.result  # b's own; a's is untouched
    # One what-if at a time on a store: a second one asked for meanwhile is refused.
    started, release = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait(10)

    first = threading.Thread(target=store.heavy.guard("a what-if of 12 engines", slow))
    first.start()
    started.wait(10)
    with pytest.raises(Busy, match="a what-if of 12 engines is running"):
        store.heavy.guard("another", lambda: None)()
    asyncio.run(b.what_if._run(None))
    assert "what-if not run: a what-if of 12 engines is running" in b.what_if.status.object
    release.set()
    first.join()
    assert store.heavy.guard("again", lambda: 1)() == 1


def test_a_notebook_console_resends_its_status_lines():
    """A notebook's browser that missed a change (an output re-drawn from the state saved
    when it was displayed) must not show a stale engine forever on a paused run."""
    from bokeh.document import Document

    from workbench.ui.app import Workbench

    wb = Workbench("default", "default", "tiresias", inline=False)
    doc = Document()
    doc.add_root(wb.layout.get_root(doc))  # as a notebook output does
    wb.state.switch_policy("fifo")
    wb.sync()
    sent = []
    doc.on_change(lambda event: sent.append(event))
    wb.console._resend_status(force=True)
    texts = [e.new for e in sent if getattr(e, "attr", None) == "text"]
    assert any("Engine now: fifo" in t for t in texts) and any("· paused" in t for t in texts)
    sent.clear()
    wb.console._resend_status()  # not again within STATUS_RESEND_S
    assert sent == []
    # A stale copy that reached the kernel's model too (a browser's edit) is put right.
    engine_model = next(iter(wb.controls.engine._models.values()))[0]
    engine_model.text = engine_model.text.replace("fifo", "tiresias")
    wb.console._resend_status(force=True)
    assert "Engine now: fifo" in engine_model.text


# ---- #18 item 2: previews and what-ifs on the shared process pool ------------------------


def wait_for_file(path: str) -> bool:
    """Holds a pool's worker until `path` exists (at most a minute)."""
    import os
    import time

    end = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.02)
    return os.path.exists(path)


def without_wall_times(table):
    return table.drop(columns=["wall_s"], errors="ignore")


def test_a_what_if_and_a_preview_on_the_pool_equal_the_serial_ones():
    store = WorkbenchState.from_workload("default", "small", "tiresias")
    store.advance(3 * 3600)
    now, rounds = store.now, store.controller.rounds
    store.parallel_forks = False
    assert store.executor() is None
    serial = store.what_if(["fifo", "tiresias", "dragon"])
    serial_preview = store.preview_switch("drf", 2 * 3600)
    store.parallel_forks = True
    pooled = store.what_if(["fifo", "tiresias", "dragon"])
    pooled_preview = store.preview_switch("drf", 2 * 3600)
    assert store.executor() is store.executor()  # one pool for the process
    assert without_wall_times(pooled.table).equals(without_wall_times(serial.table))
    assert all((pooled.jct_h[k] == serial.jct_h[k]).all() for k in serial.jct_h)
    for part in ("table", "changes", "decisions"):
        assert getattr(pooled_preview, part).equals(getattr(serial_preview, part)), part
    assert not pooled_preview.table.empty and serial.table.completed.sum() > 0
    assert (store.now, store.controller.rounds) == (now, rounds)


def test_the_store_answers_while_a_what_if_waits_on_the_pool(tmp_path, monkeypatch):
    """The what-if's thread only waits on the pool's workers: the store goes on stepping and
    refreshing meanwhile. Its one worker is held busy until the store has answered, so the
    what-if is certainly still running then (no timing involved)."""
    import threading
    from concurrent.futures import ProcessPoolExecutor

    store = WorkbenchState.from_workload("default", "small", "fifo")
    store.advance(3600)
    store.parallel_forks = False
    expected = store.prepare_what_if(["fifo", "tiresias"])()
    release = tmp_path / "release"
    with ProcessPoolExecutor(1) as pool:
        holder = pool.submit(wait_for_file, str(release))
        monkeypatch.setattr(store, "executor", lambda: pool)
        job = store.prepare_what_if(["fifo", "tiresias"])
        out = {}
        runner = threading.Thread(target=lambda: out.setdefault("result", job()))
        runner.start()
        before = store.controller.rounds
        for _ in range(3):
            store.step()
        store.refresh()
        assert store.controller.rounds > before and runner.is_alive() and not holder.done()
        release.touch()
        runner.join(timeout=300)
        assert holder.result() is True
    assert without_wall_times(out["result"].table).equals(without_wall_times(expected.table))


STOPPABLE = ["fifo", "tiresias", "drf", "optimus", "kube-default", "dorm"]


def test_a_stopped_what_if_runs_no_engine_after_the_stop():
    """One after another: a stop asked as the first engine ends leaves the others out, and the
    first engine's row is whole."""
    from workbench.stop import StopRequest

    store = WorkbenchState.from_workload("default", "small", "fifo")
    store.advance(3600)
    store.parallel_forks = False
    stop, ended = StopRequest(), []

    def done(name):
        ended.append(name)
        stop.ask()

    try:
        result = store.prepare_what_if(STOPPABLE[:3], stop=stop, done=done)()
    finally:
        stop.close()
    assert ended == ["fifo"] and result.left_out == ["tiresias", "drf"] and result.stopped
    assert list(result.table.policy) == ["fifo"] and "stopped" not in result.table.note[0]
    assert result.table.completed[0] + result.table.rejected[0] == 160  # the whole workload


def test_a_stopped_what_if_on_the_pool_ends_its_running_engines_and_starts_no_other(tmp_path,
                                                                                   monkeypatch):
    """On the pool: the stop is asked while the pool's one worker is held by another task, so
    no engine has begun; released once every engine is handed to the pool, the engines already
    on their way to the worker end at their first slice of rounds (saying so), the rest never
    start, and the live run has not moved."""
    from concurrent.futures import ProcessPoolExecutor

    from workbench.stop import StopRequest

    store = WorkbenchState.from_workload("default", "small", "fifo")
    store.advance(3600)
    now, rounds = store.now, store.controller.rounds
    release, stop = tmp_path / "release", StopRequest()

    class ReleasingOnTheLast:
        """The pool, releasing its held worker once the what-if's last engine is submitted
        (the what-if looks at the stop right after, well before the worker can take more)."""

        def __init__(self, pool):
            self.pool, self.submitted = pool, 0

        def submit(self, *a, **k):
            future = self.pool.submit(*a, **k)
            self.submitted += 1
            if self.submitted == len(STOPPABLE):
                release.touch()
            return future

    with ProcessPoolExecutor(1) as pool:
        holder = pool.submit(wait_for_file, str(release))
        monkeypatch.setattr(store, "executor", lambda: ReleasingOnTheLast(pool))
        job = store.prepare_what_if(STOPPABLE, stop=stop)
        stop.ask()
        result = job()
        assert holder.result() is True
    stop.close()
    ran = list(result.table.policy)
    assert ran + result.left_out == STOPPABLE  # the first handed to the worker ran, in order
    # at most those in the pool's call queue (its worker's one, one extra, one being fed) ran
    assert len(ran) <= 3 and len(result.left_out) >= 3
    assert all(note.startswith("stopped on request") for note in result.table.note)
    assert (store.now, store.controller.rounds) == (now, rounds)


def test_an_engine_stopped_by_its_budget_says_how_far_it_got():
    """Engines stopped at their wall-time budget cover different spans of a long trace (a
    Philly what-if: 82,247 jobs seen by one, 54,381 by another): each one's note says how far
    past the fork it got, the span its counts cover."""
    import re

    store = WorkbenchState.from_workload("default", "small", "fifo")
    store.advance(3600)
    store.parallel_forks = False
    result = store.what_if(["fifo", "tiresias"], budget_s=0.001)
    for row in result.table.itertuples():
        got = re.match(r"stopped after 0.001 s of wall time, ([\d,.]+) h past the fork(;|$)",
                       row.note)
        assert got, row.note
        assert float(got[1].replace(",", "")) == pytest.approx(
            row.ran_to_h - result.start / 3600, abs=0.05)
        assert row.unfinished > 0  # it did stop short of the end


def test_a_stopped_run_ends_at_its_next_slice_of_rounds():
    """A fork's run, once the stop is asked (here before it starts), ends after one slice."""
    from workbench.control import Controller
    from workbench.policies import make_policy
    from workbench.stop import StopRequest
    from workbench.whatif import RUN_SLICE, run_fork

    store = WorkbenchState.from_workload("default", "default", "fifo")
    store.advance(3600)
    stop = StopRequest()
    stop.ask()
    twin = Controller(store.backend.fork(), make_policy("tiresias"))
    try:
        run = run_fork("tiresias", twin, None, None, stop)
    finally:
        stop.close()
    assert not run.complete and 0 < twin.rounds <= RUN_SLICE and not twin.backend.done()


def test_a_what_if_row_names_why_its_engine_rejected_jobs():
    """DL2 takes parameter-server jobs only: on the default (all-reduce) workload its row
    says so, and so does the warning under the table; fifo's names the size it cannot give."""
    from workbench.ui.views.whatif import _shortfalls

    store = WorkbenchState.from_workload("default", "small", "fifo")
    store.advance(3600)
    store.parallel_forks = False
    result = store.prepare_what_if(["dl2", "fifo"])()
    notes = dict(zip(result.table.policy, result.table.note))
    assert not result.stopped and result.left_out == []
    assert result.table.rejected[0] > 0
    assert notes["dl2"] == "rejected: DL2 schedules parameter-server jobs only (switch engine"\
        " for all-reduce jobs)"
    # fifo rejects the jobs asking for more GPUs than the small cluster has
    assert notes["fifo"].startswith("rejected: needs 32 GPUs at its requested size")
    assert "(rejected: DL2 schedules parameter-server jobs only" in _shortfalls(result)


@pytest.mark.parametrize("engine", ["optimus", "tiresias"])
def test_a_previews_current_side_is_what_the_live_run_then_does(engine):
    """The current engine's side of a switch preview is the live run going on: forked with the
    live run's last round (`Controller.carry_on`), a copy of its engine makes the decisions the
    live run then makes, at the same times (it rounded at once at the fork before: optimus,
    which re-sizes every job every round, acted on that extra round)."""
    from workbench.policies import make_policy
    from workbench.whatif import prepare_preview

    jobs = load_jobs("default")
    live = simulate(load_nodes("default", "default"), jobs, engine)
    fork_at = sorted(j.arrival for j in jobs)[len(jobs) // 3] + 17.0  # between two rounds
    live.run(until=fork_at)
    preview = prepare_preview(live.backend, live.policy, make_policy("fifo"), 4 * 3600.0,
                              last_round=live.last_round)()
    live.run(until=fork_at + 4 * 3600.0)
    then = [(round(d.time / 3600, 9), d.action, d.job) for d in live.recorder.decisions
            if d.time > fork_at and d.action != "Wait"][:12]
    side = preview.decisions[preview.decisions.policy == engine]
    predicted = [(round(t, 9), a, j) for t, a, j in zip(side.time_h, side.action, side.job)]
    assert len(then) == 12 and predicted == then


@pytest.mark.parametrize("engine", ["dl2", "tiresias"])
def test_a_preview_side_counts_the_jobs_finished_at_its_fork_as_if_it_read_them(engine):
    """`Finished`: a side that skips the jobs finished at the fork (their restarts, and the
    deadlines of the rejected ones, counted once) answers as one that reads every job."""
    import copy

    from workbench.policies import make_policy
    from workbench.whatif import Finished, preview_side

    live = simulate(load_nodes("default", "default"), load_jobs("default"), engine)
    live.run(until=6 * 3600)
    base = live.backend
    start, usage, gone = base.now, copy.copy(base.usage), Finished.at(base)
    assert gone.names and (gone.restarts if engine == "tiresias" else gone.rejected_deadlines)
    read = preview_side(base.fork(), engine, make_policy(engine), start, 3 * 3600, usage)
    skipped = preview_side(base.fork(), engine, make_policy(engine), start, 3 * 3600, usage,
                           None, gone)
    assert repr(skipped) == repr(read) and skipped[1] == read[1]


@pytest.mark.parametrize("parallel", [False, True])
def test_a_what_ifs_rows_come_as_each_engine_ends(parallel):
    """A what-if of 13 engines on the Philly trace ran for minutes with an empty table: the
    result so far is handed on after each engine ends, the ended engines' rows in the order
    asked, and the last of those is the whole result."""
    store = WorkbenchState.from_workload("default", "small", "fifo")
    store.advance(3600)
    store.parallel_forks = parallel
    names = STOPPABLE[:3]
    so_far = []
    result = store.prepare_what_if(names, so_far=so_far.append)()
    assert [len(r.table) for r in so_far] == [1, 2, 3]
    for partial in so_far:  # the engines ended so far, in the order they were asked for
        ended = list(partial.table.policy)
        assert ended == [n for n in names if n in ended] and set(partial.jct_h) == set(ended)
    final = so_far[-1]
    pd.testing.assert_frame_equal(final.table.drop(columns="wall_s"),
                                  result.table.drop(columns="wall_s"))
    assert all(np.array_equal(final.jct_h[n], result.jct_h[n]) for n in names)


def test_the_what_if_tab_shows_the_rows_so_far_while_it_runs():
    """While its what-if runs, the tab shows the rows of the engines ended so far (and the
    CDF of their jobs) under the progress line, and the whole result once it is there."""
    import asyncio

    from workbench.ui.views.whatif import WhatIfView

    store = WorkbenchState.from_workload("default", "small", "fifo")
    store.advance(3600)
    store.parallel_forks = False
    view = WhatIfView(store, may_run=lambda: True)
    view.engines.value = STOPPABLE[:3]
    seen = []  # (rows in the table, status line) at each sync while it ran
    original = store.prepare_what_if

    def watched(*args, **kwargs):
        report = kwargs["so_far"]

        def so_far(result):
            report(result)
            view.sync()
            seen.append((list(view.table.value.policy), view.status.object))
        return original(*args, **{**kwargs, "so_far": so_far})

    store.prepare_what_if = watched
    asyncio.run(view._run(None))
    assert [rows for rows, _ in seen] == [STOPPABLE[:1], STOPPABLE[:2], STOPPABLE[:3]]
    assert all(status.startswith("running ") for _, status in seen)
    # how long it may still run: one engine after another here, each stopping at its budget
    assert store.what_if_budget_s == 60 and store.fork_workers() == 1
    assert [status.split(", at most ")[1].split(" more")[0] for _, status in seen[:2]] == \
        ["2 min", "1 min"], seen
    assert len(view.source.data["policy"]) > 0
    drawn, curves = view.table.value, view.source.data["xs"]
    view.sync()
    assert list(view.table.value.policy) == STOPPABLE[:3]
    assert view.status.object.startswith("Forked at")
    # the whole result repeats the last engine's rows: not sent to the browser again
    assert view.table.value is drawn and view.source.data["xs"] is curves


def test_wall_times_read_as_the_status_line_says_them():
    """A what-if's notes and status say a span of wall time one way: the budget note of an
    engine stopped at 60 s reads '1 min', as the status line's 'each engine stops after'."""
    from workbench.whatif import wall_time

    assert [wall_time(s) for s in (0.001, 12.3456, 45, 59.6, 60, 200, 330.2)] == [
        "0.001 s", "12.3 s", "45 s", "1 min", "1 min", "3 min 20 s", "5 min 30 s"]


def test_a_preview_changes_text_and_rows_not_the_layout():
    """Showing a preview sets text and table rows; what makes the browser lay the whole console
    out again (a model's visibility, classes, children or a table's columns) changes once:
    the tables appear. Another candidate keeps the tables' columns, names in the first row."""
    store = WorkbenchState.from_workload()
    store.advance(1.44 * 3600)
    sw = console(store).controls.switch
    assert sw.buttons.visible and sw.apply.disabled and not sw.tables.visible
    columns = (list(sw.preview_table.value.columns), list(sw.preview_changes.value.columns))
    changes_table = sw.preview_changes
    for engine in ("dl2", "fifo"):
        sw.candidate.value = engine
        p = settle(sw)
        assert p is not None and sw.tables.visible and sw.preview_changes is changes_table
        assert (list(sw.preview_table.value.columns),
                list(sw.preview_changes.value.columns)) == columns
        assert sw.preview_table.value.iloc[0].tolist() == ["engine", "tiresias", engine]
        assert sw.preview_table.titles == {"current": "if kept", "candidate": "if switched"}
        assert bool(sw.warning.object) == p.harmful == sw.confirm.visible
    sw.reset()
    assert not sw.tables.visible and sw.warning.object == "" and not sw.confirm.visible


@pytest.mark.parametrize("engines, hours, said", [
    ([], 0.0, "choose at least one engine"),  # it ran all 13, unasked
    (["fifo"], None, "horizon: hours ahead"),  # an emptied field
    (["fifo"], math.nan, "horizon: hours ahead"),
    (["fifo"], -5.0, "horizon: hours ahead"),  # ran to the end, silently
    (["fifo"], 1e9, "horizon: hours ahead"),  # "ran to 1000000000.70 h"
])
def test_the_what_if_tab_refuses_no_engine_and_a_horizon_it_cannot_use(engines, hours, said):
    import asyncio

    from workbench.ui.views.whatif import WhatIfView

    store = WorkbenchState.from_workload("default", "small", "fifo")
    view = WhatIfView(store, may_run=lambda: True)
    view.engines.value = engines
    view.horizon.value = hours  # (the page clamps to 0..MAX_HORIZON_H; a browser may send any)
    asyncio.run(view._run(None))
    assert view.result is None and said in view.status.object, view.status.object
