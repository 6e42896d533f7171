"""FIFO with gang scheduling: jobs start in arrival order, all of their tasks or none."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model import Action, ClusterState, Place, Wait
from .base import Policy, register
from .common import MAX_WAIT_REASONS, NewArrivalCheck, list_or_view, wait_reason
from .teaching import queue_facts, queue_rows

NAMED_BEHIND_HEAD = 3  # queued jobs whose reason names the job at the head


@register("fifo")
class FifoPolicy(Policy):
    """Strict FIFO by default (the head of the queue blocks the rest, no starvation);
    `backfill=True` lets later jobs that fit start while the head waits."""
    takes_placement = True
    quiet_restarts = True
    # (the cluster's arrays and the job, its wait reason): the head that did not fit last round
    _waiting_head: tuple = ((), "")

    def __init__(self, backfill: bool = False, round_interval: float = 60.0) -> None:
        self.backfill = backfill
        self.round_interval = round_interval
        # a job that can never run at its requested size is rejected as it arrives, not when
        # it reaches the head of the queue, having waited "behind" others meanwhile
        self._arrivals = NewArrivalCheck(rigid=True)

    def forget_cluster(self) -> None:
        self._arrivals = NewArrivalCheck(rigid=True)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_arrivals": NewArrivalCheck(rigid=True)}  # checks anew

    def schedule(self, state: ClusterState) -> list[Action]:
        queue = state.iter_waiting()  # oldest first
        actions: list = self._arrivals.reject(state)
        rejected = {a.job for a in actions}
        ledger = None  # made when a job is tried: not in a round whose head waits as before
        free_gpus = 0.0
        blocked_by = None
        pos = -1
        for job in queue:
            if rejected and job.name in rejected:
                continue
            pos += 1
            if blocked_by is not None and not self.backfill:
                # The next few name the head; the rest get a reason that stays true when the
                # head changes, so a long queue is not told something new at every start.
                r = (f"waiting: behind {blocked_by} in FIFO order" if pos <= NAMED_BEHIND_HEAD
                     else "waiting: behind earlier jobs in FIFO order (strict FIFO)")
                if job.reason != r:
                    actions.append(Wait(job.name, r))
                elif pos > NAMED_BEHIND_HEAD:
                    # The rest were told already, but for jobs that arrived since, at the tail:
                    # no need to walk a long queue.
                    for late in reversed(list_or_view(queue)):
                        if late.reason == r:
                            break
                        if late.name not in rejected:
                            actions.append(Wait(late.name, r))
                    break
                continue
            n = job.spec.initial_workers
            head = None
            if ledger is None and self.placer is None and pos < MAX_WAIT_REASONS:
                # Nothing placed before it this round: whether it fits, and why not, depend on
                # the cluster's arrays alone, so a head that waited on the same arrays waits again
                # for the same reason (about a third of the rounds on the Philly trace).
                head = (job.name, job.spec, state.capacity.tobytes(), state.allocated.tobytes(),
                        state.gpu_free.tobytes(), state.node_up.tobytes())
                if head == self._waiting_head[0]:
                    if job.reason != self._waiting_head[1]:
                        actions.append(Wait(job.name, self._waiting_head[1]))
                    blocked_by = blocked_by or job.name
                    continue
            if ledger is None:
                ledger = self.ledger(state)
                free_gpus = np.add.reduce(ledger.free[:, 2])  # .sum() without its wrapper
            if job.spec.worker_demand.gpu * n > free_gpus + 1e-9:  # quick reject, no search
                placement = None
            else:
                placement = ledger.place_gang(job, n)
            if placement is None:
                w = wait_reason(ledger, job, n, pos)
                if w:
                    actions.append(w)
                if head is not None:
                    self._waiting_head = (head, w.reason if w else job.reason)
                blocked_by = blocked_by or job.name
                continue
            workers, ps = placement
            ledger.take(workers, job.spec.worker_demand)
            ledger.take(ps, job.spec.ps_demand)
            free_gpus -= job.spec.worker_demand.gpu * n
            actions.append(Place(job.name, "started: first in FIFO order that fits", workers, ps))
        return actions

    def engine_view(self, state: ClusterState | None = None) -> dict[str, Any]:
        """FIFO's rule and its queue now: the order jobs will start in, the head that blocks
        the rest (strict FIFO) and the GPUs free for it."""
        view: dict[str, Any] = {
            **super().engine_view(state),
            "rule": ("backfill: any job that fits starts, oldest first" if self.backfill else
                     "strict FIFO: jobs start in arrival order, the head of the queue blocks"
                     " the rest"), "gang": "all of a job's tasks start together, or none"}
        if state is None:
            return view
        waiting = list(state.iter_waiting())
        free = float(state.gpu_free[state.node_up].sum()) if len(state.nodes) else 0.0
        return {**view, **queue_facts(waiting), "free_gpus": round(free, 2),
                "queue": queue_rows(waiting, state.now)}
