"""Plain data the views draw, derived from a `ClusterState`: no Panel, no Bokeh.

- `ClusterLayout`: where every node, GPU cell and CPU/memory bar sits, racks as blocks.
  Computed once per cluster; only colours and fill levels change as jobs come and go.
- `cluster_cells`: per GPU, the fraction in use and the jobs holding it; per node, CPU and
  memory in use and the tasks on it. Arrays, so 1,000 nodes cost milliseconds.
- `JobsTable`: one row per job for the jobs table.
- `timeline_frame`, `switches_frame`, `decisions_frame`: the run's history as tables.
- `job_colour`: a job's preferred colour, by its name; the cluster view gives the jobs
  holding GPUs at once different colours while the palette lasts (`CellPainter`).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..backend import Forkable
from ..control import Decision, Sample
from ..metrics import fragmented_share
from ..model import CPU, MEM, ClusterState, JobStatus, Node, describe_placement

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
        score = abs(math.log((w / h) / aspect)) + (rows * c - n_racks) / n_racks  # empty slots
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

    Exact from a backend that knows (the simulator, `Forkable`); otherwise GPUs are handed out
    in index order from the placements, which is right for whole GPUs and approximate for
    shared ones.
    """
    if isinstance(backend, Forkable):
        return backend.gpu_holders()
    out: dict[str, list[tuple[int, int, float]]] = {}
    used = np.nan_to_num(1.0 - state.gpu_free, nan=0.0)
    cursor = np.zeros_like(used)
    for job in list(state.jobs.values()):  # a scheduler thread may write
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


class CellPainter:
    """Cluster cells kept up to date incrementally: only the cells of jobs whose GPUs, and the
    nodes of jobs whose placement, changed since the last call are recomputed.

    A job's holdings are recognised as unchanged when the backend hands back the same list
    object with the same length (the simulator appends or replaces, never edits in place),
    and its placement when its `workers`/`ps` dicts are the same objects (backends replace
    them on every change). References are kept, so an object's identity cannot be reused."""

    def __init__(self, n_nodes: int, max_gpus: int) -> None:
        self.n, self.g = n_nodes, max_gpus
        self.colour = np.full(n_nodes * max_gpus, FREE_COLOUR, dtype=object)
        self.text = np.full(n_nodes * max_gpus, "free", dtype=object)
        self.node_text = np.full(n_nodes, "no tasks", dtype=object)
        self._gpu_seen: dict[str, tuple[list, int, list[tuple[int, float]]]] = {}
        self._cell_jobs: dict[int, dict[str, float]] = {}
        self._task_seen: dict[str, tuple[dict, dict, list[int]]] = {}
        self._node_tasks: list[dict[str, str]] = [{} for _ in range(n_nodes)]
        # The colour of each job holding GPUs, and how many such jobs have each colour: by
        # name alone two of the first two jobs were often alike (24 colours, any pair 1 in 24).
        self._colour_of: dict[str, str] = {}
        self._colour_use = dict.fromkeys(PALETTE, 0)

    def paint(self, state: ClusterState, holders: Mapping[str, list[tuple[int, int, float]]]
              ) -> ClusterCells:
        g = self.g
        free = state.gpu_free
        if free.shape[1] < g:
            free = np.pad(free, ((0, 0), (0, g - free.shape[1])), constant_values=np.nan)
        exists = ~np.isnan(free)
        used = np.where(exists, 1.0 - np.nan_to_num(free, nan=1.0), 0.0).clip(0.0, 1.0).ravel()
        self._paint_gpus(holders)
        self._paint_tasks(state)
        self.text[~exists.ravel()] = ""
        cap = state.capacity
        with np.errstate(invalid="ignore", divide="ignore"):
            cpu = np.nan_to_num(state.allocated[:, CPU] / cap[:, CPU]).clip(0, 1)
            mem = np.nan_to_num(state.allocated[:, MEM] / cap[:, MEM]).clip(0, 1)
        up = state.node_up.copy()
        colour, node_text = self.colour.copy(), self.node_text.copy()
        if not up.all():
            node_text[~up] = "DOWN"
            colour[np.repeat(~up, g) & exists.ravel()] = DOWN_COLOUR
        return ClusterCells(used, exists.ravel(), colour, self.text.copy(), cpu, mem, up,
                            node_text)

    def cells_of(self, job: str) -> list[int]:
        """The flat (node x GPU) cells `job` held at the last `paint`."""
        seen = self._gpu_seen.get(job)
        return [cell for cell, _ in seen[2]] if seen is not None else []

    def _paint_gpus(self, holders: Mapping[str, list[tuple[int, int, float]]]) -> None:
        g = self.g
        dirty: set[int] = set()
        for job in [j for j in self._gpu_seen if j not in holders]:
            for cell, _ in self._gpu_seen.pop(job)[2]:
                self._cell_jobs[cell].pop(job, None)
                dirty.add(cell)
            self._colour_use[self._colour_of.pop(job)] -= 1
        for job, gpus in holders.items():
            seen = self._gpu_seen.get(job)
            if seen is not None and seen[0] is gpus and seen[1] == len(gpus):
                continue
            if seen is None:
                self._colour_of[job] = colour = self._free_colour(job)
                self._colour_use[colour] += 1
            else:
                for cell, _ in seen[2]:
                    self._cell_jobs[cell].pop(job, None)
                    dirty.add(cell)
            cells = []
            for i, k, amount in gpus:
                cell = i * g + k
                held = self._cell_jobs.setdefault(cell, {})
                held[job] = held.get(job, 0.0) + amount
                cells.append((cell, amount))
                dirty.add(cell)
            self._gpu_seen[job] = (gpus, len(gpus), cells)
        for cell in dirty:
            held = self._cell_jobs.get(cell)
            if not held:
                self.colour[cell], self.text[cell] = FREE_COLOUR, "free"
                continue
            main = max(held, key=held.__getitem__)
            self.colour[cell] = self._colour_of[main]
            self.text[cell] = ", ".join(j if a >= 1 - 1e-9 else f"{j} {a:.2f}"
                                        for j, a in held.items())

    def _free_colour(self, job: str) -> str:
        """The job's own colour if no job holding GPUs has it, else the least used one (the
        first in the palette on a tie)."""
        own = job_colour(job)
        fewest = min(self._colour_use.values())
        if self._colour_use[own] == fewest:
            return own
        return next(c for c, n in self._colour_use.items() if n == fewest)

    def _paint_tasks(self, state: ClusterState) -> None:
        index = state.node_index
        dirty: set[int] = set()
        live = set()
        for job in list(state.jobs.values()):  # a scheduler thread may write
            if not job.state.placed or not (job.workers or job.ps):
                continue
            live.add(job.name)
            seen = self._task_seen.get(job.name)
            if seen is not None and seen[0] is job.workers and seen[1] is job.ps:
                continue
            if seen is not None:
                self._drop_tasks(job.name, seen[2], dirty)
            nodes = []
            for role, placement in (("worker", job.workers), ("ps", job.ps)):
                for node, count in placement.items():
                    if count:
                        i = index[node]
                        tasks = self._node_tasks[i]
                        text = f"{job.name} {role}×{count}"
                        tasks[job.name] = f"{tasks[job.name]}, {text}" if job.name in tasks \
                            else text
                        nodes.append(i)
                        dirty.add(i)
            self._task_seen[job.name] = (job.workers, job.ps, nodes)
        for name in [j for j in self._task_seen if j not in live]:
            self._drop_tasks(name, self._task_seen.pop(name)[2], dirty)
        for i in dirty:
            tasks = self._node_tasks[i]
            self.node_text[i] = ", ".join(tasks.values()) if tasks else "no tasks"

    def _drop_tasks(self, job: str, nodes: list[int], dirty: set[int]) -> None:
        for i in nodes:
            self._node_tasks[i].pop(job, None)
            dirty.add(i)


def cluster_cells(state: ClusterState, holders: Mapping[str, list[tuple[int, int, float]]],
                  max_gpus: int) -> ClusterCells:
    """The cells from scratch (the app keeps a `CellPainter` and updates incrementally)."""
    return CellPainter(len(state.nodes), max_gpus).paint(state, holders)


# ---- jobs ------------------------------------------------------------------------------

JOB_COLUMNS = ["job", "app", "state", "workers", "ps", "placement", "progress", "throughput",
               "finish_h", "finish_low_h", "finish_high_h", "deadline_h", "p_meet",
               "min_workers", "last_action", "reason", "arrival_h"]


class JobsTable:
    """Builds the jobs table column by column; remembers placement texts, which change only
    when a job's placement does (the backend then gives it new placement dicts). Times are
    hours from `origin` on the backend clock (the store's `time_origin`)."""

    def __init__(self, origin: float = 0.0) -> None:
        self.origin = float(origin)
        self._placement: dict[str, tuple[dict, dict, str]] = {}
        self._static: dict[str, tuple[str, str, float, float, float]] = {}
        self._fc_source: Any = None
        self._fc_rows: dict[str, tuple] = {}

    def placement_text(self, j: JobStatus) -> str:
        if not j.state.placed:
            return ""
        hit = self._placement.get(j.name)
        if hit is not None and hit[0] is j.workers and hit[1] is j.ps:
            return hit[2]
        text = describe_placement(j.workers, j.ps)
        self._placement[j.name] = (j.workers, j.ps, text)
        return text

    def frame(self, jobs: Iterable[JobStatus], forecasts: Mapping[str, Any],
              last_action: Mapping[str, str]) -> pd.DataFrame:
        """One row per job; times in hours from `origin` on the backend clock; NaN where
        unknown."""
        jobs = list(jobs)
        if self._fc_source is not forecasts:  # forecasts are recomputed now and then only
            self._fc_source = forecasts
            self._fc_rows = {name: _forecast_row(f, self.origin)
                             for name, f in forecasts.items()}
        fc_rows, none = self._fc_rows, _NO_FORECAST
        statics = self._static
        rows = []
        for j in jobs:
            spec = j.spec
            st = statics.get(spec.name)
            if st is None:
                st = statics[spec.name] = (spec.name, spec.application,
                                           _hours(spec.deadline, self.origin),
                                           spec.total_work, _hours(spec.arrival, self.origin))
            state = j.state
            f = fc_rows.get(st[0], none)
            finish = (j.finish_time - self.origin) / 3600.0 \
                if state.finished and j.finish_time is not None else f[0]
            rows.append((st[0], st[1], state.value, sum(j.workers.values()), sum(j.ps.values()),
                         self.placement_text(j), min(j.progress / st[3], 1.0), j.throughput,
                         finish, f[1], f[2], st[2], f[3], f[4], last_action.get(st[0], ""),
                         j.reason, st[4]))
        df = pd.DataFrame.from_records(rows, columns=JOB_COLUMNS)
        if not rows:  # keep numeric columns numeric when there is nothing yet
            df = df.astype({c: float for c in JOB_COLUMNS[6:13] + ["min_workers", "arrival_h"]}
                           | {"workers": int, "ps": int})
        return df


_NO_FORECAST = (float("nan"),) * 5


def _forecast_row(f: Any, origin: float = 0.0) -> tuple[float, float, float, float, float]:
    def num(v: Any) -> float:
        return float("nan") if v is None or not math.isfinite(v) else float(v)

    return ((num(getattr(f, "finish", None)) - origin) / 3600.0,
            (num(getattr(f, "low", None)) - origin) / 3600.0,
            (num(getattr(f, "high", None)) - origin) / 3600.0,
            num(getattr(f, "p_meet_deadline", None)),
            num(getattr(f, "min_workers_to_meet", None)))


def _hours(t: float | None, origin: float = 0.0) -> float:
    return float("nan") if t is None or not math.isfinite(t) else (t - origin) / 3600.0


# ---- the run's history -----------------------------------------------------------------

TIMELINE_COLUMNS = ["time_h", "policy", "gpu_util", "cpu_util", "queued", "running", "completed",
                    "deadline_hits", "deadline_misses", "gpu_frag"]
DECISION_COLUMNS = ["time_h", "policy", "action", "job", "applied", "reason", "detail"]


def timeline_frame(samples: Sequence[Sample], origin: float = 0.0) -> pd.DataFrame:
    """One row per timeline sample; times in hours from `origin`, use as shares."""
    rows = [((s.time - origin) / 3600, s.policy,
             s.gpus_allocated / s.gpus_total if s.gpus_total else 0.0,
             s.cpus_allocated / s.cpus_total if s.cpus_total else 0.0, s.queued, s.running,
             s.completed, s.deadline_hits, s.deadline_misses, fragmented_share(s))
            for s in samples]
    return pd.DataFrame.from_records(rows, columns=TIMELINE_COLUMNS)


def switches_frame(switches: Sequence[tuple[float, str, str]],
                   hours: Callable[[float], float]) -> pd.DataFrame:
    return pd.DataFrame([{"time_h": hours(t), "from": a, "to": b} for t, a, b in switches],
                        columns=["time_h", "from", "to"])


def decisions_frame(decisions: Sequence[Decision], hours: Callable[[float], float],
                    wall_time: Callable[[float], float | None] | None = None) -> pd.DataFrame:
    """`decisions` newest first; with `wall_time` (a real cluster) the wall-clock time too."""
    ds = list(reversed(decisions))
    df = pd.DataFrame([{"time_h": hours(d.time), "policy": d.policy, "action": d.action,
                        "job": d.job, "applied": d.applied, "reason": d.reason,
                        "detail": d.detail} for d in ds], columns=DECISION_COLUMNS)
    if wall_time is not None:
        df.insert(1, "at", [_clock(wall_time(d.time)) for d in ds])
    return df


def _clock(unix: float | None) -> str:
    return "" if unix is None else time.strftime("%H:%M:%S", time.gmtime(unix))
