"""The FGD paper's replay protocol on an openb pod list (Weng et al., USENIX ATC '23).

The cluster is the GPU node list. Pods are drawn uniformly with replacement from the pod list
(then shuffled) with a seeded `numpy.random.Generator` until the GPUs they request reach
`load` (130%) of the cluster's GPU capacity. Each pod is placed once, on arrival, by one
placement plugin; it never leaves and nothing is preempted; a pod that fits nowhere fails and
is counted. Recorded as the requested load grows: the allocated GPU share (allocated GPUs,
fractions included, over all GPUs) and the fragmentation of the cluster against the pod list's
task-size distribution (`workbench.placement.fragmentation`).

Every plugin sees the same pod sequence for a seed; the plugin's own tie-breaking draws come
from a second generator derived from the same seed. Measured results for every openb pod list,
10 seeds each: docs/openb-results.md. The curves are drawn by `placement.curves`.

`protocol="artifact"` replays as the FGD paper's simulator (hkust-adsl/kubernetes-scheduler-
simulator) runs its experiments: every pod of the list once in a random order, then pods drawn
with replacement appended until one more would pass `load` x capacity (or, for a list that
asks for more, pods removed at random until it fits); the plugins scored as that simulator
scores them (`plugins.ARTIFACT_PLUGINS`, equal scores to the first node of a random node
order fixed for the run); allocation at a load is the mean over the pods whose
arrived GPUs round to that percentage of capacity. What differs, and why: docs/openb-results.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..model import Node
from ..traces.openb import allowed_models
from .fragmentation import MILLI, TaskClasses, task_classes
from .plugins import get_plugin
from .state import PlacementState, Task

DEFAULT_LOAD = 1.3
FRAG_STEP = 0.05  # fragmentation is sampled every 5% of requested load
PROTOCOLS = ("default", "artifact")
ARTIFACT_COVERAGE = 0.95  # the artifact's target workload: shapes of 95% of the pods


def check_protocol(name: str) -> str:
    """`name` if it is a replay protocol, else a one-line ConfigError."""
    if name not in PROTOCOLS:
        raise ConfigError(f"--protocol: unknown {name!r}; known: {', '.join(PROTOCOLS)}")
    return name


@dataclass
class OpenbWorkload:
    """A pod list ready to replay: one `Task` per pod and the target workload for FGD."""

    name: str
    tasks: list[Task]
    requested: np.ndarray  # GPUs each pod requests
    classes: TaskClasses
    per_gpu: np.ndarray | None = None  # share of one GPU each pod asks per GPU (0: CPU-only)

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
                         num * milli / MILLI, classes, np.where(num > 0, milli, 0) / MILLI)


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


def draw_pods_artifact(requested: np.ndarray, per_gpu: np.ndarray, capacity_gpus: float,
                       rng: np.random.Generator, load: float = DEFAULT_LOAD) -> np.ndarray:
    """The FGD artifact's workload tuning: every pod of the list once, in a random order; if
    they request less than `load` x capacity, pods drawn uniformly with replacement are
    appended (in draw order) until the next draw would pass it; if more, pods are removed at
    random until they fit. The artifact's stop test adds the drawn pod's per-GPU share, not
    its total (`per_gpu`), so a multi-GPU pod can carry the total past the target: kept as
    it is."""
    n = len(requested)
    total = float(requested.sum())
    if total <= 0:
        raise ConfigError("the pod list requests no GPUs: nothing to fill the cluster with")
    target = load * capacity_gpus
    order = rng.permutation(n)
    if total > target + 1e-9:  # remove pods at random (without replacement) until it fits
        removal = rng.permutation(n)
        left = total - np.cumsum(requested[order[removal]])
        cut = int(np.searchsorted(-left, -target - 1e-9))  # first removal that fits
        keep = np.ones(n, dtype=bool)
        keep[removal[: cut + 1]] = False
        return order[keep]
    extra, got = [], total
    chunk = int(np.ceil(1.1 * (target - total) / (total / n))) + 16
    while True:
        idx = rng.integers(0, n, chunk)
        before = got + np.concatenate(([0.0], np.cumsum(requested[idx])[:-1]))
        over = np.flatnonzero(before + per_gpu[idx] > target + 1e-9)
        if len(over):
            extra.append(idx[: over[0]])
            break
        extra.append(idx)
        got = float(before[-1] + requested[idx[-1]])
    return np.concatenate([order, *extra])


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
    protocol: str = "default"

    @property
    def failed(self) -> int:
        return int((~self.placed).sum())

    def _at(self, load: float) -> int:
        i = int(np.searchsorted(self.requested, load - 1e-9))
        return min(i, len(self.requested) - 1)

    def allocated_at(self, load: float) -> float:
        """Allocated GPU share at `load`: under the default protocol, once the requested GPUs
        first reach `load` of capacity; under the artifact's, the mean over the pods whose
        requested GPUs round to that whole percentage (if none, to within one point of it)."""
        if self.protocol == "artifact":
            share = bucket_mean(self.requested, self.allocated, load)
            if share is not None:
                return share
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


def bucket_mean(requested: np.ndarray, allocated: np.ndarray, load: float) -> float | None:
    """The artifact's reading of an allocation curve at `load`: the mean allocated share over
    the pods whose requested load, in whole percent (rounded half to even), equals `load`'s;
    if there are none, over those within one point; None if still none."""
    pct = np.round(np.asarray(requested) * 100)
    target = round(load * 100)
    hit = pct == target
    if not hit.any():
        hit = np.abs(pct - target) <= 1
    return float(np.mean(np.asarray(allocated)[hit])) if hit.any() else None


def replay(nodes: Sequence[Node], workload: OpenbWorkload, plugin: str, seed: int, *,
           load: float = DEFAULT_LOAD, protocol: str = "default") -> Replay:
    choose = get_plugin(plugin, check_protocol(protocol))
    state = PlacementState.from_nodes(nodes, workload.classes)
    capacity = state.total_gpu_milli / MILLI
    if capacity <= 0:
        raise ConfigError("the node list has no GPUs")
    if protocol == "artifact":
        per_gpu = workload.per_gpu if workload.per_gpu is not None else workload.requested
        order = draw_pods_artifact(workload.requested, per_gpu, capacity,
                                   np.random.default_rng(seed), load)
    else:
        order = draw_pods(workload.requested, capacity, np.random.default_rng(seed), load)
    if protocol == "artifact":
        # The artifact's nodes get a random rank once per run, and its scheduler gives equal
        # scores to the top-ranked node (`plugins._pick_max`). Its own stream, so the plugins'
        # draws (random's) stay the same.
        state.tie_rank = np.random.default_rng([seed, 2]).permutation(len(state))
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
                  workload.name, protocol)


def run(nodes: Sequence[Node], workload: OpenbWorkload, plugins: Iterable[str],
        seeds: Iterable[int], *, load: float = DEFAULT_LOAD, progress=None,
        protocol: str = "default") -> list[Replay]:
    out = []
    for seed in seeds:
        for plugin in plugins:
            out.append(replay(nodes, workload, plugin, seed, load=load, protocol=protocol))
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
