"""What the charts share: a colour per engine that no other engine has (and the same in every
chart and every run), legends beside the plot rather than over the data, rows of charts that
go onto more lines in a narrow tab, and the what-if's completion-time CDF over all jobs with
its legend, labelled with how many each engine completed and rejected.
"""

from __future__ import annotations

import html

import numpy as np
import panel as pn
from bokeh.plotting import figure

from ...policies import available
from ...whatif import WhatIfResult

# Fourteen colours told apart on white (a subset of Trubetskoy's 20 distinct colours, with
# black): more than there are engines; past them colours repeat dashed.
ENGINE_PALETTE = ("#4363d8", "#e6194b", "#3cb44b", "#f58231", "#911eb4", "#42d4f4", "#f032e6",
                  "#469990", "#9a6324", "#800000", "#808000", "#000075", "#a9a9a9", "#000000")


def engine_style(name: str) -> tuple[str, str]:
    """(colour, dash) of engine `name`, by its place among the registered engines (a plugin
    variant such as fifo+fgd after them), so an engine keeps its colour whichever are shown."""
    engines = available()
    base = name.split("+")[0]
    k = engines.index(name) if name in engines else \
        len(engines) + (engines.index(base) if base in engines else 0) + (name != base)
    return ENGINE_PALETTE[k % len(ENGINE_PALETTE)], \
        ("solid" if k < len(ENGINE_PALETTE) else "dashed")


def legend_outside(fig: figure, place: str = "right") -> None:
    """Move `fig`'s legend beside the plot (a legend inside hides the lines under it)."""
    for legend in list(fig.legend):
        fig.center = [r for r in fig.center if r is not legend]
        legend.location = "top_left"
        legend.label_text_font_size = "9pt"
        legend.spacing = 1
        fig.add_layout(legend, place)


# Panel gives a stretching Row the sum of its items' least widths as its own, on the element's
# style (an explicit min_width is overridden); items that wrap need only the widest of them
SHRINKS = ":host { min-width: 0 !important; }"


def wrapping_row(*items: tuple[pn.viewable.Viewable, str]) -> pn.Row:
    """The `(item, CSS flex)` pairs side by side where the tab is wide enough for their flex
    bases, on more lines where not (a notebook cell). A Row whose CSS wraps: Panel's FlexBox
    with Bokeh charts in it overflowed Bokeh's layout stack and hung the page."""
    for item, flex in items:
        # (given to a Bokeh pane's constructor, Bokeh's own stays); min-width 0: alone on a line
        # narrower than its basis (a phone), an item shrinks to it rather than push the page
        # sideways, and a table in it scrolls within itself
        item.styles = {"flex": flex, "min-width": "0"}
    return pn.Row(*(item for item, _ in items), sizing_mode="stretch_width",
                  styles={"flex-wrap": "wrap"}, stylesheets=[SHRINKS])


def html_legend(cdf: dict[str, list]) -> str:
    """A legend of `jct_cdf`'s lines as HTML, one entry a line: a pane of its own beside the
    chart where the tab is wide, below it where not (a Bokeh legend stays beside its plot, and
    in an 800 px notebook cell it left the curves 134 px)."""
    swatch = ("display: inline-block; width: 22px; margin-right: 6px; vertical-align: middle;"
              " border-top: 2px {dash} {colour}")
    # an entry longer than the pane (counts of a whole trace) wraps under its own swatch's line
    entries = (f'<div class="entry" style="padding-left: 28px; text-indent: -28px"><span style="'
               f'{swatch.format(dash=dash, colour=colour)}"></span>{html.escape(label)}</div>'
               for label, colour, dash in zip(cdf["label"], cdf["colour"], cdf["dash"]))
    return f'<div style="font-size: 12px; line-height: 18px">{"".join(entries)}</div>'


def outcome_label(name: str, completed: int, rejected: int, total: int) -> str:
    """An engine's legend entry: its name with the counts its averages rest on."""
    rejected_text = f", {rejected} rejected" if rejected else ""
    return f"{name}: {completed}/{total} done{rejected_text}"


def jct_cdf(result: WhatIfResult) -> dict[str, list]:
    """The what-if CDF source: per engine, the completion times (h) of its completed jobs
    against the share of ALL its jobs done by then. A curve that ends below 1 left jobs
    rejected or unfinished, so a short average over few jobs does not look like a win."""
    counts = result.table.set_index("policy")
    data: dict[str, list] = {"xs": [], "ys": [], "policy": [], "label": [], "colour": [],
                             "dash": []}
    for name, jct in result.jct_h.items():
        jct = np.sort(jct[jct > 0])
        row = counts.loc[name] if name in counts.index else None
        done = len(jct) if row is None else int(row["completed"])
        rejected = 0 if row is None else int(row["rejected"])
        total = done if row is None else int(row["completed"] + row["rejected"]
                                             + row["unfinished"])
        if not total:
            continue
        # An engine that completed nothing still gets its legend entry (and an empty line).
        colour, dash = engine_style(name)
        data["xs"].append(jct)
        data["ys"].append(np.arange(1, len(jct) + 1) / total)
        data["policy"].append(name)
        data["label"].append(outcome_label(name, done, rejected, total))
        data["colour"].append(colour)
        data["dash"].append(dash)
    return data
