"""The default Kubernetes scheduler, pod by pod: filter feasible nodes, score by least
allocated, bind. Pods queue by creation time, so the pods of jobs submitted together
interleave. No gang: a job's placed pods hold their resources while the rest wait, which
is how a real cluster deadlocks two half-placed distributed jobs.

`tf_operator=True` (off by default) interleaves the pods of different jobs as a cluster running
Kubeflow's tf-operator does (the setting of DRAGON's paper): the operator creates every pod of a
TFJob at once, and the pods that found no room are retried together after each cluster event,
so each waiting job gets one pod in turn (pod 0 of every job by arrival, then pod 1, ...)
instead of the oldest job taking all the room first. Two jobs can then each hold part of their
gang while neither has all of it."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model import Action, ClusterState, JobState, Place, Wait
from .base import Policy, register
from .common import reject_impossible
from .teaching import queue_facts, queue_rows, top


@register("kube-default")
class KubeDefaultPolicy(Policy):
    takes_placement = True
    places_partial_gangs = True
    quiet_restarts = True
    def __init__(self, round_interval: float = 60.0, tf_operator: bool = False) -> None:
        self.round_interval = round_interval
        self.tf_operator = tf_operator

    def schedule(self, state: ClusterState) -> list[Action]:
        actions, queue = reject_impossible(state, state.waiting)
        ledger = self.ledger(state)
        # The scheduling queue: one entry per unbound pod, by (creation time, index in job).
        pods = []
        for job in queue:
            spec = job.spec
            for k in range(max(spec.num_ps - job.num_ps, 0)):
                pods.append((spec.arrival, k, job.name, "ps"))
            for k in range(max(spec.initial_workers - job.num_workers, 0)):
                pods.append((spec.arrival, spec.num_ps + k, job.name, "worker"))
        # tf-operator: pods in turn across the waiting jobs (index first), not job by job.
        pods.sort(key=(lambda p: (p[1], p[0], p[2])) if self.tf_operator else None)
        by_name = {j.name: j for j in queue}
        placed: dict[str, dict[str, dict[str, int]]] = {}
        unplaced: dict[str, int] = {}
        full = {"worker": False, "ps": False}  # once a pod shape fits nowhere, skip its kind
        last_demand: dict = {}
        for _, _, name, role in pods:
            job = by_name[name]
            demand = job.spec.worker_demand if role == "worker" else job.spec.ps_demand
            node = None if full[role] and demand == last_demand.get(role) else ledger.spread_one(demand)
            if node is None:
                unplaced[name] = unplaced.get(name, 0) + 1
                full[role], last_demand[role] = True, demand
                continue
            roles = placed.setdefault(name, {"worker": {}, "ps": {}})
            roles[role][node] = roles[role].get(node, 0) + 1
            ledger.take({node: 1}, demand)
        for job in queue:
            spec = job.spec
            total = spec.initial_workers + spec.num_ps
            got = placed.get(job.name)
            missing = unplaced.get(job.name, 0)
            held = job.num_workers + job.num_ps
            if got:
                n = sum(got["worker"].values()) + sum(got["ps"].values())
                why = ("bound: all pods placed (least-allocated nodes)" if not missing else
                       f"holding: {held + n}/{total} pods bound, {missing} pending: no node has room")
                actions.append(Place(job.name, why, got["worker"], got["ps"], partial=True))
            elif missing:
                why = (f"waiting: {missing} pods pending, no node has room" if not held else
                       f"holding: {held}/{total} pods bound, {missing} pending: no node has room")
                if why != job.reason and job.state in (JobState.PENDING, JobState.HOLDING):
                    actions.append(Wait(job.name, why))
        return actions

    def engine_view(self, state: ClusterState | None = None) -> dict[str, Any]:
        """The default scheduler's scoring now: each node's least-allocated score (mean free
        share of CPU and memory, x 100: the next pod goes to the highest) and the pods still
        pending per job, oldest first."""
        view: dict[str, Any] = {**super().engine_view(state),
                                "rule": ("pod by pod, each waiting job's next pod in turn"
                                         " (tf-operator)" if self.tf_operator else
                                         "pod by pod, oldest first") + ": filter the nodes with"
                                " room, bind to the least-allocated; no gang (a job may half"
                                " start)"}
        if state is None or not len(state.nodes):
            return view
        cap = np.where(state.capacity > 0, state.capacity, np.inf)
        free = 1.0 - state.allocated / cap
        score = 100.0 * free[:, :2].mean(axis=1)
        names = [n.name for n in state.nodes]
        scores = {names[i]: float(score[i]) for i in range(len(names)) if state.node_up[i]}
        waiting = [j for j in state.iter_waiting() if j.state in (JobState.PENDING,
                                                                  JobState.HOLDING)]
        return {**view, **queue_facts(waiting), "least_allocated_score": top(scores),
                "queue": queue_rows(waiting, state.now, pods_pending=_pending_pods)}


def _pending_pods(job) -> int:
    spec = job.spec
    return max(spec.initial_workers - job.num_workers, 0) + max(spec.num_ps - job.num_ps, 0)
