"""The Controller: the only place where a policy and a backend meet.

Each scheduling round it observes the backend, asks the active policy for actions,
applies them and records what happened and why. Rounds fall on a grid of the policy's
`round_interval`; a round with nothing new to decide (no arrival, completion, fault or
policy wake-up since the last) is skipped, which is what makes long traces fast.
Switching the policy swaps one object between rounds; no job is touched by the switch.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple, Sequence, overload

from .backend import Backend, Outcome
from .errors import ConfigError
from .model import Action, ClusterState, JobState, Reject, Suspend, Wait
from .policies.base import Policy

_ASK = object()  # `_round_time`: ask the backend for its next decision time


class Decision(NamedTuple):  # a tuple: long traces record millions, cheap to build
    time: float
    policy: str
    action: str  # Place, Scale, Migrate, Suspend, Admit, Reject, Wait
    job: str
    reason: str
    applied: bool
    detail: str = ""


class DecisionLog(Sequence[Decision]):
    """The decisions of a run, read as `Decision`s, kept as plain tuples. A tuple of strings,
    floats and bools leaves the cyclic collector's care at its first pass; a `Decision` (a
    tuple subclass) never does, and the 207 k of a Philly replay were scanned by every full
    collection (~0.4 s of its CPU, docs/sim-performance.md). A list of `Decision`s compares
    equal to the log holding the same rows."""

    __slots__ = ("_rows",)

    def __init__(self, decisions: Iterable[Sequence] = ()) -> None:
        self._rows: list[tuple] = [tuple(d) for d in decisions]

    def append(self, decision: Sequence) -> None:
        self._rows.append(tuple(decision))

    def record(self, *fields) -> None:
        """Append a decision given as its fields (time, policy, action, job, reason, applied,
        detail), without making the `Decision`."""
        self._rows.append(fields)

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, i: int) -> Decision: ...
    @overload
    def __getitem__(self, i: slice) -> list[Decision]: ...
    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(map(Decision._make, self._rows[i]))
        return Decision._make(self._rows[i])

    def __delitem__(self, i: int | slice) -> None:
        del self._rows[i]

    def __iter__(self) -> Iterator[Decision]:
        return map(Decision._make, self._rows)

    def __reversed__(self) -> Iterator[Decision]:
        return map(Decision._make, reversed(self._rows))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DecisionLog):
            return self._rows == other._rows
        if isinstance(other, list):
            return self._rows == other  # a Decision equals the tuple of its fields
        return NotImplemented

    __hash__ = None  # mutable, as a list

    def __repr__(self) -> str:
        return f"DecisionLog({len(self._rows)} decisions)"

    def __getstate__(self) -> list[tuple]:
        return self._rows

    def __setstate__(self, rows: list[tuple]) -> None:
        self._rows = rows


@dataclass(frozen=True)
class Sample:
    """One timeline point, taken at each round."""

    time: float
    policy: str
    gpus_allocated: float
    gpus_total: float
    cpus_allocated: float
    cpus_total: float
    queued: int
    running: int
    completed: int
    deadline_hits: int
    deadline_misses: int
    gpus_fragmented: float = math.nan  # free GPUs the workload cannot use (metrics.FragmentationMeter)


@dataclass
class Recorder:
    """The run's history: decisions with reasons, a timeline, and policy switches."""

    decisions: DecisionLog = field(default_factory=DecisionLog)
    timeline: list[Sample] = field(default_factory=list)
    switches: list[tuple[float, str, str]] = field(default_factory=list)  # (time, from, to)
    record_waits: bool = True
    timeline_every: float = 0.0  # seconds between timeline samples (0: every round)
    fragmentation: Callable[[ClusterState], float] | None = None  # fragmented GPUs, per sample
    _completed: int = 0
    _hits: int = 0
    _misses: int = 0
    _last_sample: float = -math.inf

    def record_round(self, t: float, policy: str, outcomes: Sequence[Outcome]) -> None:
        record = self.decisions.record
        for o in outcomes:
            if isinstance(o.action, Wait) and not self.record_waits:
                continue
            record(t, policy, type(o.action).__name__, o.action.job, o.action.reason, o.applied,
                   o.detail)

    def sample_due(self, now: float) -> bool:
        return now - self._last_sample >= self.timeline_every

    def sample(self, state: ClusterState, policy: str, finished: Iterable) -> None:
        for job in finished:
            if job.state is JobState.COMPLETED:
                self._completed += 1
                if job.spec.deadline is not None:
                    if job.finish_time <= job.spec.deadline:
                        self._hits += 1
                    else:
                        self._misses += 1
            elif job.spec.deadline is not None:
                self._misses += 1
        if state.now - self._last_sample < self.timeline_every:
            return
        self._last_sample = state.now
        up = state.node_up
        if state.queue is not None:  # placed = active - waiting, no scan of the jobs
            queued = len(state.queue)
            running = len(state.jobs) - queued
        else:
            queued = sum(j.state in (JobState.PENDING, JobState.HOLDING) for j in state.jobs.values())
            running = sum(j.state.placed for j in state.jobs.values())
        self.timeline.append(Sample(
            state.now, policy, float(state.allocated[:, 2].sum()), float(state.capacity[up, 2].sum()),
            float(state.allocated[:, 0].sum()), float(state.capacity[up, 0].sum()),
            queued, running, self._completed, self._hits, self._misses,
            self.fragmentation(state) if self.fragmentation is not None else math.nan))

    def why(self, job: str) -> list[Decision]:
        return [d for d in self.decisions if d.job == job]


@dataclass
class RoundReport:
    time: float
    policy: str
    actions: int
    refused: int
    seconds: float
    waits: int = 0  # Wait actions and refused ones: rounds that change nothing


class Controller:
    def __init__(self, backend: Backend, policy: Policy, recorder: Recorder | None = None) -> None:
        self.backend = backend
        self.policy = policy
        self.recorder = recorder or Recorder()
        self._pending_switch: Policy | None = None
        self._taking_over = True  # the next round is the first of this engine's
        self._last_round: float | None = None
        self._finished_seen = 0
        self._idle_rounds = 0
        self.rounds = 0
        self.stalled: list[str] = []
        # False: a round happens as soon as an event is due, as on a live cluster, whose
        # backend wakes the controller at a decisive change (a replay of its snapshot says
        # so); True: at the engine's grid point after it
        self.events_wait_for_grid = getattr(backend, "events_wait_for_grid", True)

    # ---- live switching -----------------------------------------------------------------

    def switch(self, policy: Policy) -> None:
        """Use `policy` from the next round on. Jobs keep their placements and progress."""
        self._pending_switch = policy

    @property
    def pending_switch(self) -> Policy | None:
        """The engine asked for by `switch` that has not taken over yet."""
        return self._pending_switch

    def switch_now(self) -> None:
        """Let a pending switch take effect now rather than at the next round."""
        if self._pending_switch is not None:
            new = self._pending_switch
            self._pending_switch = None
            if new is not self.policy:
                self.recorder.switches.append((self.backend.now, self.policy.name, new.name))
                new.forget_cluster()
                self.policy = new
                self._force_round = True
                self._taking_over = True

    _force_round = True

    # ---- the loop -----------------------------------------------------------------------

    def next_round_time(self) -> float | None:
        """When the next round should happen, on the policy's grid; None if never."""
        return self._round_time(_ASK)

    def _round_time(self, decisive: float | None | object) -> float | None:
        """`next_round_time`; `decisive`, when given, is the backend's `next_decision_time()`
        just asked (the loop asks it anyway: not twice per quiet event)."""
        interval = self.policy.round_interval
        origin = self.policy.round_origin
        now = self.backend.now
        if self._last_round is None and origin is not None:  # the first round on the grid
            return origin + interval * max(1, math.ceil((now - origin) / interval - 1e-9))
        if self._last_round is None or self._force_round:
            return now
        # A backend may say which events can change a decision (a restart ending frees nothing).
        if not self._quiet_restarts():
            nxt = self.backend.next_event_time()
        elif decisive is _ASK:
            nxt = self.backend.next_decision_time()
        else:
            nxt = decisive
        # an event already played out by run(until=...) is owed a round; the earliest of
        # them and the other candidates, each kept unless a later one is smaller (as min does)
        owed = self._owed
        first = owed if nxt is None else nxt if owed is None else min(nxt, owed)
        earliest = first
        if self.policy.needs_every_round and self._last_state is not None and \
                self._last_state.any_active():
            # the next interval: no wakeup comes sooner than that (an engine with every round
            # gives one only for the stall check, `_plan_acts_later`)
            every = self._last_round + interval
            earliest = every if earliest is None else min(earliest, every)
        elif (wake := self.policy.next_wakeup(self._last_state)) is not None:
            earliest = wake if earliest is None else min(earliest, wake)
        if earliest is None:
            return None
        t = max(earliest, self._last_round + interval)
        # Rounds fall on the grid k * interval after the first round (or the policy's origin).
        base = self._last_round if origin is None else origin
        k = math.ceil((t - base) / interval - 1e-9)
        t = base + k * interval
        if first is not None and not self.events_wait_for_grid:
            t = min(t, max(first, now))
        return t

    @property
    def engine_has_scheduled(self) -> bool:
        """The engine in charge has run a round since it took over (a switch lands at once;
        the new engine decides, and its view fills in, at the next round)."""
        return not self._taking_over

    @property
    def last_state(self) -> ClusterState | None:
        """The cluster as the last round left it (None before the first)."""
        return self._last_state

    @property
    def last_round(self) -> float | None:
        """When the last round was (backend clock); None before the first."""
        return self._last_round

    def carry_on(self, last_round: float | None) -> None:
        """Go on with a run whose last round was at `last_round` under this engine (a fork
        of a live run, from a copy of its engine): the next round falls where the live one's
        would, not at once. None: start with a round, as a new run or a switch does."""
        if last_round is None:
            return
        self._last_round = last_round
        self._force_round = False
        state = self._last_state = self.backend.observe()
        # a job that arrived or ended since that round is owed one, as the live run owes it
        now = state.now
        if any(last_round < j.spec.arrival <= now for j in state.active) or any(
                j.finish_time is not None and last_round < j.finish_time <= now
                for j in self.backend.finished):
            self._owed = now

    _last_state: ClusterState | None = None
    _owed: float | None = None  # when a decisive event happened that no round has seen yet

    def _quiet_restarts(self) -> bool:
        return self.policy.quiet_restarts

    def _next_round_after_quiet_events(self, until: float | None = None) -> float | None:
        """The next round's time, first playing out events that need no decision (a restart
        ending) but may schedule ones that do (that job's completion)."""
        while True:
            if not self._quiet_restarts():
                return self.next_round_time()
            # decisive first: on a wall clock a later reading is never earlier, so not "quiet"
            decisive = self.backend.next_decision_time()
            t = self._round_time(decisive)
            ev = self.backend.next_event_time()
            quiet = ev is not None and (decisive is None or ev < decisive)
            if until is not None and quiet and ev > until:
                return t if t is not None else ev  # run() stops at `until`; not a stall
            if not quiet or (t is not None and ev >= t):
                return t
            self.backend.advance(ev)

    def step(self) -> RoundReport | None:
        """Run one scheduling round (advancing the clock to it). None when the run is over."""
        self.switch_now()
        if self.backend.done():
            return None
        t = self._next_round_after_quiet_events()
        if t is None:
            self.end_stall()
            return None
        self.backend.advance(t)
        return self.round()

    def round(self) -> RoundReport:
        """Observe, decide, apply, record, at the backend's current time."""
        self.switch_now()
        policy = self.policy  # the round is this engine's, even if a switch lands meanwhile
        t0 = time.perf_counter()
        state = self.backend.observe()
        # the round is at the time it observed: on a live backend deciding and applying take
        # time, and counting the next round from their end would slip the grid every round
        started = state.now
        outcomes = self._release_partial_gangs(policy, state) if self._taking_over else []
        self._taking_over = False
        if outcomes:
            state = self.backend.observe()
        actions: list[Action] = policy.schedule(state)
        if actions:
            outcomes += self.backend.apply(actions)
        now = self.backend.now
        self.recorder.record_round(now, policy.name, outcomes)
        if outcomes and self.recorder.sample_due(now):
            state = self.backend.observe()
        self.recorder.sample(state, policy.name, self._newly_finished())
        self._last_round = started
        self._last_state = state
        self._force_round = False
        self._owed = None
        self.rounds += 1
        refused = waits = 0  # waits: Wait actions and refused ones
        for o in outcomes:
            if not o.applied:
                refused += 1
                waits += 1
            elif isinstance(o.action, Wait):
                waits += 1
        return RoundReport(now, policy.name, len(outcomes), refused,
                           time.perf_counter() - t0, waits)

    def _release_partial_gangs(self, policy: Policy, state: ClusterState) -> list[Outcome]:
        """Release the jobs an engine taking over finds half-placed (HOLDING: left by
        kube-default, which binds task by task, or found so on a live cluster), unless it
        places that way itself. Such a job holds resources and cannot train, and an engine
        that starts a job's tasks together or not at all never completes it: after kube-default,
        optimus ran 20,000 rounds with 15 GPUs free and no job moving."""
        if policy.places_partial_gangs:
            return []
        holding = state.jobs_in(JobState.HOLDING)
        return self.backend.apply([
            Suspend(j.name, f"released a partial placement: {policy.name} starts a job's tasks"
                            " together or not at all") for j in holding]) if holding else []

    def _play_out_to(self, until: float) -> None:
        """Advance to `until`, before the next round. An event in between (a completion
        freeing GPUs) is then past, and the backend no longer reports it as next: remember
        that a round is owed for it, or a run moved in slices (the console's ticks) would skip
        that round and a job could wait beside free GPUs until some later event."""
        due = (self.backend.next_decision_time() if self._quiet_restarts()
               else self.backend.next_event_time())
        self.backend.advance(until)
        if due is not None and due <= until:
            self._owed = due if self._owed is None else min(self._owed, due)

    def _newly_finished(self) -> list:
        """Jobs that finished since the last call, read from the backend's log of them."""
        log = self.backend.finished
        new = log[self._finished_seen:]
        self._finished_seen = len(log)
        return new

    def run(self, until: float | None = None, progress: Callable[[float], None] | None = None,
            max_rounds: int | None = None, progress_every: int = 200) -> None:
        """Run rounds until every job is done (or `until`, or `max_rounds`); `progress(now)`
        every `progress_every` rounds and at the end."""
        # (a notebook's run(until=NaN) ran the workload to its end; 'x' was a comparison's
        # TypeError after the first round; max_rounds=-1 ran on)
        if until is not None and (isinstance(until, bool) or not isinstance(until, numbers.Real)
                                  or math.isnan(until)):
            raise ConfigError(f"until: expected a time in seconds (or None: to the end),"
                              f" got {until!r}")
        if max_rounds is not None and (isinstance(max_rounds, bool) or not isinstance(
                max_rounds, numbers.Integral) or max_rounds < 1):
            raise ConfigError(f"max_rounds: expected a whole number >= 1, got {max_rounds!r}")
        n = 0
        while not self.backend.done():
            t = self._next_round_after_quiet_events(until)
            if t is None:
                self.end_stall()
                break
            if until is not None and t > until:
                self._play_out_to(until)
                break
            self.backend.advance(t)
            report = self.round()
            n += 1
            # A policy asking for rounds forever while nothing changes and nothing is due (an
            # engine that has every round says with `next_wakeup` when its own plan acts next).
            self._idle_rounds = 0 if report.actions > report.waits else self._idle_rounds + 1
            if self._idle_rounds >= 3 and self.backend.next_event_time() is None and \
                    not any(j.state.placed for j in self._last_state.active) and \
                    not self._plan_acts_later():
                self.end_stall()
                break
            if progress is not None and n % progress_every == 0:
                progress(self.backend.now)
            if max_rounds is not None and n >= max_rounds:
                break
        if progress is not None:
            progress(self.backend.now)

    def _plan_acts_later(self) -> bool:
        """Whether an engine that has every round plans to act later on its own (OASiS's
        schedules pause a job for some slots); for the others `next_wakeup` times the rounds."""
        if not self.policy.needs_every_round:
            return False
        wake = self.policy.next_wakeup(self._last_state)
        return wake is not None and wake > self.backend.now

    def end_stall(self) -> None:
        """Nothing will ever change again but jobs remain: the policy is stuck (e.g. a gang
        deadlock of pods holding resources). End those jobs with the reason, so none is lost."""
        state = self.backend.observe()
        stuck = list(state.active)
        if not stuck:
            return
        self.stalled = [j.name for j in stuck]
        reasons = [Reject(j.name, f"stalled: nothing can change; last reason: {j.reason}") for j in stuck]
        outcomes = self.backend.apply(reasons)
        self.recorder.record_round(self.backend.now, "controller", outcomes)
        self.recorder.sample(self.backend.observe(), "controller", self._newly_finished())
