"""Plain data the views draw, derived from a `ClusterState`: no Panel, no Bokeh.

- `ClusterLayout`: where every node, GPU cell and CPU/memory bar sits, racks as blocks.
  Computed once per cluster; only colours and fill levels change as jobs come and go.
- `cluster_cells`: per GPU, the fraction in use and the jobs holding it; per node, CPU and
  memory in use and the tasks on it. Arrays, so 1,000 nodes cost milliseconds.
- `jobs_frame`: one row per job for the jobs table.
- `job_colour`: a stable colour per job name (the same in every view and every run).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..model import CPU, GPU, MEM, ClusterState, JobState, JobStatus, Node, describe_placement

# Category20 without its greys (grey means "free" in the cluster view).
PALETTE = (
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
    "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#bcbd22", "#dbdb8d",
    "#17becf", "#9edae5", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
)
FREE_COLOUR = "#e8e8e8"
DOWN_COLOUR = "#555555"
_colour_cache: dict[str, str] = {}


def job_colour(name: str) -> str:
    c = _colour_cache.get(name)
    if c is None:
        # crc32, not hash(): Python salts str hashes per process, colours must not move.
        c = _colour_cache[name] = PALETTE[zlib.crc32(name.encode()) % len(PALETTE)]
    return c


# ---- layout -------------------------------------------------------------------------------

GPU_W, GAP, BAR_W, RACK_GAP_X, RACK_GAP_Y, ROW_H = 1.0, 0.4, 2.5, 1.5, 2.5, 1.0
LABEL_W = 3.2  # room for node names, drawn only on clusters small enough to read them
LABELLED_NODES = 64


@dataclass
class ClusterLayout:
    """Geometry of the cluster view in data units; y grows downwards (the view flips it)."""

    nodes: list[Node]
    max_gpus: int
    node_x: np.ndarray  # left edge of each node's row
    node_y: np.ndarray  # top edge of each node's row
    racks: list[str]
    rack_x: np.ndarray
    rack_y: np.ndarray
    width: float
    height: float
    label_w: float = 0.0

    @property
    def node_width(self) -> float:
        return self.label_w + self.max_gpus * GPU_W + GAP + BAR_W + GAP / 2 + BAR_W

    def gpu_boxes(self) -> dict[str, np.ndarray]:
        """left/right/top/bottom of every GPU cell, flattened row-major (node, gpu)."""
        n, g = len(self.nodes), self.max_gpus
        left = (self.node_x[:, None] + self.label_w + np.arange(g)[None, :] * GPU_W + 0.05).ravel()
        top = np.repeat(self.node_y, g) + 0.1
        return {"left": left, "right": left + GPU_W - 0.1, "top": top, "bottom": top + ROW_H - 0.2,
                "node_i": np.repeat(np.arange(n), g), "gpu_i": np.tile(np.arange(g), n)}

    def bar_boxes(self, which: str) -> dict[str, np.ndarray]:
        """left/right(full)/top/bottom of each node's CPU (`cpu`) or memory (`mem`) bar."""
        start = self.label_w + self.max_gpus * GPU_W + GAP + (0 if which == "cpu" else BAR_W + GAP / 2)
        left = self.node_x + start
        return {"left": left, "right": left + BAR_W, "top": self.node_y + 0.15,
                "bottom": self.node_y + ROW_H - 0.15}


def cluster_layout(nodes: list[Node], aspect: float = 1.6) -> ClusterLayout:
    """Racks as blocks of node rows, arranged in a grid close to `aspect` (width/height)."""
    racks: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        racks.setdefault(n.rack, []).append(i)
    max_g = max((int(n.gpus) for n in nodes), default=1) or 1
    label_w = LABEL_W if len(nodes) <= LABELLED_NODES else 0.0
    node_w = label_w + max_g * GPU_W + GAP + BAR_W + GAP / 2 + BAR_W
    rack_h = max(len(v) for v in racks.values()) * ROW_H
    n_racks = len(racks)
    # Pick the number of rack columns whose overall shape is closest to `aspect`.
    best, cols = math.inf, 1
    for c in range(1, n_racks + 1):
        rows = math.ceil(n_racks / c)
        w = c * node_w + (c - 1) * RACK_GAP_X
        h = rows * (rack_h + RACK_GAP_Y)
        score = abs(math.log((w / h) / aspect))
        if score < best:
            best, cols = score, c
    node_x = np.zeros(len(nodes))
    node_y = np.zeros(len(nodes))
    rack_x, rack_y = [], []
    for k, (_, members) in enumerate(racks.items()):
        col, row = k % cols, k // cols
        x0 = col * (node_w + RACK_GAP_X)
        y0 = row * (rack_h + RACK_GAP_Y) + RACK_GAP_Y * 0.8
        rack_x.append(x0)
        rack_y.append(y0)
        for j, i in enumerate(members):
            node_x[i] = x0
            node_y[i] = y0 + j * ROW_H
    rows = math.ceil(n_racks / cols)
    return ClusterLayout(list(nodes), max_g, node_x, node_y, list(racks), np.array(rack_x),
                         np.array(rack_y), cols * node_w + (cols - 1) * RACK_GAP_X,
                         rows * (rack_h + RACK_GAP_Y), label_w)


# ---- cells ---------------------------------------------------------------------------------


def gpu_holders(backend: Any, state: ClusterState) -> dict[str, list[tuple[int, int, float]]]:
    """Per job, the GPUs it holds as (node index, GPU index, amount).

    Asks the backend (`gpu_holders()`) if it can say; the simulator's own ledger otherwise;
    failing both, GPUs are handed out in index order from the placements, which is right for
    whole GPUs and approximate for shared ones.
    """
    if hasattr(backend, "gpu_holders"):
        return backend.gpu_holders()
    held = getattr(backend, "_held", None)
    if isinstance(held, dict):
        return {name: h.gpus for name, h in held.items() if getattr(h, "gpus", None)}
    out: dict[str, list[tuple[int, int, float]]] = {}
    used = np.nan_to_num(1.0 - state.gpu_free, nan=0.0)
    cursor = np.zeros_like(used)
    for job in state.jobs.values():
        if not job.state.placed:
            continue
        g = job.spec.worker_demand.gpu
        if g <= 0:
            continue
        for node, count in job.workers.items():
            i = state.node_index[node]
            for _ in range(count):
                need = g
                for k in range(used.shape[1]):
                    room = used[i, k] - cursor[i, k]
                    if room <= 1e-9:
                        continue
                    take = min(room, need if g < 1 else 1.0)
                    cursor[i, k] += take
                    out.setdefault(job.name, []).append((i, k, take))
                    need -= take
                    if need <= 1e-9:
                        break
    return out


@dataclass
class ClusterCells:
    """What the cluster view shows now. GPU arrays are flattened (node, gpu) row-major."""

    gpu_used: np.ndarray  # fraction of each GPU in use; 0 for cells beyond a node's GPUs
    gpu_exists: np.ndarray  # bool
    gpu_colour: np.ndarray  # object: colour of the largest holder, FREE_COLOUR when free
    gpu_text: np.ndarray  # object: "job (worker) 0.50, ..." for hover
    cpu_used: np.ndarray  # fraction per node
    mem_used: np.ndarray
    node_up: np.ndarray
    node_text: np.ndarray  # object: tasks on each node, for hover

    @property
    def gpus_in_use(self) -> float:
        return float(self.gpu_used.sum())


def cluster_cells(state: ClusterState, holders: Mapping[str, list[tuple[int, int, float]]],
                  max_gpus: int) -> ClusterCells:
    n = len(state.nodes)
    free = state.gpu_free
    if free.shape[1] < max_gpus:
        free = np.pad(free, ((0, 0), (0, max_gpus - free.shape[1])), constant_values=np.nan)
    exists = ~np.isnan(free)
    used = np.where(exists, 1.0 - np.nan_to_num(free, nan=1.0), 0.0).clip(0.0, 1.0).ravel()
    colour = np.full(n * max_gpus, FREE_COLOUR, dtype=object)
    text = np.full(n * max_gpus, "free", dtype=object)
    text[~exists.ravel()] = ""
    best = np.zeros(n * max_gpus)
    shares: dict[int, list[str]] = {}
    for job, gpus in holders.items():
        c = job_colour(job)
        for i, k, amount in gpus:
            cell = i * max_gpus + k
            if amount > best[cell]:
                best[cell] = amount
                colour[cell] = c
            shares.setdefault(cell, []).append(job if amount >= 1 - 1e-9 else f"{job} {amount:.2f}")
    for cell, names in shares.items():
        text[cell] = ", ".join(names)
    cap = state.capacity
    with np.errstate(invalid="ignore", divide="ignore"):
        cpu = np.nan_to_num(state.allocated[:, CPU] / cap[:, CPU]).clip(0, 1)
        mem = np.nan_to_num(state.allocated[:, MEM] / cap[:, MEM]).clip(0, 1)
    tasks: list[list[str]] = [[] for _ in range(n)]
    for job in state.jobs.values():
        if not job.state.placed:
            continue
        for node, count in job.workers.items():
            if count:
                tasks[state.node_index[node]].append(f"{job.name} worker×{count}")
        for node, count in job.ps.items():
            if count:
                tasks[state.node_index[node]].append(f"{job.name} ps×{count}")
    node_text = np.array([", ".join(t) if t else "no tasks" for t in tasks] + [""], dtype=object)[:n]
    up = state.node_up.copy()
    node_text[~up] = "DOWN"
    colour[np.repeat(~up, max_gpus) & exists.ravel()] = DOWN_COLOUR
    return ClusterCells(used, exists.ravel(), colour, text, cpu, mem, up, node_text)


# ---- jobs ------------------------------------------------------------------------------

JOB_COLUMNS = ["job", "app", "state", "workers", "ps", "placement", "progress", "throughput",
               "finish_h", "finish_low_h", "finish_high_h", "deadline_h", "p_meet",
               "min_workers", "last_action", "reason"]


def jobs_frame(jobs: Iterable[JobStatus], forecasts: Mapping[str, Any],
               last_action: Mapping[str, str]) -> pd.DataFrame:
    """One row per job; times in hours on the backend clock; NaN where unknown."""
    rows = []
    for j in jobs:
        f = forecasts.get(j.name)
        s = j.spec
        rows.append((
            j.name, s.application, j.state.value, j.num_workers, j.num_ps,
            describe_placement(j.workers, j.ps) if j.state.placed else "",
            j.fraction_done, j.throughput,
            _hours(j.finish_time if j.state.finished else getattr(f, "finish", None)),
            _hours(getattr(f, "low", None)), _hours(getattr(f, "high", None)),
            _hours(s.deadline), _num(getattr(f, "p_meet_deadline", None)),
            _num(getattr(f, "min_workers_to_meet", None)),
            last_action.get(j.name, ""), j.reason,
        ))
    return pd.DataFrame.from_records(rows, columns=JOB_COLUMNS)


def _hours(t: float | None) -> float:
    return float("nan") if t is None or not math.isfinite(t) else t / 3600.0


def _num(v: Any) -> float:
    return float("nan") if v is None else float(v)


def job_sort_key(j: JobStatus) -> tuple:
    """Active jobs first (running, then waiting), newest finished after."""
    order = {JobState.RUNNING: 0, JobState.RESTARTING: 1, JobState.HOLDING: 2, JobState.PENDING: 3}
    if j.state.finished:
        return (9, -(j.finish_time or 0.0), j.name)
    return (order.get(j.state, 5), j.spec.arrival, j.name)


def gpu_usage(state: ClusterState) -> tuple[float, float]:
    up = state.node_up
    return float(state.allocated[:, GPU].sum()), float(state.capacity[up, GPU].sum())
