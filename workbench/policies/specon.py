"""SpeCon (Mao et al., arXiv 2010.11307): speculative migration of slow-growing training jobs.

Training curves grow fast early and flatten later. SpeCon watches each job's curve and, when
its growth over a fixed interval falls below α, bets that the job has entered its slow phase:
it moves the job off a node where it competes with fast-growing jobs, so they get the cores
(or, with `hold=True` and nowhere to go, pauses it until it can run without slowing them).

- Growth of a job: relative improvement of its metric over the last `interval` **epochs** of
  its training, (m_now − m_then)/|m_then| for accuracies, (m_then − m_now)/|m_then| for losses.
  Unit: epochs, not seconds, because the curve is a function of training done: a job starved
  by contention advances slowly in wall time but not per epoch, so a wall-clock window would
  call the victim slow-growing and move it instead of the job that can give up its cores.
  Defaults α = 0.1 and interval 10 (the paper's public deployment). A job is first judged
  after two intervals (its first interval holds the warm-up plateau of several curves); a
  job shorter than that is never called slow (`interval_unit="minutes"` measures wall time).
- Placement of new jobs: as the default scheduler (least-allocated node, pod by pod) but the
  whole job or none, so SpeCon itself never deadlocks a half-placed job.
- Migration, each round (every `round_interval` s): a slow-growing running job that shares an
  oversubscribed node (running tasks want more cores than it has) with a fast-growing or
  still-young job is moved, all tasks, to nodes where it oversubscribes nothing, if its own
  predicted speed there is at least `min_speed_kept` of what it gets now, it has more than
  `min_remaining` seconds left, and it was not moved in the last `cooldown` seconds. The move
  costs the backend's checkpoint-restart delay. At most `max_migrations` a round.
  `destination="lighter"` relaxes "oversubscribes nothing": a one-node job without parameter
  servers may go to the node that would be least oversubscribed after the move, if that is
  less than where it runs. The paper's deployment log (fishercht1995/SpeCon,
  `SpeCon/Evaluation/distribution.csv`) records migrations into nodes already running other
  jobs; the exact rule is not public, so this is our reading of it.

The engine reads CPU use as the simulator models it (request × `JobSpec.cpu_burst`); on a real
cluster the same figure comes from the pods' measured usage.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..model import (
    CPU,
    Action,
    ClusterState,
    JobSpec,
    JobState,
    JobStatus,
    Migrate,
    Place,
    Placement,
    Suspend,
    Wait,
    describe_placement,
    total,
)
from ..placement.ledger import Ledger, describe_shortfall
from .base import Policy, register
from .common import MAX_WAIT_REASONS, CheckedOnce, ShapeNumbers, by_arrival

_EPS = 1e-9
_PENDING = JobState.PENDING  # a module global is found faster than an Enum member


def relative_growth(history: list[tuple[float, float, float]], window: float, increases: bool,
                    by: str = "iterations") -> float | None:
    """Relative improvement of the metric over the last `window` (iterations or seconds).

    Compares the newest history point with the newest one at least `window` before it; None
    if the history does not reach back that far (or holds no metric).
    """
    if len(history) < 2:
        return None
    k = 1 if by == "iterations" else 0
    t1, m1 = history[-1][k], history[-1][2]
    then = None
    limit = window - _EPS
    older = reversed(history)  # newest first, without copying a history of hundreds of points
    next(older)
    for point in older:
        if t1 - point[k] >= limit:
            then = point
            break
    if then is None or m1 is None or then[2] is None:
        return None
    m0 = then[2]
    if math.isnan(m0) or math.isnan(m1):
        return None
    scale = max(abs(m0), 1e-12)
    return (m1 - m0) / scale if increases else (m0 - m1) / scale


def _gang_shape(s: JobSpec) -> tuple:
    """What makes two waiting jobs look alike to SpeCon's queue walk."""
    return (s.worker_demand, s.ps_demand, s.initial_workers, s.num_ps)


@register("specon")
class SpeConPolicy(Policy):
    needs_every_round = True

    def __init__(self, alpha: float = 0.1, interval: float = 10.0, interval_unit: str = "epochs",
                 migrate: bool = True, hold: bool = False, round_interval: float = 60.0,
                 max_migrations: int = 4, cooldown: float = 1800.0, min_remaining: float = 600.0,
                 min_speed_kept: float = 0.9, destination: str = "cool", perf=None) -> None:
        if destination not in ("cool", "lighter"):
            raise ValueError(f"specon: destination must be 'cool' or 'lighter', got {destination!r}")
        if interval_unit not in ("epochs", "minutes"):
            raise ValueError(f"specon: interval_unit must be 'epochs' or 'minutes', got {interval_unit!r}")
        self.alpha = alpha
        self.interval = interval
        self.interval_unit = interval_unit
        self.migrate = migrate
        self.hold = hold
        self.round_interval = round_interval
        self.max_migrations = max_migrations
        self.cooldown = cooldown
        self.min_remaining = min_remaining
        self.min_speed_kept = min_speed_kept
        self.destination = destination
        self._perf = perf
        self.reset()

    def reset(self) -> None:
        self.growth: dict[str, float | None] = {}
        self.migrations: list[dict[str, Any]] = []
        self._last_moved: dict[str, float] = {}
        self._held: set[str] = set()
        self._pending_effect: list[dict[str, Any]] = []  # migrations whose effect is not yet seen
        # Caches of what a job's spec alone (and the cluster's shape) decides, by job name:
        self._reject_impossible = CheckedOnce()  # a waiting job checked once per cluster shape
        self._shapes = ShapeNumbers(_gang_shape)  # its gang shape, as a number

    @property
    def perf(self):
        if self._perf is None:
            from ..perf import default_perf

            self._perf = default_perf()
        return self._perf

    # ---- progress monitoring --------------------------------------------------------------

    def _window(self, job: JobStatus) -> tuple[float, str]:
        if self.interval_unit == "minutes":
            return self.interval * 60.0, "seconds"
        try:
            epoch = float(self.perf.epoch_iterations(job.spec.application, job.spec.batch_size))
        except (KeyError, ValueError):
            epoch = job.spec.total_work / 10.0
        return self.interval * epoch, "iterations"

    def _increases(self, job: JobStatus) -> bool:
        try:
            return bool(self.perf.metric_increases(job.spec.application))
        except (KeyError, ValueError):
            return True

    def job_growth(self, job: JobStatus) -> float | None:
        """Growth over the last interval, None while the job is too young to judge."""
        window, by = self._window(job)
        h = job.history
        if not h:
            return None
        done = h[-1][1] if by == "iterations" else job.executed_time
        if done < 2 * window - _EPS:
            return None
        return relative_growth(h, window, self._increases(job), by)

    def is_slow(self, job: JobStatus) -> bool:
        g = self.growth.get(job.name)
        return g is not None and g < self.alpha

    def _describe_growth(self, job: JobStatus) -> str:
        g = self.growth.get(job.name)
        unit = "epochs" if self.interval_unit == "epochs" else "min"
        word = "accuracy" if self._increases(job) else "loss"
        return f"{word} improved {g:+.1%} over the last {self.interval:g} {unit} (< α={self.alpha:g})"

    # ---- the round ----------------------------------------------------------------------

    def schedule(self, state: ClusterState) -> list[Action]:
        for job in state.active:
            if job.state is JobState.RUNNING:
                self.growth[job.name] = self.job_growth(job)
        for name in [n for n in self.growth if n not in state.jobs]:
            del self.growth[name]
        self._observe_effects(state)
        actions: list[Action] = []
        ledger = Ledger(state)
        use = self._cpu_use(state)
        if self.migrate or self.hold:
            actions += self._migrations(state, ledger, use)
        actions += self._place_waiting(state, ledger, use)
        return actions

    # ---- CPU use (what contention is made of) ---------------------------------------------

    @staticmethod
    def _task_use(job: JobStatus) -> tuple[float, float]:
        b = job.spec.cpu_burst
        return job.spec.worker_demand.cpu * b, job.spec.ps_demand.cpu * b

    def _cpu_use(self, state: ClusterState) -> np.ndarray:
        use = np.zeros(len(state.nodes))
        for job in state.jobs_in(JobState.RUNNING, JobState.RESTARTING):
            self._add_use(use, state, job.workers, job.ps, job, +1)
        return use

    def _add_use(self, use: np.ndarray, state: ClusterState, workers: Placement, ps: Placement,
                 job: JobStatus, sign: int) -> None:
        wu, pu = self._task_use(job)
        for n, c in workers.items():
            use[state.node_index[n]] += sign * wu * c
        for n, c in ps.items():
            use[state.node_index[n]] += sign * pu * c

    # ---- speculative migration --------------------------------------------------------------

    def _migrations(self, state: ClusterState, ledger: Ledger, use: np.ndarray) -> list[Action]:
        cores = state.capacity[:, CPU]
        hot = use > cores + _EPS
        if not hot.any():
            return []
        running = state.jobs_in(JobState.RUNNING)
        by_node: dict[int, list[JobStatus]] = {}
        for job in running:
            for n in job.nodes:
                by_node.setdefault(state.node_index[n], []).append(job)
        candidates = []
        for job in running:
            if not self.is_slow(job):
                continue
            if state.now - self._last_moved.get(job.name, -math.inf) < self.cooldown:
                continue
            if job.throughput <= 0 or job.remaining_work / job.throughput < self.min_remaining:
                continue
            victims = {v.name: v for n in job.nodes if hot[state.node_index[n]]
                       for v in by_node.get(state.node_index[n], []) if v is not job and not self.is_slow(v)}
            if victims:
                candidates.append((self.growth[job.name], job, victims))
        candidates.sort(key=lambda c: (c[0], c[1].name))
        actions: list[Action] = []
        for _, job, victims in candidates:
            if len([a for a in actions if isinstance(a, Migrate)]) >= self.max_migrations:
                break
            src_hot = [n for n in job.nodes if use[state.node_index[n]] > cores[state.node_index[n]] + _EPS]
            if not src_hot:
                continue  # an earlier move this round already cooled its nodes
            ledger.give_back(job.workers, job.spec.worker_demand)
            ledger.give_back(job.ps, job.spec.ps_demand)
            self._add_use(use, state, job.workers, job.ps, job, -1)
            target = self._destination(state, ledger, use, job) if self.migrate else None
            if target is not None:
                workers, ps = target
                kept = self._predicted_rate(job, workers, ps) / job.throughput
                if kept < self.min_speed_kept or (workers == job.workers and ps == job.ps):
                    target = None
            if target is None:
                if self.hold:
                    loads = ", ".join(f"{n} CPU {use[state.node_index[n]] / cores[state.node_index[n]]:.0%}"
                                      for n in src_hot)
                    actions.append(Suspend(job.name, f"held: slow-growing ({self._describe_growth(job)});"
                                           f" it slowed fast-growing {', '.join(sorted(victims))}"
                                           f" on {loads} without it; no node can take it without"
                                           " oversubscribing"))
                    self._held.add(job.name)
                    self._last_moved[job.name] = state.now
                    continue
                ledger.take(job.workers, job.spec.worker_demand)
                ledger.take(job.ps, job.spec.ps_demand)
                self._add_use(use, state, job.workers, job.ps, job, +1)
                continue
            workers, ps = target
            before = {n: f"{(use[state.node_index[n]] + self._use_on(job, n)) / cores[state.node_index[n]]:.0%}"
                      for n in src_hot}
            ledger.take(workers, job.spec.worker_demand)
            ledger.take(ps, job.spec.ps_demand)
            self._add_use(use, state, workers, ps, job, +1)
            after = max(use[state.node_index[n]] / cores[state.node_index[n]] for n in set(workers) | set(ps))
            reason = (f"migrated: slow-growing ({self._describe_growth(job)}); it shared"
                      f" {', '.join(f'{n} (CPU wanted {v} of cores)' for n, v in before.items())} with"
                      f" fast-growing {', '.join(sorted(victims))}; moved to"
                      f" {describe_placement(workers, ps)} (CPU {after:.0%} there after the move),"
                      f" paying one checkpoint-restart")
            actions.append(Migrate(job.name, reason, workers, ps))
            self._last_moved[job.name] = state.now
            record = {"time": state.now, "job": job.name, "growth": self.growth[job.name],
                      "from": describe_placement(job.workers, job.ps),
                      "to": describe_placement(workers, ps),
                      "own_rate_before": job.throughput,
                      "relieved": {n: v.throughput for n, v in victims.items()},
                      "relieved_after": {}, "own_rate_after": None}
            self.migrations.append(record)
            self._pending_effect.append(record)
        return actions

    def _use_on(self, job: JobStatus, node: str) -> float:
        wu, pu = self._task_use(job)
        return wu * job.workers.get(node, 0) + pu * job.ps.get(node, 0)

    def _predicted_rate(self, job: JobStatus, workers: Placement, ps: Placement) -> float:
        try:
            return float(self.perf.iteration_rate(job.spec, workers, ps))
        except (KeyError, ValueError):
            return job.throughput

    def _destination(self, state: ClusterState, ledger: Ledger, use: np.ndarray,
                     job: JobStatus) -> tuple[Placement, Placement] | None:
        if self.destination == "lighter" and not job.num_ps and len(job.nodes) == 1:
            return self._lighter_node(state, ledger, use, job)
        return self._cool_placement(state, ledger, use, job)

    def _lighter_node(self, state: ClusterState, ledger: Ledger, use: np.ndarray,
                      job: JobStatus) -> tuple[Placement, Placement] | None:
        """The node where the job's workers would leave the least CPU oversubscription, if less
        than on its own node (`use` holds everything but this job)."""
        cores = state.capacity[:, CPU]
        want = self._task_use(job)[0] * job.num_workers
        pressure = (use + want) / cores
        here = state.node_index[next(iter(job.nodes))]
        fits = ledger.fit_counts(job.spec.worker_demand) >= job.num_workers
        fits[here] = False
        if not fits.any():
            return None
        best = min(np.flatnonzero(fits), key=lambda i: (pressure[i], i))
        if pressure[best] >= pressure[here] - _EPS:
            return None
        return {ledger.names[best]: job.num_workers}, {}

    def _cool_placement(self, state: ClusterState, ledger: Ledger, use: np.ndarray,
                        job: JobStatus) -> tuple[Placement, Placement] | None:
        """All of the job's tasks on as few nodes as possible, none left oversubscribed."""
        cores = state.capacity[:, CPU]
        wu, pu = self._task_use(job)
        spare = cores - use
        names = ledger.names
        wd, pd = job.spec.worker_demand, job.spec.ps_demand

        def slots(per_task: float, fits: np.ndarray) -> np.ndarray:
            by_cpu = np.floor((spare + _EPS) / per_task) if per_task > 0 else np.full(len(spare), 10**6)
            return np.minimum(fits, np.maximum(by_cpu, 0)).astype(np.int64)

        n_w, n_ps = job.num_workers, job.num_ps
        wslots = slots(wu, ledger.fit_counts(wd))
        if wslots.sum() < n_w:
            return None
        whole = np.flatnonzero(wslots >= n_w)
        order = list(whole[np.argsort(wslots[whole], kind="stable")]) if len(whole) else \
            list(np.argsort(-wslots, kind="stable"))
        workers: Placement = {}
        left = n_w
        for i in order:
            if left == 0:
                break
            k = int(min(wslots[i], left))
            if k:
                workers[names[i]] = k
                left -= k
        if left:
            return None
        if not n_ps:
            return workers, {}
        ledger.take(workers, wd)
        for n, c in workers.items():
            spare[state.node_index[n]] -= wu * c
        pslots = slots(pu, ledger.fit_counts(pd))
        ledger.give_back(workers, wd)
        ps: Placement = {}
        left = n_ps
        for i in sorted(range(len(names)), key=lambda i: (names[i] not in workers, -pslots[i])):
            if left == 0:
                break
            k = int(min(pslots[i], left))
            if k:
                ps[names[i]] = k
                left -= k
        return (workers, ps) if not left else None

    def _observe_effects(self, state: ClusterState) -> None:
        """What a migration won: the relieved jobs' speed once the migrant has left."""
        still = []
        for rec in self._pending_effect:
            done = True
            for name in rec["relieved"]:
                if name in rec["relieved_after"]:
                    continue
                job = state.jobs.get(name)
                if job is None:
                    continue
                if job.state is JobState.RUNNING and job.throughput > 0:
                    rec["relieved_after"][name] = job.throughput
                else:
                    done = False
            me = state.jobs.get(rec["job"])
            if rec["own_rate_after"] is None and me is not None:
                if me.state is JobState.RUNNING and me.throughput > 0:
                    rec["own_rate_after"] = me.throughput
                elif me.state is JobState.RESTARTING:
                    done = False
            if not done and state.now - rec["time"] < 3 * self.round_interval + 600:
                still.append(rec)
        self._pending_effect = still

    # ---- placing waiting jobs -------------------------------------------------------------

    def _place_waiting(self, state: ClusterState, ledger: Ledger, use: np.ndarray) -> list[Action]:
        pending = by_arrival([j for j in state.iter_waiting() if j.state is _PENDING])
        actions, queue = self._reject_impossible(state, pending)
        cores = state.capacity[:, CPU]
        # Shapes `_spread_gang` found no room for, by the ledger content they were tried on:
        # a long queue of look-alike jobs costs one try per shape until something is placed
        # (not with a placement plugin, whose choices may draw random numbers).
        no_room: dict[int, int] = {}
        memo = ledger.view is None
        known, shape_of = self._shapes.known, self._shapes.number
        for pos, job in enumerate(queue):
            spec = job.spec
            n = spec.initial_workers
            held = job.name in self._held
            got = known.get(job.name)
            shape = got[1] if got is not None and got[0] is spec else shape_of(job)
            if held:
                # A held job comes back only where it slows nobody down.
                plan = self._cool_placement_for_new(state, ledger, use, job)
                if plan is None:
                    text = "held: waiting for room where it oversubscribes no node's CPU"
                    if text != job.reason:
                        actions.append(Wait(job.name, text))
                    continue
            else:
                if memo and no_room.get(shape) == ledger.version:
                    plan = None
                else:
                    plan = self._spread_gang(ledger, job, n)
                    if plan is None:
                        no_room[shape] = ledger.version
            if plan is None:
                if pos < MAX_WAIT_REASONS:
                    text = f"{describe_shortfall(ledger, job, n)} (SpeCon places whole jobs)"
                    if text != job.reason:
                        actions.append(Wait(job.name, text))
                continue
            workers, ps = plan
            ledger.take(workers, spec.worker_demand)
            ledger.take(ps, spec.ps_demand)
            self._add_use(use, state, workers, ps, job, +1)
            self._held.discard(job.name)
            hot = [nm for nm in set(workers) | set(ps)
                   if use[state.node_index[nm]] > cores[state.node_index[nm]] + _EPS]
            note = f"; CPU oversubscribed on {', '.join(sorted(hot))}" if hot else ""
            why = ("resumed: room where it slows nobody" if held else
                   "started: whole job, least-allocated nodes as the default scheduler") + note
            actions.append(Place(job.name, why, workers, ps))
        return actions

    def _cool_placement_for_new(self, state, ledger, use, job) -> tuple[Placement, Placement] | None:
        n = job.spec.initial_workers
        if job.num_workers != n:  # _cool_placement places the current count; a held job has none
            job = _Sized(job, n)
        return self._cool_placement(state, ledger, use, job)

    @staticmethod
    def _spread_gang(ledger: Ledger, job: JobStatus, n: int) -> tuple[Placement, Placement] | None:
        """Pod by pod on the least-allocated node, all of the job or nothing."""
        spec = job.spec
        need = spec.worker_demand.as_array() * n + spec.ps_demand.as_array() * spec.num_ps
        if (need > ledger.free.sum(axis=0) + _EPS).any():
            return None
        taken: list[tuple[Placement, Any]] = []
        workers: Placement = {}
        ps: Placement = {}
        ok = True
        for role, demand, count in (("w", spec.worker_demand, n), ("p", spec.ps_demand, spec.num_ps)):
            for _ in range(count):
                node = ledger.spread_one(demand)
                if node is None:
                    ok = False
                    break
                ledger.take({node: 1}, demand)
                taken.append(({node: 1}, demand))
                target = workers if role == "w" else ps
                target[node] = target.get(node, 0) + 1
            if not ok:
                break
        for placement, demand in taken:
            ledger.give_back(placement, demand)
        return (workers, ps) if ok else None

    # ---- teaching view ----------------------------------------------------------------------

    def engine_view(self) -> dict[str, Any]:
        speedups = [after / rec["relieved"][n] for rec in self.migrations
                    for n, after in rec["relieved_after"].items() if rec["relieved"][n] > 0]
        own = [rec["own_rate_after"] / rec["own_rate_before"] for rec in self.migrations
               if rec["own_rate_after"] and rec["own_rate_before"]]
        measured = {n: g for n, g in self.growth.items() if g is not None}
        return {
            "alpha": self.alpha,
            "interval": f"{self.interval:g} {self.interval_unit}",
            **({} if measured else {"status": "no growth measured yet: a job's growth rate is"
                                              " known after its first interval"}),
            "growth": measured,
            "slow_growing": sorted(n for n, g in self.growth.items() if g is not None and g < self.alpha),
            "migrations": len(self.migrations),
            "held": sorted(self._held),
            "relieved_speedup_mean": float(np.mean(speedups)) if speedups else None,
            "migrant_speed_kept_mean": float(np.mean(own)) if own else None,
            "recent_migrations": self.migrations[-20:],
        }


class _Sized:
    """A job view with another worker count (for planning a held job's return)."""

    def __init__(self, job: JobStatus, workers: int) -> None:
        self._job = job
        self.num_workers = workers
        self.num_ps = job.spec.num_ps

    def __getattr__(self, name: str) -> Any:
        return getattr(self._job, name)


__all__ = ["SpeConPolicy", "relative_growth", "total"]
