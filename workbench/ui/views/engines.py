"""Engine views for teaching: whatever the active engine's `engine_view()` returns, drawn by
the shape of each value, so a new engine needs no UI code.

- numbers, strings, short lists of names: one table of facts;
- a dict of numbers (prices per resource, growth per job, locality counts): bars now, and
  lines over time from the store's history;
- a list of numbers, or a matrix (per slot x per resource): lines, labelled by any list of
  names of matching length (e.g. `resources`) and against any matching `slots`/`times` list;
- a list of records with a `time` (price history): lines over time;
- other lists of records or dicts of records (gangs, migrations, scaling events): tables.

Known keys get a title saying what they teach (OASiS prices, DL2 action probabilities, ...)
and a fixed shape (`KINDS`), so a block is there from the first round after a switch even
while its value is still empty, and stays put as values come and go. Keys listed in the
view's `details` are data for notebooks, not drawn.

Times read in hours: a column or fact named for a time on the backend clock (`CLOCK`:
time, finish, deadline, ...) is shown as hours from the run's origin, one named for a
duration (`DURATION`: wait, slack, ...) as hours, each renamed with `_h`; other numbers are
shown to 3 significant digits.
"""

from __future__ import annotations

import math
import re
import textwrap
from typing import Any

import numpy as np
import pandas as pd
import panel as pn
from bokeh.models import ColumnDataSource, FactorRange, HoverTool
from bokeh.palettes import Category10_10
from bokeh.plotting import figure

from ..state import WorkbenchState
from ._base import View
from ._charts import legend_outside, wrapping_row
from ._panes import Markdown
from ._tables import table

# The longest line of a chart's title when two stand side by side (~6 px a character, and
# the chart's toolbar on the same line)
TITLE_CHARS = 30
# ... and of a chart as wide as the tab: in a notebook cell a longer one hid the toolbar
FULL_TITLE_CHARS = 40
# A bar chart and its history share a row where each gets this many px or more, and stand one
# above the other where not (a tab under 840 px: a window under ~1,250 px with the tabs beside
# the controls, or one under ~840 px with them below); the history's legend takes ~110 of it
HALF_MIN_WIDTH = 420
TITLES = {
    "price": "OASiS: resource prices per time slot (mean over servers)",
    "prices": "resource prices",
    "price_max": "OASiS: highest price per time slot",
    "price_history": "OASiS: price of each resource over time",
    "reserved_share": "OASiS: share of each resource reserved per slot",
    "U": "OASiS: price ceiling U per resource",
    "action_probabilities": "DL2: the policy network's action probabilities",
    "probabilities": "action probabilities",
    "growth": "SpeCon: relative growth rate of each job (slow growers migrate)",
    "recent_migrations": "SpeCon: recent migrations",
    "gangs": "DRAGON: gangs and their placement",
    "locality": "DRAGON: placement locality",
    "scaling_events": "autoscaling decisions",
    "scaling": "QoS: autoscaling decisions",
    "fragmentation": "placement plugin: fragmented GPUs per node, most fragmented first",
    "waiting_h": "DRAGON: hours each queued job has waited",
    "jobs": "QoS: each job's forecast and class",
    "classes": "QoS: jobs per class",
    "qoe": "DQoES: QoE targets met and missed",
    "allocation": "DL2: workers and PS given per job this slot",
    "queue": "the queue, in the order this engine would start it",
    "dominant_share": "dominant share (largest share of any resource held)",
    "least_allocated_score": "kube-default: least-allocated score per node (next pod goes to"
                             " the highest)",
    "jobs_per_queue": "Tiresias: jobs per priority queue",
    "hours_to_next_queue": "Tiresias: hours until each running job drops a queue (soonest"
                           " first)",
    "marginal_gain_h": "Optimus: hours one more worker would save, per job",
    "speedup": "Pollux: each job's goodput over its goodput at a fair share of the GPUs",
    "gpus": "Pollux: GPUs given per job this round",
    "workers": "workers held per job",
}
# The shape of known keys, whatever their value now (an empty dict or list has none).
KINDS = {"price": "matrix", "price_max": "matrix", "reserved_share": "matrix",
         "price_history": "timeseries", "U": "bars", "action_probabilities": "table",
         "allocation": "table", "growth": "bars", "recent_migrations": "table",
         "gangs": "table", "locality": "bars", "scaling_events": "table", "scaling": "table",
         "waiting_h": "bars", "jobs": "table", "classes": "bars", "qoe": "bars",
         "queue": "table", "fragmentation": "bars", "dominant_share": "bars",
         "least_allocated_score": "bars", "jobs_per_queue": "bars", "hours_to_next_queue": "bars",
         "marginal_gain_h": "bars", "workers": "bars", "speedup": "bars", "gpus": "bars"}
CLOCK = {"time", "finish", "low", "high", "deadline", "arrival", "since", "start", "end"}
DURATION = {"wait", "sd", "slack", "slack_at_plan", "time_to_target", "run_time", "waited"}
MAX_SERIES = 12
MAX_BARS = 40
AXES = ("slots", "times")


def _kind_of(key: str, value: Any) -> str:
    """`_kind` of the value, or the known shape of `key` (`KINDS`)."""
    kind = _kind(value)
    known = KINDS.get(key)
    if known is not None and (kind == known or _is_empty(value)):
        return known
    return kind


def _is_empty(value: Any) -> bool:
    return isinstance(value, (dict, list, tuple)) and not value


def _kind(value: Any) -> str:
    if value is None or isinstance(value, (bool, str, int, float, np.number)):
        return "fact"
    if isinstance(value, pd.DataFrame):
        return "table"
    if isinstance(value, np.ndarray):
        return "matrix" if value.ndim == 2 else "series" if value.ndim == 1 else "fact"
    if isinstance(value, dict):
        if not value:
            return "fact"
        vals = list(value.values())
        if all(_is_num(v) or v is None for v in vals):
            return "bars"
        if all(isinstance(v, dict) for v in vals):
            return "table"
        return "table" if len(value) > 3 else "fact"
    if isinstance(value, (list, tuple)):
        if not value:
            return "fact"
        if all(isinstance(v, str) for v in value):
            return "fact"
        if all(_is_num(v) or v is None for v in value):
            return "series"
        if all(isinstance(v, (list, tuple, np.ndarray)) for v in value):
            return "matrix"
        if all(isinstance(v, dict) for v in value):
            return "timeseries" if all("time" in v for v in value) and _numeric_records(value) \
                else "table"
    return "fact"


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, np.number)) and not isinstance(v, bool)


def _numeric_records(records: list[dict]) -> bool:
    first = records[0]
    return all(_is_num(v) or (isinstance(v, (list, tuple)) and all(_is_num(x) for x in v))
               for k, v in first.items() if k != "time")


def _num(v: Any) -> float:
    return float(v) if _is_num(v) and math.isfinite(float(v)) else float("nan")


def _fact_text(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, (float, np.floating)):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v[:30])) + (f" … (+{len(v) - 30})" if len(v) > 30 else "") \
            if v else "none"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_fact_text(x)}" for k, x in v.items()) or "none"
    return str(v)


def _title_lines(title: str, width: int = TITLE_CHARS) -> str:
    """A title broken into lines of at most `width` characters: Bokeh does not wrap a title,
    and one longer than its chart (one of two side by side, on a laptop's screen) ran past
    the page's right edge, so that every tab scrolled sideways."""
    return "\n".join(textwrap.wrap(title, width)) or title


class _Lines:
    """Several named lines in one figure (history, matrix columns, records over time)."""

    def __init__(self, title: str, x_label: str) -> None:
        self.source = ColumnDataSource({"xs": [], "ys": [], "name": [], "colour": []})
        self.points = ColumnDataSource({"x": [], "y": [], "colour": []})
        fig = figure(height=240, sizing_mode="stretch_width", title=title, x_axis_label=x_label,
                     tools="pan,wheel_zoom,reset", toolbar_location="above")
        r = fig.multi_line("xs", "ys", source=self.source, line_color="colour", line_width=2,
                           legend_field="name")
        # markers where a line cannot show a value: a point with no neighbour (the first round
        # after a switch, a job seen in one sample); on every point they hid the lines
        fig.scatter("x", "y", source=self.points, color="colour", size=5)
        fig.add_tools(HoverTool(renderers=[r], tooltips=[("", "@name")]))
        # beside the plot, not on it: inside, it hid the lines; and compact: a dozen jobs
        # ran past the plot's foot
        legend_outside(fig)
        legend = fig.legend[0]
        legend.label_text_font_size = "8pt"
        legend.label_height = legend.glyph_height = 12
        legend.spacing, legend.padding, legend.margin = 0, 4, 4
        self.panel = pn.pane.Bokeh(fig, sizing_mode="stretch_width")

    def set(self, x: np.ndarray | list[np.ndarray], series: dict[str, np.ndarray]) -> None:
        names = list(series)[:MAX_SERIES]
        xs = [x[k] if isinstance(x, list) else x for k in range(len(names))]
        ys = [np.asarray(series[n], dtype=float) for n in names]
        colours = [Category10_10[k % 10] for k in range(len(names))]
        self.source.data = {"xs": xs, "ys": ys, "name": names, "colour": colours}
        alone = [_isolated(y) for y in ys]
        self.points.data = {
            "x": np.concatenate([np.asarray(x)[a] for x, a in zip(xs, alone)]) if xs else
            np.zeros(0),
            "y": np.concatenate([y[a] for y, a in zip(ys, alone)]) if ys else np.zeros(0),
            "colour": [c for c, a in zip(colours, alone) for _ in range(int(a.sum()))]}


def _isolated(y: np.ndarray) -> np.ndarray:
    """The values of a line with no value beside them (NaN or the end on both sides): a line
    through them draws nothing."""
    known = np.isfinite(y)
    before = np.concatenate(([False], known[:-1]))
    after = np.concatenate((known[1:], [False]))
    return known & ~before & ~after


class _Bars:
    def __init__(self, title: str, name: str | None = None) -> None:
        self.source = ColumnDataSource({"key": [], "value": []}, name=name)
        fig = figure(height=220, sizing_mode="stretch_width", title=title, x_range=FactorRange(),
                     tools="", toolbar_location=None)
        fig.vbar(x="key", top="value", width=0.7, source=self.source, color="#4c78a8")
        fig.add_tools(HoverTool(tooltips=[("", "@key: @value{0.000}")]))
        fig.xaxis.major_label_orientation = 0.8
        fig.xgrid.grid_line_color = None
        self.figure = fig
        self.panel = pn.pane.Bokeh(fig, sizing_mode="stretch_width")

    def set(self, values: dict) -> None:
        items = [(str(k), _num(v)) for k, v in values.items()][:MAX_BARS]
        keys = [k for k, _ in items]
        if list(self.figure.x_range.factors) != keys:
            self.figure.x_range.factors = keys
        self.source.data = {"key": keys, "value": [v for _, v in items]}


class _Block:
    """One key of the engine view, drawn by its shape."""

    def __init__(self, key: str, kind: str, state: WorkbenchState) -> None:
        self.key, self.kind, self.state = key, kind, state
        title = TITLES.get(key, key.replace("_", " "))
        if kind == "bars":
            # two charts side by side: titles in lines that fit half the tab
            self.bars = _Bars(_title_lines(f"{title} (now)"), name=f"engine_{key}")
            self.history = _Lines(_title_lines(f"{title} over time"), state.time_label)
            # side by side where the tab is wide enough, else one above the other: at 800 px
            # the legend beside a half-width history left its lines 61 px
            half = f"1 1 {HALF_MIN_WIDTH}px"
            self.panel = wrapping_row((self.bars.panel, half), (self.history.panel, half))
        elif kind in ("series", "matrix", "timeseries"):
            self.lines = _Lines(_title_lines(title, FULL_TITLE_CHARS), "")
            self.panel = self.lines.panel
        else:  # table
            self.heading = title
            self.title = Markdown(f"**{title}**", margin=(0, 10))
            self.table = _table(pd.DataFrame())
            self.panel = pn.Column(self.title, self.table, sizing_mode="stretch_width")

    def update(self, value: Any, view: dict) -> None:
        if self.kind == "bars":
            self.bars.set(value)
            hist = self.state.engine_history.get(self.key, [])
            if hist:
                t = (np.array([h[0] for h in hist]) - self.state.time_origin) / 3600
                # the keys of the latest point first (they come and go: jobs), then those
                # seen most recently; the chart draws MAX_SERIES of them
                names = list(dict.fromkeys(k for _, point in reversed(hist) for k in point))
                self.history.set(t, {n: np.array([_num(p.get(n)) for _, p in hist]) for n in names})
        elif self.kind == "series":
            y = np.array([_num(v) for v in value])
            self.lines.set(_x_for(len(y), view, self.state.time_origin), {self.key: y})
        elif self.kind == "matrix":
            m = np.array([[_num(x) for x in row] for row in value], dtype=float)
            if m.ndim != 2:
                return
            names = _names_for(m.shape[1], view)
            self.lines.set(_x_for(m.shape[0], view, self.state.time_origin),
                           {names[k]: m[:, k] for k in range(m.shape[1])})
        elif self.kind == "timeseries":
            if not value:
                self.lines.set(np.zeros(0), {})
                return
            t = (np.array([_num(r["time"]) for r in value]) - self.state.time_origin) / 3600
            series: dict[str, np.ndarray] = {}
            for k in value[0]:
                if k == "time":
                    continue
                first = value[0][k]
                if isinstance(first, (list, tuple)):
                    cols = np.array([list(map(_num, r[k])) for r in value], dtype=float)
                    names = _names_for(cols.shape[1], view)
                    for j in range(cols.shape[1]):
                        series[f"{k} {names[j]}"] = cols[:, j]
                else:
                    series[k] = np.array([_num(r.get(k)) for r in value])
            self.lines.set(t, series)
        else:
            # an engine lists the head of its queue (`teaching.ROWS`): 20 of 1,340 read as all
            total = view.get("waiting_jobs") if self.key == "queue" else None
            part = f": the first {len(value)} of {total:,}" if isinstance(total, int) and \
                total > len(value) else ""
            heading = f"**{self.heading}**{part}"
            if self.title.object != heading:
                self.title.object = heading
            frame = _frame(value, self.state.time_origin) if len(value) else \
                pd.DataFrame({"status": ["none now"]})
            if list(frame.columns) == list(self.table.value.columns):
                self.table.value = frame
            else:  # new columns, a new table: the browser may not have drawn the old one yet
                self.table = _table(frame)
                self.panel.objects = [self.title, self.table]


def _table(frame: pd.DataFrame) -> pn.widgets.Tabulator:
    """The console's table (`_tables.table`): its text wraps and its columns fit the tab; sized
    to its data, a long reason ran past the tab's right edge and was cut."""
    text = [c for c in frame.columns if frame[c].map(lambda x: isinstance(x, str)).any()]
    titles = {c: _label(str(c)) for c in frame.columns}
    # QoS's and DQoES's tables have 20-odd columns and scroll sideways on a laptop: the
    # job's name stays in view
    frozen = [c for c in frame.columns[:1] if c == "job"]
    return table(frame, wrap=text, titles=titles, pagination="local", page_size=10,
                 name="engine-table", min_widths={c: _word_width(frame[c]) for c in text},
                 frozen=frozen)


def _word_width(column: pd.Series) -> int:
    """Pixels for the longest word of a text column's values (~7 px a letter, at most 150):
    text wraps between words, and a job's name ('deepspeech2-1') or 'observed' was cut."""
    words = (w for x in column if isinstance(x, str) for w in x.split())
    return min(7 * max(map(len, words), default=0) + 14, 150)


def _names_for(n: int, view: dict) -> list[str]:
    for v in view.values():
        if isinstance(v, (list, tuple)) and len(v) == n and all(isinstance(x, str) for x in v):
            return list(v)
    return [str(k) for k in range(n)]


def _x_for(n: int, view: dict, origin: float = 0.0) -> np.ndarray:
    for key in ("slots", "times", "time", "t"):
        v = view.get(key)
        if isinstance(v, (list, tuple, np.ndarray)) and len(v) == n and all(_is_num(x) for x in v):
            # times on the backend clock, in hours from the run's origin
            return (np.asarray(v, dtype=float) - origin) / 3600
    return np.arange(n, dtype=float)


def _frame(value: Any, origin: float = 0.0) -> pd.DataFrame:
    """A table of records (or of a dict of records, keyed by `job` when the keys are jobs'):
    nested values as text, times in hours (`_in_hours`), numbers to 3 significant digits."""
    if isinstance(value, pd.DataFrame):
        df = value.copy()
    else:
        if isinstance(value, dict):  # keyed records: the key first, unless a column has it
            rows = [v if isinstance(v, dict) and v.get("job") == k else
                    {"key": k, **(v if isinstance(v, dict) else {"value": v})}
                    for k, v in value.items()]
        else:
            rows = [v if isinstance(v, dict) else {"value": v} for v in value]
        df = pd.DataFrame(rows)
    renames = {}
    for c in list(df.columns):
        col = df[c]
        if col.map(lambda x: isinstance(x, (dict, list, tuple, set))).any():
            df[c] = col.map(_fact_text)  # nested values shown as text
            continue
        hours = _in_hours(str(c), col, origin)
        if hours is not None:
            df[c], renames[c] = hours, f"{c}_h"
        elif col.map(lambda x: isinstance(x, (float, np.floating))).any():
            df[c] = col.map(_round)
    return df.rename(columns=renames)


def _in_hours(name: str, col: pd.Series, origin: float) -> pd.Series | None:
    """`col` in hours when `name` says it is a time on the clock or a duration in seconds."""
    if name not in CLOCK and name not in DURATION:
        return None
    numeric = pd.to_numeric(col, errors="coerce")
    if numeric.isna().all():
        return None
    shift = origin if name in CLOCK else 0.0
    return ((numeric - shift) / 3600.0).map(_round)


def _round(x: Any) -> Any:
    if isinstance(x, (float, np.floating)):
        if math.isfinite(x):
            return float(f"{x:.3g}")
        if math.isinf(x):  # (the page wrote "-Infinity": a job's slack at a size that never ends)
            return "∞" if x > 0 else "−∞"
    return x


def _label(key: str) -> str:
    """A key as a title or a fact's name, in words that wrap in a narrow column
    ("attained_gpu_h" was cut to "attained_gpu", "queue_thresholds_gpu_h" at 1,024 px)."""
    return re.sub(r"_h$", " (h)", key).replace("_", " ")


def _fact_row(key: str, value: Any, origin: float) -> tuple[str, str]:
    """One row of the facts table: a time on the clock or a duration shown in hours."""
    if _is_num(value) and (key in CLOCK or key in DURATION):
        shift = origin if key in CLOCK else 0.0
        return _label(f"{key}_h"), f"{(float(value) - shift) / 3600.0:.3g}"
    return _label(key), _fact_text(value)


class EngineView(View):
    def __init__(self, state: WorkbenchState) -> None:
        super().__init__(state)
        self.header = Markdown("", margin=(0, 10))
        self.facts = table(pd.DataFrame(columns=["fact", "value"]), wrap=["fact", "value"],
                           name="engine-facts")
        self.body = pn.Column(sizing_mode="stretch_width")
        self.blocks: dict[str, _Block] = {}
        self._signature: tuple | None = None
        self._policy = ("", False)  # (engine shown, before its first round)
        self.panel = pn.Column(self.header, self.facts, self.body, sizing_mode="stretch_width",
                               name="Engine")
        self.sync()

    def update(self) -> None:
        view = dict(self.state.engine or {})
        for key in [*view.get("details", ()), "details"]:  # data for notebooks
            view.pop(key, None)
        for key in AXES:  # the x axis of other values, not a value of its own
            if isinstance(view.get(key), (list, tuple, np.ndarray)):
                view.pop(key)
        name = self.state.engine_name
        waits = not self.state.controller.engine_has_scheduled
        if (name, waits) != self._policy:
            if name != self._policy[0]:  # another engine: its own blocks, none kept from the last
                self.blocks, self._signature = {}, None
            self._policy = (name, waits)
            # (switched while paused: the values below are the engine's before any round)
            first = f"\n\n*{name} has not scheduled a round yet: its view fills in at the next" \
                " one.*" if waits else ""
            self.header.object = f"### Engine: {name}\n{self.state.engine_about}{first}"
        kinds = {k: _kind_of(k, v) for k, v in view.items()}
        origin = self.state.time_origin
        facts = [_fact_row(k, v, origin) for k, v in view.items() if kinds[k] == "fact"]
        self.facts.visible = bool(facts)
        if facts:
            self.facts.value = pd.DataFrame(facts, columns=["fact", "value"])
        # A chart of nothing is a blank box: it appears with its first value (a fact says why
        # there is none yet), then stays, so the blocks do not come and go round by round.
        signature = tuple((k, kd) for k, kd in kinds.items() if kd != "fact" and (
            kd == "table" or not _is_empty(view[k]) or k in self.blocks))
        if signature != self._signature:
            self._signature = signature
            # The engine's blocks whose key and shape stay keep their figures.
            self.blocks = {k: self.blocks[k] if k in self.blocks and self.blocks[k].kind == kd
                           else _Block(k, kd, self.state) for k, kd in signature}
            if self.blocks or facts:
                self.body.objects = [b.panel for b in self.blocks.values()]
            else:
                self.body.objects = [Markdown(
                    f"*{name} reports nothing yet.* It shows its view from its first round.",
                    margin=(0, 10))]
        for k, block in self.blocks.items():
            block.update(view[k], view)
