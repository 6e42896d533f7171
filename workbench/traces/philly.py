"""The Microsoft Philly trace (ATC '19) as `JobSpec`s.

The package ships a compact copy (`data/philly.csv.gz`, all 82,247 jobs, `arrival,duration,
num_gpus,vc`; made by `tools/derive_traces.py`), so `load_philly()` needs no path. A path to the
per-job extraction of the Pollux artifact (`timestamp,duration,num_gpus,gpu_time,cluster`) or
to a file in the compact form is read as well; the header decides which.

Philly data: CC BY 4.0, Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN
Training Workloads", USENIX ATC '19.
"""

from __future__ import annotations

import math
import os
import time
from importlib import resources

import numpy as np

from ..model import JobSpec
from .common import (
    WORKER_DEMAND,
    Jobs,
    RateCache,
    default_perf,
    elastic_max_workers,
    suited_batch_sizes,
)
from .validate import read_header, read_table

# (upper bound of the GPU-time bucket in GPU-hours, applications drawn from with equal chance).
# As in the Pollux artifact's workload generator (simulator/workload.py), which also turned half
# of its deepspeech2 jobs into bert jobs.
GPU_TIME_BUCKETS: tuple[tuple[float, tuple[str, ...]], ...] = (
    (1.0, ("cifar10", "ncf")),
    (10.0, ("deepspeech2", "bert")),
    (100.0, ("yolov3",)),
    (np.inf, ("imagenet",)),
)

ORIGINAL_COLUMNS = {"timestamp": "timestamp", "duration": "positive_float",
                    "num_gpus": "positive_int"}
COMPACT_COLUMNS = {"arrival": "nonneg_float", "duration": "positive_float",
                   "num_gpus": "positive_int"}


def shipped_philly_path() -> str:
    return str(resources.files("workbench.traces") / "data" / "philly.csv.gz")


def assign_applications(gpu_hours: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One application per job from its GPU-time bucket (see `GPU_TIME_BUCKETS`).

    One uniform number is drawn per job in arrival order, so the first k jobs get the same
    applications whatever `limit` is.
    """
    draws = rng.random(len(gpu_hours))
    apps = np.empty(len(gpu_hours), dtype=object)
    bucket = np.searchsorted([b for b, _ in GPU_TIME_BUCKETS], gpu_hours, side="right")
    for i, (_, choices) in enumerate(GPU_TIME_BUCKETS):
        mine = bucket == i
        pick = np.minimum((draws[mine] * len(choices)).astype(int), len(choices) - 1)
        apps[mine] = np.asarray(choices, dtype=object)[pick]
    return apps


def _tenants(raw, order: np.ndarray) -> list[str]:
    """Each job's user, in `order`: "vc-" and its virtual cluster, or "default" where the file
    gives none (no `vc`/`cluster` column, or an empty cell)."""
    column = next((c for c in ("vc", "cluster") if c in raw.columns), None)
    if column is None:
        return ["default"] * len(order)
    return [_tenant(c) for c in raw[column].to_numpy()[order].tolist()]


def _tenant(cell) -> str:
    if isinstance(cell, float) and cell.is_integer():  # ids all digits: read as numbers
        cell = int(cell)
    text = "" if cell is None or (isinstance(cell, float) and math.isnan(cell)) else str(cell)
    return f"vc-{text.strip()}" if text.strip() else "default"


def load_philly(path: str | os.PathLike | None = None, *, seed: int = 0, limit: int | None = None,
                gpus_per_node: int = 4, deadline_factor: float | None = None,
                perf=None) -> Jobs:
    """Load the Philly trace: one `JobSpec` per job, in submission order.

    - `arrival`: seconds since the first submission in the file (jobs sorted by it, ties kept
      in file order).
    - `application`: by the job's GPU time (duration × num_gpus) in GPU-hours, chosen uniformly
      at random (seeded) within its bucket, as the Pollux artifact does:
      < 1 → cifar10 or ncf; 1–10 → deepspeech2 or bert; 10–100 → yolov3; ≥ 100 → imagenet.
    - `initial_workers` = num_gpus; `min_workers` = 1; `max_workers` = max(num_gpus,
      min(2 × num_gpus, 64)).
    - `batch_size`: the largest measured batch size of the application not above its one-GPU
      batch size × num_gpus (`common.suited_batch_size`).
    - `total_work` = duration × perf.ideal_rate(spec, num_gpus, gpus_per_node): at its
      original size, packed, the job runs exactly as long as it did on Philly.
    - `deadline`: None, or arrival + `deadline_factor` × duration when given.
    - `user`: the job's virtual cluster, Philly's tenant ("vc-6214e9"; `vc` or `cluster`, 15 in
      the trace), so DRF is fair across them; "default" when the file has neither.

    `limit` keeps the first `limit` jobs by arrival (applications are drawn for all jobs first,
    so a prefix does not depend on `limit`). Every row must be valid (positive duration and GPU
    count, parsable times); the shipped trace has no invalid rows, so none are skipped.
    The result's `skipped` is therefore empty; `notes` says how the jobs were built.
    """
    started = time.perf_counter()
    source = shipped_philly_path() if path is None else str(path)
    header = read_header(source)
    kinds = ORIGINAL_COLUMNS if "timestamp" in header else COMPACT_COLUMNS
    table = read_table(source, kinds, optional=("gpu_time", "cluster", "vc"))
    if kinds is ORIGINAL_COLUMNS:
        stamps = table["timestamp"]
        arrival = (stamps - stamps.min()) / np.timedelta64(1, "s")
    else:
        arrival = table["arrival"] - table["arrival"].min()
    order = np.argsort(arrival, kind="stable")
    arrival = arrival[order].astype(float)
    duration = table["duration"][order].astype(float)
    gpus = table["num_gpus"][order]
    users = _tenants(table.raw, order)

    rng = np.random.default_rng(seed)
    apps = assign_applications(duration * gpus / 3600.0, rng)
    if limit is not None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        arrival, duration, gpus, apps = arrival[:limit], duration[:limit], gpus[:limit], \
            apps[:limit]
        users = users[:limit]

    perf = perf or default_perf()
    known = list(perf.applications)
    missing = sorted({a for _, choices in GPU_TIME_BUCKETS for a in choices} - set(known))
    if missing:
        raise ValueError(f"performance model lacks applications {missing}")
    batch = suited_batch_sizes(apps, gpus)
    rates = RateCache(perf, gpus_per_node).many(apps, batch, gpus)
    work = duration * rates
    max_workers = [elastic_max_workers(g) for g in range(int(gpus.max(initial=1)) + 1)]
    deadlines = (arrival + deadline_factor * duration).tolist() if deadline_factor else None

    jobs = Jobs(source=f"philly:{source}" if path is not None else "philly")
    names = [f"{a}-{i}" for i, a in enumerate(apps.tolist())]
    for i, (name, app, t, w, b, g, m) in enumerate(zip(
            names, apps.tolist(), arrival.tolist(), work.tolist(), batch.tolist(),
            gpus.tolist(), (max_workers[g] for g in gpus.tolist()))):
        jobs.append(JobSpec(name=name, application=app, arrival=t, total_work=w, batch_size=b,
                            initial_workers=g, min_workers=1, max_workers=m,
                            worker_demand=WORKER_DEMAND, user=users[i],
                            deadline=deadlines[i] if deadlines else None))
    jobs.notes.append(
        f"{len(table)} rows read, {len(table)} valid, 0 skipped; {len(jobs)} jobs kept"
        + (f" (limit {limit})" if limit is not None else "")
        + f"; applications by GPU-time bucket (seed {seed}); loaded in"
        f" {time.perf_counter() - started:.2f} s")
    return jobs

