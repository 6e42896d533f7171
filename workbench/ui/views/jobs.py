"""The jobs table: state, workers/PS, placement, progress, predicted completion with its band,
deadline, probability of meeting it, and the last decision with its reason. Selecting a job
shows every decision about it ("why is this job waiting?").

Rows keep their order between refreshes (`stable_order`), whatever their state, and the user
may sort by any column; the selection follows its job (`KeyedSelection`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import panel as pn

from .. import export
from ..state import WorkbenchState
from ._base import View, widget_row
from ._panes import Markdown, as_text
from ._tables import KeyedSelection, csv_download, table

DISPLAY_COLUMNS = {
    # No "app": job names carry it in every shipped trace (the CSV download has it).
    "job": "job", "state": "state", "arrival_h": "arrived (h)",
    "workers": "workers", "ps": "PS",
    "placement": "placement", "progress": "progress", "finish_h": "finish (h)",
    "band": "band (h)", "deadline_h": "deadline (h)", "p_meet": "P(meet)",
    "last_action": "last decision", "reason": "reason",
}
FINISHED = ("completed", "rejected")


def display_frame(jobs: pd.DataFrame) -> pd.DataFrame:
    df = jobs.copy()
    lo, hi = df["finish_low_h"].to_numpy(), df["finish_high_h"].to_numpy()
    # object dtype even when empty: Tabulator picks a column's formatter from its first dtype
    df["band"] = pd.Series([f"{_hours(a, b)}–{_hours(b, b)}" if not (math.isnan(a) or math.isnan(b))
                            else "" for a, b in zip(lo, hi)], index=df.index, dtype=object)
    df["progress"] = (df["progress"] * 100).round(1)
    return df.iloc[stable_order(df)][list(DISPLAY_COLUMNS)].reset_index(drop=True)


def _hours(h: float, top: float) -> str:
    """`h` with fewer decimals the more digits `top` has ("20.84", "596.0", "1236"): a band
    is at most 11 characters, within its column's least width (hundreds of hours with two
    decimals were cut: "596.00–636.4"); its CSV keeps every decimal."""
    return f"{h:.{2 if abs(top) < 99.995 else 1 if abs(top) < 999.95 else 0}f}"


def stable_order(jobs: pd.DataFrame) -> np.ndarray:
    """Row positions: active jobs in arrival order (new ones join at the end), then finished
    ones, the most recent first. Unlike an order by state, a row moves only when a job above
    it finishes, not every time a job is preempted or placed."""
    finished = jobs["state"].isin(FINISHED).to_numpy()
    key = np.where(finished, -jobs["finish_h"].to_numpy(dtype=float),
                   jobs["arrival_h"].to_numpy(dtype=float))
    return np.lexsort((jobs["job"].to_numpy(), np.nan_to_num(key, nan=np.inf), finished))


# Tabulator's progress bar fills its cell's height: in a row grown by wrapped text it was a
# block as tall as the row. One text line high, level with the first line of the other cells.
# A last decision that wraps does so in balanced lines ("Place @" / "0.05 h"), not leaving
# the "h" alone on the second.
JOBS_TABLE_CSS = """
.tabulator-cell[tabulator-field="progress"] > div { height: 1.4em !important; }
.tabulator-cell[tabulator-field="progress"] > div > div:last-child { line-height: 1.4em; }
.tabulator-cell[tabulator-field="last_action"] { text-wrap: balance; }
"""


class JobsView(View):
    def __init__(self, state: WorkbenchState, page_size: int = 15) -> None:
        super().__init__(state)
        self.table = table(
            display_frame(state.jobs), name="jobs-table", pagination="remote",
            page_size=page_size, selectable=1, titles=DISPLAY_COLUMNS, header_filters=False,
            counts=("workers", "ps"), hours=("arrival_h", "finish_h", "deadline_h"),
            shares=("p_meet",), wrap=("placement", "last_action", "reason"),
            # below ~1,500 px the reason, the column that says why, stays in view (down to
            # 1,024 px; the placement is also on the Cluster tab, the workers in the details)
            hide_first=("ps", "arrival_h", "band", "last_action", "placement", "workers",
                        "deadline_h"),
            formatters={"progress": {"type": "progress", "max": 100, "legend": True,
                                     "legendAlign": "center", "color": "#9ecae1"}},
            stylesheets=[JOBS_TABLE_CSS], frozen=("job",),  # in view when it scrolls sideways
        )
        self.search = pn.widgets.TextInput(placeholder="filter by job name…", width=220)
        self.state_filter = pn.widgets.MultiChoice(
            options=["running", "restarting", "holding", "pending", "completed", "rejected"],
            placeholder="all states", width=360)
        self.table.add_filter(self._filter)
        self.search.param.watch(lambda e: self.table.param.trigger("value"), "value")
        self.state_filter.param.watch(lambda e: self.table.param.trigger("value"), "value")
        self.why_title = Markdown("Select a job to see why it is where it is.",
                                          margin=(0, 10))
        self.why = table(pd.DataFrame(columns=["time_h", "policy", "action", "applied",
                                               "reason", "detail"]),
                         name="why-table", height=200, hours=("time_h",),
                         wrap=("reason", "detail"),
                         titles={"time_h": "time (h)", "at": "at (UTC)"})
        # Remember the job, not the row: rows move as the table refreshes.
        self.selection = KeyedSelection(self.table, "job", self._show_why)
        self.download = csv_download("Download jobs (CSV)", "workbench-jobs.csv",
                                     lambda: export.jobs(state))
        self.panel = pn.Column(widget_row(self.search, self.state_filter, self.download),
                               self.table, self.why_title, self.why,
                               sizing_mode="stretch_width", name="Jobs")
        self._seen = state.version  # the table was built from this version

    def _filter(self, df: pd.DataFrame) -> pd.DataFrame:
        mask = np.ones(len(df), dtype=bool)
        if self.search.value:
            mask &= df["job"].str.contains(self.search.value, case=False, regex=False).to_numpy()
        if self.state_filter.value:
            mask &= df["state"].isin(self.state_filter.value).to_numpy()
        return df[mask]

    @property
    def selected(self) -> str | None:
        """The selected job's name (it stays selected as rows move)."""
        return self.selection.selected

    def select(self, name: str | None) -> None:
        """Select job `name` (e.g. from a link) and show why it is where it is."""
        self.selection.select(name)

    def update(self) -> None:
        self.selection.set_value(display_frame(self.state.jobs))
        if self.selected:
            self._fill_why(self.selected)

    def _show_why(self, name: str | None) -> None:
        if name:
            self._fill_why(name)

    def _fill_why(self, name: str) -> None:
        # Computed from the cluster now: the engine's last word may be stale (see ui.waiting).
        # (names and reasons are text: a trace's job name is shown, not run)
        why = as_text(self.state.why_now(name))
        self.why_title.object = f"**{as_text(name)}** now: {why}"
        self.why.value = self.state.decisions_frame(last=50, job=name).drop(columns=["job"])
