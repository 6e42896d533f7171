"""Setting up a simulated run: a trace's jobs, a cluster's nodes, the simulator and the
Controller that schedules it, in one place.

`workbench simulate`/`compare`, `workbench serve`, the app's store (`ui.state`) and
`experiment.run_policy` all build their runs here, so a trace, a cluster and an engine name
mean the same thing (and fail with the same one-line message) wherever they are given.

    jobs = load_jobs("philly", seed=0, limit=500)
    nodes = load_nodes("philly", cluster=None)       # a Philly trace gets the Philly cluster
    controller = simulate(nodes, jobs, "tiresias")   # controller.backend is the SimBackend
    controller.run()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .clusters import parse_cluster
from .control import Controller
from .errors import ConfigError
from .metrics import FragmentationMeter
from .model import JobSpec, Node
from .placement.state import workload_of_jobs
from .policies import make_policy
from .policies.base import Policy
from .sim import SimBackend


def load_jobs(trace: str = "default", *, seed: int = 0, limit: int | None = None
              ) -> list[JobSpec]:
    """The jobs of `trace` (see `traces.load_trace`); with `limit`, the first that many by
    arrival."""
    from .traces import load_trace

    jobs = load_trace(trace, seed=seed)
    if limit is not None:
        if limit < 1:
            raise ConfigError(f"--limit: expected a positive integer, got {limit}")
        jobs = sorted(jobs, key=lambda j: j.arrival)[:limit]
    return jobs


def cluster_for(trace: str, cluster: str | None) -> str:
    """The cluster to simulate `trace` on: `cluster`, or when none is named the Philly
    cluster for a Philly trace and the default preset otherwise."""
    if cluster is not None:
        return cluster
    return "philly" if str(trace).split(":")[0] == "philly" else "default"


def load_nodes(trace: str, cluster: str | None = None, nodes: int | None = None,
               gpus_per_node: int | None = None) -> list[Node]:
    """The nodes of `cluster` (a preset, NxG or openb:N; see `cluster_for` when None),
    `nodes` and `gpus_per_node` overriding its size."""
    return parse_cluster(cluster_for(trace, cluster), nodes, gpus_per_node)


def make_engine(policy: str | Policy, options: dict[str, Any] | None = None) -> Policy:
    """`policy` itself, or a fresh engine of that name made with `options`."""
    return make_policy(policy, **(options or {})) if isinstance(policy, str) else policy


def simulate(nodes: Sequence[Node], jobs: Sequence[JobSpec], policy: str | Policy, *,
             policy_options: dict[str, Any] | None = None, timeline_every: float = 0.0,
             fragmentation: bool = True, **sim_options: Any) -> Controller:
    """A Controller scheduling `jobs` on a simulator of `nodes` under `policy` (an engine
    name, made with `policy_options`, or an engine). Its recorder samples the timeline every
    `timeline_every` seconds (0: every round) and, with `fragmentation`, measures fragmented
    GPUs against the jobs' task sizes. `sim_options` go to `SimBackend`."""
    controller = Controller(SimBackend(nodes, jobs, **sim_options),
                            make_engine(policy, policy_options))
    controller.recorder.timeline_every = timeline_every
    if fragmentation and jobs:
        controller.recorder.fragmentation = FragmentationMeter(workload_of_jobs(jobs))
    return controller
