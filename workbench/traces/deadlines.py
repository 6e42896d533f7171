"""Pollux workload 1 (Philly-derived arrivals, applications, sizes, batch sizes) with
deadlines: `deadline_workload` for the QoS engine's bench (deadline after the ideal run time)
and `qoe_workload` for DQoES's (a target metric to reach, and a deadline to reach it by).
Seeded: the same seed gives the same workload for every engine.

The allowance (`deadline_rule.ALLOWANCE`: one scheduling round plus one restart, which every
engine pays before a job trains) keeps the trace's many one-minute jobs from having deadlines
no scheduler could meet. The default workload's own deadlines follow `deadline_rule`.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from ..model import Resources
from .deadline_rule import ALLOWANCE
from .pollux import load_pollux_workload
from .registry import shipped_workload_path

CPU_WORKER = {"cpu": 4.0, "mem": 16.0, "gpu": 0.0}


def deadline_workload(seed: int, *, trace: str | None = None, share: float = 0.8,
                      factors: tuple[float, float] = (0.7, 3.0), allowance: float = ALLOWANCE,
                      cpu: bool = False, gpus_per_node: int = 4) -> list:
    """Pollux workload 1 (`trace`: pollux:PATH for another), each job kept with chance `share`,
    deadline = arrival + `allowance` + f x its ideal run time at its submitted size, f ~
    U(`factors`). `cpu`: every worker a 4-core CPU worker instead (`CPU_WORKER`)."""

    path = shipped_workload_path()
    if trace:
        kind, _, arg = trace.partition(":")
        if kind != "pollux" or not arg:
            raise ConfigError(f"--trace: expected pollux:PATH, got {trace!r}")
        path = arg
    if not 0 < share <= 1:
        raise ConfigError(f"--share: expected a number in (0, 1], got {share}")
    lo, hi = factors
    if not 0 < lo <= hi:
        raise ConfigError(f"--deadline: expected LOW-HIGH with 0 < LOW <= HIGH, got {lo}-{hi}")
    # deadline_factor=1 gives deadline = arrival + ideal run time at the submitted size.
    base = load_pollux_workload(path, deadline_factor=1.0, gpus_per_node=gpus_per_node,
                                lengths="project")  # what the qos bench was measured on
    rng = np.random.default_rng(seed)
    keep = rng.random(len(base)) < share
    f = rng.uniform(lo, hi, len(base))
    demand = Resources(**CPU_WORKER) if cpu else None
    out = []
    for spec, k, fi in zip(base, keep, f):
        if not k:
            continue
        run = spec.deadline - spec.arrival
        spec = spec.with_(deadline=spec.arrival + allowance + float(fi) * run)
        if demand is not None:
            spec = spec.with_(worker_demand=demand)
        out.append(spec)
    return out


def qoe_workload(seed: int, *, share: float = 0.8, targets: tuple[float, float] = (0.5, 0.95),
                 factors: tuple[float, float] = (0.7, 3.0), allowance: float = ALLOWANCE,
                 gpus_per_node: int = 4) -> list:
    """Pollux workload 1, each job kept with chance `share`, trained to a QoE target: the metric
    its measured curve reaches after a fraction q ~ U(`targets`) of the iterations to
    convergence (`total_work` = the first iteration at the target); deadline = arrival +
    `allowance` + f x the ideal time to the target at its submitted size, f ~ U(`factors`)."""
    from ..forecast import model_work_to_target
    from ..perf import default_perf

    if not 0 < share <= 1:
        raise ConfigError(f"--share: expected a number in (0, 1], got {share}")
    if not 0 < targets[0] <= targets[1] <= 1:
        raise ConfigError(f"--target: expected LOW-HIGH within (0, 1], got {targets}")
    if not 0 < factors[0] <= factors[1]:
        raise ConfigError(f"--deadline: expected LOW-HIGH with 0 < LOW <= HIGH, got {factors}")
    perf = default_perf()
    # the project's lengths: the metric curve (`metric_at`) counts in the table's iterations
    base = load_pollux_workload(shipped_workload_path(), gpus_per_node=gpus_per_node,
                                lengths="project")
    rng = np.random.default_rng(seed)
    keep = rng.random(len(base)) < share
    q = rng.uniform(*targets, len(base))
    f = rng.uniform(*factors, len(base))
    out = []
    for spec, k, qi, fi in zip(base, keep, q, f):
        if not k:
            continue
        app, bs = spec.application, spec.batch_size
        total = spec.total_work
        target = float(perf.metric_at(app, bs, qi * total))
        work = model_work_to_target(perf, app, bs, target)
        if not np.isfinite(work) or work < 0.05 * total:  # flat start: aim at the final value
            target = float(perf.metric_at(app, bs, total))
            work = model_work_to_target(perf, app, bs, target)
        work = float(min(max(work, 1.0), total))
        rate = perf.ideal_rate(spec, spec.initial_workers, gpus_per_node)
        deadline = spec.arrival + allowance + float(fi) * work / rate
        out.append(spec.with_(total_work=work, target_metric=target, deadline=deadline))
    return out
