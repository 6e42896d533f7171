"""Placement plugins: choose a node, and the GPUs on it, for one task.

Any engine can call them. They see a `PlacementState` (per-node free CPU and memory, per-GPU
free milli-GPU, GPU model per node) and a `Task`, and return `(node_index, gpu_indices)` or
None when the task fits nowhere. All have the shape `choose(state, task, rng)` and are listed
in `PLACEMENT_PLUGINS`:

- `random`: a feasible node at random.
- `dot-product` (Tetris-like, as in the FGD paper's simulator): the node and GPU whose free
  (CPU, GPU) vector has the smallest dot product with the demand, both normalised by the
  largest node: the tightest fit.
- `gpu-clustering`: nodes already running tasks of the same GPU kind (sharing, 1-GPU,
  2-GPU, ...) first, then idle nodes, then the rest; fuller nodes first within each group.
- `gpu-packing`: sharing tasks onto partly used GPUs first, then onto free GPUs of partly used
  nodes, then onto idle nodes, smallest first.
- `best-fit`: the node left with the least free CPU and GPU (equal weights, normalised by the
  largest node).
- `fgd`: fragmentation gradient descent (Weng et al., ATC '23): the node and GPU where the
  expected fragmentation of the cluster against the target workload `state.workload` grows
  least (`workbench.placement.fragmentation`).

A sharing task goes on the fullest GPU of the node that fits (best fit, as in the paper's
simulator), except under `random` (any GPU that fits) and `dot-product` and `fgd` (the GPU
their score picks). Ties between equally good nodes are broken with `rng`, like the Kubernetes
scheduler does. Units and fit rules: `workbench.placement.state`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import ConfigError
from .fragmentation import MILLI
from .state import PlacementState, Task

Choice = tuple[int, tuple[int, ...]]  # (node index, GPU indices on it)

# ---- helpers -----------------------------------------------------------------------------


def _pick_min(scores: np.ndarray, rng: np.random.Generator) -> int:
    """Index of the smallest score; equal ones drawn at random."""
    ties = np.flatnonzero(scores == scores.min())
    return int(ties[0] if len(ties) == 1 else ties[rng.integers(len(ties))])


def _exclusive_gpus(state: PlacementState, node: int, task: Task) -> tuple[int, ...]:
    """The lowest-numbered fully free GPUs (none for a CPU-only task)."""
    if not task.num_gpu:
        return ()
    return tuple(int(g) for g in np.flatnonzero(state.gpu_free[node] == MILLI)[: task.num_gpu])


def _best_fit_gpu(state: PlacementState, node: int, task: Task) -> tuple[int, ...]:
    """For a sharing task, the fullest GPU that fits; else the lowest free GPUs."""
    if not task.shared:
        return _exclusive_gpus(state, node, task)
    row = state.gpu_free[node]
    return (int(np.argmin(np.where(row >= task.gpu_milli, row, MILLI + 1))),)


def _shared_best_values(state: PlacementState, nodes: np.ndarray, task: Task) -> np.ndarray:
    """Per node, the smallest free milli of a GPU that fits the sharing task."""
    rows = state.gpu_free[nodes]
    return np.where(rows >= task.gpu_milli, rows, MILLI + 1).min(axis=1)


# ---- the plugins -------------------------------------------------------------------------


def choose_random(state: PlacementState, task: Task, rng: np.random.Generator) -> Choice | None:
    nodes = np.flatnonzero(state.feasible(task))
    if not len(nodes):
        return None
    node = int(nodes[rng.integers(len(nodes))])
    if task.shared:
        gpus = np.flatnonzero(state.gpu_free[node] >= task.gpu_milli)
        return node, (int(gpus[rng.integers(len(gpus))]),)
    return node, _exclusive_gpus(state, node, task)


def choose_best_fit(state: PlacementState, task: Task, rng: np.random.Generator
                    ) -> Choice | None:
    nodes = np.flatnonzero(state.feasible(task))
    if not len(nodes):
        return None
    left = (0.5 * (state.cpu_free[nodes] - task.cpu_milli) / state.cpu_norm
            + 0.5 * (state.gpu_free_total[nodes] - task.gpu_total) / state.gpu_norm)
    node = int(nodes[_pick_min(left, rng)])
    return node, _best_fit_gpu(state, node, task)


def choose_dot_product(state: PlacementState, task: Task, rng: np.random.Generator
                       ) -> Choice | None:
    nodes = np.flatnonzero(state.feasible(task))
    if not len(nodes):
        return None
    cpu_term = state.cpu_free[nodes] * (task.cpu_milli / state.cpu_norm ** 2)
    if not task.num_gpu:
        node = int(nodes[_pick_min(cpu_term, rng)])
        return node, ()
    # GPU dimension: a partly used GPU that fits, or the node's whole free GPUs together.
    exclusive = (MILLI * state.full_count[nodes]).astype(np.float64)
    exclusive[state.full_count[nodes] < task.num_gpu] = np.inf
    if task.shared:
        rows = state.gpu_free[nodes]
        partial = np.where((rows >= task.gpu_milli) & (rows < MILLI), rows, np.inf).min(axis=1)
        gpu_dim = np.minimum(partial, exclusive)
    else:
        partial, gpu_dim = None, exclusive
    score = cpu_term + gpu_dim * (task.gpu_total / state.gpu_norm ** 2)
    i = _pick_min(score, rng)
    node = int(nodes[i])
    if partial is not None and partial[i] <= exclusive[i]:
        row = state.gpu_free[node]
        return node, (int(np.flatnonzero(row == partial[i])[0]),)
    return node, _exclusive_gpus(state, node, task)


def choose_gpu_packing(state: PlacementState, task: Task, rng: np.random.Generator
                       ) -> Choice | None:
    nodes = np.flatnonzero(state.feasible(task))
    if not len(nodes):
        return None
    if not task.num_gpu:  # packing has no opinion on CPU-only tasks
        return int(nodes[rng.integers(len(nodes))]), ()
    idle = state.full_count[nodes] == state.gpu_count[nodes]
    if task.shared:
        best = _shared_best_values(state, nodes, task)
        on_used_gpu = best < MILLI
    else:
        best = np.zeros(len(nodes))
        on_used_gpu = np.zeros(len(nodes), dtype=bool)
    # Tiers: a partly used GPU, then free GPUs of a partly used node, then an idle node.
    tier = np.where(idle, 1, np.where(on_used_gpu, 3, 2))
    second = np.where(tier == 3, best, np.where(tier == 1, state.gpu_count[nodes], 0))
    node = int(nodes[_pick_min(-tier * 10_000_000 + second, rng)])
    return node, _best_fit_gpu(state, node, task)


def choose_gpu_clustering(state: PlacementState, task: Task, rng: np.random.Generator
                          ) -> Choice | None:
    nodes = np.flatnonzero(state.feasible(task))
    if not len(nodes):
        return None
    if not task.num_gpu:
        return int(nodes[rng.integers(len(nodes))]), ()
    kinds = state.kinds[nodes] > 0
    same, n_kinds = kinds[:, task.kind], kinds.sum(axis=1)
    # Nodes holding only this kind, then this kind among others, then idle, then the rest.
    tier = np.where(same, np.where(n_kinds == 1, 3, 2), np.where(n_kinds == 0, 1, 0))
    node = int(nodes[_pick_min(-tier * 10_000_000 + state.gpu_free_total[nodes], rng)])
    return node, _best_fit_gpu(state, node, task)


def choose_fgd(state: PlacementState, task: Task, rng: np.random.Generator) -> Choice | None:
    nodes = np.flatnonzero(state.feasible(task))
    if not len(nodes):
        return None
    index = state.fragmentation_index()
    # Nodes in the same state cost the same: price one of each, then draw among all the best.
    _, first, group = np.unique(state.signature[nodes], return_index=True, return_inverse=True)
    reps = nodes[first]
    if task.shared:
        # Candidates: each distinct free value among the fitting GPUs of each node.
        values = np.sort(state.gpu_free[reps], axis=1)
        distinct = np.ones(values.shape, dtype=bool)
        distinct[:, 1:] = values[:, 1:] != values[:, :-1]
        rows, cols = np.nonzero(distinct & (values >= task.gpu_milli))
        cand_values = values[rows, cols]
        delta = index.delta_shared(reps[rows], cand_values, task.cpu_milli, task.mem_mib,
                                   task.gpu_milli)
    else:
        rows = np.arange(len(reps))
        cand_values = None
        delta = index.delta_exclusive(reps, task.cpu_milli, task.mem_mib, task.num_gpu)
    delta = np.round(delta, 6)
    best = np.flatnonzero(delta == delta.min())
    # Every (node, GPU value) pair priced best is equally likely, whichever node stood for it.
    sizes = np.bincount(group, minlength=len(reps))[rows[best]]
    pick = int(rng.integers(sizes.sum())) if sizes.sum() > 1 else 0
    j = int(np.searchsorted(np.cumsum(sizes), pick, side="right"))
    members = nodes[group == rows[best[j]]]
    node = int(members[pick - (int(sizes[:j].sum()))])
    if cand_values is None:
        return node, _exclusive_gpus(state, node, task)
    value = cand_values[best[j]]
    return node, (int(np.flatnonzero(state.gpu_free[node] == value)[0]),)


PlacementPlugin = Callable[[PlacementState, Task, np.random.Generator], "Choice | None"]

PLACEMENT_PLUGINS: dict[str, PlacementPlugin] = {
    "random": choose_random,
    "dot-product": choose_dot_product,
    "gpu-clustering": choose_gpu_clustering,
    "gpu-packing": choose_gpu_packing,
    "best-fit": choose_best_fit,
    "fgd": choose_fgd,
}


def check_plugin(name: str, what: str = "placement") -> str:
    """`name` if it is a placement plugin, else a one-line ConfigError starting with `what`."""
    if name not in PLACEMENT_PLUGINS:
        raise ConfigError(f"{what}: unknown placement plugin {name!r}; known: "
                          f"{', '.join(PLACEMENT_PLUGINS)}")
    return name


def get_plugin(name: str) -> PlacementPlugin:
    """The plugin `name`; a one-line ConfigError if there is none."""
    return PLACEMENT_PLUGINS[check_plugin(name)]
