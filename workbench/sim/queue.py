"""`WaitingQueue`: the simulator's waiting jobs in (arrival, name) order."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from operator import itemgetter

from ..model import JobStatus

_name = itemgetter(1)


class WaitingQueue:
    """Waiting jobs, oldest arrival first. A job that waits again (preempted, or its node
    failed) goes back to its place in O(log n) plus a memmove, not a re-sort of a queue that
    holds a thousand jobs on long traces. Iterating it is a live view, as a dict's is."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobStatus] = {}
        self._keys: list[tuple[float, str]] = []  # sorted (arrival, name)

    def add(self, job: JobStatus) -> None:
        if job.name in self._jobs:
            return
        key = (job.spec.arrival, job.name)
        if self._keys and key < self._keys[-1]:
            bisect.insort(self._keys, key)
        else:
            self._keys.append(key)  # the usual case: a new arrival
        self._jobs[job.name] = job

    def discard(self, name: str) -> None:
        job = self._jobs.pop(name, None)
        if job is not None:
            del self._keys[bisect.bisect_left(self._keys, (job.spec.arrival, name))]

    def __contains__(self, name: str) -> bool:
        return name in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[JobStatus]:
        return map(self._jobs.__getitem__, map(_name, self._keys))

    def __reversed__(self) -> Iterator[JobStatus]:
        return map(self._jobs.__getitem__, map(_name, reversed(self._keys)))
