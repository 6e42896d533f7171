"""Optimus (EuroSys'18): allocate workers greedily by marginal gain in remaining time.

Every job that can get its minimum gets it (oldest first); then one worker at a time goes
to the job whose predicted remaining time drops most per GPU, using the fitted speed model
(`perf.ideal_rate`, the Optimus form for parameter-server jobs). A running job is rescaled
only when its new size is predicted to save more than `min_gain` of its remaining time,
since each rescale costs a checkpoint-restart.
"""

from __future__ import annotations

import heapq

from ..model import Action, ClusterState, JobStatus
from .base import Policy, register
from .common import by_arrival, commit_plans, reject_impossible


@register("optimus")
class OptimusPolicy(Policy):
    takes_placement = True
    quiet_restarts = True
    def __init__(self, perf=None, round_interval: float = 60.0, min_gain: float = 0.1) -> None:
        if perf is None:
            from ..perf import default_perf

            perf = default_perf()
        self.perf = perf
        self.round_interval = round_interval
        self.min_gain = min_gain

    def _remaining_time(self, job: JobStatus, workers: int, gpus_per_node: int) -> float:
        rate = self.perf.ideal_rate(job.spec, workers, gpus_per_node)
        return job.remaining_work / rate if rate > 0 else float("inf")

    def schedule(self, state: ClusterState) -> list[Action]:
        actions, jobs = reject_impossible(state, by_arrival(list(state.active)))
        if not jobs:
            return actions
        gpn = int(max(state.capacity[:, 2].max(), 1))
        budget = float(state.capacity[state.node_up, 2].sum())
        alloc: dict[str, int] = {}
        # Running jobs keep at least their minimum; then waiting jobs by age.
        for job in sorted(jobs, key=lambda j: (not j.state.placed, j.spec.arrival)):
            need = job.spec.worker_demand.gpu * job.spec.min_workers
            if need <= budget + 1e-9:
                alloc[job.name] = job.spec.min_workers
                budget -= need
        by_name = {j.name: j for j in jobs}
        heap = []
        for name, w in alloc.items():
            self._push_gain(heap, by_name[name], w, gpn)
        while heap and budget > 1e-9:
            _, name, w = heapq.heappop(heap)  # the largest gain first
            job = by_name[name]
            g = job.spec.worker_demand.gpu
            if alloc[name] != w or g > budget + 1e-9:
                continue
            alloc[name] = w + 1
            budget -= g
            self._push_gain(heap, job, w + 1, gpn)

        ledger = self.ledger(state)
        plans: list[tuple[JobStatus, int]] = []
        for name, w in alloc.items():
            job = by_name[name]
            if job.state.placed:
                current = job.num_workers
                if w == current:
                    continue
                now_t = self._remaining_time(job, current, gpn)
                new_t = self._remaining_time(job, w, gpn)
                if now_t - new_t < self.min_gain * now_t and w > current:
                    continue  # not worth a restart
                if w < current and new_t > now_t * (1 + self.min_gain) and len(alloc) == len(jobs):
                    continue  # nobody is waiting for these GPUs
                ledger.give_back(job.workers, job.spec.worker_demand)
                ledger.give_back(job.ps, job.spec.ps_demand)
            plans.append((job, w))
        actions += commit_plans(
            ledger, sorted(plans, key=lambda p: (not p[0].state.placed, p[0].spec.arrival)),
            wait_label="Optimus allocation",
            scale_reason=lambda job, w: (f"rescaled {job.num_workers}→{w} workers: largest"
                                         " marginal gain in remaining time"),
            place_reason=lambda job, w: f"started with {w} workers by marginal gain")
        return actions

    def _push_gain(self, heap, job: JobStatus, w: int, gpn: int) -> None:
        if w >= job.spec.max_workers:
            return
        now_t = self._remaining_time(job, w, gpn)
        new_t = self._remaining_time(job, w + 1, gpn)
        gain = (now_t - new_t) / max(job.spec.worker_demand.gpu, 1e-9)
        if gain > 0:
            heapq.heappush(heap, (-gain, job.name, w))
