"""`LiveJobStatus`: a simulated job whose progress accrues on the simulator's clock.

While a job trains, its progress, run time and attained service grow linearly between
events. Rather than bring every running job up to date each round (O(running) per round,
about 150 jobs x 55k rounds on the Philly trace), the values are stored as of the moment
the job last changed and computed when read.
"""

from __future__ import annotations

import copy

from ..model import JobState, JobStatus

# Field types a fork may share (nothing changes one in place); the rest are copied.
_SHARED = frozenset({float, int, str, bool, type(None), JobState})


class LiveJobStatus(JobStatus):
    """A `JobStatus` that reads `progress`, `executed_time` and `attained_service` at the
    clock's current time. The simulator calls `start_accruing` / `stop_accruing` when the job
    starts or stops training, and `catch_up` before it changes the job's rate."""

    def __init__(self, clock, **fields) -> None:
        self._clock = clock  # anything with `now` (the SimBackend)
        self._since: float | None = None  # when the stored values were true; None: not accruing
        self._progress = self._executed = self._service = 0.0
        super().__init__(**fields)

    @property
    def accruing(self) -> bool:
        """Whether the job trains now (its values grow with the clock)."""
        return self._since is not None

    def _elapsed(self) -> float:
        return self._clock.now - self._since

    @property
    def progress(self) -> float:
        if self._since is None:
            return self._progress
        return min(self._progress + self.throughput * self._elapsed(), self.spec.total_work)

    @progress.setter
    def progress(self, value: float) -> None:
        self.catch_up()
        self._progress = value

    @property
    def executed_time(self) -> float:
        if self._since is None:
            return self._executed
        return self._executed + self._elapsed()

    @executed_time.setter
    def executed_time(self, value: float) -> None:
        self.catch_up()
        self._executed = value

    @property
    def attained_service(self) -> float:
        if self._since is None:
            return self._service
        # A running job has exactly its target workers (checked by the invariant tests).
        return self._service + self._elapsed() * self.spec.worker_demand.gpu * self.target_workers

    @attained_service.setter
    def attained_service(self, value: float) -> None:
        self.catch_up()
        self._service = value

    def catch_up(self) -> None:
        """Store the values as of now (before the rate or the worker count changes)."""
        since = self._since
        if since is None:
            return
        now = self._clock.now
        if now > since:  # the same arithmetic as the properties, done once
            dt, spec = now - since, self.spec
            self._progress = min(self._progress + self.throughput * dt, spec.total_work)
            self._executed += dt
            self._service += dt * spec.worker_demand.gpu * self.target_workers
            self._since = now

    def in_fork(self, clock) -> LiveJobStatus:
        """This finished job in a fork on `clock`: the job itself when it no longer accrues
        (nothing of it changes again, and it reads no clock: a Philly fork shares ~50 k of
        them rather than copying each), else a shallow copy on `clock` sharing its history
        and placements."""
        if self._since is None:
            return self
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._clock = clock
        return twin

    def fork_copy(self, memo: dict[int, object]) -> LiveJobStatus:
        """This active job in a fork: what `copy.deepcopy(self, memo)` makes (its clock, spec
        and history as `memo` maps them), its placements copied flat. A deep copy walked each
        float and each placement entry: ~120 calls a job, 1,346 jobs at Philly mid-trace."""
        twin = object.__new__(type(self))
        memo[id(self)] = twin
        fields = twin.__dict__
        fields.update(self.__dict__)
        for name, value in fields.items():
            kind = type(value)
            if kind in _SHARED:
                continue
            done = memo.get(id(value))
            if done is not None:
                fields[name] = done
            elif kind is dict and all(type(c) is int for c in value.values()):  # a placement
                fields[name] = memo[id(value)] = dict(value)
            else:
                fields[name] = copy.deepcopy(value, memo)
        return twin

    def start_accruing(self) -> None:
        self.catch_up()
        self._since = self._clock.now

    def stop_accruing(self) -> None:
        self.catch_up()
        self._since = None
