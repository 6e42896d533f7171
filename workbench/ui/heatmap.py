"""Plain data of the cluster overview (no Panel, no Bokeh): one cell per node, racks as rows.

At 1,000–5,000 nodes the per-GPU picture is 4-pixel cells nobody can read, so a big cluster
opens on a heatmap: each node one cell coloured by the share of its GPUs in use, each rack a
row labelled with its name and its own share, racks in as many side-by-side columns as keep
rows at least `MIN_ROW_PX` tall. Clicking a cell drills down to that rack's GPUs.

    lay = heat_layout(nodes)            # where each node's cell sits
    use = node_gpu_use(cells, lay)      # per node, GPUs in use / GPUs (NaN: node down)
    racks = rack_gpu_use(use, lay)      # per rack, the same over its nodes
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..model import Node
from .data import ClusterCells

OVERVIEW_NODES = 64  # above this many nodes the cluster opens on the overview
MAX_ROW_NODES = 64  # a rack with more nodes wraps onto further rows
MAX_ROWS = 48  # rows per column of racks before another column starts
LABEL_W, SHARE_W, COLUMN_GAP = 6.0, 4.0, 1.5  # data units: rack name, its share, between columns


@dataclass
class HeatLayout:
    """Cell of each node (left/top in data units, cells 1 x 1, y grows downwards) and the
    label positions of each rack."""

    nodes: list[Node]
    gpus: np.ndarray  # GPUs per node
    left: np.ndarray
    top: np.ndarray
    racks: list[str]
    rack_of: np.ndarray  # index into `racks`, per node
    rack_x: np.ndarray  # left of each rack's name
    rack_y: np.ndarray  # middle of each rack's first row
    share_x: np.ndarray  # left of each rack's share text
    width: float
    height: float

    def node_ids(self, rack: str) -> list[int]:
        """Indices of the nodes of `rack`, in cluster order."""
        k = self.racks.index(rack)
        return np.flatnonzero(self.rack_of == k).tolist()


def heat_layout(nodes: list[Node]) -> HeatLayout:
    """Racks as rows of node cells (a rack of more than `MAX_ROW_NODES` wraps), stacked in
    columns of at most `MAX_ROWS` rows."""
    members: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        members.setdefault(n.rack, []).append(i)
    racks = list(members)
    per_row = min(max((len(v) for v in members.values()), default=1), MAX_ROW_NODES)
    rows_of = [math.ceil(len(members[r]) / per_row) for r in racks]
    columns = max(1, math.ceil(sum(rows_of) / MAX_ROWS))
    rows_per_column = math.ceil(sum(rows_of) / columns)
    column_w = LABEL_W + per_row + SHARE_W
    left, top = np.zeros(len(nodes)), np.zeros(len(nodes))
    rack_of = np.zeros(len(nodes), dtype=int)
    rack_x, rack_y, share_x = [], [], []
    col, row = 0, 0
    for k, rack in enumerate(racks):
        if row and row + rows_of[k] > rows_per_column:
            col, row = col + 1, 0
        x0 = col * (column_w + COLUMN_GAP)
        rack_x.append(x0)
        rack_y.append(row + 0.5)
        share_x.append(x0 + LABEL_W + per_row + 0.3)
        for j, i in enumerate(members[rack]):
            left[i] = x0 + LABEL_W + j % per_row
            top[i] = row + j // per_row
            rack_of[i] = k
        row += rows_of[k]
    height = max(rows_per_column, 1)
    return HeatLayout(list(nodes), np.array([n.gpus for n in nodes], dtype=float), left, top,
                      racks, rack_of, np.array(rack_x), np.array(rack_y), np.array(share_x),
                      (col + 1) * column_w + col * COLUMN_GAP, float(height))


def node_gpu_use(cells: ClusterCells, lay: HeatLayout) -> np.ndarray:
    """Per node, the share of its GPUs in use (shared GPUs by their fraction); NaN for a node
    that is down."""
    n = len(lay.nodes)
    used = cells.gpu_used.reshape(n, -1).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(lay.gpus > 0, used / lay.gpus, 0.0)
    return np.where(cells.node_up, share.clip(0.0, 1.0), np.nan)


def rack_gpu_use(use: np.ndarray, lay: HeatLayout) -> np.ndarray:
    """Per rack, GPUs in use / GPUs of its nodes that are up."""
    up = ~np.isnan(use)
    used = np.bincount(lay.rack_of, weights=np.where(up, use * lay.gpus, 0.0),
                       minlength=len(lay.racks))
    total = np.bincount(lay.rack_of, weights=np.where(up, lay.gpus, 0.0), minlength=len(lay.racks))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, used / total, np.nan)
