"""Running policies on workloads: one run, or several side by side on the same input."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .control import Controller
from .metrics import run_metrics
from .model import JobSpec, Node
from .policies.base import Policy
from .session import make_engine, simulate
from .sim import SimBackend


@dataclass
class RunResult:
    policy: str
    metrics: dict[str, Any]
    controller: Controller
    wall_seconds: float
    peak_mib: float | None = None

    @property
    def backend(self) -> SimBackend:
        return self.controller.backend

    def row(self) -> dict[str, Any]:
        return {"policy": self.policy, **self.metrics, "wall_s": self.wall_seconds}


def run_policy(nodes: Sequence[Node], jobs: Sequence[JobSpec], policy: str | Policy, *,
               policy_options: dict | None = None, progress: Callable[[float], None] | None = None,
               measure_memory: bool = False, timeline_every: float = 0.0,
               fragmentation: bool = True, **sim_options) -> RunResult:
    """Simulate `jobs` on `nodes` under `policy` to the end and measure it. `fragmentation`:
    measure GPU fragmentation against the jobs' task sizes at every timeline sample."""
    pol = make_engine(policy, policy_options)  # made before memory is measured
    if measure_memory:
        tracemalloc.start()
    t0 = time.perf_counter()
    controller = simulate(nodes, jobs, pol, timeline_every=timeline_every,
                          fragmentation=fragmentation, **sim_options)
    backend = controller.backend
    controller.run(progress=progress)
    wall = time.perf_counter() - t0
    peak = None
    if measure_memory:
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    metrics = run_metrics(backend, controller.recorder.timeline)
    metrics["stalled"] = len(controller.stalled)
    return RunResult(pol.name, metrics, controller, wall, peak)


def compare(nodes: Sequence[Node], jobs: Sequence[JobSpec], policies: Sequence[str], **kw) -> list[RunResult]:
    return [run_policy(nodes, jobs, p, **kw) for p in policies]
