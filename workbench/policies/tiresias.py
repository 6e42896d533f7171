"""Tiresias (NSDI'19), discretised two-dimensional least-attained-service (2D-LAS).

A job's priority is its queue, set by the GPU-seconds it has received so far (thresholds
`queue_thresholds`), FIFO within a queue. Each round the highest-priority jobs that fit
the cluster's GPUs run; running jobs that fall out of that set are preempted (they keep
their checkpointed progress). Replicas and batch size stay as submitted, as in the Pollux
artifact's Tiresias, whose default queue threshold is 3600 x 16 GPU-seconds.

A round costs O(changes), not O(jobs): the jobs holding GPUs stay ranked between rounds
(a running job changes queue only at its crossing time, known when it starts running), and
the first queue's waiting line is kept too (`_View`). A test checks the result against
sorting every job every round.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator

from ..model import Action, ClusterState, JobState, JobStatus, Place, Suspend
from .base import Policy, register
from .common import NewArrivalCheck, list_or_view, wait_reason

_WAITING = (JobState.PENDING, JobState.HOLDING)

# A ranked job holding GPUs: its 2D-LAS key (queue, arrival, name), itself, its GPUs.
Ranked = tuple[int, float, str, JobStatus, float]


class _View:
    """What Tiresias keeps about one cluster between its own consecutive rounds."""

    def __init__(self) -> None:
        self.arrivals = NewArrivalCheck()
        self.jobs: dict | None = None  # the backend's job dict these entries belong to
        self.placed: list[Ranked] = []  # jobs holding GPUs, in 2D-LAS order
        self.entry: dict[str, Ranked] = {}  # name -> its entry in `placed`
        self.crossing: dict[str, float] = {}  # running job -> when it enters its next queue
        self.settling: dict[str, JobStatus] = {}  # placed, not yet running: crossing moves
        self.started: list[JobStatus] = []  # placed by the last round
        self.left: list[JobStatus] = []  # preempted by the last round
        self.waiting0: dict[str, JobStatus] = {}  # see TiresiasPolicy._first_queue_waiting
        self.wakeup_for: ClusterState | None = None
        self.wakeup: float | None = None


@register("tiresias")
class TiresiasPolicy(Policy):
    takes_placement = True
    quiet_restarts = True
    def __init__(self, queue_thresholds: tuple[float, ...] = (3600.0 * 16,),
                 round_interval: float = 60.0) -> None:
        self.queue_thresholds = tuple(sorted(queue_thresholds))
        self.round_interval = round_interval
        self._view = _View()

    def forget_cluster(self) -> None:
        self._view = _View()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_view": _View()}  # a copy runs on another backend's jobs

    def queue_of(self, job: JobStatus) -> int:
        return bisect.bisect_right(self.queue_thresholds, job.attained_service)

    def next_wakeup(self, state: ClusterState | None) -> float | None:
        """The next time a running job crosses into a lower-priority queue."""
        if state is None:
            return None
        v = self._view
        if state is v.wakeup_for:  # known from the round that saw this state
            return v.wakeup
        best = math.inf
        for job in state.iter_placed():
            if job.state is not JobState.HOLDING:
                best = min(best, self._crossing(job, job.num_workers, state.now))
        v.wakeup_for, v.wakeup = state, best if best < math.inf else None
        return v.wakeup

    def _crossing(self, job: JobStatus, workers: int, now: float) -> float:
        """When `job`, running on `workers`, enters its next queue (inf: never). A restarting
        job starts accruing soon; counting it from now wakes us a little early at worst, and
        an early round just re-ranks."""
        q = bisect.bisect_right(self.queue_thresholds, job.attained_service)
        rate = job.spec.worker_demand.gpu * workers
        if q >= len(self.queue_thresholds) or rate <= 0:
            return math.inf
        return now + (self.queue_thresholds[q] - job.attained_service) / rate

    # ---- the ranking of jobs holding GPUs, kept between rounds ---------------------------

    def _rank(self, job: JobStatus, now: float) -> None:
        """Put `job` in the ranking at its current queue, and note when it leaves that queue."""
        v = self._view
        old = v.entry.get(job.name)
        q = self.queue_of(job)
        if old is None or old[0] != q:
            if old is not None:
                del v.placed[bisect.bisect_left(v.placed, old)]
            entry = (q, job.spec.arrival, job.name, job,
                     job.spec.worker_demand.gpu * job.spec.initial_workers)
            bisect.insort(v.placed, entry)
            v.entry[job.name] = entry
        if job.state is JobState.RUNNING:  # accruing at a fixed rate: the crossing holds
            v.crossing[job.name] = self._crossing(job, job.spec.initial_workers, now)
            v.settling.pop(job.name, None)
        else:  # restarting or holding: its crossing moves with the clock until it runs
            v.crossing.pop(job.name, None)
            v.settling[job.name] = job

    def _unrank(self, job: JobStatus) -> None:
        v = self._view
        entry = v.entry.pop(job.name)
        del v.placed[bisect.bisect_left(v.placed, entry)]
        v.crossing.pop(job.name, None)
        v.settling.pop(job.name, None)

    def _rebuild_ranking(self, state: ClusterState) -> list[JobStatus]:
        v = self._view
        left = [p[3] for p in v.placed]
        v.placed, v.entry, v.crossing, v.settling = [], {}, {}, {}
        for job in state.iter_placed():
            self._rank(job, state.now)
        return left

    def _update_ranking(self, state: ClusterState) -> list[JobStatus]:
        """Bring the ranking up to date with the cluster; returns the jobs that held GPUs
        since the last round and may be waiting again."""
        v, now = self._view, state.now
        left, v.left = v.left, []  # preempted by the last round
        if v.arrivals.everything:  # first round, or the cluster's shape changed
            return left + self._rebuild_ranking(state)
        for job in v.started:
            if job.state.placed and job.name not in v.entry:
                self._rank(job, now)
            else:
                left.append(job)  # its placement was refused, or it has lost it already
        v.started = []
        placed_now = len(list_or_view(state.iter_placed()))
        if len(v.placed) != placed_now:  # only this engine places: so some job has left
            for p in [p for p in v.placed if not p[3].state.placed]:
                self._unrank(p[3])  # completed, or sent back by a node failure
                left.append(p[3])
            if len(v.placed) != placed_now:
                left += self._rebuild_ranking(state)  # placed by someone else after all
        for job in list(v.settling.values()):
            self._rank(job, now)  # a restart that has ended starts a fixed crossing
        if v.crossing and min(v.crossing.values()) <= now:
            for name in [n for n, t in v.crossing.items() if t <= now]:
                self._rank(v.entry[name][3], now)
        return left

    # ---- a round ------------------------------------------------------------------------

    def ranked(self, state: ClusterState, skip: set[str], left: list[JobStatus]
               ) -> Iterator[tuple[bool, list[Ranked] | JobStatus]]:
        """Placed and waiting jobs in 2D-LAS order (queue, arrival, name), lazily: a round
        walks only as far as the GPUs go, not the whole of a long queue. Yields (True, a run of
        ranked entries of placed jobs) and (False, a waiting job)."""
        thresholds, placed = self.queue_thresholds, self._view.placed
        for q in range(len(thresholds) + 1):
            i, n = bisect.bisect_left(placed, (q,)), bisect.bisect_left(placed, (q + 1,))
            waiting = self._first_queue_waiting(skip, left) if q == 0 else state.iter_waiting()
            for job in waiting:  # in arrival order; merged with this queue's placed jobs
                if job.name in skip or bisect.bisect_right(thresholds, job.attained_service) != q:
                    continue
                start = i
                i = bisect.bisect_left(placed, (q, job.spec.arrival, job.name), i, n)
                if i > start:
                    yield True, placed[start:i]
                yield False, job
            if i < n:
                yield True, placed[i:n]

    def _first_queue_waiting(self, skip: set[str], left: list[JobStatus]) -> list[JobStatus]:
        """The waiting jobs of the first queue, in arrival order, without walking a long queue
        of jobs that have had their service: arrivals since the last round, plus the jobs that
        held GPUs and wait again (preempted here, or sent back by a node failure), plus those
        still waiting from before; everything on the first round and when the cluster's
        shape changes."""
        v = self._view
        if v.arrivals.everything:
            v.waiting0 = {}
        first = self.queue_thresholds[0] if self.queue_thresholds else math.inf
        for job in itertools.chain(v.arrivals.checked, left):
            if job.attained_service < first and job.state in _WAITING:
                v.waiting0[job.name] = job
        live = [j for j in v.waiting0.values() if j.state in _WAITING and j.name not in skip
                and j.attained_service < first]
        v.waiting0 = {j.name: j for j in live}
        return sorted(live, key=lambda j: (j.spec.arrival, j.name))

    def schedule(self, state: ClusterState) -> list[Action]:
        if state.jobs is not self._view.jobs:  # another backend's jobs (a forked what-if)
            self.forget_cluster()
            self._view.jobs = state.jobs
        v = self._view
        actions = v.arrivals.reject(state)
        rejected = {a.job for a in actions}
        left = self._update_ranking(state)
        capacity = float(state.capacity[state.node_up, 2].sum())
        kept: list[list[Ranked]] = []  # runs of placed jobs that keep their GPUs
        n_kept = 0
        starting: list[JobStatus] = []  # waiting jobs chosen to start
        used = 0.0
        now = state.now
        for is_placed, item in self.ranked(state, rejected, left):
            if is_placed:
                run = item
                whole = sum(p[4] for p in run)
                if used + whole <= capacity + 1e-9:  # typical: the whole run keeps its GPUs
                    kept.append(run)
                    n_kept += len(run)
                    used += whole
                else:
                    fits = []
                    for p in run:
                        if used + p[4] <= capacity + 1e-9:
                            fits.append(p)
                            used += p[4]
                    kept.append(fits)
                    n_kept += len(fits)
            else:
                job = item
                need = job.spec.worker_demand.gpu * job.spec.initial_workers
                if used + need <= capacity + 1e-9:
                    starting.append(job)
                    used += need
            if used >= capacity - 1e-9:
                break
        ledger = self.ledger(state) if starting or n_kept < len(v.placed) else None
        if n_kept < len(v.placed):
            keep = {p[2] for run in kept for p in run}
            for p in [p for p in v.placed if p[2] not in keep]:
                job = p[3]
                self._unrank(job)
                v.left.append(job)
                ledger.give_back(job.workers, job.spec.worker_demand)
                ledger.give_back(job.ps, job.spec.ps_demand)
                actions.append(Suspend(job.name, f"preempted: queue {p[0]} after"
                                       f" {job.attained_service / 3600:.1f} GPU-hours; higher"
                                       " priority jobs need the GPUs"))
        # The next queue crossing among the jobs that will hold GPUs.
        wakeup = min(v.crossing.values(), default=math.inf)
        for job in itertools.chain(v.settling.values(), starting):
            wakeup = min(wakeup, self._crossing(job, job.spec.initial_workers, now))
        v.wakeup_for, v.wakeup = state, wakeup if wakeup < math.inf else None
        pos = 0
        for job in starting:
            placement = ledger.place_gang(job, job.spec.initial_workers)
            if placement is None:
                w = wait_reason(ledger, job, job.spec.initial_workers, pos, f"queue {self.queue_of(job)}")
                pos += 1
                if w:
                    actions.append(w)
                continue
            workers, ps = placement
            ledger.take(workers, job.spec.worker_demand)
            ledger.take(ps, job.spec.ps_demand)
            v.started.append(job)
            actions.append(Place(job.name, f"started: queue {self.queue_of(job)}, least attained"
                                 " service first", workers, ps))
        return actions

