"""The decision log: every action the engines took, newest first, with its reason — the
record of what the scheduler did and why, across policy switches."""

from __future__ import annotations

import panel as pn
from bokeh.models.widgets.tables import NumberFormatter

from ..state import WorkbenchState
from ._base import View


class DecisionsView(View):
    def __init__(self, state: WorkbenchState, rows: int = 300) -> None:
        super().__init__(state)
        self.rows = rows
        self.show_waits = pn.widgets.Checkbox(label="include waits", value=False)
        self.show_waits.param.watch(lambda e: self.update(), "value")
        self.table = pn.widgets.Tabulator(
            state.decisions_frame(rows, include_waits=False), show_index=False, disabled=True,
            pagination="remote", page_size=20, sizing_mode="stretch_width",
            layout="fit_data_stretch", titles={"time_h": "time (h)", "at": "at (UTC)"},
            formatters={"time_h": NumberFormatter(format="0.00")}, widths={"reason": 420})
        self.panel = pn.Column(
            pn.Row(pn.pane.Markdown("Every decision, newest first; `policy` is the engine that"
                                    " took it.", margin=(0, 10)), self.show_waits),
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
