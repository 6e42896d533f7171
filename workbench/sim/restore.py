"""A `Snapshot` back into a running simulator: `from_snapshot(snapshot)` is a `SimBackend` at
the snapshot's moment, from which any engine can be run forward (switch previews, what-ifs,
`workbench simulate --from-snapshot`).

What is restored: the nodes (a node that took no new work stays so, its jobs carry on, as
under a cordon), what other schedulers' pods hold, every job at its progress: waiting ones
queued in arrival order, running ones on their nodes training from the snapshot's moment with
no restart delay, restarting ones paying a full one, finished ones as they ended, and the jobs
still to arrive. Utilisation is counted from the snapshot on.

Rates (`FittedPerf`): the simulator's performance model, calibrated per job to what the job
has measured. A job whose application the model knows runs at the model's rate times its
measured/model ratio at its current placement (clamped to [1/5, 5]; 1 where nothing was
measured): on the emulated cluster the ratio is 1, on real hardware it carries the
difference. A job whose application the model does not know gets a `Fit` from the throughput
it has reported: the rate at its current size is its latest reported throughput (the median of
its history's rates when it reports none), its relative spread over the history intervals is
the rate's uncertainty, and other sizes scale as workers^0.8 (one size seen tells nothing of
scaling: 0.8 is a middling data-parallel efficiency; `Fit.rate_range` gives the rates the
exponents of `EXPONENT_RANGE` allow). `fitted_bands` gives each such job's finish with that
uncertainty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model import JobSpec, Placement, total
from .engine import SimBackend
from .snapshot import JobRecord, Snapshot

SCALE_RANGE = (0.2, 5.0)  # measured/model ratios beyond this are taken as a bad report
EXPONENT = 0.8  # rate ∝ workers**EXPONENT for a fitted job at another size
EXPONENT_RANGE = (0.5, 1.0)  # the band of scaling a single measured size allows
RATE_SD_FLOOR = 0.02  # a fitted rate is never known better than this (relative)
Z90 = 1.645  # a 90 % band


@dataclass(frozen=True)
class Fit:
    """A job's throughput as fitted from its reports (its application has no profile)."""

    job: str
    rate: float  # iterations/s at `workers`
    workers: int
    rate_sd: float  # relative
    points: int  # history intervals it was fitted on

    def rate_at(self, workers: int, exponent: float = EXPONENT) -> float:
        if workers <= 0 or self.rate <= 0:
            return 0.0
        return self.rate * (workers / max(self.workers, 1)) ** exponent

    def rate_range(self, workers: int) -> tuple[float, float]:
        """The lowest and highest rate at `workers` over `EXPONENT_RANGE` and the rate's
        90 % band: what one observed size allows."""
        rates = [self.rate_at(workers, e) for e in EXPONENT_RANGE]
        return (min(rates) * max(1 - Z90 * self.rate_sd, 0.05),
                max(rates) * (1 + Z90 * self.rate_sd))


def fit_throughput(job: JobRecord) -> Fit | None:
    """The `Fit` of a job from its reported throughput and history; None with no report."""
    t, done = (np.array([h[k] for h in job.history], dtype=float) for k in (0, 1))
    dt, dw = np.diff(t), np.diff(done)
    rates = dw[(dt > 0) & (dw > 0)] / dt[(dt > 0) & (dw > 0)] if len(t) > 1 else np.array([])
    rate = job.throughput if job.throughput > 0 else float(np.median(rates)) if len(rates) else 0.0
    if rate <= 0:
        return None
    spread = float(np.std(rates) / np.mean(rates)) if len(rates) > 1 else 0.1
    workers = job.target_workers or total(job.workers) or job.spec.initial_workers
    return Fit(job.name, rate, workers, max(spread, RATE_SD_FLOOR), len(rates))


class FittedPerf:
    """A performance model answering as `base` does, per job calibrated or fitted (see the
    module docstring). Everything else is `base`'s."""

    def __init__(self, base: Any, fits: dict[str, Fit], scales: dict[str, float]) -> None:
        self.base, self.fits, self.scales = base, fits, scales

    def iteration_rate(self, spec: JobSpec, workers: Placement, ps: Placement) -> float:
        fit = self.fits.get(spec.name)
        if fit is not None:
            return fit.rate_at(total(workers))
        try:
            rate = self.base.iteration_rate(spec, workers, ps)
        except (KeyError, ValueError):  # unknown and never reported: it cannot be foreseen
            return 0.0
        return rate * self.scales.get(spec.name, 1.0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)


def knows(perf: Any, spec: JobSpec) -> bool:
    """Whether `perf` has a model of `spec`'s application (of its kind)."""
    try:
        perf.iteration_rate(spec, {"n": spec.initial_workers}, {"n": spec.num_ps} if
                            spec.num_ps else {})
        return True
    except (KeyError, ValueError):
        return False


def fitted_perf(snapshot: Snapshot, base: Any) -> FittedPerf:
    """`base` calibrated to each job's measured throughput, fitted where it knows no model."""
    fits, scales = {}, {}
    for job in snapshot.active:
        if not knows(base, job.spec):
            if (fit := fit_throughput(job)) is not None:
                fits[job.name] = fit
        elif job.throughput > 0 and job.workers:
            model = base.iteration_rate(job.spec, job.workers, job.ps)
            if model > 0:
                scales[job.name] = float(np.clip(job.throughput / model, *SCALE_RANGE))
    return FittedPerf(base, fits, scales)


def from_snapshot(snapshot: Snapshot, perf: Any = None, **sim_options: Any) -> SimBackend:
    """A simulator at `snapshot`'s moment (see the module docstring). `perf`: the base
    performance model (default the package's); `sim_options` go to `SimBackend` (they win
    over the snapshot's restart delay and checkpoint interval). ValueError naming the job
    when a placement does not fit its node."""
    if perf is None:
        from ..perf import default_perf

        perf = default_perf()
    now = snapshot.taken_at
    specs = [j.spec.with_(arrival=min(j.spec.arrival, now)) for j in snapshot.jobs]
    options = {"restart_delay": snapshot.restart_delay,
               "checkpoint_interval": snapshot.checkpoint_interval, **sim_options}
    sim = SimBackend([r.node for r in snapshot.nodes], specs + list(snapshot.upcoming),
                     fitted_perf(snapshot, perf), **options)
    sim.advance(now)  # every job present arrives and waits, in arrival order
    for record in snapshot.nodes:
        if any(record.other.as_array() > 0):
            sim.hold_background(record.node.name, record.other)
    for job in snapshot.jobs:
        sim.restore_job(job.status())
    for record in snapshot.nodes:
        if not record.up:
            sim.set_schedulable(record.node.name, False)
    sim.reset_usage()
    sim.clock = type(sim.clock)(origin=snapshot.clock_origin)
    # a live cluster's controller rounds as soon as it sees a decisive change (`K8sBackend.
    # advance` returns early), not at the engine's next grid point: so does its replay
    sim.events_wait_for_grid = snapshot.source != "kubernetes"
    return sim


def fitted_bands(snapshot: Snapshot, perf: FittedPerf) -> list[dict[str, Any]]:
    """Per job with a fitted model: its fitted rate, the rate's uncertainty, and its finish
    at its current size with a 90 % band (running jobs; others depend on when they start)."""
    rows = []
    for name, fit in perf.fits.items():
        job = snapshot.job(name)
        left = max(job.spec.total_work - job.progress, 0.0)
        row = {"job": name, "application": job.spec.application, "rate": fit.rate,
               "rate_sd": fit.rate_sd, "workers": fit.workers, "points": fit.points,
               "finish": math.nan, "low": math.nan, "high": math.nan}
        if job.state.placed and fit.rate > 0:
            fast = fit.rate * (1 + Z90 * fit.rate_sd)
            slow = fit.rate * max(1 - Z90 * fit.rate_sd, 0.05)
            row.update(finish=snapshot.taken_at + left / fit.rate,
                       low=snapshot.taken_at + left / fast, high=snapshot.taken_at + left / slow)
        rows.append(row)
    return rows


__all__ = ["EXPONENT", "EXPONENT_RANGE", "Fit", "FittedPerf", "fit_throughput", "fitted_bands",
           "fitted_perf", "from_snapshot", "knows"]
