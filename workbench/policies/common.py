"""Steps most engines share: rejecting what can never run, ordering, waiting reasons."""

from __future__ import annotations

from ..model import Action, ClusterState, JobState, JobStatus, Reject, Wait
from .placement import Ledger, describe_shortfall, never_fits

MAX_WAIT_REASONS = 200  # reasons beyond this many queued jobs are summarised, for speed


# id(spec) -> (spec, capacity signature, verdict): a job is checked once per cluster shape,
# not every round (long traces keep thousands of jobs queued).
_VERDICTS: dict[int, tuple[object, tuple, str | None]] = {}


def cluster_signature(state: ClusterState) -> tuple:
    up = state.capacity[state.node_up]
    return tuple(up.sum(axis=0).round(6)) + tuple(up.max(axis=0, initial=0).round(6))


def impossible(state: ClusterState, job: JobStatus, signature: tuple | None = None) -> str | None:
    """Why a pending job can never run on this cluster (cached per job and cluster shape)."""
    if job.state is not JobState.PENDING:
        return None
    signature = signature or cluster_signature(state)
    cached = _VERDICTS.get(id(job.spec))
    if cached is not None and cached[0] is job.spec and cached[1] == signature:
        return cached[2]
    if len(_VERDICTS) > 500_000:
        _VERDICTS.clear()
    why = never_fits(job, state)
    _VERDICTS[id(job.spec)] = (job.spec, signature, why)
    return why


def reject_impossible(state: ClusterState, jobs: list[JobStatus]) -> tuple[list[Action], list[JobStatus]]:
    """Reject the jobs that could not run even on the empty cluster; return the rest."""
    actions: list[Action] = []
    keep = []
    signature = cluster_signature(state)
    for job in jobs:
        why = impossible(state, job, signature)
        if why:
            actions.append(Reject(job.name, why))
        else:
            keep.append(job)
    return actions, keep


def wait_reason(ledger: Ledger, job: JobStatus, workers: int, position: int, prefix: str = "") -> Wait | None:
    if position >= MAX_WAIT_REASONS:
        return None
    text = describe_shortfall(ledger, job, workers)
    if prefix:
        text = f"{text} ({prefix})"
    return None if text == job.reason else Wait(job.name, text)


def by_arrival(jobs: list[JobStatus]) -> list[JobStatus]:
    return sorted(jobs, key=lambda j: (j.spec.arrival, j.name))  # Timsort: ~free if sorted
