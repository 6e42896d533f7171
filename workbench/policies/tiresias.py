"""Tiresias (NSDI'19), discretised two-dimensional least-attained-service (2D-LAS).

A job's priority is its queue, set by the GPU-seconds it has received so far (thresholds
`queue_thresholds`). Each round the highest-priority jobs that fit the cluster's GPUs run,
skipping a job that does not fit for a later one that does; running jobs that fall out of that
set are preempted (they keep their checkpointed progress). The rules are the Pollux OSDI'21
artifact's (petuum/adaptdl osdi21-artifact, simulator/tiresias.py), each cited where it is made:

- two queues, the threshold 3600 x 16 GPU-seconds; a job moves down once and never back
  (the artifact's starvation promotion is off: `_solve_starvation = 0`);
- the first queue in arrival order, a lower queue in the order jobs entered it;
- replicas and batch size as submitted; a running job keeps its GPUs (never moved);
- a starting job takes GPUs node by node from the node with the most free
  (`node_order="most-free"`); `node_order="pack"` is our variant: as few nodes as possible,
  the tightest fit first, which keeps a job's replicas together.

A round costs O(changes), not O(jobs): the jobs holding GPUs stay ranked between rounds
(a running job changes queue only at its crossing time, known when it starts running), and
the first queue's waiting line is kept too (`_View`). A test checks the result against
sorting every job every round.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from typing import Any, NamedTuple

from ..model import Action, ClusterState, JobState, JobStatus, Place, Suspend, Wait
from .base import Policy, register
from .common import (
    MOST_FREE,
    NewArrivalCheck,
    check_node_order,
    list_or_view,
    place_in_order,
    wait_reason,
)
from .teaching import BARS, queue_facts, queue_rows

_WAITING = (JobState.PENDING, JobState.HOLDING)
# (globals: in Python 3.11 an Enum member read through its class is slow)
_HOLDING, _RUNNING = JobState.HOLDING, JobState.RUNNING

class Ranked(NamedTuple):
    """A job holding GPUs, ordered by its 2D-LAS key (queue, entered, arrival, name)."""

    queue: int
    entered: float  # when it entered its queue: its arrival for the first queue
    arrival: float
    name: str
    job: JobStatus
    gpus: float


class _View:
    """What Tiresias keeps about one cluster between its own consecutive rounds."""

    def __init__(self) -> None:
        self.arrivals = NewArrivalCheck(rigid=True)
        self.jobs: dict | None = None  # the backend's job dict these entries belong to
        self.placed: list[Ranked] = []  # jobs holding GPUs, in 2D-LAS order
        self.gpus: list[float] = []  # their GPUs, in the same order (summed by the slice)
        self.entry: dict[str, Ranked] = {}  # name -> its entry in `placed`
        self.crossing: dict[str, float] = {}  # running job -> when it enters its next queue
        self.cross_heap: list[tuple[float, str]] = []  # (time, name) of `crossing`, stale ones too
        self.settling: dict[str, JobStatus] = {}  # placed, not yet running: crossing moves
        self.started: list[JobStatus] = []  # placed by the last round
        self.left: list[JobStatus] = []  # preempted by the last round
        self.waiting0: dict[str, JobStatus] = {}  # see TiresiasPolicy._first_queue_waiting
        # waiting jobs of lower queues: (queue, entered, arrival, name, job), sorted
        self.low: list[tuple] = []
        self.low_names: set[str] = set()
        self.wakeup_for: ClusterState | None = None
        self.gpus_up: tuple[bytes, float] = (b"", 0.0)  # GPUs of the nodes up, by the arrays' bytes
        self.wakeup: float | None = None


@register("tiresias")
class TiresiasPolicy(Policy):
    takes_placement = True
    quiet_restarts = True
    def __init__(self, queue_thresholds: tuple[float, ...] = (3600.0 * 16,),
                 round_interval: float = 60.0, node_order: str = MOST_FREE) -> None:
        # artifact tiresias.py: `_queue_threshold = 3600 * 16`; simulator.py: `--interval 60`
        self.queue_thresholds = tuple(sorted(queue_thresholds))
        self.round_interval = round_interval
        self.node_order = check_node_order(node_order)
        self._view = _View()
        # job -> (its lower queue, the first round that saw it there): a fact about the job, kept
        # across a switch, so a lower queue keeps its order whoever ran the jobs meanwhile
        self._entered_at: dict[str, tuple[int, float]] = {}

    def forget_cluster(self) -> None:
        self._view = _View()

    def __getstate__(self) -> dict:
        # a copy runs on another backend's jobs
        return {**self.__dict__, "_view": _View(), "_entered_at": dict(self._entered_at)}

    def queue_of(self, job: JobStatus) -> int:
        # by service alone: no promotion back (artifact tiresias.py: `_solve_starvation = 0`)
        return bisect.bisect_right(self.queue_thresholds, job.attained_service)

    def next_wakeup(self, state: ClusterState | None) -> float | None:
        """The next time a running job crosses into a lower-priority queue."""
        if state is None:
            return None
        v = self._view
        if state is v.wakeup_for:  # known from the round that saw this state
            return v.wakeup
        # `_crossing` of every job holding GPUs, inlined: a state seen by no round (the
        # controller's sample after a round's actions) costs ~150 of these
        thresholds, now, best = self.queue_thresholds, state.now, math.inf
        last = len(thresholds)
        for job in state.iter_placed():
            if job.state is _HOLDING:
                continue
            service = job.attained_service
            q = bisect.bisect_right(thresholds, service)
            if q == last:  # in the last queue: never crosses (its rate is not needed)
                continue
            rate = job.spec.worker_demand.gpu * sum(job.workers.values())  # `num_workers`
            if rate > 0:
                crossing = now + (thresholds[q] - service) / rate
                if crossing < best:
                    best = crossing
        v.wakeup_for, v.wakeup = state, best if best < math.inf else None
        return v.wakeup

    def _crossing(self, job: JobStatus, workers: int, now: float,
                  service: float | None = None) -> float:
        """When `job`, running on `workers`, enters its next queue (inf: never). A restarting
        job starts accruing soon; counting it from now wakes us a little early at worst, and
        an early round just re-ranks. `service`: its attained service, if the caller has read
        it (a property on the simulator's jobs)."""
        if service is None:
            service = job.attained_service
        q = bisect.bisect_right(self.queue_thresholds, service)
        rate = job.spec.worker_demand.gpu * workers
        if q >= len(self.queue_thresholds) or rate <= 0:
            return math.inf
        return now + (self.queue_thresholds[q] - service) / rate

    # ---- the ranking of jobs holding GPUs, kept between rounds ---------------------------

    def _rank(self, job: JobStatus, now: float) -> None:
        """Put `job` in the ranking at its current queue, and note when it leaves that queue."""
        v, thresholds = self._view, self.queue_thresholds
        old = v.entry.get(job.name)
        service = job.attained_service  # read once (a property on the simulator's jobs)
        q = bisect.bisect_right(thresholds, service)  # `queue_of`
        if old is None or old.queue != q:
            if old is not None:
                self._drop_entry(old)
            entry = Ranked(q, self._entered(job, q, now), job.spec.arrival, job.name, job,
                           job.spec.worker_demand.gpu * job.spec.initial_workers)
            i = bisect.bisect_left(v.placed, entry)
            v.placed.insert(i, entry)
            v.gpus.insert(i, entry.gpus)
            v.entry[job.name] = entry
        if job.state is _RUNNING:  # accruing at a fixed rate: the crossing holds
            t = v.crossing[job.name] = self._crossing(job, job.spec.initial_workers, now,
                                                      service)
            if t < math.inf:
                heapq.heappush(v.cross_heap, (t, job.name))
            v.settling.pop(job.name, None)
        else:  # restarting or holding: its crossing moves with the clock until it runs
            v.crossing.pop(job.name, None)
            v.settling[job.name] = job

    def _earliest_crossing(self) -> float:
        """`min(crossing.values())` without a pass over ~150 jobs each round: the heap's
        top, once the entries that no longer match `crossing` are dropped."""
        v = self._view
        heap, crossing = v.cross_heap, v.crossing
        while heap and crossing.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        if len(heap) > 2 * len(crossing) + 1000:  # stale entries deep in the heap
            heap[:] = [(t, n) for n, t in crossing.items() if t < math.inf]
            heapq.heapify(heap)
        return heap[0][0] if heap else math.inf

    def _entered(self, job: JobStatus, q: int, now: float) -> float:
        """When `job` entered queue `q`: its arrival for the first queue; for a lower queue the
        round that first saw it there (artifact tiresias.py: a demoted job is appended to
        `_queue_1`, so that queue runs in the order of demotion)."""
        if q == 0:
            return job.spec.arrival
        seen = self._entered_at.get(job.name)
        if seen is None or seen[0] != q:
            seen = self._entered_at[job.name] = (q, now)
        return seen[1]

    def _drop_entry(self, entry: Ranked) -> None:
        v = self._view
        i = bisect.bisect_left(v.placed, entry)
        del v.placed[i]
        del v.gpus[i]

    def _unrank(self, job: JobStatus) -> None:
        v = self._view
        self._drop_entry(v.entry.pop(job.name))
        v.crossing.pop(job.name, None)
        v.settling.pop(job.name, None)

    def _rebuild_ranking(self, state: ClusterState) -> list[JobStatus]:
        v = self._view
        left = [p.job for p in v.placed]
        v.placed, v.gpus, v.entry, v.crossing, v.settling = [], [], {}, {}, {}
        v.cross_heap = []
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
            for p in self._departed(state):
                self._unrank(p.job)  # completed, or sent back by a node failure
                left.append(p.job)
            if len(v.placed) != placed_now:
                left += self._rebuild_ranking(state)  # placed by someone else after all
        for job in list(v.settling.values()):
            self._rank(job, now)  # a restart that has ended starts a fixed crossing
        if self._earliest_crossing() <= now:
            for name in [n for n, t in v.crossing.items() if t <= now]:
                self._rank(v.entry[name].job, now)
        return left

    def _departed(self, state: ClusterState) -> list[Ranked]:
        """The ranked jobs that no longer hold GPUs, in ranking order."""
        v = self._view
        holding = getattr(state.placed, "mapping", None)  # the simulator's placed jobs by name
        if holding is None:
            return [p for p in v.placed if not p.job.state.placed]
        # a set difference of ~150 names, rather than reading each job's state
        return sorted(v.entry[name] for name in v.entry.keys() - holding.keys())

    # ---- a round ------------------------------------------------------------------------

    def _walk(self, skip: set[str], left: list[JobStatus], room: float, full: float
              ) -> tuple[list[JobStatus], list[Ranked], int]:
        """Placed and waiting jobs in 2D-LAS order (queue, entered, arrival, name), each queue's
        waiting jobs merged with its run of placed ones, as far as the GPUs go (a round does not
        walk the whole of a long queue). Returns the waiting jobs chosen to start, the placed
        entries of a run that does not fit whole, and the end of the last run walked: every
        entry after it loses its GPUs too (the runs cover the ranking in order)."""
        v, thresholds = self._view, self.queue_thresholds
        placed = v.placed
        starting: list[JobStatus] = []
        dropped: list[Ranked] = []
        used, walked = 0.0, 0
        for q in range(len(thresholds) + 1):
            i, n = bisect.bisect_left(placed, (q,)), bisect.bisect_left(placed, (q + 1,))
            # queue q's waiting jobs as (queue, entered, arrival, name, job), in queue order:
            # the first queue's as built this round, a lower queue's from its kept list
            if q == 0:
                waiting, k = self._first_queue_waiting(skip, left), 0
            else:
                waiting, k = v.low, bisect.bisect_left(v.low, (q,))
            while k < len(waiting):  # merged with queue q's run of placed jobs
                entry = waiting[k]
                job = entry[4]
                if entry[0] != q:
                    break
                if q and (job.state not in _WAITING or  # a stale entry, dropped as met
                          bisect.bisect_right(thresholds, job.attained_service) != q):
                    v.low_names.discard(job.name)
                    del waiting[k]
                    continue
                k += 1
                if job.name in skip:
                    continue
                start = i
                i = bisect.bisect_left(placed, entry[:4], i, n)
                if i > start:
                    used, walked = self._keep_run(start, i, used, room, dropped), i
                    if used >= full:
                        return starting, dropped, walked
                need = job.spec.worker_demand.gpu * job.spec.initial_workers
                # artifact tiresias.py: a job that does not fit is skipped, the next may run
                if used + need <= room:
                    starting.append(job)
                    used += need
                if used >= full:
                    return starting, dropped, walked
            if i < n:
                used, walked = self._keep_run(i, n, used, room, dropped), n
                if used >= full:
                    return starting, dropped, walked
        return starting, dropped, walked

    def _keep_run(self, start: int, end: int, used: float, room: float,
                  dropped: list[Ranked]) -> float:
        """GPUs in use after the placed entries `[start:end]` keep theirs where they fit; the
        others go to `dropped`."""
        v = self._view
        whole = sum(v.gpus[start:end])  # the same additions as over the entries
        if used + whole <= room:  # typical: the whole run keeps its GPUs
            return used + whole
        for p in v.placed[start:end]:
            if used + p.gpus <= room:
                used += p.gpus
            else:
                dropped.append(p)
        return used

    def _first_queue_waiting(self, skip: set[str], left: list[JobStatus]) -> list[tuple]:
        """The waiting jobs of the first queue in arrival order, each as its key and itself
        (0, arrival, arrival, name, job) (its `entered` is its arrival), without walking a long queue
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
        # by (arrival, name): names are unique, so the tuples never compare the jobs
        return [(0, a, a, name, j) for a, name, j in sorted([(j.spec.arrival, j.name, j)
                                                             for j in live])]

    def _track_low(self, state: ClusterState, left: list[JobStatus]) -> None:
        """Keep the waiting jobs of the lower queues sorted by (queue, entered, arrival): the
        jobs that held GPUs and wait again join; all waiting jobs are looked at on the first
        round and when the cluster's shape changes (only a job that has run is below the first
        queue)."""
        v, now = self._view, state.now
        if v.arrivals.everything:
            v.low, v.low_names = [], set()
            left = list(state.iter_waiting())
        first = self.queue_thresholds[0] if self.queue_thresholds else math.inf
        for job in left:
            if job.state in _WAITING and job.attained_service >= first and \
                    job.name not in v.low_names:
                q = self.queue_of(job)
                bisect.insort(v.low, (q, self._entered(job, q, now), job.spec.arrival, job.name,
                                      job))
                v.low_names.add(job.name)

    def _start_low(self, job: JobStatus, q: int) -> None:
        """A lower-queue job placed this round (in queue `q`) leaves the waiting list (a
        refused placement brings it back through `left`)."""
        v = self._view
        if job.name in v.low_names:
            v.low_names.discard(job.name)
            key = (q, self._entered(job, q, 0.0), job.spec.arrival, job.name)
            i = bisect.bisect_left(v.low, key)
            if i < len(v.low) and v.low[i][3] == job.name:
                del v.low[i]

    def schedule(self, state: ClusterState) -> list[Action]:
        if state.jobs is not self._view.jobs:  # another backend's jobs (a forked what-if)
            self.forget_cluster()
            self._view.jobs = state.jobs
        v = self._view
        actions = v.arrivals.reject(state)
        rejected = {a.job for a in actions}
        left = self._update_ranking(state)
        self._track_low(state, left)
        key = state.node_up.tobytes() + state.capacity.tobytes()
        if key != v.gpus_up[0]:
            v.gpus_up = (key, float(state.capacity[state.node_up, 2].sum()))
        capacity = v.gpus_up[1]
        room, full = capacity + 1e-9, capacity - 1e-9  # the walk's bounds, computed once
        now = state.now
        # Placed jobs that lose their GPUs, in ranking order: those of a run that does not fit
        # whole, then all those after where the walk stops.
        starting, dropped, walked = self._walk(rejected, left, room, full)
        dropped += v.placed[walked:]
        ledger = self.ledger(state) if starting or dropped else None
        if dropped:
            for p in dropped:
                job = p.job
                self._unrank(job)
                v.left.append(job)
                ledger.give_back(job.workers, job.spec.worker_demand)
                ledger.give_back(job.ps, job.spec.ps_demand)
                actions.append(Suspend(job.name, f"preempted: queue {p.queue} after"
                                       f" {job.attained_service / 3600:.1f} GPU-hours; higher"
                                       " priority jobs need the GPUs"))
        # The next queue crossing among the jobs that will hold GPUs.
        wakeup = self._earliest_crossing()
        for job in itertools.chain(v.settling.values(), starting):
            wakeup = min(wakeup, self._crossing(job, job.spec.initial_workers, now))
        v.wakeup_for, v.wakeup = state, wakeup if wakeup < math.inf else None
        pos = 0
        for job in starting:
            placement = place_in_order(ledger, job, job.spec.initial_workers, self.node_order)
            if placement is None:
                w = wait_reason(ledger, job, job.spec.initial_workers, pos, f"queue {self.queue_of(job)}")
                pos += 1
                if w:
                    actions.append(w)
                continue
            workers, ps = placement
            ledger.take(workers, job.spec.worker_demand)
            ledger.take(ps, job.spec.ps_demand)
            q = self.queue_of(job)
            self._start_low(job, q)
            v.started.append(job)
            actions.append(Place(job.name, f"started: queue {q}, least attained service first",
                                 workers, ps))
        if v.arrivals.checked:
            actions += self._arrival_reasons(rejected, starting)
        return actions

    def _arrival_reasons(self, rejected: set[str], starting: list[JobStatus]) -> list[Action]:
        """Why each job that arrived since the last round and does not start now waits (it
        would keep the backend's 'arrived, not yet scheduled'). The reason stays true until it
        starts, so later rounds need not repeat it; a job that has run keeps its reason (its
        preemption's, the backend's after a node failure, or 'found with a checkpoint')."""
        tried = {j.name for j in starting}
        waits: list[Action] = []
        for job in self._view.arrivals.checked:
            if job.has_run or job.state not in _WAITING or job.name in rejected or \
                    job.name in tried:
                continue
            q = self.queue_of(job)
            gpus = job.spec.worker_demand.gpu * job.spec.initial_workers
            ahead = "earlier arrivals" if q == 0 else \
                f"higher queues and jobs that entered queue {q} before it"
            plural = "" if gpus == 1 else "s"
            text = f"waiting: queue {q}, needs {gpus:g} GPU{plural}; {ahead} come first"
            if job.reason != text:
                waits.append(Wait(job.name, text))
        return waits

    def engine_view(self, state: ClusterState | None = None) -> dict[str, Any]:
        """Tiresias's 2D-LAS now: jobs per priority queue (running and waiting), the running
        jobs next to drop a queue with the hours until they do, and the waiting jobs in the
        order they would start. From the cluster now, not from the ranking this engine keeps,
        which takes in the jobs a round starts only at the next round: after a quiet round
        it showed no job running (one pass over the jobs holding GPUs)."""
        thresholds = [t / 3600.0 for t in self.queue_thresholds]
        view: dict[str, Any] = {
            **super().engine_view(state),
            "rule": "least attained service first: a job drops to a lower queue after its"
                    " threshold of GPU-hours; within a queue, first come first served",
            "queue_thresholds_gpu_h": ", ".join(f"{t:g}" for t in thresholds)}
        if state is None:
            return view
        counts = {f"queue {q} {kind}": 0 for q in range(len(thresholds) + 1)
                  for kind in ("running", "waiting")}
        crossing: dict[str, float] = {}
        placed = 0
        for job in state.iter_placed():
            placed += 1
            counts[f"queue {self.queue_of(job)} running"] += 1
            # at the GPUs it holds; a job still restarting drops a little later than this
            t = self._crossing(job, job.num_workers, state.now)
            if t < math.inf:
                crossing[job.name] = t
        waiting = [(self.queue_of(j), j) for j in state.iter_waiting()]
        waiting.sort(key=lambda qj: (qj[0], self._entered_at.get(qj[1].name, (0, 0.0))[1],
                                     qj[1].spec.arrival, qj[1].name))
        for q, _ in waiting:
            counts[f"queue {q} waiting"] += 1
        jobs = [j for _, j in waiting]
        soon = heapq.nsmallest(BARS, crossing.items(), key=lambda kv: kv[1])
        none = "(no running job drops a queue)" if placed else "(no job running)"
        return {**view, **queue_facts(jobs), "jobs_per_queue": counts,
                "hours_to_next_queue": {name: max(t - state.now, 0.0) / 3600.0
                                        for name, t in soon} or {none: 0.0},
                "queue": queue_rows(jobs, state.now, queue=self.queue_of,
                                    attained_gpu_h=lambda j: j.attained_service / 3600.0)}
