"""Pollux (OSDI '21) workload files as `JobSpec`s.

A workload is a CSV `name,time,application,num_replicas,batch_size` (160 jobs each in the
artifact, sampled from the Philly trace); each job trains until its application's convergence
target. Pollux workloads: Apache-2.0, petuum/adaptdl osdi21-artifact.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ConfigError, InputError
from ..model import JobSpec
from ..perf.goodput import artifact_iterations, has_goodput
from .common import (
    WORKER_DEMAND,
    Jobs,
    RateCache,
    check_batch_sizes,
    default_perf,
    elastic_max_workers,
)
from .deadline_rule import DeadlineRule
from .validate import check_choice, check_unique, read_table

POLLUX_COLUMNS = {"name": "name", "time": "nonneg_float", "application": "str",
                  "num_replicas": "positive_int", "batch_size": "positive_int"}
# job lengths: "artifact" = the Pollux artifact simulator's (statistical-efficiency progress,
# `perf.goodput.artifact_iterations`); "project" = the validation table's iterations
LENGTHS = ("artifact", "project")


def load_pollux_workload(path: str | os.PathLike, *, deadline_factor: float | None = None,
                         deadlines: DeadlineRule | None = None, gpus_per_node: int = 4,
                         max_workers_cap: int = 64, perf=None, lengths: str = "artifact"
                         ) -> Jobs:
    """Load a Pollux workload CSV, one `JobSpec` per row, in arrival order.

    - `arrival` = time; `application`, `batch_size` as written (the job's initial batch size).
    - `total_work`: iterations to the application's max epochs at that batch size. With
      `lengths="artifact"` (the default) as the Pollux artifact's simulator counts them
      (`perf.goodput.artifact_iterations`: each epoch's progress span over the statistical
      efficiency of the batch, so a large batch runs more iterations; yolov3 at 128 +20 %);
      with `lengths="project"` the validation table's `iteration` at the last epoch
      (`perf.total_iterations`), which the metric curves (`perf.metric_at`) are indexed by. An
      application without goodput data (not one of the six Pollux ones) takes the latter.
    - `initial_workers` = num_replicas; `min_workers` = 1; `max_workers` = max(num_replicas,
      min(2 × num_replicas, `max_workers_cap`)), i.e. an elastic engine may double a job.
    - `worker_demand` = 4 CPUs, 16 GiB, 1 GPU per worker; no parameter servers.
    - `deadline`: None, or arrival + `deadline_factor` × ideal run time, where the ideal run
      time is total_work / perf.ideal_rate(spec, num_replicas, gpus_per_node); or, with
      `deadlines` (a seeded `DeadlineRule`, as the default workload has), that rule's mix of
      tight and loose deadlines from the same ideal run time (not both).

    Bad input (missing column, non-numeric or non-positive replicas or batch size, negative
    time, an application the performance model does not know, a repeated name) raises
    `InputError` naming the file, line and column.
    """
    if deadline_factor is not None and deadlines is not None:
        raise ConfigError("deadlines: give deadline_factor or a deadline rule, not both")
    if lengths not in LENGTHS:
        raise ConfigError(f"lengths: expected one of {', '.join(LENGTHS)}, got {lengths!r}")
    perf = perf or default_perf()
    table = read_table(path, POLLUX_COLUMNS)
    apps = list(perf.applications)
    check_choice(table, "application", apps)
    check_unique(table, "name")
    check_batch_sizes(table, perf)

    order = np.argsort(table["time"], kind="stable")
    rates = RateCache(perf, gpus_per_node)
    jobs = Jobs(source=f"pollux:{path}")
    ideal_run: list[float] = []
    for i in order.tolist():
        app, bsz, replicas = table["application"][i], int(table["batch_size"][i]), \
            int(table["num_replicas"][i])
        arrival = float(table["time"][i])
        try:
            work = float(perf.total_iterations(app, bsz))
        except (ValueError, KeyError) as e:
            raise InputError(f"expected a batch size the {app} profile covers, got {bsz} ({e})",
                             file=str(path), line=int(table.lines[i]),
                             column="batch_size") from None
        if lengths == "artifact" and has_goodput(app):
            work = artifact_iterations(app, bsz, perf)
        deadline = None
        if deadline_factor is not None or deadlines is not None:
            ideal_run.append(work / rates(app, bsz, replicas))
            if deadline_factor is not None:
                deadline = arrival + deadline_factor * ideal_run[-1]
        jobs.append(JobSpec(
            name=str(table["name"][i]), application=app, arrival=arrival, total_work=work,
            batch_size=bsz, initial_workers=replicas, min_workers=1,
            max_workers=elastic_max_workers(replicas, max_workers_cap),
            worker_demand=WORKER_DEMAND, deadline=deadline))
    jobs.notes.append(f"{len(jobs)} jobs from {path}; work = iterations to convergence"
                      f" ({lengths} lengths); max_workers = 2 × replicas (cap {max_workers_cap})")
    if deadlines is not None:
        due = deadlines.deadlines(np.array([j.arrival for j in jobs]), np.array(ideal_run))
        jobs[:] = [j.with_(deadline=float(d)) for j, d in zip(jobs, due)]
        jobs.notes.append(deadlines.describe())
    return jobs
