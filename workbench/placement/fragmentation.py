"""GPU fragmentation measured against a workload (FGD, Weng et al., USENIX ATC '23).

A node's unallocated GPU capacity is *fragmented for a task* when that task cannot use it:

- the task asks for no GPU, or the node cannot host the task at all (too little CPU or
  memory, a GPU model the task does not allow, too few GPUs with enough free capacity):
  all of the node's free GPU capacity is a fragment for it;
- otherwise the GPUs whose free capacity is below the task's per-GPU demand are fragments.

The fragmentation of node n against a workload M (task classes m with popularity p_m) is the
expected fragment F_n(M) = sum_m p_m F_n(m); the cluster's is the sum over nodes. All
quantities are in milli-GPU. The workload is the set of most popular task shapes of a trace
(`task_classes`); FGD places each task where F grows least (`workbench.placement.plugins`).

This module knows nothing of any trace format: it works on plain arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MILLI = 1000


@dataclass(frozen=True)
class TaskClasses:
    """Popularity-weighted task shapes: the target workload M of the measure.

    `mem_mib` is 0 where memory is not part of a class (the paper's measure uses CPU and GPU
    only). `gpu_models[k]` is the set of GPU models class k allows, None for any.
    """

    cpu_milli: np.ndarray
    mem_mib: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    gpu_models: tuple[frozenset[str] | None, ...]
    weight: np.ndarray

    def __len__(self) -> int:
        return len(self.weight)

    def rows(self) -> list[dict]:
        return [{"cpu": self.cpu_milli[k] / MILLI, "mem_gib": self.mem_mib[k] / 1024,
                 "num_gpu": int(self.num_gpu[k]), "gpu_milli": int(self.gpu_milli[k]),
                 "gpu_models": "|".join(sorted(self.gpu_models[k] or ())) or "any",
                 "weight": float(self.weight[k])} for k in range(len(self))]


def task_classes(cpu_milli: Sequence[int], num_gpu: Sequence[int], gpu_milli: Sequence[int],
                 gpu_models: Sequence[frozenset[str] | None] | None = None,
                 mem_mib: Sequence[int] | None = None, *, coverage: float = 0.95,
                 counts: Sequence[int] | None = None) -> TaskClasses:
    """The most frequent distinct task shapes, most frequent first, until they cover
    `coverage` of all tasks; their weights renormalised to sum to 1.

    A shape is (CPU, per-GPU milli, GPU count, allowed models), plus memory if `mem_mib` is
    given. The FGD paper's simulator keeps shapes up to 95% popularity this way. `counts`:
    how many tasks each entry stands for (default one each), so a job of 10^8 replicas is one
    entry, not 10^8.
    """
    entries = len(cpu_milli)
    if entries == 0:
        raise ValueError("task_classes: no tasks")
    tally = [1] * entries if counts is None else [int(c) for c in counts]
    n = sum(tally)
    models = list(gpu_models) if gpu_models is not None else [None] * entries
    mems = (np.asarray(mem_mib, dtype=np.int64) if mem_mib is not None
            else np.zeros(entries, np.int64))
    cpu = np.asarray(cpu_milli, dtype=np.int64)
    num = np.asarray(num_gpu, dtype=np.int64)
    milli = np.where(num > 0, np.asarray(gpu_milli, dtype=np.int64), 0)
    seen: dict[tuple, int] = {}
    keys = zip(cpu.tolist(), mems.tolist(), num.tolist(), milli.tolist(), models)
    for key, c in zip(keys, tally):
        seen[key] = seen.get(key, 0) + c
    # Most frequent first; equal counts in a fixed order so the result never depends on input
    # order.
    ranked = sorted(seen.items(),
                    key=lambda kv: (-kv[1], kv[0][:4], sorted(kv[0][4] or ())))
    kept, covered = [], 0
    for key, count in ranked:
        if covered >= coverage * n:
            break
        kept.append((key, count))
        covered += count
    weight = np.array([c for _, c in kept], dtype=np.float64)
    return TaskClasses(
        cpu_milli=np.array([k[0] for k, _ in kept], dtype=np.int64),
        mem_mib=np.array([k[1] for k, _ in kept], dtype=np.int64),
        num_gpu=np.array([k[2] for k, _ in kept], dtype=np.int64),
        gpu_milli=np.array([k[3] for k, _ in kept], dtype=np.int64),
        gpu_models=tuple(k[4] for k, _ in kept),
        weight=weight / weight.sum(),
    )


def model_access(node_models: Sequence[str], classes: TaskClasses) -> np.ndarray:
    """(nodes x classes) bool: node's GPU model is allowed by the class."""
    names = np.asarray(node_models, dtype=object)
    out = np.ones((len(names), len(classes)), dtype=bool)
    for k, allowed in enumerate(classes.gpu_models):
        if allowed is not None:
            out[:, k] = np.isin(names, list(allowed))
    return out


def node_fragmentation(gpu_free: np.ndarray, cpu_free: np.ndarray, mem_free: np.ndarray,
                       node_models: Sequence[str], classes: TaskClasses) -> np.ndarray:
    """F_n(M) per node, milli-GPU. `gpu_free` is (nodes x GPUs) free milli per GPU (0 where a
    node has fewer GPUs); CPU in milli-cores, memory in MiB."""
    gpu_free = np.asarray(gpu_free, dtype=np.int64)
    index = FragmentationIndex(classes, node_models, gpu_free, cpu_free, mem_free)
    return index.node_values()


def fragmentation_ratio(fragmented: float, free: float) -> float:
    """Share of the unallocated GPU capacity that is fragmented (0 when nothing is free)."""
    return float(fragmented / free) if free > 0 else 0.0


class FragmentationIndex:
    """Per-node terms of F_n(M), kept current row by row so that FGD can price every
    candidate placement of a task with whole-array operations.

    For each distinct per-GPU demand t (the thresholds) it keeps, per node, the free capacity
    on GPUs with at least t free (`usable_at`) and how many such GPUs there are (`count_at`);
    `usable` is sum_m p_m [node can host m] usable_at(t_m), so F_n = free_n - usable_n.
    """

    def __init__(self, classes: TaskClasses, node_models: Sequence[str], gpu_free: np.ndarray,
                 cpu_free: np.ndarray, mem_free: np.ndarray) -> None:
        gpu_classes = classes.gpu_milli > 0  # CPU-only classes can use no GPU: never usable
        self.classes = classes
        self.cls_cpu = classes.cpu_milli[gpu_classes]
        self.cls_mem = classes.mem_mib[gpu_classes]
        self.cls_num = classes.num_gpu[gpu_classes]
        self.cls_weight = classes.weight[gpu_classes]
        self.thresholds, self.cls_thr = np.unique(classes.gpu_milli[gpu_classes],
                                                  return_inverse=True)
        self.access = model_access(node_models, classes)[:, gpu_classes]
        self._group()
        self.gpu_free, self.cpu_free, self.mem_free = gpu_free, cpu_free, mem_free
        n = len(gpu_free)
        self.usable_at = np.zeros((n, len(self.thresholds)))
        self.count_at = np.zeros((n, len(self.thresholds)), dtype=np.int64)
        self.usable = np.zeros(n)
        self.refresh()

    def refresh(self, nodes=None) -> None:
        """Recompute the rows of `nodes` (an index or index array; all when None) from the
        free arrays, after they changed."""
        idx = np.arange(len(self.gpu_free)) if nodes is None else np.atleast_1d(nodes)
        free = self.gpu_free[idx]
        ge = free[:, :, None] >= self.thresholds[None, None, :]
        usable_at = (ge * free[:, :, None]).sum(axis=1).astype(np.float64)
        count_at = ge.sum(axis=1)
        self.usable_at[idx] = usable_at
        self.count_at[idx] = count_at
        self.usable[idx] = self._usable(idx, usable_at, count_at, self.cpu_free[idx],
                                        self.mem_free[idx])

    def _group(self) -> None:
        """Classes that differ only in CPU share one column: their weights are summed per CPU
        level, so pricing costs (candidates x groups) instead of (candidates x classes)."""
        self.grouped = not self.cls_mem.any()
        if not self.grouped:
            return
        models = [self.classes.gpu_models[k] for k in np.flatnonzero(self.classes.gpu_milli > 0)]
        keys: dict[tuple, int] = {}
        member = np.empty(len(self.cls_cpu), dtype=np.int64)
        for k, key in enumerate(zip(self.cls_thr.tolist(), self.cls_num.tolist(), models)):
            member[k] = keys.setdefault(key, len(keys))
        first = np.array([np.flatnonzero(member == g)[0] for g in range(len(keys))],
                         dtype=np.int64)
        self.grp_thr = self.cls_thr[first]
        self.grp_num = self.cls_num[first]
        self.grp_access = self.access[:, first]
        self.cpu_levels = np.unique(self.cls_cpu)
        # weight_upto[i, g]: weight of group g's classes needing at most cpu_levels[i-1]
        weight_upto = np.zeros((len(self.cpu_levels) + 1, len(keys)))
        level = np.searchsorted(self.cpu_levels, self.cls_cpu)
        np.add.at(weight_upto, (level + 1, member), self.cls_weight)
        self.weight_upto = np.cumsum(weight_upto, axis=0)

    def _usable(self, nodes: np.ndarray, usable_at: np.ndarray, count_at: np.ndarray,
                cpu: np.ndarray, mem: np.ndarray) -> np.ndarray:
        """sum_m p_m [host ok] usable_at(t_m) for rows describing (hypothetical) node states."""
        if self.grouped:
            weight = self.weight_upto[np.searchsorted(self.cpu_levels, cpu, side="right")]
            weight *= self.grp_access[nodes]
            weight *= count_at[:, self.grp_thr] >= self.grp_num
            return np.einsum("ij,ij->i", weight, usable_at[:, self.grp_thr])
        ok = self.access[nodes]
        ok &= cpu[:, None] >= self.cls_cpu
        ok &= mem[:, None] >= self.cls_mem
        ok &= count_at[:, self.cls_thr] >= self.cls_num
        return np.where(ok, usable_at[:, self.cls_thr], 0.0) @ self.cls_weight

    def node_values(self) -> np.ndarray:
        """F_n(M) per node, milli-GPU."""
        return self.gpu_free.sum(axis=1) - self.usable

    def total(self) -> float:
        """F(M) of the cluster, milli-GPU."""
        return float(self.gpu_free.sum() - self.usable.sum())

    # -- pricing hypothetical placements ---------------------------------------------------

    def delta_exclusive(self, nodes: np.ndarray, cpu_milli: int, mem_mib: int,
                        num_gpu: int) -> np.ndarray:
        """Change of F_n if a task taking `num_gpu` whole free GPUs (0 for a CPU-only task)
        and this CPU and memory were placed on each of `nodes`."""
        taken = MILLI * num_gpu
        usable_at = self.usable_at[nodes] - taken  # a whole free GPU passes every threshold
        count_at = self.count_at[nodes] - num_gpu
        after = self._usable(nodes, usable_at, count_at, self.cpu_free[nodes] - cpu_milli,
                             self.mem_free[nodes] - mem_mib)
        return -taken - after + self.usable[nodes]

    def delta_shared(self, nodes: np.ndarray, gpu_values: np.ndarray, cpu_milli: int,
                     mem_mib: int, gpu_milli: int) -> np.ndarray:
        """Change of F_n if a task taking `gpu_milli` of one GPU that has `gpu_values` free
        were placed on each (node, GPU) candidate."""
        v = gpu_values[:, None]
        w = v - gpu_milli
        t = self.thresholds[None, :]
        usable_at = self.usable_at[nodes] - v * (v >= t) + w * (w >= t)
        count_at = self.count_at[nodes] - (v >= t) + (w >= t)
        after = self._usable(nodes, usable_at, count_at, self.cpu_free[nodes] - cpu_milli,
                             self.mem_free[nodes] - mem_mib)
        return -gpu_milli - after + self.usable[nodes]
