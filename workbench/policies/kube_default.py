"""The default Kubernetes scheduler, pod by pod: filter feasible nodes, score by least
allocated, bind. No gang: a job's placed pods hold their resources while the rest wait,
which is how a real cluster can deadlock two half-placed distributed jobs."""

from __future__ import annotations

from ..model import Action, ClusterState, JobState, Place, Wait
from .base import Policy, register
from .common import by_arrival, reject_impossible
from .placement import Ledger


@register("kube-default")
class KubeDefaultPolicy(Policy):
    def __init__(self, round_interval: float = 60.0) -> None:
        self.round_interval = round_interval

    def schedule(self, state: ClusterState) -> list[Action]:
        actions, queue = reject_impossible(state, by_arrival(state.waiting))
        ledger = Ledger(state)
        for job in queue:
            spec = job.spec
            want = [("worker", spec.worker_demand, spec.initial_workers - job.num_workers),
                    ("ps", spec.ps_demand, spec.num_ps - job.num_ps)]
            placed: dict[str, dict[str, int]] = {"worker": {}, "ps": {}}
            unplaced = 0
            for role, demand, count in want:
                for _ in range(max(count, 0)):
                    node = ledger.spread_one(demand)
                    if node is None:
                        unplaced += 1
                        continue
                    placed[role][node] = placed[role].get(node, 0) + 1
                    ledger.take({node: 1}, demand)
            n_placed = sum(placed["worker"].values()) + sum(placed["ps"].values())
            if n_placed:
                held = job.num_workers + job.num_ps + n_placed
                total = spec.initial_workers + spec.num_ps
                why = ("bound: all pods placed (least-allocated nodes)" if not unplaced else
                       f"holding: {held}/{total} pods bound, {unplaced} pending: no node has room")
                actions.append(Place(job.name, why, placed["worker"], placed["ps"], partial=True))
            elif unplaced:
                held = job.num_workers + job.num_ps
                why = (f"waiting: {unplaced} pods pending, no node has room" if not held else
                       f"holding: {held} pods bound, {unplaced} pending: no node has room")
                if why != job.reason and job.state in (JobState.PENDING, JobState.HOLDING):
                    actions.append(Wait(job.name, why))
        return actions
