"""The cluster: every node's GPUs as cells coloured by the job holding them, a shared GPU
filled to the fraction in use, CPU and memory bars beside them, nodes grouped by rack.

One Bokeh figure, quads fed by two ColumnDataSources (GPU cells, node bars). Geometry is
sent once; each update patches only the cells whose fill, colour or hover text changed, so
1,000 nodes x 8 GPUs cost little more than 16 nodes."""

from __future__ import annotations

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, HoverTool, Range1d
from bokeh.plotting import figure

from ..data import BAR_W, DOWN_COLOUR, FREE_COLOUR, GAP, GPU_W, ROW_H, ClusterLayout
from ..state import WorkbenchState
from ._base import View
from ._sources import sync_columns

CPU_COLOUR, MEM_COLOUR, BAR_BG = "#4c78a8", "#b279a2", "#f2f2f2"
CELL_BG, CELL_LINE = "#f7f7f7", "#c9c9c9"


class ClusterView(View):
    def __init__(self, state: WorkbenchState, height: int | None = None) -> None:
        super().__init__(state)
        self.gpu_source = ColumnDataSource(name="gpu_cells")
        self.node_source = ColumnDataSource(name="node_bars")
        self.rack_source = ColumnDataSource()
        self.header_source = ColumnDataSource()
        self.label_source = ColumnDataSource()
        self._sent_gpu: dict[str, np.ndarray] = {}
        self._sent_node: dict[str, np.ndarray] = {}
        self.cells_sent = 0
        self.figure = self._figure(height)
        self._set_geometry(state.layout)
        self.legend = pn.pane.HTML(_legend_html(), margin=(0, 10))
        self.panel = pn.Column(self.legend, pn.pane.Bokeh(self.figure, sizing_mode="stretch_width"),
                               sizing_mode="stretch_width", name="Cluster")
        self._layout_seen = state.layout_version
        self.sync()

    def sync(self) -> None:
        if self._layout_seen != self.state.layout_version:  # a new cluster was loaded
            self._set_geometry(self.state.layout)  # (seen only once drawn: retried if it fails)
            self._layout_seen = self.state.layout_version
            self._seen = -1
        super().sync()

    def _figure(self, height: int | None):
        lay = self.state.layout
        if height is None:
            height = int(np.clip(900 / (lay.width / lay.height), 260, 760))
        fig = figure(height=height, sizing_mode="stretch_width", tools="pan,wheel_zoom,box_zoom,reset",
                     active_scroll="wheel_zoom", toolbar_location="above",
                     x_range=Range1d(), y_range=Range1d(), output_backend="webgl")
        fig.axis.visible = False
        fig.grid.visible = False
        fig.outline_line_color = None
        fig.min_border = 4
        bg = fig.quad(left="left", right="right", top="y0", bottom="y1", source=self.gpu_source,
                      fill_color=CELL_BG, line_color=CELL_LINE, line_width=0.5)
        fig.quad(left="left", right="right", top="fy", bottom="y1", source=self.gpu_source,
                 fill_color="colour", line_color=None)
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
        small = len(self.state.layout.nodes) > 200
        fig.text(x="x", y="y", text="rack", source=self.rack_source,
                 text_font_size="7pt" if small else "9pt",
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
        return fig

    def _set_geometry(self, lay: ClusterLayout) -> None:
        """Static geometry of a (new) cluster; the dynamic columns follow in `update`."""
        boxes = lay.gpu_boxes()
        exists = np.array([k < int(lay.nodes[i].gpus) for i, k in zip(boxes["node_i"], boxes["gpu_i"])],
                          dtype=bool)
        self._cell_index = np.flatnonzero(exists)
        idx = self._cell_index
        names = np.array([n.name for n in lay.nodes], dtype=object)
        racks = np.array([n.rack for n in lay.nodes], dtype=object)
        node_i = boxes["node_i"][idx]
        self._sent_gpu = {}
        self._sent_node = {}
        self.gpu_source.data = {
            "left": boxes["left"][idx], "right": boxes["right"][idx], "y0": boxes["top"][idx],
            "y1": boxes["bottom"][idx], "fy": boxes["bottom"][idx],
            "colour": [FREE_COLOUR] * len(idx), "text": ["free"] * len(idx),
            "used": np.zeros(len(idx)), "node": list(names[node_i]), "rack": list(racks[node_i]),
            "gpu": boxes["gpu_i"][idx],
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
        self._cell_height = boxes["bottom"][idx] - boxes["top"][idx]
        self.rack_source.data = {"x": lay.rack_x, "y": lay.rack_y - 0.15, "rack": lay.racks}
        first = lay.rack_x + lay.label_w
        self.header_source.data = {
            "x": np.concatenate([first + lay.max_gpus * GPU_W + GAP,
                                 first + lay.max_gpus * GPU_W + GAP * 1.5 + BAR_W]),
            "y": np.concatenate([lay.rack_y - 0.1] * 2),
            "text": ["CPU"] * len(first) + ["memory"] * len(first)}
        shown = lay.label_w > 0
        if not shown:  # on big clusters the legend says which bar is which
            self.header_source.data = {"x": [], "y": [], "text": []}
        self.label_source.data = {"x": lay.node_x + lay.label_w - 0.2 if shown else [],
                                  "y": lay.node_y + ROW_H / 2 if shown else [],
                                  "node": list(names) if shown else []}
        fig = self.figure
        fig.x_range.start, fig.x_range.end = -0.5, lay.width + 0.5
        fig.y_range.start, fig.y_range.end = lay.height + 0.2, -0.2  # racks read top-down
        self._caps = self.state.cluster_state.capacity

    def update(self) -> None:
        cells = self.state.cells
        if cells is None:
            return
        idx = self._cell_index
        used = cells.gpu_used[idx]
        y1 = self.gpu_source.data["y1"]
        gpu_cols = {"fy": np.asarray(y1) - used * self._cell_height, "colour": cells.gpu_colour[idx],
                    "text": cells.gpu_text[idx], "used": used}
        sent = sync_columns(self.gpu_source, gpu_cols, self._sent_gpu)
        caps = self._caps
        alloc = self.state.cluster_state.allocated
        cpu_left, mem_left = self._bar_left
        node_cols = {
            "cpu_right": cpu_left + cells.cpu_used * self._bar_width,
            "mem_right": mem_left + cells.mem_used * self._bar_width,
            "tasks": cells.node_text,
            "cpu_text": _pair_text(alloc[:, 0], caps[:, 0], ""),
            "mem_text": _pair_text(alloc[:, 1], caps[:, 1], " GiB"),
        }
        sent += sync_columns(self.node_source, node_cols, self._sent_node)
        self.cells_sent = sent


def _pair_text(used: np.ndarray, total: np.ndarray, unit: str) -> np.ndarray:
    # Rounded, so a text changes (and is resent) only when the number shown does.
    return np.array([f"{u:g}/{t:g}{unit}" for u, t in zip(np.round(used, 1), total)], dtype=object)


def _legend_html() -> str:
    def box(colour: str, label: str) -> str:
        return (f'<span style="display:inline-block;width:12px;height:12px;background:{colour};'
                f'border:1px solid #bbb;margin:0 4px -2px 10px"></span>{label}')
    return ('<div style="font-size:12px;color:#333">'
            + box(FREE_COLOUR, "free GPU") + box("#1f77b4", "GPU held (colour = job; partly"
                                                 " filled = shared fraction)")
            + box(CPU_COLOUR, "CPU in use") + box(MEM_COLOUR, "memory in use")
            + box(DOWN_COLOUR, "node down") + "</div>")
