"""DRAGON (CLOSER'19): gang scheduling with task dependencies, locality, load-aware scaling.

Written from the paper and the rules of its public controller (NTHU-LSALAB/DRAGON,
`pkg/controller.v1/DRAGON/scheduling/`); the code is our own.

- Gang, dependency aware: a job's parameter servers and at least `min_workers` workers start
  in one `Place` or not at all; a PS is critical and is never scaled away. The job starts with
  as many workers as fit, up to `initial_workers`.
- Locality: the whole job on one node if it fits there (the tightest such node, which keeps
  large holes for large gangs); otherwise on as few nodes as possible, one rack if one can
  hold it, filling from the node with the most free room, PS first so the workers join it.
- Load-aware scaling: when the oldest waiting job has waited `wait_threshold` seconds (30 s
  in DRAGON's controller), running jobs are scaled down toward their minimum until its PS and
  minimum workers fit, workers on nodes without their PS first; until then no younger job may
  start (it would take the room the oldest is waiting for). When nothing has happened for
  `idle_threshold` seconds (60 s) and nobody waits, running jobs are scaled up toward their
  maximum with free resources, next to their PS. DRAGON adds workers blindly; our measured
  PS speed model is not monotone in workers, so a scale-up is only done when the performance
  model predicts a faster job (`check_speedup`, on by default).
"""

from __future__ import annotations

import copy
from operator import attrgetter
from typing import Any

import numpy as np

from ..model import (
    CPU,
    GPU,
    Action,
    ClusterState,
    JobSpec,
    JobState,
    JobStatus,
    Place,
    Placement,
    Scale,
    Wait,
    describe_placement,
    merge_placements,
    total,
)
from ..placement.ledger import Ledger, describe_shortfall
from .base import Policy, register
from .common import CheckedOnce, ShapeNumbers, by_arrival

_EPS = 1e-9
_PENDING = JobState.PENDING  # a module global is found faster than an Enum member
_NAME = attrgetter("name")
_TRAINING = (JobState.RUNNING, JobState.RESTARTING)


def _scratch(ledger: Ledger) -> Ledger:
    twin = copy.copy(ledger)
    twin.free = ledger.free.copy()
    twin.gpu_free = ledger.gpu_free.copy()
    return twin


def _room(ledger: Ledger, job: JobStatus) -> np.ndarray:
    """Worker slots per node for this job, then free CPU as a tie-break (for sorting)."""
    return ledger.fit_counts(job.spec.worker_demand) + ledger.free[:, CPU] / 1e6


def locality_place(ledger: Ledger, job: JobStatus, workers: int, min_workers: int,
                   racks: np.ndarray | None = None) -> tuple[Placement, Placement] | None:
    """PS + up to `workers` workers (at least `min_workers`) with DRAGON's locality, or None.

    Does not change `ledger`.
    """
    spec = job.spec
    wd, pd, n_ps = spec.worker_demand, spec.ps_demand, spec.num_ps
    need = wd.as_array() * min_workers + pd.as_array() * n_ps
    if (need > ledger.free.sum(axis=0) + _EPS).any():
        return None
    names = ledger.names
    # 1. One node for the whole job: the tightest fit.
    best, best_key = None, None
    wfit = ledger.fit_counts(wd)
    for i in np.flatnonzero(wfit >= workers):
        s = _scratch(ledger)
        if n_ps:
            if s.fit_counts(pd)[i] < n_ps:
                continue
            s.take({names[i]: n_ps}, pd)
        if s.fit_counts(wd)[i] < workers:
            continue
        key = (ledger.free[i, GPU] - workers * wd.gpu, ledger.free[i, CPU])
        if best_key is None or key < best_key:
            best, best_key = int(i), key
    if best is not None:
        return {names[best]: workers}, ({names[best]: n_ps} if n_ps else {})
    # 2. Fewest nodes: one rack if one can hold it, nodes by most free room first.
    room = _room(ledger, job)
    order = list(np.argsort(-room, kind="stable"))
    if racks is not None and len(set(racks.tolist())) > 1:
        rack_names = sorted(set(racks.tolist()))
        slots = {r: int(np.floor(room[racks == r]).sum()) for r in rack_names}
        holding = [r for r in rack_names if slots[r] >= workers]
        if holding:
            def nodes_needed(r: str) -> int:
                counts = np.sort(np.floor(room[racks == r]))[::-1]
                return int(np.searchsorted(np.cumsum(counts), workers) + 1)
            first = min(holding, key=lambda r: (nodes_needed(r), slots[r]))
            rank = {first: 0}
        else:
            rank = {r: k for k, r in enumerate(sorted(rack_names, key=lambda r: -slots[r]))}
        order.sort(key=lambda i: (rank.get(racks[i], len(rank)), -room[i]))
    s = _scratch(ledger)
    ps: Placement = {}
    left = n_ps
    for i in order:  # PS on the roomiest node(s), so the workers can sit with it
        if left == 0:
            break
        k = int(min(s.fit_counts(pd)[i], left))
        if k:
            ps[names[i]] = k
            s.take({names[i]: k}, pd)
            left -= k
    if left:
        return None
    placed: Placement = {}
    left = workers
    ps_first = sorted(order, key=lambda i: names[i] not in ps)  # stable: keeps the room order
    for i in ps_first:
        if left == 0:
            break
        k = int(min(s.fit_counts(wd)[i], left))
        if k:
            placed[names[i]] = k
            s.take({names[i]: k}, wd)
            left -= k
    if total(placed) < min_workers:
        return None
    return placed, ps


def _gang_shape(s: JobSpec) -> tuple:
    """What makes two waiting jobs look alike to DRAGON's queue walk."""
    return (s.worker_demand, s.ps_demand, s.num_ps, s.initial_workers, s.min_workers)


@register("dragon")
class DragonPolicy(Policy):
    def __init__(self, wait_threshold: float = 30.0, idle_threshold: float = 60.0,
                 round_interval: float = 10.0, scale_down: bool = True, scale_up: bool = True,
                 check_speedup: bool = True, perf=None) -> None:
        self.wait_threshold = wait_threshold
        self.idle_threshold = idle_threshold
        self.round_interval = round_interval
        self.scale_down = scale_down
        self.scale_up = scale_up
        self.check_speedup = check_speedup
        self._perf = perf
        self.reset()

    def reset(self) -> None:
        self._enqueued: dict[str, float] = {}
        self._last_action: float | None = None
        self._wake: float | None = None
        self.events: list[dict[str, Any]] = []  # scaling events
        self.gangs: dict[str, dict[str, Any]] = {}
        self.placements = {"one_node": 0, "one_rack": 0, "multi_rack": 0, "nodes_total": 0}
        # Caches of what a job's spec alone (and the cluster's shape) decides, by job name:
        self._reject_impossible = CheckedOnce()  # a waiting job checked once per cluster shape
        self._shapes = ShapeNumbers(_gang_shape)  # its gang shape, as a number
        self._gang_rows: dict[str, tuple] = {}  # `_remember_gangs` rows, by what made them

    @property
    def perf(self):
        if self._perf is None:
            from ..perf import default_perf

            self._perf = default_perf()
        return self._perf

    # ---- the round ------------------------------------------------------------------------

    def next_wakeup(self, state: ClusterState | None) -> float | None:
        return self._wake

    def schedule(self, state: ClusterState) -> list[Action]:
        """Admit the queue; the head job, once it has waited `wait_threshold`, gets room by
        scaling running jobs down (or the rest of the queue waits for it); the others start
        in arrival order where a gang fits; with nothing to do for `idle_threshold`, running
        jobs scale up into idle resources."""
        now = state.now
        if self._last_action is None:
            self._last_action = now
        actions: list[Action] = []
        queue = self._admit(state, actions)
        ledger = Ledger(state)
        racks = state.racks  # built afresh on every access: once per round
        placed_names: set[str] = set()
        acted, reserved_for = False, None
        if queue:
            acted, reserved_for = self._serve_starving_head(state, ledger, racks, queue[0],
                                                            actions, placed_names)
        acted |= self._serve_queue(state, ledger, racks, queue, reserved_for, actions,
                                   placed_names)
        if acted:
            self._last_action = now
        nobody_waits = all(j.name in placed_names for j in queue)
        if (self.scale_up and not acted and nobody_waits
                and now - self._last_action >= self.idle_threshold - _EPS):
            ups = self._scale_up(state, ledger, now)
            actions += ups
            self._last_action = now
        self._plan_wakeup(state, queue, placed_names, ledger)
        self._remember_gangs(state)
        return actions

    def _admit(self, state: ClusterState, actions: list[Action]) -> list[JobStatus]:
        """Reject jobs that can never fit, and keep each queued job's enqueue time. Returns
        the queue in arrival order."""
        now = state.now
        pending = by_arrival([j for j in state.iter_waiting() if j.state is _PENDING])
        rejects, queue = self._reject_impossible(state, pending)
        actions += rejects
        enqueued = self._enqueued
        queued_names = set(map(_NAME, queue))
        for name in enqueued.keys() - queued_names:
            del enqueued[name]
        new = queued_names - enqueued.keys()
        for job in queue if new else ():  # in queue order
            if job.name in new:
                # Time in queue counts from arrival, or from the round it came back (preempted).
                enqueued[job.name] = job.spec.arrival if job.first_start is None else now
        return queue

    def _serve_starving_head(self, state: ClusterState, ledger: Ledger, racks: np.ndarray,
                             head: JobStatus, actions: list[Action], placed_names: set[str]
                             ) -> tuple[bool, str | None]:
        """The head of the queue, once it has waited `wait_threshold`: place it, scaling
        running jobs down if that frees enough, or reserve the free room for it. Returns
        (acted, the job the room is reserved for)."""
        now = state.now
        waited = now - self._enqueued[head.name]
        if not (waited >= self.wait_threshold - _EPS and self.scale_down):
            return False, None
        acted = False
        plan = locality_place(ledger, head, head.spec.initial_workers,
                              head.spec.min_workers, racks)
        if plan is None:
            scaled, plan = self._scale_down_for(head, state, ledger, waited)
            if plan is not None:
                actions += scaled
                acted = True
        if plan is not None:
            actions.append(self._place(head, plan, ledger, state,
                                       f"; it had waited {waited:.0f} s"))
            placed_names.add(head.name)
            return True, None
        self._last_action = now  # DRAGON: a starving job blocks idle scale-up
        why = describe_shortfall(ledger, head, head.spec.min_workers)
        text = (f"{why}; waited {waited:.0f} s, scaling running jobs down to their"
                " minimum would not free enough")
        if text != head.reason:
            actions.append(Wait(head.name, text))
        return acted, head.name

    def _serve_queue(self, state: ClusterState, ledger: Ledger, racks: np.ndarray,
                     queue: list[JobStatus], reserved_for: str | None, actions: list[Action],
                     placed_names: set[str]) -> bool:
        """Start the queued jobs in arrival order where their gang fits, unless the room is
        reserved for a starving head. Returns whether any started."""
        acted = False
        # Gang shapes that did not fit since the ledger last changed, with why: a job of the
        # same shape gets the same answer (the ledger only changes by a placement here), so
        # a long queue of look-alikes costs one placement attempt, not one each.
        no_room: dict[int, str | None] = {}
        if reserved_for is not None:  # nobody starts; the first 200 are told why
            text = (f"waiting: {reserved_for} has waited over {self.wait_threshold:.0f} s;"
                    " DRAGON keeps free room for the oldest job")
            for job in queue[:200]:
                if not (job.name in placed_names or job.name == reserved_for or text == job.reason):
                    actions.append(Wait(job.name, text))
            return False
        shape_of, known = self._shapes.number, self._shapes.known
        for pos, job in enumerate(queue):
            if job.name in placed_names:
                continue
            got = known.get(job.name)
            shape = got[1] if got is not None and got[0] is job.spec else shape_of(job)
            if shape in no_room:
                if pos >= 200:  # no room, as for the last of its shape, and no reason to tell
                    continue
                plan = None
            else:
                s = job.spec
                plan = locality_place(ledger, job, s.initial_workers, s.min_workers, racks)
            if plan is None:
                why = no_room.get(shape)
                if why is None and pos < 200:
                    why = describe_shortfall(ledger, job, job.spec.min_workers)
                no_room[shape] = why
                if pos < 200:
                    s = job.spec
                    text = f"{why} (gang: {s.num_ps} PS + at least {s.min_workers} workers)"
                    if text != job.reason:
                        actions.append(Wait(job.name, text))
                continue
            actions.append(self._place(job, plan, ledger, state, ""))
            placed_names.add(job.name)
            no_room.clear()
            acted = True
        return acted

    def _plan_wakeup(self, state: ClusterState, queue: list[JobStatus], placed: set[str],
                     ledger: Ledger) -> None:
        times = []
        first_left = next((j for j in queue if j.name not in placed), None)
        if first_left is not None:
            t = self._enqueued[first_left.name] + self.wait_threshold
            if t > state.now + _EPS:
                times.append(t)
        elif self.scale_up and self._can_grow(state, ledger):
            times.append(max(self._last_action + self.idle_threshold, state.now + _EPS))
        self._wake = min(times) if times else None

    def _can_grow(self, state: ClusterState, ledger: Ledger) -> bool:
        for job in state.jobs_in(JobState.RUNNING):
            if (job.num_workers < job.spec.max_workers
                    and ledger.total_fit(job.spec.worker_demand) > 0
                    and (not self.check_speedup or self._faster(job, job.num_workers + 1))):
                return True
        return False

    # ---- placement ------------------------------------------------------------------------

    def _place(self, job: JobStatus, plan: tuple[Placement, Placement], ledger: Ledger,
               state: ClusterState, extra: str) -> Place:
        workers, ps = plan
        ledger.take(workers, job.spec.worker_demand)
        ledger.take(ps, job.spec.ps_demand)
        nodes = set(workers) | set(ps)
        racks = {state.nodes[state.node_index[n]].rack for n in nodes}
        self.placements["nodes_total"] += len(nodes)
        if len(nodes) == 1:
            self.placements["one_node"] += 1
            where = f"on {next(iter(nodes))} (the whole job on one node)"
        else:
            self.placements["one_rack" if len(racks) == 1 else "multi_rack"] += 1
            where = (f"on {len(nodes)} nodes in {len(racks)} rack{'s' if len(racks) > 1 else ''}"
                     " (fewest nodes, filled from the node with the most free room)")
        w, n_ps = total(workers), total(ps)
        size = (f"{w} worker{'s' if w > 1 else ''}" if w == job.spec.initial_workers else
                f"{w}/{job.spec.initial_workers} workers (min {job.spec.min_workers})")
        gang = f"{n_ps} PS + {size}" if n_ps else size
        together = " together" if w + n_ps > 1 else ""
        return Place(job.name, f"gang started: {gang}{together} {where}{extra}", workers, ps)

    # ---- load-aware scaling -----------------------------------------------------------------

    def _removal_order(self, job: JobStatus) -> list[str]:
        """Nodes to take this job's workers from: away from its PS first, smallest share first."""
        return sorted((n for n, c in job.workers.items() if c),
                      key=lambda n: (job.ps.get(n, 0) > 0, job.workers[n], n))

    def _scale_down_for(self, head: JobStatus, state: ClusterState, ledger: Ledger, waited: float
                        ) -> tuple[list[Action], tuple[Placement, Placement] | None]:
        scratch = _scratch(ledger)
        racks = state.racks  # built afresh on every access
        running = [j for j in state.iter_placed()  # sorted below by a key unique per job
                   if j.state in _TRAINING and j.num_workers > j.spec.min_workers]
        running.sort(key=lambda j: (-(j.num_workers - j.spec.min_workers), j.first_start or 0.0, j.name))
        removed: dict[str, Placement] = {}
        plan = None
        for job in running:
            excess = job.num_workers - job.spec.min_workers
            for node in self._removal_order(job):
                while excess > 0 and job.workers[node] - removed.get(job.name, {}).get(node, 0) > 0:
                    plan = locality_place(scratch, head, head.spec.initial_workers,
                                          head.spec.min_workers, racks)
                    if plan is not None:
                        break
                    scratch.give_back({node: 1}, job.spec.worker_demand)
                    r = removed.setdefault(job.name, {})
                    r[node] = r.get(node, 0) + 1
                    excess -= 1
                if plan is not None:
                    break
            if plan is not None:
                break
        if plan is None:
            plan = locality_place(scratch, head, head.spec.initial_workers, head.spec.min_workers,
                                  racks)
        if plan is None:
            return [], None
        actions: list[Action] = []
        for name, gone in removed.items():
            job = state.jobs[name]
            keep = {n: c - gone.get(n, 0) for n, c in job.workers.items() if c - gone.get(n, 0) > 0}
            ledger.give_back(job.workers, job.spec.worker_demand)
            ledger.take(keep, job.spec.worker_demand)
            away = sum(c for n, c in gone.items() if not job.ps.get(n, 0))
            reason = (f"scaled down {job.num_workers}→{total(keep)} workers (min"
                      f" {job.spec.min_workers}) to admit {head.name}, waiting {waited:.0f} s"
                      f" (> {self.wait_threshold:.0f} s); {away} of {total(gone)} removed workers"
                      " were on nodes without this job's PS; PS kept")
            actions.append(Scale(name, reason, keep, dict(job.ps)))
            self.events.append({"time": state.now, "job": name, "kind": "down",
                                "from": job.num_workers, "to": total(keep), "for": head.name})
        return actions, plan

    def _faster(self, job: JobStatus, workers: int) -> bool:
        try:
            return self.perf.ideal_rate(job.spec, workers) > self.perf.ideal_rate(job.spec, job.num_workers) * 1.01
        except (KeyError, ValueError):
            return True

    def _scale_up(self, state: ClusterState, ledger: Ledger, now: float) -> list[Action]:
        actions: list[Action] = []
        jobs = sorted(state.jobs_in(JobState.RUNNING), key=lambda j: (j.first_start or 0.0, j.name))
        for job in jobs:
            room = job.spec.max_workers - job.num_workers
            if room <= 0:
                continue
            wd = job.spec.worker_demand
            fits = ledger.fit_counts(wd)
            if fits.sum() == 0:
                continue
            names = ledger.names
            # Next to its PS, then next to its workers, then where there is the most room.
            order = sorted(np.flatnonzero(fits > 0),
                           key=lambda i: (-job.ps.get(names[i], 0), -job.workers.get(names[i], 0), -fits[i]))
            add: Placement = {}
            left = room
            for i in order:
                if left == 0:
                    break
                k = int(min(fits[i], left))
                add[names[i]] = k
                left -= k
            # Keep only as many as the performance model says make the job faster.
            n_add = total(add)
            if self.check_speedup:
                best = max(range(n_add + 1), key=lambda k: (self.perf.ideal_rate(job.spec, job.num_workers + k), -k))
                if best == 0:
                    continue
                trimmed: Placement = {}
                left = best
                for n, c in add.items():
                    if left == 0:
                        break
                    trimmed[n] = min(c, left)
                    left -= trimmed[n]
                add = trimmed
            ledger.take(add, wd)
            new = merge_placements(job.workers, add)
            reason = (f"scaled up {job.num_workers}→{total(new)} workers (max {job.spec.max_workers}):"
                      f" no scheduling action for {self.idle_threshold:.0f} s and nobody waiting;"
                      f" added {describe_placement(add)}, next to its PS where possible")
            actions.append(Scale(job.name, reason, new, dict(job.ps)))
            self.events.append({"time": now, "job": job.name, "kind": "up",
                                "from": job.num_workers, "to": total(new), "for": None})
        return actions

    # ---- teaching view ----------------------------------------------------------------------

    def _remember_gangs(self, state: ClusterState) -> None:
        """Each placed job's gang for the teaching view. A row is made again only when the
        job's placement, spec or node list changed (each round ~150 jobs run, most as before)."""
        gangs = {}
        rows, kept = self._gang_rows, {}
        nodes_list = state.nodes
        for job in [j for j in state.jobs.values() if j.state.placed]:
            cached = rows.get(job.name)
            if (cached is not None and cached[2] is job.spec and cached[3] is nodes_list
                    and cached[0] == job.workers and cached[1] == job.ps):
                kept[job.name] = cached
                gangs[job.name] = cached[4]
                continue
            nodes = job.nodes
            row = {
                "ps": dict(job.ps), "workers": dict(job.workers),
                "min": job.spec.min_workers, "max": job.spec.max_workers,
                "nodes": len(nodes),
                "racks": len({state.nodes[state.node_index[n]].rack for n in nodes}),
                "workers_away_from_ps": sum(c for n, c in job.workers.items() if not job.ps.get(n, 0))
                if job.ps else 0,
            }
            kept[job.name] = (dict(job.workers), dict(job.ps), job.spec, nodes_list, row)
            gangs[job.name] = row
        self._gang_rows = kept
        self.gangs = gangs

    def engine_view(self, state: ClusterState | None = None) -> dict[str, Any]:
        """Gangs and their placement, locality of starts, scaling events, and (with `state`)
        hours each queued job has waited against the scaling thresholds."""
        started = sum(self.placements[k] for k in ("one_node", "one_rack", "multi_rack"))
        now = state.now if state is not None else None
        waited = {job: (now - since) / 3600.0 for job, since in self._enqueued.items()} \
            if now is not None else {}
        return {
            "gangs": self.gangs,
            "locality": {**self.placements, "started": started,
                         "avg_nodes_per_job": self.placements["nodes_total"] / started if started else None},
            "scaling_events": self.events[-50:],
            "scale_downs": sum(e["kind"] == "down" for e in self.events),
            "scale_ups": sum(e["kind"] == "up" for e in self.events),
            "waiting_h": waited,
            "thresholds": f"scale running gangs down for a job waiting over"
                          f" {self.wait_threshold:g} s; up when GPUs idle over"
                          f" {self.idle_threshold:g} s",
        }
