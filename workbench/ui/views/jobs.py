"""The jobs table: state, workers/PS, placement, progress, predicted completion with its band,
deadline, probability of meeting it, and the last decision with its reason. Selecting a job
shows every decision about it ("why is this job waiting?")."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import panel as pn
from bokeh.models.widgets.tables import NumberFormatter

from ..state import WorkbenchState
from ._base import View

DISPLAY_COLUMNS = {
    "job": "job", "app": "app", "state": "state", "workers": "workers", "ps": "PS",
    "placement": "placement", "progress": "progress", "finish_h": "finish (h)",
    "band": "band (h)", "deadline_h": "deadline (h)", "p_meet": "P(meet)",
    "last_action": "last decision", "reason": "reason",
}


def display_frame(jobs: pd.DataFrame) -> pd.DataFrame:
    df = jobs.copy()
    lo, hi = df["finish_low_h"].to_numpy(), df["finish_high_h"].to_numpy()
    # object dtype even when empty: Tabulator picks a column's formatter from its first dtype
    df["band"] = pd.Series([f"{a:.2f}–{b:.2f}" if not (math.isnan(a) or math.isnan(b)) else ""
                            for a, b in zip(lo, hi)], index=df.index, dtype=object)
    df["progress"] = (df["progress"] * 100).round(1)
    return df[list(DISPLAY_COLUMNS)]


class JobsView(View):
    def __init__(self, state: WorkbenchState, page_size: int = 15) -> None:
        super().__init__(state)
        self.table = pn.widgets.Tabulator(
            display_frame(state.jobs), pagination="remote", page_size=page_size, show_index=False,
            disabled=True, selectable=1, sizing_mode="stretch_width", layout="fit_data_stretch",
            titles=DISPLAY_COLUMNS, header_filters=False,
            formatters={
                "progress": {"type": "progress", "max": 100, "legend": True,
                             "legendAlign": "center", "color": "#9ecae1"},
                "finish_h": NumberFormatter(format="0.00"),
                "deadline_h": NumberFormatter(format="0.00"),
                "p_meet": NumberFormatter(format="0%"),
            },
            widths={"reason": 360, "placement": 220, "last_action": 150},
        )
        self.search = pn.widgets.TextInput(placeholder="filter by job name…", width=220)
        self.state_filter = pn.widgets.MultiChoice(
            options=["running", "restarting", "holding", "pending", "completed", "rejected"],
            placeholder="all states", width=360)
        self.table.add_filter(self._filter)
        self.search.param.watch(lambda e: self.table.param.trigger("value"), "value")
        self.state_filter.param.watch(lambda e: self.table.param.trigger("value"), "value")
        self.why_title = pn.pane.Markdown("Select a job to see why it is where it is.",
                                          margin=(0, 10))
        self.why = pn.widgets.Tabulator(pd.DataFrame(columns=["time_h", "policy", "action",
                                                              "applied", "reason", "detail"]),
                                        show_index=False, disabled=True, height=200,
                                        sizing_mode="stretch_width", layout="fit_data_stretch",
                                        formatters={"time_h": NumberFormatter(format="0.00")},
                                        titles={"time_h": "time (h)", "at": "at (UTC)"})
        self.table.param.watch(self._show_why, "selection")
        self._selected: str | None = None
        self.panel = pn.Column(pn.Row(self.search, self.state_filter), self.table,
                               self.why_title, self.why, sizing_mode="stretch_width", name="Jobs")
        self._seen = state.version  # the table was built from this version

    def _filter(self, df: pd.DataFrame) -> pd.DataFrame:
        mask = np.ones(len(df), dtype=bool)
        if self.search.value:
            mask &= df["job"].str.contains(self.search.value, case=False, regex=False).to_numpy()
        if self.state_filter.value:
            mask &= df["state"].isin(self.state_filter.value).to_numpy()
        return df[mask]

    def update(self) -> None:
        self.table.value = display_frame(self.state.jobs)
        if self._selected:
            self._fill_why(self._selected)

    def _show_why(self, event) -> None:
        value = self.table.value
        if not event.new or event.new[0] >= len(value):
            return
        # Remember the job, not the row: rows move as the table refreshes.
        self._selected = value.iloc[event.new[0]]["job"]
        self._fill_why(self._selected)

    def _fill_why(self, name: str) -> None:
        # Computed from the cluster now: the engine's last word may be stale (see ui.waiting).
        self.why_title.object = f"**{name}** now: {self.state.why_now(name)}"
        self.why.value = self.state.decisions_frame(last=50, job=name).drop(columns=["job"])
