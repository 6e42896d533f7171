"""What a restart costs on this cluster, measured in the simulator's terms.

The simulator charges every new placement (a first start, a resume, a rescale) a
`restart_delay` of seconds without progress, and loses no progress when a job is stopped. On a
cluster a restart costs the time until the new pods run (delete, re-create, bind, start) plus
the work done since the last progress report, which the new pods do not resume from. A
snapshot's simulator predicts a live cluster only if it charges what restarts cost there.

`RestartMeter` measures it per restart: when a job is placed (or resized) at time `t0` with
progress `p0` (the backend's estimate of its true progress then: for a job that was stopped,
at the moment it was stopped), and the first report of its new pods that passes what was seen
before the restart shows progress `p` at time `t` at rate `r`, the simulator would have had it
at `p0 + r (t - t0 - d)`; so the equivalent delay is `d = (t - t0) - (p - p0) / r`. The median
of the last `keep` such delays is the cluster's restart delay.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..model import Action, JobState, JobStatus, Migrate, Place, Scale, Suspend

DEFAULT_RESTART_DELAY = 30.0  # the simulator's default (`SimBackend.restart_delay`)
MIN_MEASURED = 3  # restarts measured before the median replaces the configured delay


@dataclass
class _Mark:
    at: float  # when the new placement was asked for (backend clock)
    progress: float  # the job's estimated true progress to resume from
    seen: float  # its progress as the backend saw it then: a report passing it is the new pods'


def progress_now(job: JobStatus, seen: tuple[float, float] | None, now: float) -> float:
    """A running job's progress at `now`: its pods' last report (`seen`: the figure, and when
    it was first seen) carried forward at the job's throughput, from when it was seen or from
    when the job last started, whichever is later (a job resumed at its last report shows
    that figure until its new pods report: the time it was stopped is no progress)."""
    if job.state is not JobState.RUNNING or seen is None:
        return job.progress
    since = max(seen[1], job.last_start if job.last_start is not None else seen[1])
    return min(seen[0] + job.throughput * max(now - since, 0.0), job.spec.total_work)


class RestartMeter:
    """Measures restart delays from a backend's actions and the progress it then sees."""

    def __init__(self, keep: int = 25) -> None:
        self.delays: deque[float] = deque(maxlen=keep)
        self._marks: dict[str, _Mark] = {}
        self._stopped: dict[str, float] = {}  # job -> estimated progress when it was stopped

    def applied(self, action: Action, job: JobStatus | None, now: float, estimate: float) -> None:
        """Note an applied action of `job` (`estimate`: its true progress now, estimated)."""
        if job is None:
            return
        name = job.spec.name
        if isinstance(action, Suspend):
            self._marks.pop(name, None)
            self._stopped[name] = estimate
        elif isinstance(action, (Scale, Migrate)) or (isinstance(action, Place)
                                                       and not action.partial):
            resume = self._stopped.pop(name, estimate)
            self._marks[name] = _Mark(now, resume, job.progress)

    def observed(self, jobs: Mapping[str, JobStatus] | Iterable[JobStatus], now: float,
                 seen: Mapping[str, tuple[float, float]] | None = None) -> None:
        """Measure the marked jobs whose new pods have reported past the old progress, as of
        when that report came (`seen`, by job: (its figure, when it came); else `now`): a
        report read a round after it came would count the wait as delay."""
        active = jobs if isinstance(jobs, Mapping) else {j.spec.name: j for j in jobs}
        for name, mark in list(self._marks.items()):
            job = active.get(name)
            if job is None or job.state.finished:
                del self._marks[name]
                self._stopped.pop(name, None)
                continue
            if job.state is not JobState.RUNNING or job.throughput <= 0 or \
                    job.progress <= mark.seen:
                continue
            del self._marks[name]
            at = seen[name][1] if seen is not None and name in seen else now
            delay = (at - mark.at) - (job.progress - mark.progress) / job.throughput
            self.delays.append(max(delay, 0.0))

    def delay(self, default: float) -> float:
        """The median measured delay, or `default` until `MIN_MEASURED` restarts are measured."""
        if len(self.delays) < MIN_MEASURED:
            return default
        return float(statistics.median(self.delays))
