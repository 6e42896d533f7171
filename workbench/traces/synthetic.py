"""Seeded synthetic workloads: Poisson arrivals over the profiled applications, with deadlines.

All randomness comes from one `numpy.random.Generator(seed)`; the same arguments give the same
jobs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..model import JobKind, JobSpec
from .common import WORKER_DEMAND, Jobs, RateCache, default_perf, suited_batch_size
from .validate import beyond_time_limit

# Per-worker batch size of each parameter-server model in the DL2 measurements (config_speed).
PS_BATCH_PER_WORKER = {
    "resnet-50": 32, "vgg-16": 32, "resnext-110": 128, "inception-bn": 128, "seq2seq": 64,
    "cnn-text-classification": 50, "dssm": 256, "wlm": 160,
}
PS_MAX_WORKERS = 12  # the DL2 measurements cover 1-12 workers and 1-12 parameter servers
PS_MAX_SERVERS = 4
PS_RUN_TIME = (10 * 60.0, 4 * 3600.0)  # seconds; PS job lengths are drawn log-uniformly in it
# Smallest initial size per application, as in the Pollux workloads (imagenet on 1 GPU would
# need ~150 h to converge).
APP_MIN_WORKERS = {"imagenet": 8}


def synthetic_workload(n_jobs: int = 100, *, arrival_rate: float = 1 / 120,
                       apps: Mapping[str, float] | Sequence[str] | None = None,
                       max_workers: int = 8,
                       deadline_factor: float | tuple[float, float] | None = (1.5, 4.0),
                       ps_jobs: bool | float = False, seed: int = 0, gpus_per_node: int = 4,
                       perf=None) -> Jobs:
    """`n_jobs` jobs arriving as a Poisson process of `arrival_rate` jobs per second.

    - Arrivals: exponential gaps of mean 1/arrival_rate; the first job arrives at 0.
    - Kind: `ps_jobs` False → all data-parallel (all-reduce); True → all parameter-server
      jobs (DL2/OASiS style); a number in (0, 1) → that share of PS jobs, chosen at random.
    - All-reduce jobs: application drawn from `apps` (a dict application → weight, or a list
      with equal weights; default all of `perf.applications` equally); initial workers a power
      of two ≤ `max_workers` with chance ∝ 1/size (1 most likely), imagenet at least
      min(8, `max_workers`) as in the Pollux workloads; batch size the measured one
      suited to that size (`common.suited_batch_size`); total_work = perf.total_iterations
      (train to the application's convergence target); workers may range 1..`max_workers`.
    - PS jobs: model uniform over `perf.ps_models`; workers uniform 1..min(`max_workers`, 12),
      num_ps uniform 1..min(workers, 4), fixed (min = max = initial); batch_size = the model's
      per-worker batch in the DL2 measurements; run time at that size drawn log-uniformly in
      10 min–4 h and total_work = run time × perf.ps_speed(model, workers, num_ps), so runs
      last minutes to hours.
    - Deadline: arrival + factor × ideal run time (total_work / ideal rate at the initial
      size, packed), factor uniform in `deadline_factor` if a (low, high) pair, fixed if a
      number, no deadlines if None.
    """
    _check_sizes(n_jobs, arrival_rate, max_workers)
    perf = perf or default_perf()
    rng = np.random.default_rng(seed)
    names, weights = _mix(apps, list(perf.applications))
    ps_models = list(getattr(perf, "ps_models", ()))
    draws = _Draws.of(rng, n_jobs, arrival_rate, weights, max_workers, deadline_factor, ps_jobs,
                      len(ps_models))
    if draws.is_ps.any() and not ps_models:
        raise ConfigError("synthetic: the performance model has no parameter-server models")
    rates = RateCache(perf, gpus_per_node)
    jobs = Jobs(source="synthetic")
    for i in range(n_jobs):
        if draws.is_ps[i]:
            spec, run_time = _ps_job(i, draws, ps_models, perf)
        else:
            spec, run_time = _allreduce_job(i, draws, names, max_workers, perf, rates)
        if draws.factors is not None:
            spec = spec.with_(deadline=spec.arrival + float(draws.factors[i]) * run_time)
        jobs.append(spec)
    jobs.notes.append(
        f"{n_jobs} synthetic jobs (seed {seed}), Poisson arrivals at {arrival_rate:.4g}/s,"
        f" {int(draws.is_ps.sum())} parameter-server jobs, deadline factor {deadline_factor}")
    return jobs


MAX_JOBS = 1_000_000  # a bound on what a typo can allocate (the Philly trace has 82,247)


def _check_sizes(n_jobs: int, arrival_rate: float, max_workers: int) -> None:
    if not 0 <= n_jobs <= MAX_JOBS:
        raise ConfigError(f"synthetic: n (jobs) must be from 0 to {MAX_JOBS:,}, got {n_jobs:,}")
    if not arrival_rate > 0:
        raise ConfigError(f"synthetic: arrival rate must be > 0 jobs/s, got {arrival_rate}")
    if max_workers < 1:
        raise ConfigError(f"synthetic: max_workers must be >= 1, got {max_workers}")


@dataclass
class _Draws:
    """Every random draw of a workload, one entry per job. All are drawn for every job, in a
    fixed order, so that the all-reduce jobs do not depend on the PS share (and vice versa)."""

    arrivals: np.ndarray
    is_ps: np.ndarray
    app_pick: np.ndarray
    size_pick: np.ndarray
    factors: np.ndarray | None
    ps_model_pick: np.ndarray
    ps_workers: np.ndarray
    ps_servers_u: np.ndarray
    ps_run_time: np.ndarray

    @classmethod
    def of(cls, rng: np.random.Generator, n_jobs: int, arrival_rate: float,
           weights: np.ndarray, max_workers: int, deadline_factor, ps_jobs: bool | float,
           n_ps_models: int) -> _Draws:
        gaps = rng.exponential(1.0 / arrival_rate, n_jobs)
        arrivals = np.cumsum(gaps) - (gaps[0] if n_jobs else 0.0)
        if n_jobs and (why := beyond_time_limit("the last job arrives", arrivals[-1])):
            raise ConfigError(f"synthetic: at {arrival_rate:g} jobs/s {why}; raise the rate")
        ps_share = float(ps_jobs) if not isinstance(ps_jobs, bool) else (1.0 if ps_jobs else 0.0)
        if not 0.0 <= ps_share <= 1.0:
            raise ConfigError(f"synthetic: ps_jobs must be a bool or a share in [0, 1],"
                              f" got {ps_jobs}")
        is_ps = rng.random(n_jobs) < ps_share
        app_pick = rng.choice(len(weights), size=n_jobs, p=weights)
        sizes = 2 ** np.arange(int(np.log2(max_workers)) + 1)
        size_pick = rng.choice(sizes, size=n_jobs, p=(1 / sizes) / (1 / sizes).sum())
        factors = _factors(deadline_factor, n_jobs, rng)
        return cls(arrivals, is_ps, app_pick, size_pick, factors,
                   ps_model_pick=rng.integers(0, max(n_ps_models, 1), n_jobs),
                   ps_workers=rng.integers(1, min(max_workers, PS_MAX_WORKERS) + 1, n_jobs),
                   ps_servers_u=rng.random(n_jobs),
                   ps_run_time=np.exp(rng.uniform(*np.log(PS_RUN_TIME), n_jobs)))


def _ps_job(i: int, d: _Draws, ps_models: list[str], perf) -> tuple[JobSpec, float]:
    """Job `i` as a fixed-size parameter-server job, and its run time."""
    model = ps_models[int(d.ps_model_pick[i])]
    workers = int(d.ps_workers[i])
    servers = 1 + int(d.ps_servers_u[i] * min(workers, PS_MAX_SERVERS))
    speed = float(perf.ps_speed(model, workers, servers))
    run_time = float(d.ps_run_time[i])
    spec = JobSpec(name=f"{model}-{i}", application=model, arrival=float(d.arrivals[i]),
                   total_work=run_time * speed, batch_size=PS_BATCH_PER_WORKER.get(model, 32),
                   initial_workers=workers, min_workers=workers, max_workers=workers,
                   num_ps=servers, worker_demand=WORKER_DEMAND, kind=JobKind.PS)
    return spec, run_time


def _allreduce_job(i: int, d: _Draws, names: list[str], max_workers: int, perf,
                   rates: RateCache) -> tuple[JobSpec, float]:
    """Job `i` as an elastic all-reduce job trained to convergence, and its ideal run time."""
    app = names[int(d.app_pick[i])]
    workers = max(int(d.size_pick[i]), min(APP_MIN_WORKERS.get(app, 1), max_workers))
    bsz = suited_batch_size(app, workers)
    spec = JobSpec(name=f"{app}-{i}", application=app, arrival=float(d.arrivals[i]),
                   total_work=float(perf.total_iterations(app, bsz)), batch_size=bsz,
                   initial_workers=workers, min_workers=1, max_workers=max_workers,
                   worker_demand=WORKER_DEMAND)
    return spec, spec.total_work / rates(app, bsz, workers)


def _mix(apps, known: list[str]) -> tuple[list[str], np.ndarray]:
    if apps is None:
        mix = {a: 1.0 for a in known}
    elif isinstance(apps, Mapping):
        mix = {str(a): float(w) for a, w in apps.items()}
    else:
        mix = {str(a): 1.0 for a in apps}
    unknown = [a for a in mix if a not in known]
    if unknown:
        raise ConfigError(f"synthetic: unknown application {unknown[0]!r};"
                          f" expected one of {', '.join(known)}")
    weights = np.array(list(mix.values()), dtype=float)
    if not mix or (weights < 0).any() or not weights.sum() > 0:
        raise ConfigError(f"synthetic: application weights must be >= 0 and not all 0, got {mix}")
    return list(mix), weights / weights.sum()


def _factors(deadline_factor, n: int, rng: np.random.Generator) -> np.ndarray | None:
    if deadline_factor is None:
        rng.random(n)  # keep the stream the same with and without deadlines
        return None
    if isinstance(deadline_factor, (int, float)):
        low = high = float(deadline_factor)
    else:
        low, high = (float(x) for x in deadline_factor)
    if not 0 < low <= high:
        raise ConfigError(f"synthetic: deadline factor must be > 0 (low <= high),"
                          f" got {deadline_factor}")
    return low + (high - low) * rng.random(n)
