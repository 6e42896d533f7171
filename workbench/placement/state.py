"""The placement state: what one task needs (`Task`) and what every node has free
(`PlacementState`), in integer units so fractional GPU accounting adds up exactly.

Units: CPU in milli-cores, memory in MiB, GPU in milli-GPU (1000 = one GPU). A GPU-sharing
task (`num_gpu` 1, `gpu_milli` < 1000) goes on one GPU with enough free milli; a whole-GPU task
needs `num_gpu` fully free GPUs; a CPU-only task needs no GPU; `gpu_models` restricts the GPU
model. Also here: the target workload (task shapes weighted by count) that FGD and the
fragmentation metric measure against, built from tasks or jobs, and the placement view of a
`ClusterState`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from ..model import CPU, MEM, ClusterState, JobSpec, Node, Resources
from .fragmentation import (
    MILLI,
    FragmentationIndex,
    TaskClasses,
    fragmentation_ratio,
    task_classes,
)

MAX_TAG = 9  # gpu-clustering kinds: 0 = sharing, k = k whole GPUs (k >= 9 together)


@dataclass(frozen=True)
class Task:
    """What one task (pod, worker) needs. `gpu_milli` is per GPU (1000 for whole GPUs)."""

    cpu_milli: int = 0
    mem_mib: int = 0
    num_gpu: int = 0
    gpu_milli: int = 0
    gpu_models: frozenset[str] | None = None  # allowed GPU models; None = any

    def __post_init__(self) -> None:
        if self.num_gpu < 0 or self.cpu_milli < 0 or self.mem_mib < 0:
            raise ValueError(f"negative demand in {self}")
        if self.num_gpu and not 0 < self.gpu_milli <= MILLI:
            raise ValueError(f"gpu_milli must be 1..1000 for a GPU task, got {self.gpu_milli}")
        if self.num_gpu > 1 and self.gpu_milli != MILLI:
            raise ValueError("only a single-GPU task can take a fraction of a GPU")

    @property
    def shared(self) -> bool:
        return self.num_gpu == 1 and self.gpu_milli < MILLI

    @property
    def gpu_total(self) -> int:
        """milli-GPU requested in all."""
        return self.num_gpu * self.gpu_milli if self.num_gpu else 0

    @property
    def kind(self) -> int:
        """gpu-clustering kind: 0 sharing, k for k whole GPUs (capped), -1 CPU-only."""
        if not self.num_gpu:
            return -1
        return 0 if self.shared else min(self.num_gpu, MAX_TAG)

    @classmethod
    def from_resources(cls, demand: Resources,
                       gpu_models: frozenset[str] | None = None) -> Task:
        """A task from the main model's `Resources` (cores, GiB, GPUs or a fraction)."""
        gpu = float(demand.gpu)
        if 0 < gpu < 1:
            num, milli = 1, round(gpu * MILLI)
        else:
            num, milli = round(gpu), (MILLI if gpu >= 1 else 0)
        return cls(round(float(demand.cpu) * MILLI), round(float(demand.mem) * 1024), num, milli,
                   gpu_models)


class PlacementState:
    """Free resources of every node as arrays, updated in place by `allocate`/`release`.

    `gpu_free` is (nodes x max GPUs) free milli-GPU per GPU, 0 beyond a node's GPUs.
    `workload` is the target workload FGD and the fragmentation metric measure against.
    """

    def __init__(self, names: Sequence[str], cpu_capacity, mem_capacity, gpu_count,
                 gpu_models: Sequence[str], workload: TaskClasses | None = None) -> None:
        self.names = list(names)
        self.cpu_capacity = np.asarray(cpu_capacity, dtype=np.int64).copy()
        self.mem_capacity = np.asarray(mem_capacity, dtype=np.int64).copy()
        self.gpu_count = np.asarray(gpu_count, dtype=np.int64).copy()
        self.gpu_models = np.asarray(list(gpu_models), dtype=object)
        n, width = len(self.names), max(int(self.gpu_count.max(initial=0)), 1)
        self.cpu_free = self.cpu_capacity.copy()
        self.mem_free = self.mem_capacity.copy()
        self.gpu_free = np.where(np.arange(width)[None, :] < self.gpu_count[:, None], MILLI, 0)
        self.gpu_free = self.gpu_free.astype(np.int64)
        self.kinds = np.zeros((n, MAX_TAG + 1), dtype=np.int64)  # resident GPU tasks per kind
        _, self.model_code = np.unique(self.gpu_models.astype(str), return_inverse=True)
        self.workload = workload
        # Node priority for equal scores under the FGD artifact's scoring (lower first; None:
        # node order). Our own plugins draw ties at random and never read it.
        self.tie_rank: np.ndarray | None = None
        self._derive()
        self._model_masks: dict[frozenset[str], np.ndarray] = {}
        self._index: FragmentationIndex | None = None
        # Largest node, to normalise scores (the paper's simulator uses 128 CPUs, 8 GPUs).
        self.cpu_norm = float(max(self.cpu_capacity.max(initial=1), 1))
        self.gpu_norm = float(max(MILLI * self.gpu_count.max(initial=1), MILLI))

    def _derive(self, nodes=slice(None)) -> None:
        if isinstance(nodes, slice):
            self.gpu_free_total = self.gpu_free.sum(axis=1)
            self.gpu_max = self.gpu_free.max(axis=1)
            self.full_count = (self.gpu_free == MILLI).sum(axis=1)
            self.signature = np.array([self._signature(i) for i in range(len(self.names))],
                                      dtype=np.int64)
        else:
            row = self.gpu_free[nodes]
            self.gpu_free_total[nodes] = row.sum()
            self.gpu_max[nodes] = row.max()
            self.full_count[nodes] = (row == MILLI).sum()

    def _signature(self, node: int) -> int:
        """Equal for nodes in the same state (model, free CPU, memory, GPUs in any order)."""
        return hash((int(self.model_code[node]), int(self.cpu_free[node]),
                     int(self.mem_free[node]), *sorted(self.gpu_free[node].tolist())))

    # -- construction ------------------------------------------------------------------

    @classmethod
    def from_nodes(cls, nodes: Sequence[Node], workload: TaskClasses | None = None
                   ) -> PlacementState:
        return cls([n.name for n in nodes],
                   [round(float(n.cpus) * MILLI) for n in nodes],
                   [round(float(n.mem) * 1024) for n in nodes],
                   [n.gpus for n in nodes], [n.gpu_model if n.gpus else "" for n in nodes],
                   workload)

    @classmethod
    def from_cluster_state(cls, state: ClusterState, workload: TaskClasses | None = None
                           ) -> PlacementState:
        """The placement view of the main model's `ClusterState` (free fraction per GPU,
        NaN beyond a node's GPUs; a node that is down has nothing free). Which kinds of GPU
        task a node holds is not in a `ClusterState`: partly used GPUs count as sharing
        tasks, the rest is unknown to gpu-clustering."""
        cpu_free, mem_free, gpu_free = free_milli(state)
        out = cls([n.name for n in state.nodes],
                  np.round(state.capacity[:, CPU] * MILLI), np.round(state.capacity[:, MEM] * 1024),
                  _gpu_counts(state), [n.gpu_model if n.gpus else "" for n in state.nodes],
                  workload)
        out.cpu_free[:] = cpu_free
        out.mem_free[:] = mem_free
        out.gpu_free[:, : gpu_free.shape[1]] = gpu_free
        out.kinds[:, 0] = ((out.gpu_free > 0) & (out.gpu_free < MILLI)).sum(axis=1)
        out._derive()
        return out

    def copy(self) -> PlacementState:
        out = object.__new__(PlacementState)
        out.__dict__.update(self.__dict__)
        for name in ("cpu_free", "mem_free", "gpu_free", "kinds", "gpu_free_total", "gpu_max",
                     "full_count", "signature"):
            setattr(out, name, getattr(self, name).copy())
        out._index = None
        return out

    # -- questions ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> int:
        return int(MILLI * self.gpu_count.sum())

    @property
    def allocated_gpu_milli(self) -> int:
        return self.total_gpu_milli - int(self.gpu_free_total.sum())

    def model_mask(self, models: frozenset[str] | None) -> np.ndarray | None:
        """Nodes whose GPU model is in `models` (None: no restriction)."""
        if models is None:
            return None
        mask = self._model_masks.get(models)
        if mask is None:
            mask = np.isin(self.gpu_models, list(models))
            self._model_masks[models] = mask
        return mask

    def feasible(self, task: Task) -> np.ndarray:
        """Nodes that can host `task` now."""
        ok = (self.cpu_free >= task.cpu_milli) & (self.mem_free >= task.mem_mib)
        if task.num_gpu:
            if task.shared:
                ok &= self.gpu_max >= task.gpu_milli
            else:
                ok &= self.full_count >= task.num_gpu
            mask = self.model_mask(task.gpu_models)
            if mask is not None:
                ok &= mask
        return ok

    def fragmentation_index(self) -> FragmentationIndex:
        """The FGD bookkeeping for `workload`, built on first use and kept current."""
        if self._index is None:
            if self.workload is None:
                raise ValueError("fragmentation needs a target workload: set state.workload "
                                 "(workbench.placement.fragmentation.task_classes)")
            self._index = FragmentationIndex(self.workload, self.gpu_models, self.gpu_free,
                                             self.cpu_free, self.mem_free)
        return self._index

    def fragmentation(self) -> float:
        """Expected fragmented GPU capacity of the cluster against `workload`, milli-GPU."""
        if self._index is not None:
            return self._index.total()
        if self.workload is None:
            raise ValueError("fragmentation needs a target workload: set state.workload")
        # Measured afresh rather than kept current: only FGD pays for the bookkeeping.
        return FragmentationIndex(self.workload, self.gpu_models, self.gpu_free, self.cpu_free,
                                  self.mem_free).total()

    def fragmentation_ratio(self) -> float:
        """Share of the unallocated GPU capacity that is fragmented."""
        return fragmentation_ratio(self.fragmentation(), float(self.gpu_free_total.sum()))

    # -- changes -----------------------------------------------------------------------

    def set_free(self, node: int, cpu_milli: int, mem_mib: int, gpu_milli: np.ndarray) -> None:
        """Overwrite what is free on `node` (to mirror a ledger that decides GPUs itself)."""
        self.cpu_free[node] = cpu_milli
        self.mem_free[node] = mem_mib
        self.gpu_free[node, : len(gpu_milli)] = gpu_milli
        self._derive(node)
        self.signature[node] = self._signature(node)
        if self._index is not None:
            self._index.refresh(node)

    def allocate(self, node: int, gpus: Sequence[int], task: Task) -> None:
        """Take `task`'s resources on `node` and `gpus`; refuses anything that does not fit."""
        gpus = tuple(int(g) for g in gpus)
        if self.cpu_free[node] < task.cpu_milli or self.mem_free[node] < task.mem_mib:
            raise ValueError(f"{self.names[node]}: not enough CPU or memory for {task}")
        self._check_gpus(node, gpus, task)
        mask = self.model_mask(task.gpu_models) if task.num_gpu else None
        if mask is not None and not mask[node]:
            raise ValueError(f"{self.names[node]}: GPU model {self.gpu_models[node]} not in "
                             f"{sorted(task.gpu_models)}")
        for g in gpus:
            if self.gpu_free[node, g] < task.gpu_milli:
                raise ValueError(f"{self.names[node]} GPU {g}: {self.gpu_free[node, g]} milli "
                                 f"free, task needs {task.gpu_milli}")
            if not task.shared and self.gpu_free[node, g] != MILLI:
                raise ValueError(f"{self.names[node]} GPU {g} is not fully free")
        self._apply(node, gpus, task, -1)

    def release(self, node: int, gpus: Sequence[int], task: Task) -> None:
        """Give back what `allocate(node, gpus, task)` took."""
        gpus = tuple(int(g) for g in gpus)
        self._check_gpus(node, gpus, task)
        if (self.cpu_free[node] + task.cpu_milli > self.cpu_capacity[node]
                or self.mem_free[node] + task.mem_mib > self.mem_capacity[node]
                or any(self.gpu_free[node, g] + task.gpu_milli > MILLI for g in gpus)):
            raise ValueError(f"{self.names[node]}: releasing {task} exceeds capacity")
        self._apply(node, gpus, task, +1)

    def _check_gpus(self, node: int, gpus: tuple[int, ...], task: Task) -> None:
        if len(gpus) != task.num_gpu or len(set(gpus)) != len(gpus):
            raise ValueError(f"task needs {task.num_gpu} distinct GPU(s), got {gpus}")
        if any(not 0 <= g < self.gpu_count[node] for g in gpus):
            raise ValueError(f"{self.names[node]} has {self.gpu_count[node]} GPU(s), got {gpus}")

    def _apply(self, node: int, gpus: tuple[int, ...], task: Task, sign: int) -> None:
        self.cpu_free[node] += sign * task.cpu_milli
        self.mem_free[node] += sign * task.mem_mib
        for g in gpus:
            self.gpu_free[node, g] += sign * task.gpu_milli
        if task.num_gpu:
            self.kinds[node, task.kind] -= sign
            self._derive(node)
        self.signature[node] = self._signature(node)
        if self._index is not None:
            self._index.refresh(node)


def workload_of(tasks: Sequence[Task], coverage: float = 1.0) -> TaskClasses:
    """The target workload (popularity-weighted task shapes) of a list of tasks."""
    return task_classes([t.cpu_milli for t in tasks], [t.num_gpu for t in tasks],
                        [t.gpu_milli for t in tasks], [t.gpu_models for t in tasks],
                        coverage=coverage)


def tasks_of(spec: JobSpec) -> list[tuple[Task, int]]:
    """A job's tasks as (task shape, how many): its workers at their submitted count, then
    its parameter servers."""
    out = [(Task.from_resources(spec.worker_demand), spec.initial_workers)]
    if spec.num_ps:
        out.append((Task.from_resources(spec.ps_demand), spec.num_ps))
    return out


def workload_of_counts(counts: dict[Task, int]) -> TaskClasses:
    """The target workload of tasks given as shape -> how many (every shape kept)."""
    shapes = [t for t, n in counts.items() if n > 0]
    if not shapes:
        raise ValueError("workload_of_counts: no tasks")
    return task_classes(*([getattr(t, f) for t in shapes]
                          for f in ("cpu_milli", "num_gpu", "gpu_milli")),
                        [t.gpu_models for t in shapes], coverage=1.0,
                        counts=[counts[t] for t in shapes])


def workload_of_jobs(specs: Iterable[JobSpec]) -> TaskClasses:
    """The task-size distribution of a list of jobs: every task (worker or PS) one draw."""
    # Summed by demand first: a trace has 82k jobs but few shapes, and a Task is slow to make.
    by_demand: dict[Resources, int] = {}
    for spec in specs:
        by_demand[spec.worker_demand] = by_demand.get(spec.worker_demand, 0) + spec.initial_workers
        if spec.num_ps:
            by_demand[spec.ps_demand] = by_demand.get(spec.ps_demand, 0) + spec.num_ps
    counts: dict[Task, int] = {}
    for demand, n in by_demand.items():  # in order of first sight, as tasks_of gives them
        task = Task.from_resources(demand)
        counts[task] = counts.get(task, 0) + n
    return workload_of_counts(counts)


def free_milli(state: ClusterState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Free CPU (milli-cores), memory (MiB) per node and free milli-GPU per GPU of a
    `ClusterState`, as int64; 0 beyond a node's GPUs and on a node that is down."""
    gpu_frac = np.asarray(state.gpu_free, dtype=np.float64)
    if gpu_frac.ndim != 2 or gpu_frac.shape[0] != len(state.nodes):
        gpu_frac = np.full((len(state.nodes), 0), np.nan)
    free = state.free
    up = np.asarray(state.node_up, dtype=bool)
    cpu = np.maximum((free[:, CPU] * MILLI).round(), 0).astype(np.int64)
    mem = np.maximum((free[:, MEM] * 1024).round(), 0).astype(np.int64)
    # 0 where there is no GPU or the node is down, then rounded and clipped to [0, MILLI]:
    # the array methods and ufuncs of `round`/`nan_to_num`/`clip` without their Python
    # wrappers (this runs at every timeline sample)
    valid = ~np.isnan(gpu_frac) & up[:, None]
    milli = (np.where(valid, gpu_frac, 0.0) * MILLI).round()
    return cpu, mem, np.minimum(np.maximum(milli, 0.0), MILLI).astype(np.int64)


def _gpu_counts(state: ClusterState) -> np.ndarray:
    gpu_frac = np.asarray(state.gpu_free, dtype=np.float64)
    if gpu_frac.ndim != 2 or gpu_frac.shape[0] != len(state.nodes):
        return np.zeros(len(state.nodes), dtype=np.int64)
    return (~np.isnan(gpu_frac)).sum(axis=1)


def cluster_fragmentation(state: ClusterState, workload: TaskClasses) -> dict[str, float]:
    """Fragmentation of a `ClusterState` against `workload`, for metrics and the UI:
    fragmented GPUs, unallocated GPUs, and their ratio."""
    view = PlacementState.from_cluster_state(state, workload)
    fragmented = view.fragmentation() / MILLI
    free = float(view.gpu_free_total.sum()) / MILLI
    return {"fragmented_gpus": fragmented, "free_gpus": free,
            "fragmentation_ratio": fragmentation_ratio(fragmented, free)}
