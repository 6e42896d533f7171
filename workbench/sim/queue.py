"""`WaitingQueue`: the simulator's waiting jobs in (arrival, name) order."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from itertools import islice
from operator import itemgetter

from ..model import JobStatus

_name = itemgetter(1)


class WaitingQueue:
    """Waiting jobs, oldest arrival first. A job that waits again (preempted, or its node
    failed) goes back to its place in O(log n) plus a memmove, not a re-sort of a queue that
    holds a thousand jobs on long traces. The head leaves in O(1): FIFO starts it, and a
    memmove of a queue of ten thousand jobs per start was visible. Iterating it is a live
    view, as a dict's is."""

    _COMPACT = 1024  # dropped head keys kept before they are deleted in one go

    def __init__(self) -> None:
        self._jobs: dict[str, JobStatus] = {}
        self._keys: list[tuple[float, str]] = []  # sorted (arrival, name), from `_head` on
        self._head = 0  # keys before it belong to jobs that left from the head

    def add(self, job: JobStatus) -> None:
        if job.name in self._jobs:
            return
        key = (job.spec.arrival, job.name)
        if len(self._keys) > self._head and key < self._keys[-1]:
            bisect.insort(self._keys, key, self._head)
        else:
            self._keys.append(key)  # the usual case: a new arrival
        self._jobs[job.name] = job

    def discard(self, name: str) -> None:
        job = self._jobs.pop(name, None)
        if job is None:
            return
        i = bisect.bisect_left(self._keys, (job.spec.arrival, name), self._head)
        if i > self._head:
            del self._keys[i]
            return
        self._head += 1  # the head left: step past it
        if self._head >= self._COMPACT and 2 * self._head >= len(self._keys):
            del self._keys[:self._head]
            self._head = 0

    def __contains__(self, name: str) -> bool:
        return name in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def __iter__(self) -> Iterator[JobStatus]:
        keys = iter(self._keys)
        keys.__setstate__(self._head)  # start at the head (islice would step over the rest)
        return map(self._jobs.__getitem__, map(_name, keys))

    def __reversed__(self) -> Iterator[JobStatus]:
        live = len(self._keys) - self._head
        return map(self._jobs.__getitem__, map(_name, islice(reversed(self._keys), live)))
