"""The per-GPU picture of some nodes: each GPU a cell coloured by the job holding it, a shared
GPU filled to the fraction in use, CPU and memory bars beside them, nodes grouped by rack.

The cluster tab shows every node this way on a small cluster and one rack at a time (the
drill-down) on a big one. One Bokeh figure, quads fed by ColumnDataSources; geometry is
sent when the nodes shown change, and each update patches only the cells whose fill, colour
or hover text changed. Cells of the selected job are outlined (`mark`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Range1d, TapTool
from bokeh.plotting import figure

from ..data import (
    BAR_W,
    FREE_COLOUR,
    GAP,
    GPU_W,
    ROW_H,
    ClusterCells,
    ClusterLayout,
    cluster_layout,
)
from ..state import WorkbenchState
from ._sources import sync_columns

CPU_COLOUR, MEM_COLOUR, BAR_BG = "#4c78a8", "#b279a2", "#f2f2f2"
CELL_BG, CELL_LINE, MARK_COLOUR = "#f7f7f7", "#c9c9c9", "#d62728"
DRILL_COLUMN = 10  # a drilled rack is drawn in columns of this many nodes


class GpuGrid:
    def __init__(self, state: WorkbenchState, height: int | None = None) -> None:
        self.state = state
        self.gpu_source = ColumnDataSource(name="gpu_cells")
        self.node_source = ColumnDataSource(name="node_bars")
        self.mark_source = ColumnDataSource({"left": [], "right": [], "top": [], "bottom": []},
                                            name="gpu_marks")
        self.rack_source = ColumnDataSource({"x": [], "y": [], "rack": []})
        self.header_source = ColumnDataSource({"x": [], "y": [], "text": []})
        self.label_source = ColumnDataSource({"x": [], "y": [], "node": []}, name="node_labels")
        self._height = height
        self._sent_gpu: dict[str, np.ndarray] = {}
        self._sent_node: dict[str, np.ndarray] = {}
        self._marked: list[int] = []
        self.node_ids: list[int] = []
        self._cell_index = np.zeros(0, dtype=int)
        self._on_tap: Callable[[int], None] | None = None
        self.figure = self._figure()
        self.pane = pn.pane.Bokeh(self.figure, sizing_mode="stretch_width")

    def on_tap(self, callback: Callable[[int], None]) -> None:
        """Call `callback(flat cell index)` when a GPU cell is clicked."""
        self._on_tap = callback

    def _tapped(self, attr: str, old: list[int], new: list[int]) -> None:
        if new and self._on_tap is not None and new[0] < len(self._cell_index):
            self._on_tap(int(self._cell_index[new[0]]))
            self.gpu_source.selected.indices = []  # the same cell may be clicked again

    def _figure(self):
        fig = figure(height=self._height or 300, sizing_mode="stretch_width", name="cluster_gpus",
                     tools="pan,wheel_zoom,box_zoom,reset", active_scroll="wheel_zoom",
                     toolbar_location="above", x_range=Range1d(), y_range=Range1d(),
                     output_backend="webgl")
        fig.axis.visible = False
        fig.grid.visible = False
        fig.outline_line_color = None
        fig.min_border = 4
        bg = fig.quad(left="left", right="right", top="y0", bottom="y1", source=self.gpu_source,
                      fill_color=CELL_BG, line_color=CELL_LINE, line_width=0.5)
        fill = fig.quad(left="left", right="right", top="fy", bottom="y1", source=self.gpu_source,
                        fill_color="colour", line_color=None)
        for r in (bg, fill):  # a click selects a job, it does not dim the others
            r.selection_glyph = r.nonselection_glyph = None
        cpu_bg = fig.quad(left="cpu_left", right="cpu_full", top="y0", bottom="y1",
                          source=self.node_source, fill_color=BAR_BG, line_color=CELL_LINE,
                          line_width=0.5)
        fig.quad(left="cpu_left", right="cpu_right", top="y0", bottom="y1", source=self.node_source,
                 fill_color=CPU_COLOUR, line_color=None)
        mem_bg = fig.quad(left="mem_left", right="mem_full", top="y0", bottom="y1",
                          source=self.node_source, fill_color=BAR_BG, line_color=CELL_LINE,
                          line_width=0.5)
        fig.quad(left="mem_left", right="mem_right", top="y0", bottom="y1", source=self.node_source,
                 fill_color=MEM_COLOUR, line_color=None)
        fig.quad(left="left", right="right", top="top", bottom="bottom", source=self.mark_source,
                 fill_color=None, line_color=MARK_COLOUR, line_width=2.5)
        fig.text(x="x", y="y", text="rack", source=self.rack_source, text_font_size="9pt",
                 text_color="#444444", text_baseline="bottom", text_font_style="bold")
        fig.text(x="x", y="y", text="text", source=self.header_source, text_font_size="8pt",
                 text_color="#666666", text_baseline="bottom")
        fig.text(x="x", y="y", text="node", source=self.label_source, text_font_size="8pt",
                 text_color="#555555", text_baseline="middle", text_align="right")
        fig.add_tools(HoverTool(renderers=[bg], tooltips=[
            ("node", "@node (@rack)"), ("GPU", "@gpu: @used{0%} in use"), ("held by", "@text")]))
        fig.add_tools(HoverTool(renderers=[cpu_bg, mem_bg], tooltips=[
            ("node", "@node (@rack)"), ("CPU", "@cpu_text"), ("memory", "@mem_text"),
            ("tasks", "@tasks")]))
        fig.add_tools(TapTool(renderers=[bg]))
        self.gpu_source.selected.on_change("indices", self._tapped)
        return fig

    def show(self, node_ids: Sequence[int], drilled: bool = False) -> None:
        """Draw the nodes `node_ids` (indices into the store's nodes); a `drilled` rack is
        drawn in columns of `DRILL_COLUMN` nodes, labelled with its name."""
        nodes = self.state.layout.nodes
        self.node_ids = list(node_ids)
        shown = [nodes[i] for i in self.node_ids]
        if drilled and len(shown) > DRILL_COLUMN:
            parts = -(-len(shown) // DRILL_COLUMN)
            shown = [replace(n, rack=f"{n.rack} ({k // DRILL_COLUMN + 1}/{parts})")
                     for k, n in enumerate(shown)]
        self._set_geometry(cluster_layout(shown) if shown else None)

    def _set_geometry(self, lay: ClusterLayout | None) -> None:
        """Static geometry of the nodes shown; the dynamic columns follow in `update`."""
        self._sent_gpu, self._sent_node, self._marked = {}, {}, []
        self.mark_source.data = {"left": [], "right": [], "top": [], "bottom": []}
        if lay is None:
            self._cell_index = np.zeros(0, dtype=int)
            self.gpu_source.data = {k: [] for k in ("left", "right", "y0", "y1", "fy", "colour",
                                                    "text", "used", "node", "rack", "gpu")}
            self.node_source.data = {k: [] for k in (
                "cpu_left", "cpu_full", "cpu_right", "mem_left", "mem_full", "mem_right", "y0",
                "y1", "node", "rack", "cpu_text", "mem_text", "tasks")}
            for s in (self.rack_source, self.header_source, self.label_source):
                s.data = {k: [] for k in s.data}
            return
        g_all = self.state.layout.max_gpus  # the store's cells are (node, GPU) at this width
        boxes = lay.gpu_boxes()
        ids = np.asarray(self.node_ids)
        exists = boxes["gpu_i"] < np.array([int(n.gpus) for n in lay.nodes])[boxes["node_i"]]
        keep = np.flatnonzero(exists)
        node_i = boxes["node_i"][keep]
        self._cell_index = ids[node_i] * g_all + boxes["gpu_i"][keep]
        names = np.array([n.name for n in lay.nodes], dtype=object)
        racks = np.array([self.state.layout.nodes[i].rack for i in ids], dtype=object)
        self._boxes = {k: boxes[k][keep] for k in ("left", "right", "top", "bottom")}
        self.gpu_source.data = {
            "left": self._boxes["left"], "right": self._boxes["right"],
            "y0": self._boxes["top"], "y1": self._boxes["bottom"], "fy": self._boxes["bottom"],
            "colour": [FREE_COLOUR] * len(keep), "text": ["free"] * len(keep),
            "used": np.zeros(len(keep)), "node": list(names[node_i]),
            "rack": list(racks[node_i]), "gpu": boxes["gpu_i"][keep],
        }
        cpu, mem = lay.bar_boxes("cpu"), lay.bar_boxes("mem")
        n = len(lay.nodes)
        self.node_source.data = {
            "cpu_left": cpu["left"], "cpu_full": cpu["right"], "cpu_right": cpu["left"].copy(),
            "mem_left": mem["left"], "mem_full": mem["right"], "mem_right": mem["left"].copy(),
            "y0": cpu["top"], "y1": cpu["bottom"], "node": list(names), "rack": list(racks),
            "cpu_text": [""] * n, "mem_text": [""] * n, "tasks": [""] * n,
        }
        self._bar_left = (cpu["left"], mem["left"])
        self._bar_width = cpu["right"] - cpu["left"]
        self._cell_height = self._boxes["bottom"] - self._boxes["top"]
        self._label(lay, names)
        fig = self.figure
        fig.x_range.start, fig.x_range.end = -0.5, lay.width + 0.5
        fig.y_range.start, fig.y_range.end = lay.height + 0.2, -0.2  # racks read top-down
        fig.height = self._height or int(np.clip(900 / (lay.width / lay.height), 260, 760))

    def _label(self, lay: ClusterLayout, names: np.ndarray) -> None:
        self.rack_source.data = {"x": lay.rack_x, "y": lay.rack_y - 0.15, "rack": lay.racks}
        shown = lay.label_w > 0
        first = lay.rack_x + lay.label_w
        self.header_source.data = {
            "x": np.concatenate([first + lay.max_gpus * GPU_W + GAP,
                                 first + lay.max_gpus * GPU_W + GAP * 1.5 + BAR_W]),
            "y": np.concatenate([lay.rack_y - 0.1] * 2),
            "text": ["CPU"] * len(first) + ["memory"] * len(first)} if shown else \
            {"x": [], "y": [], "text": []}  # on big layouts the legend says which bar is which
        self.label_source.data = {"x": lay.node_x + lay.label_w - 0.2 if shown else [],
                                  "y": lay.node_y + ROW_H / 2 if shown else [],
                                  "node": list(names) if shown else []}

    def update(self, cells: ClusterCells) -> int:
        """Patch the cells and bars that changed; returns the number of values sent."""
        if not self.node_ids:
            return 0
        idx = self._cell_index
        used = cells.gpu_used[idx]
        gpu_cols = {"fy": self._boxes["bottom"] - used * self._cell_height,
                    "colour": cells.gpu_colour[idx], "text": cells.gpu_text[idx], "used": used}
        sent = sync_columns(self.gpu_source, gpu_cols, self._sent_gpu)
        ids = self.node_ids
        caps = self.state.cluster_state.capacity[ids]
        alloc = self.state.cluster_state.allocated[ids]
        cpu_left, mem_left = self._bar_left
        node_cols = {
            "cpu_right": cpu_left + cells.cpu_used[ids] * self._bar_width,
            "mem_right": mem_left + cells.mem_used[ids] * self._bar_width,
            "tasks": cells.node_text[ids],
            "cpu_text": _pair_text(alloc[:, 0], caps[:, 0], ""),
            "mem_text": _pair_text(alloc[:, 1], caps[:, 1], " GiB"),
        }
        return sent + sync_columns(self.node_source, node_cols, self._sent_node)

    def mark(self, cells: Sequence[int]) -> None:
        """Outline the shown ones of the flat cells `cells` (the selected job's GPUs)."""
        where = np.flatnonzero(np.isin(self._cell_index, np.asarray(cells, dtype=int)))
        if where.tolist() == self._marked:
            return
        self._marked = where.tolist()
        b = self._boxes if self.node_ids else {k: np.zeros(0) for k in ("left", "right", "top",
                                                                        "bottom")}
        self.mark_source.data = {k: b[k][where] for k in ("left", "right", "top", "bottom")}


def _pair_text(used: np.ndarray, total: np.ndarray, unit: str) -> np.ndarray:
    # Rounded, so a text changes (and is resent) only when the number shown does.
    return np.array([f"{u:g}/{t:g}{unit}" for u, t in zip(np.round(used, 1), total)], dtype=object)
