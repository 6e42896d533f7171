"""Setting up a simulated run: a trace's jobs, a cluster's nodes, the simulator and the
Controller that schedules it, in one place.

`workbench simulate`/`compare`, `workbench serve`, the app's store (`ui.state`) and
`experiment.run_policy` all build their runs here, so a trace, a cluster and an engine name
mean the same thing (and fail with the same one-line message) wherever they are given.

    jobs = load_jobs("philly", seed=0, limit=500)
    nodes = load_nodes("philly", cluster=None)       # a Philly trace gets the Philly cluster
    controller = simulate(nodes, jobs, "tiresias")   # controller.backend is the SimBackend
    controller.run()

A workload is checked against its cluster in one place, `refusals`: a job that even at its
smallest size needs more than the whole cluster holds (99,999 GPUs of 64), with one task
bigger than every node, or with more workers than the nodes hold (a task cannot span nodes),
can never run. `simulate` gives its Controller those verdicts, and it
rejects each such job with its reason when the job arrives, before any engine sees it: the
CLI's results, the app's Jobs and Decisions and a notebook's `Workbench()` all show the same
rejection, and no engine, forecast or view spends time on a job that cannot run.

"Smallest size" is `min_workers`, as the engines' own check (`placement.ledger.never_fits`)
has it: an elastic job asking for more than the cluster (a Pollux row of 32 replicas on 16
GPUs, whose minimum is 1) is not refused, since an elastic engine may run it smaller; an
engine that will not shrink it keeps it waiting with the shortfall as its reason.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .clusters import parse_cluster
from .control import Controller, RoundReport
from .errors import ConfigError, unknown_keyword
from .metrics import FragmentationMeter
from .model import JobSpec, Node, Reject
from .placement.ledger import shape_refusal
from .placement.state import workload_of_jobs
from .policies import make_policy
from .policies.base import Policy
from .sim import SimBackend


def load_jobs(trace: str = "default", *, seed: int = 0, limit: int | None = None
              ) -> list[JobSpec]:
    """The jobs of `trace` (see `traces.load_trace`); with `limit`, the first that many by
    arrival."""
    from .traces import load_trace

    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ConfigError(f"--seed: expected a non-negative integer, got {seed!r}")
    jobs = load_trace(trace, seed=seed)
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1:
            raise ConfigError(f"--limit: expected a positive integer, got {limit!r}")
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
    if options is not None and not isinstance(options, Mapping):  # (** of a str: TypeError)
        raise ConfigError(f"policy_options: expected a dict of an engine's options, got {options!r}")
    if isinstance(policy, str) or not callable(getattr(policy, "schedule", None)):
        return make_policy(policy, **(options or {}))  # (None, a number: a ConfigError there)
    return policy


def refusals(jobs: Sequence[JobSpec], nodes: Sequence[Node]) -> dict[str, str]:
    """Job name -> why it can never run on `nodes`, for each such job: at its minimum size its
    workers and parameter servers together need more of a resource than the whole cluster has
    ("rejected: needs 99,999 GPUs, the cluster has 64"), or one of its tasks needs more than
    the largest node ("... one worker needs 8 GPUs, the largest node has 4"), or more of its
    workers than the nodes hold ("... needs 4 workers, the nodes hold at most 3 (one takes
    3 GPUs, ...)"). The one check of a workload against its cluster, for the CLI and the app
    alike (see the module docstring), by the engines' rule (`placement.ledger.shape_refusal`)."""
    if not jobs or not nodes:
        return {}
    capacity = np.array([[n.cpus, n.mem, n.gpus] for n in nodes], dtype=float)
    # A trace has few distinct shapes (82,247 Philly jobs, a few dozen): judge each once.
    shapes: dict[tuple, str | None] = {}
    verdicts: dict[str, str] = {}
    for job in jobs:
        shape = (job.worker_demand, job.ps_demand, job.min_workers, job.num_ps)
        if shape not in shapes:
            shapes[shape] = shape_refusal(capacity, *shape)
        if (why := shapes[shape]) is not None:
            verdicts[job.name] = why
    return verdicts


class AdmittingController(Controller):
    """A Controller that rejects the jobs `refusals` found impossible as they arrive, with
    their reasons (recorded as the "admission" step's decisions), before the engine's round:
    no engine, forecast or view ever handles them."""

    def __init__(self, backend, policy: Policy, refused: Sequence[tuple[JobSpec, str]],
                 **kwargs: Any) -> None:
        super().__init__(backend, policy, **kwargs)
        # (arrival, name, reason), latest first: popped from the end as the clock passes them
        self._refused = sorted(((job.arrival, job.name, why) for job, why in refused),
                               reverse=True)

    @property
    def refused(self) -> list[str]:
        """The jobs still to be rejected when they arrive."""
        return [name for _, name, _ in self._refused]

    def round(self) -> RoundReport:
        now = self.backend.now
        arrived = []
        while self._refused and self._refused[-1][0] <= now:
            arrived.append(self._refused.pop())
        if arrived:
            outcomes = self.backend.apply([Reject(name, why) for _, name, why in arrived])
            self.recorder.record_round(now, "admission", outcomes)
        return super().round()


def simulate(nodes: Sequence[Node], jobs: Sequence[JobSpec], policy: str | Policy, *,
             policy_options: dict[str, Any] | None = None, timeline_every: float = 0.0,
             fragmentation: bool = True, **sim_options: Any) -> Controller:
    """A Controller scheduling `jobs` on a simulator of `nodes` under `policy` (an engine
    name, made with `policy_options`, or an engine). Jobs that can never run (`refusals`) are
    rejected as they arrive. Its recorder samples the timeline every `timeline_every` seconds
    (0: every round) and, with `fragmentation`, measures fragmented GPUs against the jobs'
    task sizes. `sim_options` go to `SimBackend`."""
    check_sim_options(sim_options)
    verdicts = refusals(jobs, nodes)
    controller = AdmittingController(SimBackend(nodes, jobs, **sim_options),
                                     make_engine(policy, policy_options),
                                     [(j, verdicts[j.name]) for j in jobs if j.name in verdicts])
    controller.recorder.timeline_every = timeline_every
    if fragmentation:
        meter_fragmentation(controller, [j for j in jobs if j.name not in verdicts])
    return controller


def check_sim_options(sim_options: dict[str, Any]) -> None:
    """A one-line ConfigError for an option the simulator does not take (a notebook's
    `bogus=1` was its constructor's TypeError); the simulator checks its nodes and jobs."""
    if (unknown := unknown_keyword(SimBackend, sim_options, skip=("nodes", "jobs"))) is not None:
        key, takes = unknown
        raise ConfigError(f"{key}: not an option of the simulator; it takes {', '.join(takes)}")


def meter_fragmentation(controller: Controller, runnable: Sequence[JobSpec]) -> None:
    """Have `controller`'s recorder measure fragmented GPUs against the task sizes of
    `runnable` (the jobs not refused: a refused job places no task); none, nothing to measure."""
    if runnable:
        controller.recorder.fragmentation = FragmentationMeter(workload_of_jobs(runnable))
