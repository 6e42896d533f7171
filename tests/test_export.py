"""The tables an operator takes away (ui.export, Workbench.*_frame) and what the charts and
tables build from them, without a browser: the decision log, jobs and what-if results as
DataFrames and CSV, the what-if CDF over all jobs with its counts, one colour per engine,
the jobs table's stable order, and the busy counter."""

from __future__ import annotations

import io
import threading

import numpy as np
import pandas as pd
import pytest

from workbench.policies import available
from workbench.ui import export
from workbench.ui.busy import BackgroundWork
from workbench.ui.data import JobsTable
from workbench.ui.state import WorkbenchState
from workbench.ui.views._charts import engine_style, jct_cdf
from workbench.ui.views.jobs import display_frame
from workbench.whatif import WhatIfResult


@pytest.fixture(scope="module")
def state() -> WorkbenchState:
    s = WorkbenchState.from_workload(limit=30)
    s.advance(2 * 3600)
    return s


def test_decision_log_is_every_decision_oldest_first(state):
    log = export.decisions(state)
    assert len(log) == len(state.recorder.decisions) > 0
    assert list(log.columns[:4]) == ["time_h", "policy", "action", "job"]
    assert log["time_h"].is_monotonic_increasing
    without = export.decisions(state, include_waits=False)
    assert "Wait" not in set(without["action"])
    back = pd.read_csv(io.StringIO(log.to_csv(index=False)))
    assert len(back) == len(log) and back["job"].tolist() == log["job"].tolist()


def test_jobs_frame_in_arrival_order_with_integer_counts(state):
    jobs = export.jobs(state)
    assert jobs["arrival_h"].is_monotonic_increasing
    assert jobs["workers"].dtype.kind == "i" and jobs["ps"].dtype.kind == "i"
    assert set(jobs["job"]) == set(state.jobs["job"])
    text = jobs.to_csv(index=False)
    assert "arrival_h" in text.splitlines()[0]


def test_jobs_display_keeps_active_jobs_in_arrival_order_then_finished_newest_first(state):
    shown = display_frame(state.jobs)
    done = shown["state"].isin(["completed", "rejected"]).to_numpy()
    assert not (done[:-1] & ~done[1:]).any()  # no active job after a finished one
    assert shown.loc[~done, "arrival_h"].is_monotonic_increasing
    finish = state.jobs.set_index("job").loc[shown.loc[done, "job"], "finish_h"]
    assert finish.is_monotonic_decreasing


def test_an_empty_jobs_table_keeps_counts_integers():
    # Tabulator keeps the formatter of a column's first dtype: float would print "4.0" later.
    empty = JobsTable().frame([], {}, {})
    assert empty["workers"].dtype.kind == "i" and empty["ps"].dtype.kind == "i"
    assert empty["arrival_h"].dtype.kind == "f"


def _result() -> WhatIfResult:
    table = pd.DataFrame([
        {"policy": "fifo", "completed": 160, "rejected": 0, "unfinished": 0, "avg_jct_h": 0.65},
        {"policy": "dl2", "completed": 27, "rejected": 133, "unfinished": 0, "avg_jct_h": 0.2},
    ])
    jct = {"fifo": np.linspace(0.1, 3, 160), "dl2": np.linspace(0.05, 0.4, 27)}
    return WhatIfResult(start=0.0, until=None, table=table, jct_h=jct)


def test_what_if_frame_puts_counts_before_averages():
    frame = export.what_if(_result())
    assert list(frame.columns[:6]) == ["policy", "jobs", "completed", "rejected", "unfinished",
                                       "avg_jct_h"]
    assert frame["jobs"].tolist() == [160, 160]
    assert export.what_if(None).empty


def test_what_if_cdf_is_over_all_jobs_and_labels_the_counts():
    cdf = jct_cdf(_result())
    by = dict(zip(cdf["policy"], zip(cdf["ys"], cdf["label"])))
    assert by["fifo"][0][-1] == pytest.approx(1.0)
    assert by["dl2"][0][-1] == pytest.approx(27 / 160)  # most jobs never completed
    assert by["dl2"][1] == "dl2: 27/160 done, 133 rejected"
    assert by["fifo"][1] == "fifo: 160/160 done"
    none = _result()
    none.table.loc[1, ["completed", "rejected"]] = [0, 160]
    none.jct_h["dl2"] = np.array([])
    assert "dl2: 0/160 done, 160 rejected" in jct_cdf(none)["label"]  # still in the legend


def test_every_engine_has_its_own_colour_the_same_each_time():
    styles = [engine_style(e) for e in available()]
    assert len(set(styles)) == len(styles)
    assert len({c for c, _ in styles}) == len(styles)  # colours alone tell them apart
    assert engine_style("fifo") == engine_style("fifo")
    assert engine_style("fifo+fgd") not in styles


def test_background_work_is_counted_while_it_runs():
    work = BackgroundWork()
    started, release = threading.Event(), threading.Event()

    def job() -> int:
        started.set()
        release.wait(5)
        return 7

    thread = threading.Thread(target=lambda: results.append(work.track("what-if of 2", job)()))
    results: list[int] = []
    thread.start()
    started.wait(5)
    assert work.describe() == "what-if of 2"
    release.set()
    thread.join(5)
    assert results == [7] and work.describe() == ""


def test_store_what_if_and_preview_are_tracked(state):
    run = state.prepare_what_if(["fifo"], until=state.now + 600)
    assert state.background.describe() == ""  # prepared, not running yet
    run()
    assert state.background.describe() == ""


def test_workbench_frames():
    from workbench.ui import Workbench

    wb = Workbench(limit=10, inline=True)
    wb.state.advance(3600)
    assert len(wb.decisions_frame()) == len(wb.state.recorder.decisions)
    assert len(wb.jobs_frame()) == len(wb.state.jobs)
    assert wb.what_if_frame().empty
    wb.state.what_if(["fifo", "tiresias"])
    assert wb.what_if_frame()["policy"].tolist() == ["fifo", "tiresias"]


def test_the_jobs_selection_follows_its_job_not_its_row(state):
    from types import SimpleNamespace

    from workbench.ui.views.jobs import JobsView

    view = JobsView(state)
    view.update()
    table = view.table
    name = table.value["job"].iloc[2]
    view.selection._clicked(SimpleNamespace(row=2))  # the user clicks the third row
    assert view.selected == name and table.selection == [2]
    table.selection = [0]  # the browser echoes a position from before a refresh
    assert view.selected == name
    state.advance(1800)
    view.update()  # rows move; the selection moves with the job
    assert table.value["job"].iloc[table.selection[0]] == name
    view.selection._clicked(SimpleNamespace(row=table.selection[0]))  # a second click clears
    assert view.selected is None and table.selection == []
