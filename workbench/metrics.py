"""Run metrics: JCT, makespan, queueing delay, deadline hit rate, utilisation, GPU
fragmentation.

Fragmentation follows the FGD paper (Weng et al., ATC '23): the unallocated GPU capacity that
the run's own workload cannot use (its task shapes weighted by how many tasks of each there
are, `placement.state.workload_of_jobs`; see `workbench.placement.fragmentation`), measured at every timeline
sample by a `FragmentationMeter` and averaged over time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .model import ClusterState, JobState, JobStatus
from .placement.fragmentation import MILLI, FragmentationIndex, TaskClasses
from .placement.state import free_milli


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
        # the time until every job had ended: not known while some have not (a what-if's
        # horizon, a run stopped early), where it read as the last end so far (0 with none)
        "makespan_h": (last_finish - first_arrival) / 3600
        if len(done) + len(rejected) == len(jobs) else float("nan"),
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


class FragmentationMeter:
    """Fragmented GPUs of a `ClusterState` against a fixed workload. Cheap to ask at every
    timeline sample: only the nodes whose free resources changed since the last call are
    measured again."""

    def __init__(self, workload: TaskClasses) -> None:
        self.workload = workload
        self._index: FragmentationIndex | None = None
        self._names: list[str] = []

    def __call__(self, state: ClusterState) -> float:
        cpu, mem, gpu = free_milli(state)
        index = self._index
        if index is None or self._names != [n.name for n in state.nodes] \
                or index.gpu_free.shape != gpu.shape:
            self._names = [n.name for n in state.nodes]
            models = [n.gpu_model if n.gpus else "" for n in state.nodes]
            self._index = FragmentationIndex(self.workload, models, gpu, cpu, mem)
        else:
            changed = np.flatnonzero((index.gpu_free != gpu).any(axis=1)
                                     | (index.cpu_free != cpu) | (index.mem_free != mem))
            if len(changed):
                index.gpu_free[changed] = gpu[changed]
                index.cpu_free[changed] = cpu[changed]
                index.mem_free[changed] = mem[changed]
                index.refresh(changed)
        return self._index.total() / MILLI


def fragmented_share(sample) -> float:
    """Fragmented share of the free GPUs at a timeline sample (0 when none is free, NaN when
    not measured): the FGD paper's fragmentation rate."""
    if math.isnan(sample.gpus_fragmented):
        return math.nan
    free = sample.gpus_total - sample.gpus_allocated
    return min(sample.gpus_fragmented / free, 1.0) if free > 1e-9 else 0.0  # 1.0: float sums


def fragmentation_metrics(timeline: Sequence) -> dict[str, float]:
    """Time averages over timeline samples (each holds until the next): the fragmented share
    of the unallocated GPUs, that share while jobs wait, and the fragmented GPUs. NaN when the
    samples carry no fragmentation."""
    samples = [s for s in timeline if not np.isnan(getattr(s, "gpus_fragmented", np.nan))]
    nan = float("nan")
    if not samples:
        return {"gpu_frag_avg": nan, "gpu_frag_queued": nan, "gpus_fragmented_avg": nan}
    t = np.array([s.time for s in samples])
    frag = np.array([s.gpus_fragmented for s in samples])
    ratio = np.array([fragmented_share(s) for s in samples])
    queued = np.array([s.queued > 0 for s in samples])
    dt = np.diff(t, append=t[-1])
    if dt.sum() <= 0:
        dt = np.ones(len(t))

    def mean(values: np.ndarray, weight: np.ndarray) -> float:
        return float((values * weight).sum() / weight.sum()) if weight.sum() > 0 else nan

    return {"gpu_frag_avg": mean(ratio, dt), "gpu_frag_queued": mean(ratio, dt * queued),
            "gpus_fragmented_avg": mean(frag, dt)}


def run_metrics(backend, timeline: Sequence | None = None) -> dict[str, Any]:
    """Everything about a finished (or stopped) simulator run; fragmentation from the
    run's `timeline` (the Recorder's samples) when given."""
    if getattr(backend, "finished_left_out", 0) or getattr(backend, "arrivals_left_out", 0):
        raise ValueError(f"this copy of the run left out {backend.finished_left_out} finished"
                         f" jobs and {backend.arrivals_left_out} to come"
                         " (`pickled_without_settled`): its whole-run metrics would be wrong")
    out = job_metrics(backend.jobs.values())
    out.update(usage_metrics(backend.usage))
    if timeline is not None:
        out.update(fragmentation_metrics(timeline))
    return out
