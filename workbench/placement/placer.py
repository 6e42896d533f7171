"""Placement plugins inside the engines: a `Placer` lets a `Ledger` ask a plugin (`fgd`,
`best-fit`, ... of `plugins.PLACEMENT_PLUGINS`) which node each task of a job goes to.

The engine still decides which jobs start and how many tasks they get; the plugin only picks
the nodes. Each round the placer builds a `PlacementState` from the `ClusterState`, and the
ledger keeps it equal to its own free arrays as the engine takes and gives back resources.
A gang is placed task by task (the plugin sees the tasks already placed); if one task fits
nowhere the whole gang waits. Which GPU of the chosen node a task gets is the backend's
choice (the fullest GPU that fits, as the simulator and the FGD paper's simulator do).
Parameter servers placed next to their workers keep the ledger's locality rule.

FGD measures against the task sizes of every job the engine has seen so far (its workers
and PS at their submitted counts): learned online, so it needs no trace in advance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model import ClusterState, Placement, Resources
from .plugins import PLACEMENT_PLUGINS, check_plugin
from .state import PlacementState, Task, tasks_of, workload_of_counts

MAX_NODES_SHOWN = 40  # the engine view lists the most fragmented nodes only
REBUILD_GROWTH = 1.1  # rebuild the target workload when the tasks seen grew by 10%


class Placer:
    """One engine's placement plugin, its tie-breaking generator and its target workload."""

    def __init__(self, plugin: str, seed: int = 0) -> None:
        self.name = check_plugin(plugin)
        self.choose = PLACEMENT_PLUGINS[plugin]
        self.rng = np.random.default_rng(seed)
        self._seen: set[str] = set()
        self._counts: dict[Task, int] = {}
        self._built_from = 0
        self._tasks: dict[Resources, Task] = {}
        self.workload = None
        self.last: PlacementState | None = None  # the last round's view, after its placements

    def task(self, demand: Resources) -> Task:
        task = self._tasks.get(demand)
        if task is None:
            task = self._tasks[demand] = Task.from_resources(demand)
        return task

    def _learn(self, state: ClusterState) -> None:
        new_shape = False
        for job in state.jobs.values():
            if job.name in self._seen:
                continue
            self._seen.add(job.name)
            for task, n in tasks_of(job.spec):
                new_shape |= task not in self._counts
                self._counts[task] = self._counts.get(task, 0) + n
        total = sum(self._counts.values())
        if total and (new_shape or total >= REBUILD_GROWTH * self._built_from):
            self.workload = workload_of_counts(self._counts)
            self._built_from = total

    def view(self, state: ClusterState) -> PlacementState:
        """This round's placement state; which GPU task kinds each node holds comes from the
        placed jobs (gpu-clustering needs it)."""
        self._learn(state)
        view = PlacementState.from_cluster_state(state, self.workload)
        view.kinds[:] = 0
        index = state.node_index
        for job in state.jobs.values():
            if not job.state.placed:
                continue
            for placement, demand in ((job.workers, job.spec.worker_demand),
                                      (job.ps, job.spec.ps_demand)):
                task = self.task(demand)
                if task.num_gpu:
                    for node, count in placement.items():
                        view.kinds[index[node], task.kind] += count
        self.last = view
        return view

    def place(self, view: PlacementState, demand: Resources, count: int) -> Placement | None:
        """Nodes for `count` tasks of `demand`, chosen one task at a time; None if one fits
        nowhere. `view` is left as it was."""
        task = self.task(demand)
        chosen: list[tuple[int, tuple[int, ...]]] = []
        try:
            for _ in range(count):
                choice = self.choose(view, task, self.rng)
                if choice is None:
                    return None
                view.allocate(choice[0], choice[1], task)
                chosen.append(choice)
        finally:
            for node, gpus in reversed(chosen):
                view.release(node, gpus, task)
        placement: Placement = {}
        for node, _ in chosen:
            name = view.names[node]
            placement[name] = placement.get(name, 0) + 1
        return placement

    def mirror(self, view: PlacementState, node: int, free: np.ndarray, gpu_free: np.ndarray,
               demand: Resources, count: int) -> None:
        """Copy one node of a ledger (free CPU, memory, per-GPU fractions with -1 for none)
        into `view` after `count` tasks of `demand` were taken (negative: given back)."""
        view.set_free(node, round(max(float(free[0]), 0.0) * 1000),
                      round(max(float(free[1]), 0.0) * 1024),
                      np.clip(np.round(gpu_free * 1000), 0, 1000).astype(np.int64))
        task = self.task(demand)
        if task.num_gpu:
            view.kinds[node, task.kind] = max(view.kinds[node, task.kind] + count, 0)

    def engine_view(self) -> dict[str, Any]:
        """For the UI: the plugin, and the cluster's fragmentation after the last round, per
        node (the most fragmented first) and in all."""
        out: dict[str, Any] = {"placement": self.name}
        view = self.last
        if view is None or view.workload is None:
            return out
        per_node = view.fragmentation_index().node_values() / 1000
        free = float(view.gpu_free_total.sum()) / 1000
        total = float(per_node.sum())
        out["fragmented_gpus"] = total
        out["fragmentation_ratio"] = total / free if free > 0 else 0.0
        top = np.argsort(-per_node, kind="stable")[:MAX_NODES_SHOWN]
        out["fragmentation"] = {view.names[i]: float(per_node[i]) for i in top}
        return out
