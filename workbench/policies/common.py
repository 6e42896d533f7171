"""Steps most engines share: rejecting what can never run, ordering, waiting reasons."""

from __future__ import annotations

from ..model import Action, ClusterState, JobState, JobStatus, Reject, Wait
from .placement import Ledger, describe_shortfall, never_fits

MAX_WAIT_REASONS = 200  # reasons beyond this many queued jobs are summarised, for speed


def reject_impossible(state: ClusterState, jobs: list[JobStatus]) -> tuple[list[Action], list[JobStatus]]:
    """Reject the jobs that could not run even on the empty cluster; return the rest."""
    actions: list[Action] = []
    keep = []
    for job in jobs:
        why = never_fits(job, state) if job.state is JobState.PENDING else None
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
    return sorted(jobs, key=lambda j: (j.spec.arrival, j.name))
