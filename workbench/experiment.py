"""Running policies on workloads: one run, or several side by side on the same input."""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
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
    with fewer_young_collections():
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


@contextmanager
def fewer_young_collections(young: int = 10_000) -> Iterator[None]:
    """Let the cyclic collector's young generation grow to `young` objects (Python's default
    is 700) while a run goes, and put the thresholds back after. A run makes millions of
    short-lived tuples and no reference cycles (none of 13 engines on the default workload
    left more than 99 objects to the collector; tiresias on the whole Philly trace, 20), so
    its passes only scan: at 700 they took ~0.5 s of a 11 s Philly replay, most of it full
    passes over the run's 300 k lasting objects (docs/sim-performance.md). A cycle waits
    at most `young` allocations longer."""
    old = gc.get_threshold()
    gc.set_threshold(max(young, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def compare(nodes: Sequence[Node], jobs: Sequence[JobSpec], policies: Sequence[str], **kw) -> list[RunResult]:
    return [run_policy(nodes, jobs, p, **kw) for p in policies]
