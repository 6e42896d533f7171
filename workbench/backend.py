"""The contract every backend (simulator, Kubernetes) fulfils for the Controller and the UI.

`Backend` is everything a caller may use on any backend; `Forkable` is the capability only
the simulator has (copy the present and run it forward, say exactly which GPU each job
holds); `Snapshottable` the one both have (write the present down, `sim.snapshot`).
Callers test a capability with `isinstance(backend, Forkable)`, never `hasattr`.
`refusal` is the one rule book both backends consult before carrying out an action, so the
same action is refused for the same reason, in the same words, on either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from .model import (
    Action,
    Admit,
    ClusterState,
    JobSpec,
    JobState,
    JobStatus,
    Migrate,
    Place,
    Reject,
    Scale,
    Suspend,
    Wait,
    count_problem,
    total,
)


class Outcome(NamedTuple):  # a tuple: a long trace makes hundreds of thousands, cheap to build
    """What became of one action: carried out, or refused with the backend's reason."""

    action: Action
    applied: bool
    detail: str = ""


class Clock(Protocol):
    """A backend's clock as a console shows it."""

    origin: float  # where a console's hours count from, in backend seconds
    speed: float | None  # backend seconds per wall second; None: a virtual clock that jumps


@dataclass(frozen=True)
class VirtualClock:
    """The simulator's clock: hours count from the trace's start, time jumps between events."""

    origin: float = 0.0
    speed: float | None = None


class Backend(Protocol):
    """Owns the clock and the truth; never decides."""

    jobs: dict[str, JobStatus]  # every job that has arrived, finished ones included
    active: dict[str, JobStatus]  # arrived and not finished
    finished: list[JobStatus]  # in the order they completed or were rejected
    clock: Clock

    @property
    def now(self) -> float: ...

    def submit(self, spec: JobSpec) -> None: ...

    def observe(self) -> ClusterState: ...

    def apply(self, actions: Sequence[Action]) -> list[Outcome]: ...

    def advance(self, until: float) -> None:
        """Move the clock to `until` (the simulator jumps; Kubernetes waits)."""

    def next_event_time(self) -> float | None:
        """When something will next change by itself (arrival, completion, fault); None if never."""

    def next_decision_time(self) -> float | None:
        """Like `next_event_time`, leaving out events that free nothing (a restart ending)."""

    def done(self) -> bool:
        """True when every submitted job has completed or been rejected and none are to come."""

    def pending_arrivals(self) -> int:
        """Jobs submitted that have not arrived yet."""

    def interrupt(self) -> None:
        """Make a waiting `advance` return now (a scheduler thread shutting down)."""

    def close(self) -> None:
        """Let go of what the backend holds (watches, threads); the jobs are left as they are."""


@runtime_checkable
class Forkable(Protocol):
    """A backend whose present can be copied and run forward: the simulator."""

    usage: object  # GPU and CPU time allocated and available so far (sim.engine.Usage)

    def fork(self) -> Forkable: ...

    def gpu_holders(self) -> dict[str, list[tuple[int, int, float]]]:
        """Per job, the GPUs it holds as (node index, GPU index, amount)."""

    def next_arrival_time(self) -> float | None:
        """When the next job of the workload arrives; None when none is to come."""


@runtime_checkable
class Snapshottable(Protocol):
    """A backend whose present can be written down as a `sim.snapshot.Snapshot`: both. A
    what-if on a backend that cannot fork runs on a simulator restored from its snapshot."""

    def snapshot(self, engine: str = "") -> Any:
        """The present as a `Snapshot` (`engine`: the name of the engine scheduling)."""


_WAITING = (JobState.PENDING, JobState.HOLDING)  # (a global: Enum members read slowly in 3.11)


def refusal(job: JobStatus, action: Action, *, binding: bool = False) -> str | None:
    """Why a backend must refuse `action` on `job` whatever the free resources, or None.

    `binding`: the job's pods are still being bound for an earlier placement (Kubernetes).
    Whether the resources fit is each backend's own check, made after this one.
    """
    name, state = job.name, job.state
    if isinstance(action, Place):  # the most common first (the action classes are disjoint)
        if state not in _WAITING or binding:
            return f"{name}: already {state.value}"
        if action.partial:
            if job.num_workers + total(action.workers) > job.spec.initial_workers or \
                    job.num_ps + total(action.ps) > job.spec.num_ps:
                return f"{name}: more pods than the job has"
            return None
        if state is JobState.HOLDING:
            return f"{name}: holding a partial placement; use partial placement"
        return count_problem(job.spec, action.workers, action.ps)
    if isinstance(action, (Wait, Admit, Reject)):
        return None
    if isinstance(action, Suspend):
        return None if state.placed else f"{name}: not placed, nothing to suspend"
    if isinstance(action, (Scale, Migrate)):
        if not state.placed or state is JobState.HOLDING:
            return f"{name}: not running, cannot {type(action).__name__.lower()}"
        if (problem := count_problem(job.spec, action.workers, action.ps)) is not None:
            return problem
        if isinstance(action, Migrate) and \
                (total(action.workers), total(action.ps)) != (job.num_workers, job.num_ps):
            return f"{name}: a migration keeps the task counts; use Scale"
        return None
    return f"{name}: unknown action {type(action).__name__}"
