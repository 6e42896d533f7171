"""The FGD paper's replay protocol on an openb pod list (Weng et al., USENIX ATC '23).

The cluster is the GPU node list. Pods are drawn uniformly with replacement from the pod list
(then shuffled) with a seeded `numpy.random.Generator` until the GPUs they request reach
`load` (130%) of the cluster's GPU capacity. Each pod is placed once, on arrival, by one
placement plugin; it never leaves and nothing is preempted; a pod that fits nowhere fails and
is counted. Recorded as the requested load grows: the allocated GPU share (allocated GPUs,
fractions included, over all GPUs) and the fragmentation of the cluster against the pod list's
task-size distribution (`workbench.fragmentation`).

Every plugin sees the same pod sequence for a seed; the plugin's own tie-breaking draws come
from a second generator derived from the same seed. Measured results for every openb pod list,
10 seeds each: docs/openb-results.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .errors import ConfigError
from .fragmentation import TaskClasses, task_classes
from .model import Node
from .policies.plugins import MILLI, PlacementState, Task, get_plugin
from .traces.openb import allowed_models

DEFAULT_LOAD = 1.3
FRAG_STEP = 0.05  # fragmentation is sampled every 5% of requested load


@dataclass
class OpenbWorkload:
    """A pod list ready to replay: one `Task` per pod and the target workload for FGD."""

    name: str
    tasks: list[Task]
    requested: np.ndarray  # GPUs each pod requests
    classes: TaskClasses

    def __len__(self) -> int:
        return len(self.tasks)


def prepare_workload(pods: pd.DataFrame, name: str = "", coverage: float = 1.0) -> OpenbWorkload:
    cpu = pods["cpu_milli"].to_numpy(np.int64)
    mem = pods["memory_mib"].to_numpy(np.int64)
    num = pods["num_gpu"].to_numpy(np.int64)
    milli = pods["gpu_milli"].to_numpy(np.int64)
    specs = pods["gpu_spec"].astype(str).to_numpy()
    models = {s: allowed_models(s) for s in set(specs.tolist())}
    gpu_models = [models[s] if n else None for s, n in zip(specs.tolist(), num.tolist())]
    cache: dict[tuple, Task] = {}
    tasks = []
    for key in zip(cpu.tolist(), mem.tolist(), num.tolist(), milli.tolist(), gpu_models):
        task = cache.get(key)
        if task is None:
            task = cache[key] = Task(*key)
        tasks.append(task)
    classes = task_classes(cpu, num, milli, gpu_models, coverage=coverage)
    return OpenbWorkload(name or str(pods.attrs.get("path", "")), tasks,
                         num * milli / MILLI, classes)


def draw_pods(requested: np.ndarray, capacity_gpus: float, rng: np.random.Generator,
              load: float = DEFAULT_LOAD) -> np.ndarray:
    """Pod indices drawn uniformly with replacement until their requested GPUs reach
    `load` x capacity, then shuffled."""
    total = float(requested.sum())
    if total <= 0:
        raise ConfigError("the pod list requests no GPUs: nothing to fill the cluster with")
    target = load * capacity_gpus
    chunk = int(np.ceil(1.1 * target / (total / len(requested)))) + 16
    drawn, got = [], 0.0
    while True:
        idx = rng.integers(0, len(requested), chunk)
        cum = got + np.cumsum(requested[idx])
        stop = int(np.searchsorted(cum, target - 1e-9))
        if stop < chunk:
            drawn.append(idx[: stop + 1])
            break
        drawn.append(idx)
        got = float(cum[-1])
    return rng.permutation(np.concatenate(drawn))


@dataclass
class Replay:
    """One plugin on one seed. Arrays have one entry per arriving pod."""

    plugin: str
    seed: int
    capacity_gpus: float
    requested: np.ndarray  # requested GPUs so far / capacity
    allocated: np.ndarray  # allocated GPUs / capacity
    placed: np.ndarray  # bool per pod
    frag_load: np.ndarray  # requested load at each fragmentation sample
    frag_ratio: np.ndarray  # fragmented / unallocated GPU capacity
    frag_share: np.ndarray  # fragmented / all GPU capacity
    seconds: float
    workload: str = ""

    @property
    def failed(self) -> int:
        return int((~self.placed).sum())

    def _at(self, load: float) -> int:
        i = int(np.searchsorted(self.requested, load - 1e-9))
        return min(i, len(self.requested) - 1)

    def allocated_at(self, load: float) -> float:
        """Allocated GPU share once the requested GPUs first reach `load` of capacity."""
        return float(self.allocated[self._at(load)])

    def fragmentation_at(self, load: float) -> tuple[float, float]:
        """(fragmented/unallocated, fragmented/all) at the first sample at or past `load`."""
        i = min(int(np.searchsorted(self.frag_load, load - 1e-9)), len(self.frag_load) - 1)
        return float(self.frag_ratio[i]), float(self.frag_share[i])

    def summary(self, loads: Sequence[float] = (1.0, DEFAULT_LOAD)) -> dict:
        row = {"trace": self.workload, "plugin": self.plugin, "seed": self.seed}
        for load in loads:
            pct = f"{round(load * 100)}%"
            row[f"alloc@{pct}"] = self.allocated_at(load)
        for load in loads:
            pct = f"{round(load * 100)}%"
            row[f"frag@{pct}"] = self.fragmentation_at(load)[0]
        row["failed"] = self.failed
        row["pods"] = len(self.placed)
        row["seconds"] = round(self.seconds, 3)
        return row


def replay(nodes: Sequence[Node], workload: OpenbWorkload, plugin: str, seed: int, *,
           load: float = DEFAULT_LOAD) -> Replay:
    choose = get_plugin(plugin)
    state = PlacementState.from_nodes(nodes, workload.classes)
    capacity = state.total_gpu_milli / MILLI
    if capacity <= 0:
        raise ConfigError("the node list has no GPUs")
    order = draw_pods(workload.requested, capacity, np.random.default_rng(seed), load)
    rng = np.random.default_rng([seed, 1])
    requested = np.cumsum(workload.requested[order]) / capacity
    allocated = np.empty(len(order))
    placed = np.zeros(len(order), dtype=bool)
    marks = list(np.arange(FRAG_STEP, load + 1e-9, FRAG_STEP))
    empty = state.fragmentation()  # CPU-only shapes see even an idle cluster's GPUs as fragments
    frag_load, frag_ratio, frag_share = [0.0], [empty / state.total_gpu_milli], [
        empty / state.total_gpu_milli]
    tasks = workload.tasks
    allocate = state.allocate
    next_mark = 0
    start = time.perf_counter()
    for i, p in enumerate(order.tolist()):
        task = tasks[p]
        choice = choose(state, task, rng)
        if choice is not None:
            allocate(choice[0], choice[1], task)
            placed[i] = True
        allocated[i] = state.allocated_gpu_milli
        if next_mark < len(marks) and requested[i] >= marks[next_mark] - 1e-9:
            frag = state.fragmentation()
            free = state.total_gpu_milli - allocated[i]
            frag_load.append(float(requested[i]))
            frag_ratio.append(frag / free if free > 0 else 0.0)
            frag_share.append(frag / state.total_gpu_milli)
            while next_mark < len(marks) and requested[i] >= marks[next_mark] - 1e-9:
                next_mark += 1
    seconds = time.perf_counter() - start
    return Replay(plugin, seed, capacity, requested, allocated / state.total_gpu_milli, placed,
                  np.array(frag_load), np.array(frag_ratio), np.array(frag_share), seconds,
                  workload.name)


def run(nodes: Sequence[Node], workload: OpenbWorkload, plugins: Iterable[str],
        seeds: Iterable[int], *, load: float = DEFAULT_LOAD, progress=None) -> list[Replay]:
    out = []
    for seed in seeds:
        for plugin in plugins:
            out.append(replay(nodes, workload, plugin, seed, load=load))
            if progress:
                progress(out[-1])
    return out


def mean_rows(replays: Sequence[Replay], loads: Sequence[float] = (1.0, DEFAULT_LOAD)
              ) -> list[dict]:
    """Mean and standard deviation over seeds, per trace and plugin, in first-seen order."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in replays:
        groups.setdefault((r.workload, r.plugin), []).append(r.summary(loads))
    rows = []
    for (trace, plugin), rs in groups.items():
        row = {"trace": trace, "plugin": plugin, "seeds": len(rs)}
        for key in rs[0]:
            if key.startswith(("alloc@", "frag@")) or key in ("failed", "seconds"):
                vals = np.array([r[key] for r in rs], dtype=float)
                row[key] = float(vals.mean())
                row[key + " sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
        rows.append(row)
    return rows


def curves(replays: Sequence[Replay], step: float = 0.01) -> dict[str, dict[str, np.ndarray]]:
    """Per plugin, the mean allocated share and fragmentation ratio over seeds on a grid of
    requested load."""
    out: dict[str, dict[str, list]] = {}
    for r in replays:
        grid = np.arange(0.0, r.requested[-1] + 1e-9, step)
        idx = np.minimum(np.searchsorted(r.requested, grid - 1e-9), len(r.requested) - 1)
        c = out.setdefault(r.plugin, {"alloc": [], "frag": [], "load": grid})
        c["alloc"].append(np.where(grid > 0, r.allocated[idx], 0.0))
        c["frag"].append(np.interp(grid, r.frag_load, r.frag_ratio))
        if len(grid) < len(c["load"]):
            c["load"] = grid
    result = {}
    for plugin, c in out.items():
        n = len(c["load"])
        result[plugin] = {"load": c["load"],
                          "alloc": np.mean([a[:n] for a in c["alloc"]], axis=0),
                          "frag": np.mean([f[:n] for f in c["frag"]], axis=0)}
    return result


# ---- curves for people ---------------------------------------------------------------------

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f")


def write_curves(path: str, data: dict[str, dict[str, np.ndarray]], title: str = "") -> str:
    """Write the curves of `curves()` to `path`: `.csv` (a table), `.svg` (drawn here, no
    plotting library needed) or `.png` (needs matplotlib). Returns the format written."""
    lower = str(path).lower()
    if lower.endswith(".csv"):
        rows = []
        for plugin, c in data.items():
            for load, alloc, frag in zip(c["load"], c["alloc"], c["frag"]):
                rows.append({"plugin": plugin, "requested_load": round(float(load), 4),
                             "allocated_share": float(alloc), "fragmentation_ratio": float(frag)})
        pd.DataFrame(rows).to_csv(path, index=False)
        return "csv"
    if lower.endswith(".svg"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(curves_svg(data, title))
        return "svg"
    if lower.endswith(".png"):
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ConfigError("--plot: .png needs matplotlib, which is not installed; "
                              "use a .svg or .csv file") from None
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for plugin, c in data.items():
            axes[0].plot(100 * c["load"], 100 * c["alloc"], label=plugin)
            axes[1].plot(100 * c["load"], 100 * c["frag"], label=plugin)
        axes[0].set(xlabel="requested GPUs, % of capacity", ylabel="allocated GPUs, %")
        axes[1].set(xlabel="requested GPUs, % of capacity",
                    ylabel="fragmented, % of unallocated GPUs")
        axes[0].legend()
        fig.suptitle(title)
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        return "png"
    raise ConfigError(f"--plot: unknown file type {path!r}; use .svg, .csv or .png")


def curves_svg(data: dict[str, dict[str, np.ndarray]], title: str = "") -> str:
    """Two panels: allocated GPU share and fragmentation ratio against requested load."""
    width, height, pad = 440, 300, 50
    x_max = max(float(c["load"][-1]) for c in data.values()) * 100 if data else 130.0
    panels = [("alloc", "allocated GPUs, % of capacity", (0, 100)),
              ("frag", "fragmented, % of unallocated GPUs", (0, 100))]
    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * width}" '
           f'height="{height + 40}" font-family="sans-serif" font-size="11">'),
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{width}" y="16" text-anchor="middle" font-size="13">{_esc(title)}</text>']
    for p, (key, label, (y_lo, y_hi)) in enumerate(panels):
        x0, y0 = p * width + pad, 30
        w, h = width - pad - 15, height - pad - 10

        def sx(x, x0=x0, w=w):
            return x0 + w * x / x_max

        def sy(y, y0=y0, h=h, y_lo=y_lo, y_hi=y_hi):
            return y0 + h * (1 - (y - y_lo) / (y_hi - y_lo))

        out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" '
                   f'stroke="#999"/>')
        for tick in range(0, int(x_max) + 1, 20):
            out.append(f'<line x1="{sx(tick):.1f}" y1="{y0 + h}" x2="{sx(tick):.1f}" '
                       f'y2="{y0 + h + 4}" stroke="#999"/>'
                       f'<text x="{sx(tick):.1f}" y="{y0 + h + 16}" '
                       f'text-anchor="middle">{tick}</text>')
        for tick in range(y_lo, y_hi + 1, 20):
            out.append(f'<line x1="{x0 - 4}" y1="{sy(tick):.1f}" x2="{x0 + w}" '
                       f'y2="{sy(tick):.1f}" stroke="#eee"/>'
                       f'<text x="{x0 - 6}" y="{sy(tick) + 4:.1f}" '
                       f'text-anchor="end">{tick}</text>')
        out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 32}" text-anchor="middle">'
                   f'requested GPUs, % of capacity</text>')
        out.append(f'<text transform="translate({x0 - 36},{y0 + h / 2}) rotate(-90)" '
                   f'text-anchor="middle">{_esc(label)}</text>')
        for i, (plugin, c) in enumerate(data.items()):
            colour = _COLOURS[i % len(_COLOURS)]
            pts = " ".join(f"{sx(100 * x):.1f},{sy(100 * y):.1f}"
                           for x, y in zip(c["load"], c[key]))
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" '
                       f'stroke-width="1.5"/>')
            if p == 0:
                # bottom right: the curves are high there
                ly, lx = y0 + h - 12 - 14 * (len(data) - 1 - i), x0 + w - 120
                out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 18}" y2="{ly}" '
                           f'stroke="{colour}" stroke-width="2"/><text x="{lx + 22}" '
                           f'y="{ly + 4}">{_esc(plugin)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
