"""Tables an operator takes away: the decision log, the jobs table and the what-if results as
pandas DataFrames (from Python: `Workbench().decisions_frame()`, or these functions on a
store) and as CSV (the console's download buttons write these same frames).

Times are hours from the store's `time_origin` (the trace start, or when the console
connected to a cluster), as everywhere in the console; on a real cluster the decision log
carries the wall-clock time (UTC) too.
"""

from __future__ import annotations

import pandas as pd

from ..whatif import WhatIfResult
from .state import WorkbenchState

# What-if columns in reading order: the counts before the averages they qualify.
WHAT_IF_ORDER = ("policy", "jobs", "completed", "rejected", "unfinished", "avg_jct_h",
                 "median_jct_h", "p95_jct_h", "makespan_h", "avg_queue_h", "deadline_hit_rate",
                 "gpu_alloc_util", "restarts", "stalled", "ran_to_h", "wall_s", "note")


def decisions(state: WorkbenchState, include_waits: bool = True) -> pd.DataFrame:
    """Every decision of the run so far, oldest first (a log reads forwards): time, engine,
    action, job, whether the backend applied it, reason and detail."""
    n = len(state.recorder.decisions)
    frame = state.decisions_frame(last=max(n, 1), include_waits=include_waits)
    return frame.iloc[::-1].reset_index(drop=True)


def jobs(state: WorkbenchState) -> pd.DataFrame:
    """The jobs table as the console lists it (active jobs and the most recently finished
    ones), in arrival order: every column of `data.JOB_COLUMNS`, progress as a share."""
    frame = state.jobs
    order = frame.sort_values(["arrival_h", "job"], kind="stable").index
    return frame.loc[order].reset_index(drop=True)


def what_if(result: WhatIfResult | None) -> pd.DataFrame:
    """One row per engine of a what-if (empty before the first): how many jobs it completed,
    rejected and left unfinished next to the averages over the completed ones."""
    if result is None:
        return pd.DataFrame(columns=list(WHAT_IF_ORDER))
    frame = result.table.copy()
    counts = [c for c in ("completed", "rejected", "unfinished") if c in frame]
    if counts and "jobs" not in frame:
        frame.insert(1, "jobs", frame[counts].sum(axis=1).astype(int))
    first = [c for c in WHAT_IF_ORDER if c in frame]
    return frame[first + [c for c in frame.columns if c not in first]]
