"""What every table of the console shares, so they read alike and survive a refresh:

- counts print as integers ("4", never "4.0"), hours with two decimals, shares as percents;
- long text (reasons, placements, details) wraps inside its cell instead of being cut, and
  the columns fit the width of the tab (no column pushed off the right edge);
- rows keep their order between refreshes (the caller gives a stable order) and the user
  may sort by any column (header click; the sort survives refreshes);
- a selection follows its row's key (a job), not its position: `KeyedSelection`.

Tabulator picks a column's formatter from the first value it is shown, so a count column
first shown empty (float) would print "4.0" forever: the formatters here are explicit.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
import panel as pn
from bokeh.models.widgets.tables import NumberFormatter

COUNT = NumberFormatter(format="0,0", text_align="right")
HOURS = NumberFormatter(format="0.00", text_align="right")
SHARE = NumberFormatter(format="0%", text_align="right")
WRAP = {"type": "textarea"}  # Tabulator's multi-line formatter: the row grows to fit the text
# Header titles wrap rather than being cut when a column is narrow.
COLUMN_DEFAULTS = {"headerWordWrap": True, "minWidth": 48}
# Columns share the tab's width in proportion to `widthGrow` (text that wraps gets more),
# never narrower than `minWidth`; any column not named here gets a share of 1.
COLUMNS = {
    # wide enough for "namespace/deepspeech2-17" (a cluster watched in every namespace)
    "job": {"minWidth": 150, "widthGrow": 1.6, "tooltip": True},
    "policy": {"minWidth": 96, "widthGrow": 1.2},
    "completed": {"minWidth": 84}, "rejected": {"minWidth": 72}, "unfinished": {"minWidth": 84},
    "makespan_h": {"minWidth": 82}, "restarts": {"minWidth": 70}, "stalled": {"minWidth": 62},
    "deadline_hit_rate": {"minWidth": 78}, "avg_queue_h": {"minWidth": 66},
    "median_jct_h": {"minWidth": 72},
    "app": {"minWidth": 64}, "state": {"minWidth": 75}, "action": {"minWidth": 70},
    "progress": {"minWidth": 84}, "band": {"minWidth": 96, "widthGrow": 1.3},
    "placement": {"minWidth": 94, "widthGrow": 2.2},
    "last_action": {"minWidth": 100, "widthGrow": 1.4}, "workers": {"minWidth": 78},
    "arrival_h": {"minWidth": 64}, "deadline_h": {"minWidth": 76}, "p_meet": {"minWidth": 78},
    "time_h": {"minWidth": 64}, "applied": {"minWidth": 66, "sorter": "boolean"},
    "finish_h": {"minWidth": 52},
    "reason": {"minWidth": 100, "widthGrow": 4}, "detail": {"minWidth": 140, "widthGrow": 3},
    "note": {"minWidth": 120, "widthGrow": 2.5},
    "fact": {"minWidth": 150, "widthGrow": 1.2}, "value": {"minWidth": 120, "widthGrow": 4},
}
# Tabulator puts a column's sort arrow beside its title, in a 25 px right padding that a word
# wider than the rest of a narrow column runs into ("completed" under the arrow). The arrow
# goes below the titles instead, at the header's foot, and the title keeps the full width.
# (!important: Panel adds these rules before Tabulator's theme, whose selectors weigh as much.)
HEADER_CSS = """
.tabulator { font-family: Helvetica, Arial, sans-serif; }
.tabulator-col.tabulator-sortable .tabulator-col-title { padding-right: 0 !important; }
.tabulator-col .tabulator-col-content { position: static !important;
  padding-bottom: 14px !important; }
.tabulator-col .tabulator-col-title-holder { position: static !important; }
.tabulator-col .tabulator-col-content .tabulator-col-sorter { top: auto !important;
  bottom: 3px !important; }
.tabulator-cell { overflow-wrap: anywhere; }
"""
# (the first rule: the font the columns' widths are measured in, Bokeh's; in JupyterLab the
# table inherited its wider system-ui from Panel's jupyter.css and titles were cut, "complete";
# the last: a wrapped cell's word longer than its column breaks rather than being cut)


def table(value: pd.DataFrame, *, counts: Iterable[str] = (), hours: Iterable[str] = (),
          shares: Iterable[str] = (), wrap: Iterable[str] = (),
          formatters: Mapping[str, Any] | None = None, name: str | None = None,
          hide_first: Sequence[str] = (), min_widths: Mapping[str, int] | None = None,
          frozen: Sequence[str] = (), **params: Any) -> pn.widgets.Tabulator:
    """A read-only table with the console's formats: `counts` as integers, `hours` with two
    decimals, `shares` as percents, `wrap` text wrapped in its cell. `hide_first`: columns
    hidden, in that order, while the table is wider than its place (a laptop's screen); the
    others never are (the table scrolls sideways if hiding those is not enough).
    `min_widths`: the least width of columns the console has none for (by default as wide as
    their title's longest word). `frozen`: columns kept at the left edge while the table
    scrolls sideways (a row's key). `params` go to Tabulator (titles, widths, pagination, ...)."""
    numbers = {c: COUNT for c in counts} | {c: HOURS for c in hours} | {c: SHARE for c in shares}
    fmt: dict[str, Any] = numbers | {c: WRAP for c in wrap} | dict(formatters or {})
    if "job" in value.columns:  # a row's key is read whole: "namespace/deepspeech2-22" was cut
        fmt.setdefault("job", WRAP)
    specs = {field: dict(spec) for field, spec in COLUMNS.items()}
    titles = params.get("titles") or {}
    for field in value.columns:
        if field not in COLUMNS:  # as wide as its title's longest word (~8 px a bold letter)
            longest = max(map(len, str(titles.get(field, field)).split()), default=0)
            least = max(COLUMN_DEFAULTS["minWidth"], 8 * longest + 12)
            specs[field] = {"minWidth": max(least, (min_widths or {}).get(field, 0))}
    config: dict[str, Any] = {"columnDefaults": COLUMN_DEFAULTS}
    if hide_first:
        config["responsiveLayout"] = "hide"
        for field in value.columns:  # Tabulator hides the highest `responsive` first; 0 never
            specs.setdefault(field, {})["responsive"] = 0
        for rank, field in enumerate(hide_first):
            specs.setdefault(field, {})["responsive"] = len(hide_first) - rank
    # Panel gives a number column its sorter from the frame's dtype: a table first shown empty
    # (object dtype) changed its configuration with its first rows, and Tabulator rebuilt
    # itself then, racing the cell styles sent with the next rows (a page error)
    for field, formatter in fmt.items():  # (a number's formatter may be given, in JavaScript)
        if field in numbers or isinstance(formatter, NumberFormatter):
            specs.setdefault(field, {})["sorter"] = "number"
    for field in frozen:  # stays in view while the table scrolls sideways
        specs.setdefault(field, {})["frozen"] = True
    config["columns"] = [{"field": field, **spec} for field, spec in specs.items()]
    options: dict[str, Any] = {"show_index": False, "disabled": True,
                               "sizing_mode": "stretch_width", "layout": "fit_columns",
                               "configuration": config}
    params["stylesheets"] = [HEADER_CSS, *params.get("stylesheets", ())]
    if name:
        options["css_classes"] = [name]  # a handle for tests and style sheets
    return pn.widgets.Tabulator(value, formatters=fmt, **(options | params))


class KeyedSelection:
    """Keeps a Tabulator's single selection on a key (column `key`) across refreshes, however
    the rows move: Panel's selection is a row position, and with remote pagination a new
    value even clears it. Only a click chooses the key (a second click on it clears it):
    the selections the browser reports include stale echoes of a refresh (a position in the
    rows as they were), which would otherwise move the selection to another job.
    `on_select(key or None)` is called when the user changes it."""

    def __init__(self, widget: pn.widgets.Tabulator, key: str,
                 on_select: Callable[[str | None], None]) -> None:
        self.widget, self.key, self.on_select = widget, key, on_select
        self.selected: str | None = None
        self._refreshing = False
        widget.on_click(self._clicked)

    def set_value(self, value: pd.DataFrame) -> None:
        """Show `value`, then put the selection back on the selected key's new row."""
        self._refreshing = True
        try:
            self.widget.value = value
            self._reselect(resend=True)
        finally:
            self._refreshing = False

    def select(self, key: str | None) -> None:
        """Select the row of `key` (None: none), as if the user had clicked it."""
        self.selected = key
        self._refreshing = True
        try:
            self._reselect()
        finally:
            self._refreshing = False
        self.on_select(key)

    def _reselect(self, resend: bool = False) -> None:
        """Select the key's row; `resend`: also when Panel holds it already, as the browser
        may show a stale echo in its place."""
        value = self.widget.value
        rows = [] if self.selected is None else \
            [int(i) for i in (value[self.key] == self.selected).to_numpy().nonzero()[0][:1]]
        if self.widget.selection != rows:
            self.widget.selection = rows
        elif resend:
            self.widget.param.trigger("selection")

    def _clicked(self, event) -> None:
        value = self.widget.value
        if not 0 <= event.row < len(value):
            return
        key = str(value.iloc[event.row][self.key])
        self.select(None if key == self.selected else key)


def csv_download(label: str, filename: str, frame: Callable[[], pd.DataFrame]
                 ) -> pn.widgets.FileDownload:
    """A button that downloads `frame()` (computed when clicked) as a CSV file."""

    def write() -> io.BytesIO:
        return io.BytesIO(frame().to_csv(index=False).encode())

    return pn.widgets.FileDownload(callback=write, filename=filename, label=label,
                                   color="light", embed=False, width=210,
                                   align="end")
