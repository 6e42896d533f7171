"""Run metrics: JCT, makespan, queueing delay, deadline hit rate, utilisation."""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .model import JobState, JobStatus


def job_metrics(jobs: Iterable[JobStatus]) -> dict[str, Any]:
    jobs = list(jobs)
    done = [j for j in jobs if j.state is JobState.COMPLETED]
    rejected = [j for j in jobs if j.state is JobState.REJECTED]
    jct = np.array([j.finish_time - j.spec.arrival for j in done], dtype=float)
    started = [j for j in jobs if j.first_start is not None]
    queue = np.array([j.first_start - j.spec.arrival for j in started], dtype=float)
    with_deadline = [j for j in jobs if j.spec.deadline is not None]
    hits = sum(1 for j in with_deadline
               if j.state is JobState.COMPLETED and j.finish_time <= j.spec.deadline + 1e-9)
    first_arrival = min((j.spec.arrival for j in jobs), default=0.0)
    last_finish = max((j.finish_time for j in jobs if j.finish_time is not None), default=first_arrival)

    def stat(a: np.ndarray, f) -> float:
        return float(f(a)) if len(a) else float("nan")

    return {
        "jobs": len(jobs),
        "completed": len(done),
        "rejected": len(rejected),
        "unfinished": len(jobs) - len(done) - len(rejected),
        "avg_jct_h": stat(jct, np.mean) / 3600,
        "median_jct_h": stat(jct, np.median) / 3600,
        "p95_jct_h": stat(jct, lambda a: np.percentile(a, 95)) / 3600,
        "makespan_h": (last_finish - first_arrival) / 3600,
        "avg_queue_h": stat(queue, np.mean) / 3600,
        "deadline_jobs": len(with_deadline),
        "deadline_hit_rate": hits / len(with_deadline) if with_deadline else float("nan"),
        "restarts": int(sum(j.restarts for j in jobs)),
    }


def usage_metrics(usage) -> dict[str, float]:
    def ratio(a: float, b: float) -> float:
        return float(a / b) if b > 0 else float("nan")

    return {
        "gpu_alloc_util": ratio(usage.gpu_allocated, usage.gpu_capacity),
        "gpu_effective_util": ratio(usage.gpu_effective, usage.gpu_capacity),
        "cpu_alloc_util": ratio(usage.cpu_allocated, usage.cpu_capacity),
        "cpu_effective_util": ratio(usage.cpu_effective, usage.cpu_capacity),
    }


def run_metrics(backend) -> dict[str, Any]:
    """Everything about a finished (or stopped) simulator run."""
    out = job_metrics(backend.jobs.values())
    out.update(usage_metrics(backend.usage))
    return out
