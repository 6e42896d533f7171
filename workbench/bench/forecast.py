"""`workbench bench forecast`: how far `workbench.forecast` is from the true completion times.

A workload is replayed in the simulator under an engine, observed every `--step` seconds; for
each job the forecast is recorded when it arrives (waiting: queueing delay included) and the
first time its progress passes 10 %, 25 % and 50 %, and compared with when it really finished.

Error = |predicted finish - true finish| / (true finish - arrival), i.e. as a share of the
job's completion time. Also: the bias (mean signed error), the share of true finishes inside
the forecast's 90 % band, and for deadline jobs the Brier score of P(meet deadline).

The simulator's rates come from the same performance model the forecast uses, so on its own a
running job's forecast would be exact; `--model-error S` (default 0.1) makes every job in the
simulated truth run at a seeded random multiple exp(N(0, S²)) of the model's rate, as a real
job would differ from its profile. The anchor is a naive forecast measured in the same run:
remaining work / current rate (the model's rate at the submitted size for a waiting job),
starting now, no queue.

Workloads: `deadline` (the `bench qos` workload: train to convergence, deadlines) and `qoe`
(the `bench dqoes` workload: train to a target metric, so the work itself is forecast from
the metric curve).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time
from typing import Any

import numpy as np

from .. import argtypes
from ..errors import ConfigError
from ..output import emit

CHECKPOINTS = (0.0, 0.10, 0.25, 0.50)


class NoisyPerf:
    """The performance model with a fixed, seeded per-job speed multiplier (model error)."""

    def __init__(self, base, sigma: float, seed: int = 0) -> None:
        self.base, self.sigma, self.seed = base, float(sigma), int(seed)
        self._factor: dict[str, float] = {}

    def factor(self, name: str) -> float:
        f = self._factor.get(name)
        if f is None:
            digest = hashlib.sha256(f"{self.seed}:{name}".encode()).digest()
            rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
            f = self._factor[name] = float(math.exp(rng.normal(0.0, self.sigma)))
        return f

    def iteration_rate(self, spec, workers, ps) -> float:
        return self.base.iteration_rate(spec, workers, ps) * self.factor(spec.name)

    def __getattr__(self, name):
        return getattr(self.base, name)


def _naive(state, job, perf, now: float) -> float:
    if job.throughput > 0:
        return now + job.remaining_work / job.throughput
    try:
        rate = perf.ideal_rate(job.spec, max(job.num_workers or job.spec.initial_workers, 1), 4)
    except (KeyError, ValueError):
        rate = 0.0
    return now + job.remaining_work / rate if rate > 0 else math.inf


def replay(jobs, nodes, policy: str, *, model_error: float = 0.1, seed: int = 0,
           step: float = 60.0) -> list[dict[str, Any]]:
    """Records (job, checkpoint, predicted, low, high, p_meet, naive) and the truth per job."""
    from ..control import Controller
    from ..forecast import Forecaster
    from ..perf import default_perf
    from ..policies import make_policy
    from ..sim import SimBackend

    model = default_perf()
    truth_perf = NoisyPerf(model, model_error, seed) if model_error > 0 else model
    backend = SimBackend(nodes, jobs, perf=truth_perf, history_interval=step)
    controller = Controller(backend, make_policy(policy))
    forecaster = Forecaster(model)
    pending: dict[str, list[float]] = {j.name: list(CHECKPOINTS) for j in jobs}
    records: list[dict[str, Any]] = []
    t = min(j.arrival for j in jobs)
    while not backend.done():
        t += step
        # Rounds by hand up to t: every round the engine would have, and an observation at t.
        while (nxt := controller.next_round_time()) is not None and nxt <= t:
            backend.advance(nxt)
            controller.round()
        if controller.next_round_time() is None and backend.next_event_time() is None:
            controller.run()  # the engine is stuck: let the controller end it as it would
            break
        backend.advance(t)
        state = backend.observe()
        due = []
        for job in state.active:
            marks = pending.get(job.name)
            if not marks:
                continue
            frac = job.fraction_done if job.spec.target_metric is None else \
                job.progress / job.spec.total_work
            passed = [m for m in marks if frac >= m]
            if passed:
                due.append((job, max(passed)))
                pending[job.name] = [m for m in marks if m > max(passed)]
        if not due:
            continue
        fc = forecaster.run(state)
        for job, mark in due:
            f = fc.get(job.name)
            if f is None:
                continue
            records.append({"job": job.name, "checkpoint": mark, "at": state.now,
                            "finish": f.finish, "low": f.low, "high": f.high,
                            "p_meet": f.p_meet_deadline, "source": f.source,
                            "naive": _naive(state, job, model, state.now)})
    for r in records:
        j = backend.jobs[r["job"]]
        r["true"] = j.finish_time if j.state.value == "completed" else None
        r["arrival"] = j.spec.arrival
        r["deadline"] = j.spec.deadline
    return [r for r in records if r["true"] is not None]


def score(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for mark in CHECKPOINTS:
        rs = [r for r in records if r["checkpoint"] == mark]
        if not rs:
            continue
        jct = np.array([max(r["true"] - r["arrival"], 1.0) for r in rs])
        true = np.array([r["true"] for r in rs])
        pred = np.array([r["finish"] for r in rs])
        naive = np.array([r["naive"] for r in rs])
        err = (pred - true) / jct
        nerr = (naive - true) / jct
        inside = np.mean([(r["low"] <= r["true"] <= r["high"]) for r in rs])
        dl = [r for r in rs if r["deadline"] is not None and r["p_meet"] is not None]
        brier = float(np.mean([(r["p_meet"] - float(r["true"] <= r["deadline"] + 1e-9)) ** 2
                               for r in dl])) if dl else float("nan")
        med = float(np.median(np.abs(err)))
        naive_med = float(np.nanmedian(np.abs(nerr)))
        rows.append({"checkpoint": "arrival" if mark == 0 else f"{mark:.0%}", "jobs": len(rs),
                     "median_err_%": 100 * med, "mean_err_%": 100 * float(np.mean(np.abs(err))),
                     "p90_err_%": 100 * float(np.percentile(np.abs(err), 90)),
                     "bias_%": 100 * float(np.mean(err)), "in_90%_band": float(inside),
                     "brier_p_meet": brier, "naive_median_err_%": 100 * naive_med,
                     "ratio_to_naive": med / naive_med if naive_med > 0 else float("nan")})
    return rows


def run_bench(seeds: int, policies: list[str], workloads: list[str], *, model_error: float,
              nodes: int, step: float, share: float) -> dict[str, Any]:
    from ..traces.deadlines import deadline_workload, qoe_workload
    from .qos import cluster

    out_rows = []
    for wl in workloads:
        for policy in policies:
            records = []
            for seed in range(seeds):
                jobs = (deadline_workload(seed, share=share) if wl == "deadline"
                        else qoe_workload(seed, share=share))
                records += replay(jobs, cluster(nodes), policy, model_error=model_error,
                                  seed=seed, step=step)
            for row in score(records):
                out_rows.append({"workload": wl, "policy": policy, **row})
    return {"seeds": seeds, "model_error": model_error, "nodes": nodes, "step_s": step,
            "share": share, "rows": out_rows}


def run(args: argparse.Namespace) -> int:
    from ..policies import check_engine

    if args.seeds < 1:
        raise ConfigError(f"--seeds: expected a positive integer, got {args.seeds}")
    if args.model_error < 0:
        raise ConfigError(f"--model-error: expected >= 0, got {args.model_error}")
    if args.step <= 0:
        raise ConfigError(f"--step: expected seconds > 0, got {args.step}")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    for p in policies:
        check_engine(p, "--policies")
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in workloads:
        if w not in ("deadline", "qoe"):
            raise ConfigError(f"--workloads: expected deadline and/or qoe, got {w!r}")
    started = time.perf_counter()
    result = run_bench(args.seeds, policies, workloads, model_error=args.model_error,
                       nodes=args.nodes, step=args.step, share=args.share)
    result["wall_s"] = time.perf_counter() - started
    emit(result, as_json=args.json,
         tables={f"forecast error vs true completion ({args.seeds} seeds, {args.nodes} nodes,"
                 f" model error {args.model_error:g}); error = |pred - true| / JCT":
                 result["rows"]},
         notes=[f"naive = remaining / current rate from now, no queue; wall {result['wall_s']:.0f} s"])
    return 0


def register(sub) -> None:
    p = sub.add_parser("forecast", help="forecast error against true completion at 10/25/50%% progress")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--policies", default="fifo,qos")
    p.add_argument("--workloads", default="deadline,qoe")
    p.add_argument("--nodes", type=int, default=16, help="nodes x4 GPUs")
    p.add_argument("--share", type=float, default=0.5, help="share of the trace's jobs per seed")
    p.add_argument("--model-error", type=argtypes.nonnegative, default=0.1,
                   help="sd of the log speed error of the simulated truth vs the model")
    p.add_argument("--step", type=argtypes.positive, default=60.0, help="seconds between observations")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)
