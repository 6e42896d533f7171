"""Pieces of the engines' teaching views (`Policy.engine_view`), shared so that every engine
shows a queue, a time or a per-job figure the same way: times in hours (keys end in `_h`),
at most `ROWS` rows or `BARS` bars, and a sentence instead of an empty value.

An engine that keeps nothing between rounds (FIFO, DRF, ...) is given the cluster as it is
now (`engine_view(state)`) and shows its rule applied to it: the order it would start jobs
in, the shares it compares, the scores it ranks nodes by.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from ..model import ClusterState, JobStatus

ROWS = 20  # rows of a queue table
BARS = 30  # bars of a per-job or per-node chart


def engine_view_of(policy: Any, state: ClusterState | None) -> dict[str, Any]:
    """`policy.engine_view(state)`, or `policy.engine_view()` for an engine whose view takes
    no state (engines written before views were given one)."""
    view = policy.engine_view
    try:
        takes_state = "state" in inspect.signature(view).parameters
    except (TypeError, ValueError):
        takes_state = False
    return dict((view(state) if takes_state else view()) or {})


def gpus_of(job: JobStatus, workers: int | None = None) -> float:
    """GPUs `job` asks for at `workers` (its submitted size when None)."""
    spec = job.spec
    n = spec.initial_workers if workers is None else workers
    return spec.worker_demand.gpu * n + spec.ps_demand.gpu * spec.num_ps


def queue_rows(jobs: Iterable[JobStatus], now: float, rows: int = ROWS,
               **columns: Any) -> list[dict[str, Any]]:
    """The first `rows` of `jobs` (in the engine's order) as table rows: position, job, GPUs
    asked, hours waited since arrival and the job's reason; `columns` maps a column name to a
    function of the job for engine-specific columns."""
    out = []
    for k, job in enumerate(jobs):
        if k >= rows:
            break
        row = {"position": k + 1, "job": job.name, "gpus": gpus_of(job),
               "waited_h": max(now - job.spec.arrival, 0.0) / 3600.0}
        row.update({name: f(job) for name, f in columns.items()})
        row["reason"] = job.reason or ""
        out.append(row)
    return out


def stands_for_none(key: Any) -> bool:
    """Whether a bar's key is a sentence in parentheses standing for no bars at all
    ("(no job running)"): drawn as the one bar now, it is no series over time."""
    return isinstance(key, str) and key.startswith("(") and key.endswith(")")


def top(values: dict[str, float], n: int = BARS) -> dict[str, float]:
    """The `n` largest of `values`, largest first (a chart of thousands of bars reads as none)."""
    return dict(sorted(values.items(), key=lambda kv: -kv[1])[:n])


def queue_facts(waiting: list[JobStatus]) -> dict[str, Any]:
    """Queue length and its head, as facts."""
    return {"waiting_jobs": len(waiting),
            "head_of_queue": waiting[0].name if waiting else "queue empty"}
