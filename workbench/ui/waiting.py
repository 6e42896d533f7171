"""Why a job is where it is, computed now: the job detail's answer to "why is this job
waiting?".

A job's `reason` is the engine's word from the last round that spoke about it, and engines
only speak when their word changes: after jobs finish it can say "higher priority jobs need
the GPUs" while the GPUs it needs are free. `why_now` looks at the cluster as it is: what the
job asks for against what is free now (the largest free block too), its place in the queue
now, when the engine next looks, and the engine's last word with the time it was said.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..model import GPU, ClusterState, JobState, JobStatus, describe_placement
from ..placement.ledger import Ledger, describe_shortfall, never_fits


@dataclass(frozen=True)
class EngineWord:
    """The engine's last reason about a job and when (backend clock) it was given."""

    reason: str
    time: float | None


def why_now(job: JobStatus, state: ClusterState, engine: EngineWord,
            hours: Callable[[float], float], next_round: float | None = None,
            round_interval: float | None = None) -> str:
    """One paragraph: the job's current blocker (or why it will start), then the engine's last
    word and when it was said. `next_round`: when the engine next decides (backend clock),
    if known; else `round_interval` says how often it looks."""
    said = _engine_said(engine, hours, state.now)
    if job.state is JobState.COMPLETED:
        return f"completed at {hours(job.finish_time):.2f} h."
    if job.state is JobState.REJECTED:
        return f"rejected: {_bare(job.reason)}."
    if job.state in (JobState.RUNNING, JobState.RESTARTING):
        where = describe_placement(job.workers, job.ps)
        return f"{job.state.value} on {where}. {said}"
    return f"{_blocker(job, state, hours, next_round, round_interval)} {said}"


def _blocker(job: JobStatus, state: ClusterState, hours: Callable[[float], float],
             next_round: float | None, round_interval: float | None) -> str:
    """A waiting (pending or holding) job: what keeps it from running now."""
    spec = job.spec
    if (never := never_fits(job, state)) is not None:
        return f"can never run on this cluster: {_bare(never)}."
    queue = _queue_text(*_queue_place(job, state))
    free_gpus = float(state.free[:, GPU].sum())
    need_gpus = spec.worker_demand.gpu * spec.initial_workers + spec.ps_demand.gpu * spec.num_ps
    ledger = Ledger(state)
    if job.state is JobState.HOLDING:
        # Its held tasks are in `allocated` already: what is missing must fit in what is free.
        held = job.num_workers
        missing = max(spec.initial_workers - held, 0)
        fits = ledger.pack(spec.worker_demand, missing) is not None
        status = f"holds {held} of its {spec.initial_workers} workers"
        if not fits:
            short = _bare(describe_shortfall(ledger, job, missing))
            return f"{status}; the rest does not fit now: {short}; {queue}."
        return (f"{status}; the rest fits now; {queue}."
                f" {_when(state, hours, next_round, round_interval)}")
    fits = ledger.place_gang(job, spec.initial_workers) is not None
    ask = f"needs {need_gpus:g} GPUs" if need_gpus else "needs no GPU"
    if not fits:
        shortfall = _bare(describe_shortfall(ledger, job, spec.initial_workers))
        block = _largest_gpu_block(ledger)
        return f"does not fit now: {shortfall} (largest free block {block:g}); {queue}."
    return (f"fits now: {ask}, {free_gpus:g} GPUs free (largest free block"
            f" {_largest_gpu_block(ledger):g}); {queue}."
            f" {_when(state, hours, next_round, round_interval)}")


def _queue_place(job: JobStatus, state: ClusterState) -> tuple[int, int]:
    """(jobs waiting that arrived before `job`, jobs waiting in all), `job` among them."""
    ahead = waiting = 0
    key = (job.spec.arrival, job.name)
    for other in state.iter_waiting():
        waiting += 1
        if (other.spec.arrival, other.name) < key:
            ahead += 1
    return ahead, max(waiting, 1)


def _queue_text(ahead: int, waiting: int) -> str:
    if waiting == 1:
        return "it is the only job waiting"
    place = "first" if ahead == 0 else f"number {ahead + 1}"
    return f"{place} of {waiting} waiting jobs by arrival (the engine may order them otherwise)"


def _largest_gpu_block(ledger: Ledger) -> float:
    """The most whole GPUs free on one node."""
    return float((ledger.gpu_free >= 1 - 1e-9).sum(axis=1).max(initial=0))


def _when(state: ClusterState, hours: Callable[[float], float], next_round: float | None,
          round_interval: float | None) -> str:
    if next_round is not None and math.isfinite(next_round):
        wait = max(next_round - state.now, 0.0)
        return (f"The engine decides at its next round, at {hours(next_round):.2f} h"
                f" (in {wait:,.0f} s of simulated time).")
    if round_interval:
        return f"The engine looks again within {round_interval:g} s."
    return "The engine has no round scheduled: nothing it waits for is due."


def _engine_said(engine: EngineWord, hours: Callable[[float], float], now: float) -> str:
    if engine.time is None:  # set by the cluster (an arrival, a node failure), not a round
        return f"Last recorded reason: “{_bare(engine.reason)}”."
    age = max(now - engine.time, 0.0)
    return (f"Engine's last word, at {hours(engine.time):.2f} h ({_age(age)} ago):"
            f" “{_bare(engine.reason)}”.")


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _bare(reason: str) -> str:
    """A reason without its 'waiting: ' / 'rejected: ' prefix."""
    for prefix in ("waiting: ", "rejected: "):
        if reason.startswith(prefix):
            return reason[len(prefix):]
    return reason
