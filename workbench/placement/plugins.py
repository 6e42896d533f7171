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

`ARTIFACT_PLUGINS` holds the same six names scored as the FGD paper's simulator scores them
(integer scores, fixed normalisers, its GPU selection, ties to the first node of a fixed
per-run order `state.tie_rank` rather than drawn): `workbench openb --protocol artifact`.
Ours stay the default; docs/openb-results.md lists what differs.
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


# ---- the FGD artifact's scoring (`workbench openb --protocol artifact`) ------------------
#
# The same six rules as the FGD paper's simulator (hkust-adsl/kubernetes-scheduler-simulator)
# scores them, written anew: each node gets an integer score in 0..100 (the Kubernetes
# scheduler's range, fractions truncated), among the nodes with the top score the one ranked
# first in a fixed per-run node order (`state.tie_rank`: the artifact's patched host selection
# takes the lexicographically smallest node name, and its node names start with a random rank
# drawn once per run), scores are normalised by the simulator's fixed largest node
# (128 CPUs, 8 GPUs), and the GPU of a sharing pod is the fullest that fits (its "best" GPU
# selection) except under random (any that fits) and FGD (its own pick).

MAX_SCORE = 100
SPEC_CPU = 128_000  # milli-CPU of the artifact's normalising node
SPEC_GPU = 8 * MILLI  # milli-GPU of the artifact's normalising node


def _pick_max(scores: np.ndarray, nodes: np.ndarray, state: PlacementState) -> int:
    """Index of the largest score; among equal ones, the node ranked first by
    `state.tie_rank` (node order if unset). The artifact's scheduler keeps the node whose name
    sorts first among the top scores (its patched `selectHost`), and its names start with a
    random rank drawn once per run: a fixed priority of nodes, not a fresh draw per pod."""
    ties = np.flatnonzero(scores == scores.max())
    if len(ties) == 1:
        return int(ties[0])
    rank = state.tie_rank
    return int(ties[np.argmin(nodes[ties] if rank is None else rank[nodes[ties]])])


def _truncate(x: np.ndarray) -> np.ndarray:
    """A float score to the scheduler's integer (truncated toward zero, as a Go int64 cast)."""
    return np.trunc(x).astype(np.int64)


def artifact_best_fit(state: PlacementState, task: Task, rng: np.random.Generator
                      ) -> Choice | None:
    """100 x (1 - CPU and GPU left after placing, each / the fixed largest node, weighted 1/2):
    one score point is 2.56 cores or 160 milli-GPU of leftover."""
    nodes = np.flatnonzero(state.feasible(task))
    if not len(nodes):
        return None
    left = (state.cpu_free[nodes] - task.cpu_milli) / SPEC_CPU * 0.5
    left = left + (state.gpu_free_total[nodes] - task.gpu_total) / SPEC_GPU * 0.5
    node = int(nodes[_pick_max(_truncate((1.0 - left) * MAX_SCORE), nodes, state)])
    return node, _best_fit_gpu(state, node, task)


def artifact_dot_product(state: PlacementState, task: Task, rng: np.random.Generator
                         ) -> Choice | None:
    """Tetris with the GPU dimension merged (the artifact's `-dimext merge -norm max`): the
    node's free (CPU, all GPU milli) dotted with the pod's (CPU, GPU milli), both / the fixed
    largest node, halved; score 100 x (1 - that). The GPU: the fullest that fits."""
    nodes = np.flatnonzero(state.feasible(task))
    if not len(nodes):
        return None
    dot = (state.cpu_free[nodes] / SPEC_CPU) * (task.cpu_milli / SPEC_CPU)
    dot = dot + (state.gpu_free_total[nodes] / SPEC_GPU) * (task.gpu_total / SPEC_GPU)
    node = int(nodes[_pick_max(_truncate(MAX_SCORE * (1.0 - dot / 2)), nodes, state)])
    return node, _best_fit_gpu(state, node, task)


def artifact_gpu_packing(state: PlacementState, task: Task, rng: np.random.Generator
                         ) -> Choice | None:
    """Scores, best first: the fullest fitting GPU is partly used: 100 - its free milli // 100
    (so GPUs within the same 100 milli tie); free GPUs of a partly used node: 50 - the GPUs
    taken (at least 33); an idle node: 33 - its GPUs. A CPU-only pod scores 0 everywhere."""
    nodes = np.flatnonzero(state.feasible(task))
    if not len(nodes):
        return None
    if not task.num_gpu:  # 0 on every node: the top-ranked feasible node, not a random one
        return int(nodes[_pick_max(np.zeros(len(nodes)), nodes, state)]), ()
    gpus = state.gpu_count[nodes]
    idle = state.full_count[nodes] == gpus
    score = np.where(idle, np.maximum(MAX_SCORE // 3 - gpus, gpus),
                     max(MAX_SCORE // 2 - task.num_gpu, MAX_SCORE // 3))
    if task.shared:
        best = _shared_best_values(state, nodes, task)
        on_used_gpu = ~idle & (best < MILLI)
        score = np.where(on_used_gpu,
                         np.maximum(MAX_SCORE - (best * 100 // MILLI) // 10, MAX_SCORE // 2),
                         score)
    node = int(nodes[_pick_max(score, nodes, state)])
    return node, _best_fit_gpu(state, node, task)


def artifact_gpu_clustering(state: PlacementState, task: Task, rng: np.random.Generator
                            ) -> Choice | None:
    """A quarter of the range per tier (only this GPU kind on the node, this kind among others,
    no GPU pod, other kinds only), plus up to 25 points for fuller nodes: 25 x (8000 - free
    GPU milli) // 8000, so nodes within 320 milli of free GPU tie. CPU-only pods score 0."""
    nodes = np.flatnonzero(state.feasible(task))
    if not len(nodes):
        return None
    if not task.num_gpu:  # 0 on every node: the top-ranked feasible node, not a random one
        return int(nodes[_pick_max(np.zeros(len(nodes)), nodes, state)]), ()
    kinds = state.kinds[nodes] > 0
    same, n_kinds = kinds[:, task.kind], kinds.sum(axis=1)
    tier = np.where(same, np.where(n_kinds == 1, 3, 2), np.where(n_kinds == 0, 1, 0))
    quarter = MAX_SCORE // 4
    score = tier * quarter + quarter * (SPEC_GPU - state.gpu_free_total[nodes]) // SPEC_GPU
    node = int(nodes[_pick_max(score, nodes, state)])
    return node, _best_fit_gpu(state, node, task)


def fgd_score(delta_milli: np.ndarray) -> np.ndarray:
    """The artifact's FGD score of a placement that changes the node's expected fragment by
    `delta_milli` (milli-GPU; negative = less fragment): 100 x sigmoid(-delta in GPUs),
    truncated. 50 for no change; near 0 one point is about 40 milli-GPU."""
    x = -np.round(np.asarray(delta_milli, dtype=np.float64), 6) / MILLI
    return _truncate(1.0 / (1.0 + np.exp(-x)) * MAX_SCORE)


def artifact_fgd(state: PlacementState, task: Task, rng: np.random.Generator) -> Choice | None:
    """FGD with integer scores: a node scores its best GPU's `fgd_score`; the node is the
    top-ranked (`state.tie_rank`) among the top-scoring ones; a sharing pod takes the
    lowest-numbered GPU of that node with the node's score."""
    nodes = np.flatnonzero(state.feasible(task))
    if not len(nodes):
        return None
    index = state.fragmentation_index()
    _, first, group = np.unique(state.signature[nodes], return_index=True, return_inverse=True)
    group = group.reshape(-1)
    reps = nodes[first]
    if task.shared:
        values = np.sort(state.gpu_free[reps], axis=1)
        distinct = np.ones(values.shape, dtype=bool)
        distinct[:, 1:] = values[:, 1:] != values[:, :-1]
        rows, cols = np.nonzero(distinct & (values >= task.gpu_milli))
        cand_values = values[rows, cols]
        score = fgd_score(index.delta_shared(reps[rows], cand_values, task.cpu_milli,
                                             task.mem_mib, task.gpu_milli))
        rep_score = np.full(len(reps), -1, dtype=np.int64)
        np.maximum.at(rep_score, rows, score)
    else:
        rep_score = fgd_score(index.delta_exclusive(reps, task.cpu_milli, task.mem_mib,
                                                    task.num_gpu))
    i = _pick_max(rep_score[group], nodes, state)
    node = int(nodes[i])
    if not task.shared:
        return node, _exclusive_gpus(state, node, task)
    r = group[i]
    best_values = cand_values[(rows == r) & (score == rep_score[r])]
    row = state.gpu_free[node]
    return node, (int(np.flatnonzero(np.isin(row, best_values))[0]),)


PlacementPlugin = Callable[[PlacementState, Task, np.random.Generator], "Choice | None"]

PLACEMENT_PLUGINS: dict[str, PlacementPlugin] = {
    "random": choose_random,
    "dot-product": choose_dot_product,
    "gpu-clustering": choose_gpu_clustering,
    "gpu-packing": choose_gpu_packing,
    "best-fit": choose_best_fit,
    "fgd": choose_fgd,
}


# The same names scored as the FGD artifact scores them (random is the same rule in both).
ARTIFACT_PLUGINS: dict[str, PlacementPlugin] = {
    "random": choose_random,
    "dot-product": artifact_dot_product,
    "gpu-clustering": artifact_gpu_clustering,
    "gpu-packing": artifact_gpu_packing,
    "best-fit": artifact_best_fit,
    "fgd": artifact_fgd,
}

SCORINGS = {"default": PLACEMENT_PLUGINS, "artifact": ARTIFACT_PLUGINS}


def check_plugin(name: str, what: str = "placement") -> str:
    """`name` if it is a placement plugin, else a one-line ConfigError starting with `what`."""
    if name not in PLACEMENT_PLUGINS:
        raise ConfigError(f"{what}: unknown placement plugin {name!r}; known: "
                          f"{', '.join(PLACEMENT_PLUGINS)}")
    return name


def get_plugin(name: str, scoring: str = "default") -> PlacementPlugin:
    """The plugin `name`, scored our way (`default`) or the FGD artifact's (`artifact`); a
    one-line ConfigError if there is none."""
    if scoring not in SCORINGS:
        raise ConfigError(f"placement scoring: unknown {scoring!r}; known: "
                          f"{', '.join(SCORINGS)}")
    return SCORINGS[scoring][check_plugin(name)]
