"""The cluster overview of a big cluster: one cell per node coloured by the share of its GPUs
in use (light: free, dark: full, grey: down), one row per rack labelled with its name and
its share (see `ui.heatmap`). Hover names a node and its tasks; a click on a node drills down
to its rack. Nodes holding the selected job, or the selected node, are outlined.

Geometry is sent once per cluster; an update sends the nodes whose share or tasks changed and
the racks' shares, so 5,000 nodes cost a few kilobytes per tick."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Range1d, TapTool
from bokeh.palettes import Blues256
from bokeh.plotting import figure
from bokeh.transform import linear_cmap

from ..data import DOWN_COLOUR, ClusterCells
from ..heatmap import HeatLayout, node_gpu_use, rack_gpu_use
from ._sources import sync_columns

PALETTE = tuple(reversed(Blues256))[16:]  # light (a little in use) to dark (full)
FREE_CELL = "#f4f4f4"
MARK_COLOUR = "#d62728"
ROW_PX = 18  # pixels per row of racks


class Heatmap:
    def __init__(self) -> None:
        self.source = ColumnDataSource(name="node_heat")
        self.rack_source = ColumnDataSource({"x": [], "y": [], "rack": []}, name="rack_labels")
        self.share_source = ColumnDataSource({"x": [], "y": [], "text": []}, name="rack_shares")
        self.mark_source = ColumnDataSource({"left": [], "right": [], "top": [], "bottom": []},
                                            name="node_marks")
        self._sent: dict[str, np.ndarray] = {}
        self._sent_share: dict[str, np.ndarray] = {}
        self._marked: list[int] = []
        self._on_tap: Callable[[int], None] | None = None
        self.lay: HeatLayout | None = None
        self.figure = self._figure()
        self.pane = pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")

    def on_tap(self, callback: Callable[[int], None]) -> None:
        """Call `callback(node index)` when a node's cell is clicked."""
        self._on_tap = callback

    def _tapped(self, attr: str, old: list[int], new: list[int]) -> None:
        if new and self._on_tap is not None:
            self._on_tap(int(new[0]))
            self.source.selected.indices = []  # the same node may be clicked again

    def _figure(self):
        fig = figure(height=300, sizing_mode="stretch_width", tools="pan,wheel_zoom,reset",
                     name="cluster_overview",
                     active_scroll="wheel_zoom", toolbar_location="above", x_range=Range1d(),
                     y_range=Range1d(), output_backend="webgl")
        fig.axis.visible = False
        fig.grid.visible = False
        fig.outline_line_color = None
        fig.min_border = 4
        cells = fig.quad(left="left", right="right", top="top", bottom="bottom",
                         source=self.source, line_color="white", line_width=0.5,
                         fill_color=linear_cmap("use", PALETTE, 1e-3, 1.0, low_color=FREE_CELL,
                                                nan_color=DOWN_COLOUR))
        cells.selection_glyph = cells.nonselection_glyph = None
        fig.quad(left="left", right="right", top="top", bottom="bottom", source=self.mark_source,
                 fill_color=None, line_color=MARK_COLOUR, line_width=2.5)
        fig.text(x="x", y="y", text="rack", source=self.rack_source, text_font_size="8pt",
                 text_color="#333333", text_baseline="middle", text_font_style="bold")
        fig.text(x="x", y="y", text="text", source=self.share_source, text_font_size="8pt",
                 text_color="#555555", text_baseline="middle")
        fig.add_tools(HoverTool(renderers=[cells], tooltips=[
            ("node", "@node (@rack)"), ("GPUs", "@gpus_text"), ("tasks", "@tasks")]))
        fig.add_tools(TapTool(renderers=[cells]))
        self.source.selected.on_change("indices", self._tapped)
        return fig

    def set_layout(self, lay: HeatLayout) -> None:
        self.lay = lay
        self._sent, self._sent_share, self._marked = {}, {}, []
        n = len(lay.nodes)
        self.source.data = {
            "left": lay.left + 0.04, "right": lay.left + 0.96, "top": lay.top + 0.06,
            "bottom": lay.top + 0.94, "use": np.zeros(n), "node": [x.name for x in lay.nodes],
            "rack": [x.rack for x in lay.nodes], "gpus_text": [""] * n, "tasks": [""] * n}
        self.rack_source.data = {"x": lay.rack_x, "y": lay.rack_y, "rack": lay.racks}
        self.share_source.data = {"x": lay.share_x, "y": lay.rack_y,
                                  "text": [""] * len(lay.racks)}
        self.mark_source.data = {"left": [], "right": [], "top": [], "bottom": []}
        fig = self.figure
        fig.x_range.start, fig.x_range.end = -0.2, lay.width + 0.2
        fig.y_range.start, fig.y_range.end = lay.height + 0.2, -0.2  # racks read top-down
        fig.height = int(np.clip(lay.height * ROW_PX + 40, 160, 900))

    def update(self, cells: ClusterCells) -> int:
        """Send the nodes whose share or tasks changed and the racks' shares; returns the
        number of values sent."""
        lay = self.lay
        if lay is None:
            return 0
        use = node_gpu_use(cells, lay)
        in_use = np.nan_to_num(use) * lay.gpus
        gpus_text = np.array([f"{u:g}/{g:g} in use" for u, g in zip(np.round(in_use, 1),
                                                                     lay.gpus)], dtype=object)
        gpus_text[np.isnan(use)] = "node down"
        sent = sync_columns(self.source, {"use": use, "gpus_text": gpus_text,
                                          "tasks": cells.node_text}, self._sent)
        racks = rack_gpu_use(use, lay)
        share = np.array(["down" if np.isnan(r) else f"{r:.0%}" for r in racks], dtype=object)
        return sent + sync_columns(self.share_source, {"text": share}, self._sent_share)

    def mark(self, nodes: Sequence[int]) -> None:
        """Outline the cells of `nodes` (holding the selected job, or the selected node)."""
        nodes = sorted({int(i) for i in nodes})
        if nodes == self._marked or self.lay is None:
            return
        self._marked = nodes
        ids = np.asarray(nodes, dtype=int)
        left, top = self.lay.left[ids], self.lay.top[ids]
        self.mark_source.data = {"left": left, "right": left + 1.0, "top": top,
                                 "bottom": top + 1.0}


def heat_legend_html() -> str:
    """A colour bar for the overview's shares, and what grey and outlines mean."""
    stops = ", ".join(PALETTE[k] for k in range(0, len(PALETTE), max(len(PALETTE) // 8, 1)))
    return ('<div style="font-size:12px;color:#333">Each cell a node, each row a rack: GPUs in'
            ' use <span style="display:inline-block;width:120px;height:11px;margin:0 4px -1px;'
            f'background:linear-gradient(to right, {FREE_CELL}, {stops});border:1px solid #bbb">'
            '</span>0% → 100% (rack share at the row\'s end) · '
            f'<span style="white-space:nowrap"><span style="display:inline-block;width:11px;'
            f'height:11px;background:{DOWN_COLOUR};margin:0 3px -1px"></span>node down</span>'
            ' · outlined: the selected job\'s or node\'s.'
            ' Click a node to see its rack\'s GPUs.</div>')
