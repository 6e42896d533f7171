"""The decision log: every action the engines took, newest first, with its reason — the
record of what the scheduler did and why, across policy switches. New decisions come in at
the top; the rows below keep their order, and the user may sort by any column. The whole
log downloads as CSV (oldest first, see `ui.export`)."""

from __future__ import annotations

import panel as pn

from .. import export
from ..state import WorkbenchState
from ._base import View, widget_row
from ._panes import Markdown
from ._tables import csv_download, table


class DecisionsView(View):
    def __init__(self, state: WorkbenchState, rows: int = 300) -> None:
        super().__init__(state)
        self.rows = rows
        self.show_waits = pn.widgets.Checkbox(label="include waits", value=False, align="center")
        self.show_waits.param.watch(lambda e: self.update(), "value")
        self.table = table(
            state.decisions_frame(rows, include_waits=False), name="decisions-table",
            pagination="remote", page_size=20, titles={"time_h": "time (h)", "at": "at (UTC)"},
            hours=("time_h",), wrap=("reason", "detail"),
            # on a small laptop's screen (1,024 px) the detail stays in view
            hide_first=("applied", "policy"))
        self.download = csv_download(
            "Download log (CSV)", "workbench-decisions.csv",
            lambda: export.decisions(state, include_waits=self.show_waits.value))
        self.panel = pn.Column(
            # the policy column gives way on a small screen: the sentence holds either way
            widget_row(Markdown("Every decision, newest first; `policy` is the engine that"
                                " took it (on a small screen, in the CSV).", margin=(0, 10),
                                align="center"),
                       self.show_waits, self.download),
            self.table, sizing_mode="stretch_width", name="Decisions")
        self._count: tuple = ()
        self.sync()

    def update(self) -> None:
        # The recorder is a new one when the store moved to another backend.
        n = (id(self.state.recorder), len(self.state.recorder.decisions))
        if n == self._count and self.show_waits.value == self._waits:
            return
        self._count, self._waits = n, self.show_waits.value
        self.table.value = self.state.decisions_frame(self.rows, include_waits=self.show_waits.value)

    _waits = False
