"""QoS-oriented scheduling and autoscaling (Xing et al., IJCNN 2019): users give a deadline,
the engine picks the order and the size.

Each round every active job gets a forecast (`workbench.forecast`): the work it has left, its
rate at each size (the model's, scaled by what was measured for it) and the uncertainty.

- Scheduling (`scheduling=True`): jobs that can still meet their deadline go first, least
  slack first (slack = deadline - now - predicted run time). Best effort (run only on
  resources nobody with a reachable deadline needs, preempted with progress kept when such a
  job needs them): a job that cannot meet its deadline at any allowed size (`reject_late=True`
  rejects it instead), a job without a deadline, and a "heavy" job whose deadline is
  reachable only by holding more than `max_share` of the cluster's capacity over its deadline
  window (at least `share_window`): to maximise the number of deadlines met, one job that
  would crowd out many does not go first (Moore-Hodgson's rule in spirit). Off: arrival
  order, no preemption, no best-effort class (a gang FIFO with backfill).
- Autoscaling (`autoscaling=True`): a waiting job starts at its submitted size if that meets
  its deadline at the high end of the forecast's band, else at the fewest workers that do
  (`sizing="fewest"`: always the fewest, the paper's rule taken literally); if that size does
  not fit now, with fewer workers that still meet it; a running job predicted to miss it is
  scaled up to the fewest that would meet it; a running job ahead of its deadline is scaled
  down to the fewest that still meet it when another job needs the room (the reason says for
  whom). `use_idle=True` also gives idle resources to running jobs that gain at least
  `min_speedup` (they shrink back when needed); measured to cost more restarts than it wins,
  so off by default. Off: every job runs at its submitted size.
- No job is rescaled twice within `min_rescale_interval` (each rescale is a restart).

Every decision carries a reason with the numbers behind it. `engine_view()` returns each
job's forecast, class and planned size, and the recent scaling decisions, for the UI.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..forecast import Forecast, Forecaster, PendingForecast, workers_to_meet
from ..model import (
    Action,
    ClusterState,
    JobState,
    JobStatus,
    Place,
    Placement,
    Reject,
    Scale,
    Suspend,
    Wait,
)
from ..placement.ledger import Ledger, most_tasks
from .base import Policy, register
from .common import CheckedOnce, wait_reason

ON_TRACK, AT_RISK, LATE, NO_DEADLINE = "on-track", "at-risk", "late", "no-deadline"
HEAVY = "heavy"  # reachable deadline, but would hold more than `max_share` of the cluster
BEST_EFFORT = (LATE, NO_DEADLINE, HEAVY)


def hours(seconds: float) -> str:
    """A duration for a reason: '35 min', '2.1 h', '3.0 d'."""
    if not np.isfinite(seconds):
        return "∞" if seconds > 0 else "-∞"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 3600:
        return f"{sign}{s / 60:.0f} min"
    if s < 72 * 3600:
        return f"{sign}{s / 3600:.1f} h"
    return f"{sign}{s / 86400:.1f} d"


def units(job: JobStatus, workers: int) -> str:
    """What `workers` workers of this job hold, in its scarcest unit: '4 GPUs', '16 CPUs'."""
    d = job.spec.worker_demand
    if d.gpu > 0:
        n = d.gpu * workers
        return f"{n:g} GPU{'s' if n != 1 else ''}"
    n = d.cpu * workers
    return f"{n:g} CPU{'s' if n != 1 else ''}"


@dataclass
class Plan:
    """What the engine makes of one job this round."""

    job: JobStatus
    forecast: Forecast | PendingForecast  # (its remaining, rel_error and rate_scale are read)
    rates: np.ndarray  # expected iterations/s at 0..max workers
    cls: str
    size: int | None  # workers it should run with (None: no size meets the deadline)
    slack: float  # deadline - now - predicted run time at `size` (inf without a deadline)
    safe_size: int | None  # fewest workers meeting the deadline at the band's high end
    safe_slack: float = float("inf")  # slack at `size` at the band's high end
    time_left: float = float("inf")  # seconds to the deadline (less a pending restart)
    margin: float = 1.0  # run-time factor at the band's high end
    restart_delay: float = 30.0

    def run_time(self, workers: int) -> float:
        r = self.rates[workers] if workers < len(self.rates) else 0.0
        return self.forecast.remaining / r if r > 0 else float("inf")

    def meets(self, workers: int, safe: bool = True) -> bool:
        """Predicted to meet the deadline at this size (at the band's high end if `safe`)."""
        pay = 0.0 if workers == self.job.num_workers and self.job.state.placed else \
            self.restart_delay
        return self.run_time(workers) * (self.margin if safe else 1.0) + pay <= self.time_left


@register("qos")
class QosPolicy(Policy):
    """QoS (deadline) scheduling and autoscaling, IJCNN 2019; each part can be switched off."""

    # Slack shrinks with time alone, but only crossings matter: `next_wakeup` asks for a round
    # when a waiting job's slack (or its slack at the band's high end) reaches zero, when a
    # job held back by `min_rescale_interval` may be rescaled, and at least every `max_quiet`.
    needs_every_round = False

    def __init__(self, scheduling: bool = True, autoscaling: bool = True, perf=None,
                 round_interval: float = 60.0, confidence: float = 0.9,
                 restart_delay: float = 30.0, min_rescale_interval: float = 300.0,
                 reject_late: bool = False, history: int = 200,
                 max_quiet: float = 1800.0, use_idle: bool = False,
                 min_speedup: float = 0.15, sizing: str = "elastic",
                 max_share: float | None = 0.5, share_window: float = 6 * 3600.0) -> None:
        if sizing not in ("elastic", "fewest"):
            raise ValueError(f"qos: sizing must be 'elastic' or 'fewest', got {sizing!r}")
        self.sizing = sizing
        self.max_share = max_share
        self.share_window = share_window
        self.scheduling = bool(scheduling)
        self.autoscaling = bool(autoscaling)
        self.round_interval = round_interval
        self.forecaster = Forecaster(perf, restart_delay=restart_delay, confidence=confidence)
        self.restart_delay = restart_delay
        self.min_rescale_interval = min_rescale_interval
        self.reject_late = reject_late
        self.max_quiet = max_quiet
        self.use_idle = use_idle
        self.min_speedup = min_speedup
        self._events: deque[dict[str, Any]] = deque(maxlen=history)
        self._view_args: tuple[float, dict[str, Plan]] = (0.0, {})
        self._max_cache: dict[tuple, int] = {}
        # a waiting job checked once per cluster shape; at its submitted size without autoscaling
        self._reject_impossible = CheckedOnce(rigid=not autoscaling)
        self._up_seen: tuple | None = None  # (node_up as bytes, its count of nodes up)

    def reset(self) -> None:
        self._events.clear()
        self._view_args = (0.0, {})

    def __getstate__(self) -> dict:
        # a copy runs on another backend's jobs: what was kept per job is remade as asked
        return {**self.__dict__, "_reject_impossible": CheckedOnce(self._reject_impossible.rigid)}

    def next_wakeup(self, state: ClusterState | None) -> float | None:
        now, plans = self._view_args
        if state is None or not state.active:
            return None
        if not self._acted and not any(j.state.placed for j in state.active):
            return None  # nothing runs and nothing was decided: let the controller see a stall
        times = [now + self.max_quiet]
        for p in plans.values():
            job = p.job
            if job.state.finished:
                continue
            if not job.state.placed:
                for s in (p.slack, p.safe_slack):
                    if 0 < s < float("inf"):
                        times.append(now + s)
            elif self.autoscaling and job.last_start is not None and (
                    p.cls == AT_RISK or (p.safe_size or job.num_workers) < job.num_workers):
                ready = job.last_start + self.min_rescale_interval
                if ready > now:
                    times.append(ready)
        return min(times)

    # ---- planning -----------------------------------------------------------------------

    def _plan(self, state: ClusterState, job: JobStatus, f: Forecast | PendingForecast) -> Plan:
        spec = job.spec
        # Sizes beyond what the whole cluster holds are never planned.
        table = self.forecaster.last_tables.get(job.name)  # this round's (`outlook`)
        if table is None:
            table = self.forecaster.rate_table(state, spec)
        top = self._cluster_max(state, spec) + 1
        # x · 1.0 is x: a job never measured reads the (read-only) table itself
        rates = table[:top] if f.rate_scale == 1.0 else (table * f.rate_scale)[:top]
        running = job.state in (JobState.RUNNING, JobState.RESTARTING)
        current = job.num_workers if running else None
        submitted = current if current is not None else spec.initial_workers
        if spec.deadline is None:
            plan = Plan(job, f, rates, NO_DEADLINE, submitted, float("inf"), None)
            return plan
        time_left = spec.deadline - state.now
        if job.state is JobState.RESTARTING:
            time_left -= self.restart_delay  # conservative: the restart may just have begun
        z = self.forecaster.z
        if self.autoscaling:
            safe = workers_to_meet(job, rates, f.remaining, time_left, f.rel_error, z,
                                   self.restart_delay, current)
            median = safe if safe is not None else workers_to_meet(
                job, rates, f.remaining, time_left, 0.0, 0.0, self.restart_delay, current)
        else:
            pay = 0.0 if current is not None else self.restart_delay
            r = rates[submitted] if submitted < len(rates) else 0.0
            t = f.remaining / r if r > 0 else float("inf")
            safe = submitted if t * (1 + z * f.rel_error) + pay <= time_left else None
            median = submitted if t + pay <= time_left else None
        size = safe if safe is not None else median
        if size is None:
            return Plan(job, f, rates, LATE, None, -float("inf"), None, -float("inf"),
                        time_left, 1 + z * f.rel_error, self.restart_delay)
        if self.autoscaling and self.sizing == "elastic" and current is None:
            size = max(size, min(submitted, len(rates) - 1))  # the user's size unless short
        pay = 0.0 if size == current else self.restart_delay
        slack = time_left - pay - f.remaining / max(rates[size], 1e-12)
        safe_slack = time_left - pay - f.remaining * (1 + z * f.rel_error) / max(rates[size], 1e-12)
        cls = ON_TRACK if safe is not None else AT_RISK
        if current is not None and cls == ON_TRACK and safe is not None and safe > current:
            cls = AT_RISK  # on track only after a scale-up
        if self.scheduling and self.max_share is not None and time_left > 0:
            share = size * (f.remaining / max(rates[size], 1e-12)) / (
                max(self._cluster_max(state, spec), 1) * max(time_left, self.share_window))
            if share > self.max_share:
                cls = HEAVY
        return Plan(job, f, rates, cls, size, slack, safe, safe_slack, time_left,
                    1 + z * f.rel_error, self.restart_delay)

    # ---- the round ----------------------------------------------------------------------

    def schedule(self, state: ClusterState) -> list[Action]:
        """Plan every job; release partial placements; serve the requests most urgent first
        (scale-ups of running jobs, starts of waiting ones, making room where needed); give
        idle resources away if `use_idle`; start best-effort jobs last."""
        self._now = state.now
        if self._reject_impossible.rigid == self.autoscaling:  # without autoscaling, as submitted
            self._reject_impossible = CheckedOnce(rigid=not self.autoscaling)
        actions, jobs = self._reject_impossible(state, list(state.active))
        if not jobs:
            self._view_args = (state.now, {})
            return actions
        # each job's work left, rate error and measured/model ratio: all a plan needs; the rest
        # of its forecast (the queue walk, the band) is made only if the view asks for it
        fc = self.forecaster.outlook(state, jobs=jobs).pending()
        plans = {j.name: self._plan(state, j, fc[j.name]) for j in jobs}
        ledger = Ledger(state)
        changed: set[str] = set()  # jobs given an action this round
        waiting = [p for p in plans.values() if not p.job.state.placed]
        running = [p for p in plans.values()
                   if p.job.state in (JobState.RUNNING, JobState.RESTARTING)]
        requests, best_effort = self._requests(waiting, running, state.now, actions)
        pos = self._serve(state, ledger, requests, plans, changed, actions)
        if self.autoscaling and self.use_idle:
            actions += self._speed_up(state, ledger, running, changed)
        self._start_best_effort(ledger, best_effort, pos, actions)
        self._view_args = (state.now, plans)
        self._acted = any(not isinstance(a, Wait) for a in actions)
        return actions

    def _requests(self, waiting: list[Plan], running: list[Plan], now: float,
                  actions: list[Action]) -> tuple[list[tuple[Plan, int]], list[Plan]]:
        """Requests (plan, size), most urgent first: running jobs that need a scale-up, and
        waiting jobs; and the best-effort jobs apart. Rejections go to `actions`."""
        requests: list[tuple[Plan, int]] = []
        if self.autoscaling:
            for p in running:
                if (p.size is not None and p.size > p.job.num_workers and p.cls == AT_RISK
                        and self._may_rescale(p.job, now)
                        and p.rates[p.size] > p.rates[p.job.num_workers] * 1.02):
                    requests.append((p, p.size))
        best_effort: list[Plan] = []
        for p in waiting:
            cap = len(p.rates) - 1
            if not self.autoscaling and p.job.spec.initial_workers > cap:
                # the whole cluster holds it (else rejected above): some nodes are down
                text = (f"waiting: needs {units(p.job, p.job.spec.initial_workers)} at its"
                        f" submitted size, the nodes up hold {units(p.job, cap)}; waits for"
                        " nodes to recover")
                if p.job.reason != text:
                    actions.append(Wait(p.job.name, text))
                continue
            if self.scheduling and p.cls in BEST_EFFORT:
                if p.cls == LATE and self.reject_late and p.job.state is JobState.PENDING:
                    actions.append(Reject(p.job.name, self._late_text(p, "rejected")))
                else:
                    best_effort.append(p)
            else:
                requests.append((p, p.size or min(p.job.spec.initial_workers, cap)))
        if self.scheduling:
            requests.sort(key=lambda r: (r[0].slack, r[0].job.spec.arrival, r[0].job.name))
        else:
            requests.sort(key=lambda r: (r[0].job.spec.arrival, r[0].job.name))
        return requests, best_effort

    def _serve(self, state: ClusterState, ledger: Ledger, requests: list[tuple[Plan, int]],
               plans: dict[str, Plan], changed: set[str], actions: list[Action]) -> int:
        """Grow or start each request in turn, making room where its deadline needs it.
        Returns how many jobs were left waiting (their queue positions)."""
        pos = 0
        for p, size in requests:
            job = p.job
            if job.state.placed:
                actions += self._grow(state, ledger, p, size, plans, changed)
                continue
            size, placement = self._fit_start(ledger, p, size)
            freeing: list[Action] = []
            if placement is None:
                freeing, placement = self._make_room(state, ledger, p, size, plans, changed)
            if placement is None:
                w = wait_reason(ledger, job, size, pos, self._wait_note(p, size))
                pos += 1
                if w:
                    actions.append(w)
                continue
            actions += freeing
            workers, ps = placement
            ledger.take(workers, job.spec.worker_demand)
            ledger.take(ps, job.spec.ps_demand)
            actions.append(Place(job.name, self._start_text(p, size), workers, ps))
            changed.add(job.name)
        return pos

    def _fit_start(self, ledger: Ledger, p: Plan, size: int
                   ) -> tuple[int, tuple[Placement, Placement] | None]:
        """A waiting job's gang at `size` if it fits now; else (autoscaling) with fewer workers
        that still meet the deadline. Returns the size to start (or make room for) and the
        placement, None if nothing fits."""
        placement = ledger.place_gang(p.job, size)
        if placement is None and self.autoscaling and p.cls != LATE:
            # Start now with fewer workers if that still meets the deadline.
            least = p.safe_size or p.size or size
            for w in range(size - 1, least - 1, -1):
                if p.meets(w, safe=p.safe_size is not None):
                    placement = ledger.place_gang(p.job, w)
                    if placement is not None:
                        size = w
                        break
            if placement is None and least < size:
                size = least  # make room for the fewest that meet it
        return size, placement

    def _start_best_effort(self, ledger: Ledger, best_effort: list[Plan], pos: int,
                           actions: list[Action]) -> None:
        """Best effort last, in arrival order: jobs whose deadline is out of reach (or that
        have none) run on what is left."""
        best_effort.sort(key=lambda p: (p.job.spec.arrival, p.job.name))
        for p in best_effort:
            job = p.job
            size = self._best_effort_size(p)
            placement = ledger.place_gang(job, size)
            if placement is None:
                why = (self._late_text(p, "waiting") if p.cls == LATE else
                       self._heavy_text(p, size, "waiting") if p.cls == HEAVY else None)
                if why is None:
                    w = wait_reason(ledger, job, size, pos, "best effort: no deadline")
                    pos += 1
                    if w:
                        actions.append(w)
                elif why != job.reason:
                    actions.append(Wait(job.name, why))
                continue
            workers, ps = placement
            ledger.take(workers, job.spec.worker_demand)
            ledger.take(ps, job.spec.ps_demand)
            text = (self._late_text(p, "started") if p.cls == LATE else
                    self._heavy_text(p, size, "started") if p.cls == HEAVY else
                    f"started with {size} workers: no deadline, best effort on idle resources")
            actions.append(Place(job.name, text, workers, ps))

    # ---- growing, shrinking, preempting ---------------------------------------------------

    def _may_rescale(self, job: JobStatus, now: float) -> bool:
        return job.state is JobState.RUNNING and (
            job.last_start is None or now - job.last_start >= self.min_rescale_interval)

    def _grow(self, state, ledger: Ledger, p: Plan, size: int, plans, changed) -> list[Action]:
        job = p.job
        ledger.give_back(job.workers, job.spec.worker_demand)
        ledger.give_back(job.ps, job.spec.ps_demand)
        placement = ledger.place_gang(job, size, job.num_ps)
        freeing: list[Action] = []
        if placement is None:
            ledger.take(job.workers, job.spec.worker_demand)
            ledger.take(job.ps, job.spec.ps_demand)
            freeing, _ = self._make_room(state, ledger, p, size - job.num_workers, plans, changed,
                                         probe=False)
            if not freeing:
                return []
            ledger.give_back(job.workers, job.spec.worker_demand)
            ledger.give_back(job.ps, job.spec.ps_demand)
            placement = ledger.place_gang(job, size, job.num_ps)
            if placement is None:  # freed enough in total but not together: keep it as it is
                ledger.take(job.workers, job.spec.worker_demand)
                ledger.take(job.ps, job.spec.ps_demand)
                return freeing
        workers, ps = placement
        ledger.take(workers, job.spec.worker_demand)
        ledger.take(ps, job.spec.ps_demand)
        cur = job.num_workers
        t_now, t_new = p.run_time(cur), p.run_time(size)
        dl = job.spec.deadline - state.now
        text = (f"scaled {cur}→{size} workers: predicted to miss its deadline by"
                f" {hours(t_now - dl)} at {cur}; {size} finish in {hours(t_new)}"
                f" with {hours(p.slack)} to spare")
        self._note(state.now, job.name, cur, size, text)
        changed.add(job.name)
        return freeing + [Scale(job.name, text, workers, ps)]

    def _speed_up(self, state, ledger: Ledger, running: list[Plan], changed) -> list[Action]:
        """Give idle resources to running jobs where they gain most, so they finish (and free
        them) sooner; they shrink back to their safe size when someone needs the room."""
        acts: list[Action] = []
        now = state.now
        cands = []
        for p in running:
            job = p.job
            cur = job.num_workers
            if (job.name in changed or not self._may_rescale(job, now) or cur >= job.spec.max_workers
                    or p.run_time(cur) < 20 * self.restart_delay):
                continue
            sizes = np.arange(cur + 1, min(job.spec.max_workers, len(p.rates) - 1) + 1)
            if not len(sizes):
                continue
            gain = (p.rates[sizes] - p.rates[cur]) / max(p.rates[cur], 1e-12)
            per_worker = gain / (sizes - cur)
            k = int(np.argmax(per_worker))
            if gain[k] >= self.min_speedup:
                cands.append((-per_worker[k], job.spec.arrival, job.name, p, int(sizes[k])))
        cands.sort(key=lambda c: c[:3])
        for _, _, _, p, size in cands:
            job = p.job
            if ledger.total_fit(job.spec.worker_demand) < size - job.num_workers:
                continue
            ledger.give_back(job.workers, job.spec.worker_demand)
            ledger.give_back(job.ps, job.spec.ps_demand)
            placement = ledger.place_gang(job, size, job.num_ps)
            if placement is None:
                ledger.take(job.workers, job.spec.worker_demand)
                ledger.take(job.ps, job.spec.ps_demand)
                continue
            workers, ps = placement
            ledger.take(workers, job.spec.worker_demand)
            ledger.take(ps, job.spec.ps_demand)
            cur = job.num_workers
            sooner = p.run_time(cur) - p.run_time(size)
            text = (f"scaled {cur}→{size} workers: {units(job, size - cur)} idle; finishes"
                    f" {hours(sooner)} sooner and frees them earlier (shrinks back when needed)")
            self._note(now, job.name, cur, size, text)
            changed.add(job.name)
            acts.append(Scale(job.name, text, workers, ps))
        return acts

    def _make_room(self, state, ledger: Ledger, p: Plan, size: int, plans, changed,
                   probe: bool = True):
        """Free resources for `p` by shrinking jobs that are ahead (autoscaling) and then by
        preempting best-effort jobs (scheduling). Returns (actions, placement or None); the
        ledger keeps the freed resources only if it worked."""
        job = p.job
        undo: list[tuple[Placement, Any]] = []
        acts: list[Action] = []
        need_text = units(job, size)

        def fits():
            if probe:
                return ledger.place_gang(job, size)
            d = job.spec.worker_demand
            return True if ledger.total_fit(d) >= size else None

        placement = None
        if self.autoscaling and p.cls != LATE:
            donors = [q for q in plans.values()
                      if q.job.name not in changed and q.job.name != job.name
                      and q.cls in (ON_TRACK, NO_DEADLINE) and q.safe_size is not None
                      and q.safe_size < q.job.num_workers and self._may_rescale(q.job, state.now)]
            donors.sort(key=lambda q: -q.slack)
            for q in donors:
                new_w, removed = _shrink(q.job.workers, q.job.num_workers - q.safe_size)
                ledger.give_back(removed, q.job.spec.worker_demand)
                undo.append((removed, q.job.spec.worker_demand))
                cur = q.job.num_workers
                ahead = q.slack
                text = (f"scaled {cur}→{q.safe_size} workers: ahead of deadline by {hours(ahead)},"
                        f" frees {units(q.job, cur - q.safe_size)} for {job.name}")
                acts.append((q, Scale(q.job.name, text, new_w, dict(q.job.ps))))
                placement = fits()
                if placement is not None:
                    break
        if placement is None and self.scheduling and p.cls != LATE:
            victims = [q for q in plans.values()
                       if q.job.name not in changed and q.job.name != job.name
                       and q.job.state in (JobState.RUNNING, JobState.RESTARTING)
                       and q.cls in BEST_EFFORT]
            victims.sort(key=lambda q: (BEST_EFFORT.index(q.cls), -q.job.spec.arrival))
            for q in victims:
                ledger.give_back(q.job.workers, q.job.spec.worker_demand)
                ledger.give_back(q.job.ps, q.job.spec.ps_demand)
                undo.append((q.job.workers, q.job.spec.worker_demand))
                undo.append((q.job.ps, q.job.spec.ps_demand))
                why = {LATE: "its deadline is out of reach", NO_DEADLINE: "it has no deadline",
                       HEAVY: "it holds a large share of the cluster (best effort)"}[q.cls]
                acts.append((q, Suspend(q.job.name, f"preempted (progress kept): {why};"
                                        f" {job.name} needs {need_text} to meet its deadline")))
                placement = fits()
                if placement is not None:
                    break
        if placement is None:
            for removed, demand in undo:
                ledger.take(removed, demand)
            return [], None
        for q, action in acts:
            changed.add(q.job.name)
            if isinstance(action, Scale):
                self._note(state.now, q.job.name, q.job.num_workers, q.safe_size, action.reason)
        return [a for _, a in acts], (placement if probe else None)

    # ---- reasons and the view -------------------------------------------------------------

    def _start_text(self, p: Plan, size: int) -> str:
        job = p.job
        if p.cls == NO_DEADLINE:
            return f"started with {size} workers: no deadline, in arrival order"
        if not self.autoscaling or size == job.spec.initial_workers:
            how = "its submitted size"
        elif size == p.safe_size:
            how = "the fewest predicted to meet its deadline"
        elif size < job.spec.initial_workers:
            how = f"fewer than its {job.spec.initial_workers}: what is free, still meets it"
        else:
            how = f"more than its {job.spec.initial_workers}: needed to meet it"
        order = "least slack first" if self.scheduling else "arrival order"
        risk = "" if p.cls == ON_TRACK else "; at risk: meets it only at the median forecast"
        return (f"started with {size} workers ({how}; {order}): predicted run"
                f" {hours(p.run_time(size))}, deadline in {hours(job.spec.deadline - self._now)},"
                f" slack {hours(p.slack)}{risk}")

    def _wait_note(self, p: Plan, size: int) -> str:
        if p.cls == NO_DEADLINE:
            return "no deadline"
        if p.cls == LATE:
            return "deadline out of reach at any size"
        return f"slack {hours(p.slack)} at {size} workers"

    def _late_text(self, p: Plan, verb: str) -> str:
        spec = p.job.spec
        sizes = p.rates[spec.min_workers:spec.max_workers + 1]  # none while nodes are down
        best = (int(np.argmax(sizes)) if len(sizes) else 0) + spec.min_workers \
            if self.autoscaling else (p.job.num_workers or spec.initial_workers)
        tail = {"rejected": "", "waiting": "; runs when resources are idle",
                "started": "; best effort on idle resources"}[verb]
        return (f"{verb}: deadline out of reach: needs {hours(p.run_time(best))} at"
                f" {'best' if self.autoscaling else 'its size'} ({best} workers),"
                f" {hours(max(spec.deadline - self._now, 0.0))} left{tail}")

    _now = 0.0
    _acted = True
    max_share: float | None = 0.5

    def _best_effort_size(self, p: Plan) -> int:
        """Workers for a best-effort start: its submitted size (within the cluster), or for a
        heavy job the size that would still meet its deadline."""
        if p.cls == HEAVY and p.size is not None:
            return p.size
        initial = p.job.spec.initial_workers
        return min(initial, len(p.rates) - 1) if self.autoscaling else initial

    def _heavy_text(self, p: Plan, size: int, verb: str) -> str:
        job = p.job
        tail = ("; runs on idle resources, preemptible" if verb == "started" else
                "; jobs that need less of the cluster go first")
        return (f"{verb} as best effort: would hold {units(job, size)} for"
                f" {hours(p.run_time(size))}, more than {self.max_share:.0%} of the cluster"
                f" until its deadline in {hours(job.spec.deadline - self._now)}{tail}")

    def _cluster_max(self, state: ClusterState, spec) -> int:
        """Most workers of this job the whole (empty) cluster holds."""
        d = spec.worker_demand
        up, seen = self._up_seen, state.node_up.tobytes()
        if up is None or up[0] != seen:  # nodes up, counted once per change
            up = self._up_seen = (seen, int(state.node_up.sum()))
        key = (state.capacity.shape, d.cpu, d.mem, d.gpu, up[1])
        hit = self._max_cache.get(key)
        if hit is None:
            cap = state.capacity[state.node_up]
            # with no node up, sizes are not bounded by the nodes (10^6, as for no demand)
            hit = int(min(most_tasks(cap, d.as_array()), 10**6)) if len(cap) else 10**6
            self._max_cache[key] = hit
        return max(hit, 0)

    def _note(self, now: float, job: str, old: int, new: int, reason: str) -> None:
        self._events.append({"time": now, "job": job, "from": old, "to": new, "reason": reason})

    def _make_view(self, now: float, plans: dict[str, Plan]) -> dict[str, Any]:
        jobs = {}
        counts: dict[str, int] = {}
        for name, p in plans.items():
            d = p.forecast.as_dict()
            d.update({"class": p.cls, "planned_workers": p.size, "workers_now": p.job.num_workers,
                      "slack_at_plan": p.slack})
            jobs[name] = d
            counts[p.cls] = counts.get(p.cls, 0) + 1
        return {"engine": self.name, "time": now,
                "options": {"scheduling": self.scheduling, "autoscaling": self.autoscaling},
                "classes": counts, "jobs": jobs, "scaling": list(self._events)}

    def engine_view(self) -> dict[str, Any]:
        """Per job: forecast (finish, band, P(meet deadline), min workers), class (on-track,
        at-risk, late, heavy, no-deadline), planned and current workers; recent scalings."""
        return self._make_view(*self._view_args)


def _shrink(workers: Placement, drop: int) -> tuple[Placement, Placement]:
    """Remove `drop` workers, from the nodes holding the fewest of them first (keeps the job
    packed). Returns (new placement, removed part)."""
    new = dict(workers)
    removed: Placement = {}
    for node in sorted(new, key=lambda n: (new[n], n)):
        if drop <= 0:
            break
        k = min(new[node], drop)
        new[node] -= k
        removed[node] = k
        drop -= k
    return {n: c for n, c in new.items() if c}, removed
