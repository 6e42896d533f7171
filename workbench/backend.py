"""The contract every backend (simulator, Kubernetes) fulfils for the Controller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from .model import Action, ClusterState, JobSpec


@dataclass(frozen=True)
class Outcome:
    """What became of one action: carried out, or refused with the backend's reason."""

    action: Action
    applied: bool
    detail: str = ""


class Backend(Protocol):
    """Owns the clock and the truth; never decides."""

    @property
    def now(self) -> float: ...

    def submit(self, spec: JobSpec) -> None: ...

    def observe(self) -> ClusterState: ...

    def apply(self, actions: Sequence[Action]) -> list[Outcome]: ...

    def advance(self, until: float) -> None:
        """Move the clock to `until` (the simulator jumps; Kubernetes waits)."""

    def next_event_time(self) -> float | None:
        """When something will next change by itself (arrival, completion, fault); None if never."""

    def done(self) -> bool:
        """True when every submitted job has completed or been rejected and none are to come."""
