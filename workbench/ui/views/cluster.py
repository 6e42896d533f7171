"""The cluster tab: every GPU of a small cluster, or on a big one (more than
`heatmap.OVERVIEW_NODES` nodes) an overview heatmap of GPU use per node and rack with a
drill-down to one rack's GPUs.

- Small cluster: `GpuGrid` of all nodes (cells coloured by job, CPU/memory bars, labels).
- Big cluster: `Heatmap` of every node; picking a rack (the rack list, or a click on a node)
  shows that rack's nodes below it as a `GpuGrid`, labelled.
- "find a node or job": a node's name selects it (its rack drilled, its jobs listed, its cell
  outlined); a job's name highlights its GPUs (outlined in the grid, its nodes in the
  overview, its rack drilled). Clicking a GPU selects the job holding it.
"""

from __future__ import annotations

import numpy as np
import panel as pn

from ..data import DOWN_COLOUR, FREE_COLOUR
from ..heatmap import OVERVIEW_NODES, heat_layout
from ..state import WorkbenchState
from ._base import View, button, in_session, widget_row
from ._panes import HTML, Markdown, as_text
from .cluster_grid import CPU_COLOUR, MEM_COLOUR, GpuGrid
from .cluster_heat import Heatmap, heat_legend_html

OVERVIEW = "all racks (overview)"


class ClusterView(View):
    def __init__(self, state: WorkbenchState, height: int | None = None) -> None:
        super().__init__(state)
        self.grid = GpuGrid(state, height)
        self.heat = Heatmap()
        self.grid.on_tap(self._tap_cell)
        self.heat.on_tap(self._tap_node)
        self.find = pn.widgets.TextInput(placeholder="find a node or job (Enter)", width=260,
                                         margin=(0, 10))
        self.rack = pn.widgets.Select(options=[OVERVIEW], width=220, margin=(0, 10))
        self.clear = button("Clear selection", width=130, margin=(0, 10))
        self.info = Markdown("", margin=(0, 10), sizing_mode="stretch_width")
        self.legend = HTML(_legend_html(), margin=(0, 10))
        self.heat_legend = HTML(heat_legend_html(), margin=(0, 10))
        self.panel = pn.Column(sizing_mode="stretch_width", name="Cluster")
        self.job: str | None = None  # the selected job
        self.node: int | None = None  # the selected node
        self.cells_sent = 0
        self.find.param.watch(lambda e: in_session(lambda: self.select(e.new)), "value")
        self.rack.param.watch(lambda e: in_session(
            lambda: self.drill(None if e.new == OVERVIEW else e.new)), "value")
        self.clear.on_click(lambda _: in_session(lambda: self.select("")))
        self._set_cluster()
        self._layout_seen = state.layout_version
        self.sync()

    # ---- the cluster and what is shown ---------------------------------------------------

    @property
    def gpu_source(self):
        """The GPU cells shown (every node's on a small cluster, the drilled rack's on a big)."""
        return self.grid.gpu_source

    @property
    def big(self) -> bool:
        return len(self.state.layout.nodes) > OVERVIEW_NODES

    def sync(self) -> None:
        if self._layout_seen != self.state.layout_version:  # a new cluster was loaded
            self._set_cluster()  # (seen only once drawn: retried if it fails)
            self._layout_seen = self.state.layout_version
            self._seen = -1
        super().sync()

    def _set_cluster(self) -> None:
        nodes = self.state.layout.nodes
        self._index = {n.name: i for i, n in enumerate(nodes)}
        self.job, self.node = None, None
        big = self.big
        # the overview is in the page only on a big cluster (no hidden canvas on a small one)
        self.panel.objects = [
            *([self.heat_legend] if big else []), self.legend,
            widget_row(self.find, *([self.rack] if big else []), self.clear), self.info,
            *([self.heat.pane] if big else []), self.grid.pane]
        self.legend.visible = not big
        if big:
            self.heat.set_layout(heat_layout(nodes))
            self.rack.options = [OVERVIEW, *self.heat.lay.racks]
            self.rack.value = OVERVIEW
            self.drill(None)
        else:
            self.grid.show(range(len(nodes)))
            self.grid.pane.visible = True
        self.info.object = ""

    def drill(self, rack: str | None) -> None:
        """Show the GPUs of `rack` under the overview (None: the overview alone)."""
        if not self.big:
            return
        if rack not in (self.heat.lay.racks if self.heat.lay else ()):
            rack = None
        if self.rack.value != (rack or OVERVIEW):
            self.rack.value = rack or OVERVIEW  # (its watcher calls back with the same rack)
            return
        self.grid.show(self.heat.lay.node_ids(rack) if rack else [], drilled=True)
        self.grid.pane.visible = self.legend.visible = rack is not None
        self._seen = -1  # draw the rack's cells now, not at the next version

    # ---- selection -------------------------------------------------------------------------

    def select(self, text: str) -> None:
        """Select the node or job named `text` ('' clears the selection)."""
        name = (text or "").strip()
        self.job, self.node = None, None
        if not name:
            self.info.object = ""
        elif name in self._index:
            self.node = self._index[name]
            if self.big:
                self.drill(self.state.layout.nodes[self.node].rack)
        elif self.state.known_job(name) is not None:  # a finished job too: it holds nothing
            self.job = name
            self._drill_to_job()
        else:
            self.info.object = f"No node or job named **{as_text(name)}**."
        if self.find.value != name:
            self.find.value = name
        self._seen = -1
        self.update()

    def _drill_to_job(self) -> None:
        """On a big cluster, show the rack holding most of the selected job's GPUs (unless the
        rack shown holds some)."""
        cells = self.state.job_cells(self.job or "")
        if not self.big or not cells:
            return
        g = self.state.layout.max_gpus
        racks = [self.state.layout.nodes[c // g].rack for c in cells]
        if self.rack.value not in racks:
            self.drill(max(set(racks), key=racks.count))

    def _tap_node(self, i: int) -> None:
        self.select(self.state.layout.nodes[i].name)

    def _tap_cell(self, cell: int) -> None:
        g = self.state.layout.max_gpus
        holder = str(self.state.cells.gpu_text[cell]) if self.state.cells is not None else ""
        job = holder.split(",")[0].split(" ")[0] if holder and holder != "free" else ""
        self.select(job or self.state.layout.nodes[cell // g].name)

    # ---- drawing ---------------------------------------------------------------------------

    def update(self) -> None:
        cells = self.state.cells
        if cells is None:
            return
        sent = self.heat.update(cells) if self.big else 0
        sent += self.grid.update(cells)
        self.cells_sent = sent
        self._show_selection()

    def _show_selection(self) -> None:
        g = self.state.layout.max_gpus
        if self.job is not None:
            cells = self.state.job_cells(self.job)
            self.grid.mark(cells)
            self.heat.mark([c // g for c in cells])
            self.info.object = _job_text(self.job, cells, self.state)
        elif self.node is not None:
            self.grid.mark(range(self.node * g, (self.node + 1) * g))
            self.heat.mark([self.node])
            self.info.object = _node_text(self.node, self.state)
        else:
            self.grid.mark([])
            self.heat.mark([])


def _job_text(job: str, cells: list[int], state: WorkbenchState) -> str:
    job_name = as_text(job)
    if not cells:
        status = state.known_job(job)
        what = status.state.value if status is not None else "gone"
        return f"**{job_name}** holds no GPU now ({what})."
    g = state.layout.max_gpus
    nodes = sorted({c // g for c in cells})
    names = [state.layout.nodes[i].name for i in nodes]
    racks = sorted({state.layout.nodes[i].rack for i in nodes})
    shown = ", ".join(names[:12]) + (f" … (+{len(names) - 12})" if len(names) > 12 else "")
    return (f"**{job_name}** holds {len(cells)} GPU{'s' * (len(cells) != 1)} on {len(nodes)}"
            f" node{'s' * (len(nodes) != 1)} ({shown}) in {', '.join(racks[:6])}"
            f"{' …' if len(racks) > 6 else ''}: outlined in red.")


def _node_text(i: int, state: WorkbenchState) -> str:
    node = state.layout.nodes[i]
    cells = state.cells
    if cells is None:
        return f"**{node.name}** ({node.rack})"
    g = state.layout.max_gpus
    used = float(np.sum(cells.gpu_used[i * g:(i + 1) * g]))
    up = "" if cells.node_up[i] else " · **down**"
    return (f"**{node.name}** ({node.rack}): {used:g}/{node.gpus:g} GPUs in use{up} · jobs:"
            f" {cells.node_text[i]}")


def _legend_html() -> str:
    def box(colour: str, label: str) -> str:
        # swatch and label as one unbreakable piece: a narrow tab wraps between entries only
        return (f'<span style="white-space:nowrap"><span style="display:inline-block;'
                f'width:12px;height:12px;background:{colour};border:1px solid #bbb;'
                f'margin:0 4px -2px 10px"></span>{label}</span> ')
    return ('<div style="font-size:12px;color:#333">'
            + box(FREE_COLOUR, "free GPU") + box("#1f77b4", "GPU held (colour = job; partly"
                                                 " filled = shared fraction)")
            + box(CPU_COLOUR, "CPU in use") + box(MEM_COLOUR, "memory in use")
            + box(DOWN_COLOUR, "node down") + "</div>")
