"""Plain data shared by every part of the workbench: nodes, jobs, cluster state, actions.

Resources are counted in three units everywhere: CPU cores, memory in GiB, GPUs.
A GPU demand below 1.0 is a fraction of one GPU (a GPU-sharing task); whole GPUs
are integers. Times are seconds on the backend's clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Iterable

import numpy as np

CPU, MEM, GPU = 0, 1, 2  # column order of every resource array
RESOURCE_NAMES = ("cpu", "mem", "gpu")


@dataclass(frozen=True)
class Resources:
    cpu: float = 0.0
    mem: float = 0.0  # GiB
    gpu: float = 0.0  # whole GPUs, or a fraction of one (GPU sharing)

    def as_array(self) -> np.ndarray:
        """[cpu, mem, gpu], read-only (made once per Resources: placement asks millions of times)."""
        try:  # (not through `__dict__`: reading it makes the object keep a real dict, and
            return self._array  # every later attribute read of it 2-3x slower)
        except AttributeError:
            array = np.array([self.cpu, self.mem, self.gpu], dtype=float)
            array.flags.writeable = False
            object.__setattr__(self, "_array", array)
            return array

    def __add__(self, other: "Resources") -> "Resources":
        return Resources(self.cpu + other.cpu, self.mem + other.mem, self.gpu + other.gpu)

    def __mul__(self, k: float) -> "Resources":
        return Resources(self.cpu * k, self.mem * k, self.gpu * k)

    __rmul__ = __mul__


@dataclass(frozen=True)
class Node:
    name: str
    cpus: float
    mem: float  # GiB
    gpus: int
    gpu_model: str = "V100"
    rack: str = "rack-0"

    @property
    def capacity(self) -> Resources:
        return Resources(self.cpus, self.mem, float(self.gpus))


class JobKind(str, Enum):
    ALLREDUCE = "allreduce"  # data-parallel workers only (Pollux applications)
    PS = "ps"  # parameter-server jobs (DL2/OASiS/DRAGON style)


@dataclass(frozen=True)
class JobSpec:
    """What a user submits. `total_work` is in iterations at `batch_size`."""

    name: str
    application: str
    arrival: float
    total_work: float
    batch_size: int
    initial_workers: int = 1
    min_workers: int = 1
    max_workers: int = 1
    num_ps: int = 0
    worker_demand: Resources = Resources(cpu=4, mem=16, gpu=1)
    ps_demand: Resources = Resources(cpu=2, mem=8, gpu=0)
    deadline: float | None = None  # absolute time on the backend clock
    priority: int = 0
    user: str = "default"
    kind: JobKind = JobKind.ALLREDUCE
    # Quality-of-experience target (DQoES): reach `target_metric` by `deadline`.
    target_metric: float | None = None
    # Cores a task would use unthrottled, as a multiple of its CPU request (a container without
    # a CPU limit bursts above its request). 1.0: uses what it requests, so it never contends.
    cpu_burst: float = 1.0
    # The job picks its own batch size on each placement (AdaptDL/Pollux, `perf/goodput.py`):
    # `batch_size` is then its initial batch and `total_work` counts progress units, iterations
    # at that batch weighted by statistical efficiency.
    adaptive_batch: bool = False

    def __post_init__(self) -> None:
        if not (1 <= self.min_workers <= self.initial_workers <= self.max_workers):
            raise ValueError(
                f"job {self.name}: need 1 <= min_workers <= initial_workers <= max_workers,"
                f" got {self.min_workers}, {self.initial_workers}, {self.max_workers}"
            )
        if self.total_work <= 0:
            raise ValueError(f"job {self.name}: total_work must be > 0, got {self.total_work}")
        if self.num_ps < 0:
            raise ValueError(f"job {self.name}: num_ps must be >= 0, got {self.num_ps}")

    def with_(self, **changes) -> "JobSpec":
        return replace(self, **changes)


class JobState(str, Enum):
    PENDING = "pending"  # submitted, not yet admitted or placed
    HOLDING = "holding"  # some tasks placed and holding resources, not all: cannot train
    RESTARTING = "restarting"  # placed, paying a checkpoint-restart delay
    RUNNING = "running"
    COMPLETED = "completed"
    REJECTED = "rejected"

    finished: bool  # completed or rejected
    placed: bool  # holding resources: holding, restarting or running


# Plain attributes, not properties: the simulator reads them millions of times per trace.
for _state in JobState:
    _state.finished = _state in (JobState.COMPLETED, JobState.REJECTED)
    _state.placed = _state in (JobState.HOLDING, JobState.RESTARTING, JobState.RUNNING)
del _state


Placement = dict[str, int]  # node name -> number of tasks of one role on it


@dataclass
class JobStatus:
    """What the backend knows about a job now. Policies read it, never write it."""

    spec: JobSpec
    state: JobState = JobState.PENDING
    workers: Placement = field(default_factory=dict)
    ps: Placement = field(default_factory=dict)
    target_workers: int = 0  # how many workers the job needs before it trains
    target_ps: int = 0
    progress: float = 0.0  # iterations done (checkpointed progress while not running)
    throughput: float = 0.0  # iterations per second at the current placement
    metric: float | None = None  # latest accuracy/loss-like value of its curve
    history: list[tuple[float, float, float]] = field(default_factory=list)  # (t, iters, metric)
    attained_service: float = 0.0  # GPU-seconds received (Tiresias)
    executed_time: float = 0.0  # seconds spent running
    first_start: float | None = None
    last_start: float | None = None
    finish_time: float | None = None
    restarts: int = 0
    admitted: bool = False
    reason: str = "waiting: not yet considered"
    name: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.name = self.spec.name  # a plain attribute: read millions of times per trace

    @property
    def has_run(self) -> bool:
        """Whether it has trained before, so that placing it is a restart: it has started here,
        or it was found with service kept for it (a scheduler that restarted, on a cluster)."""
        return self.first_start is not None or self.attained_service > 0

    @property
    def num_workers(self) -> int:
        return sum(self.workers.values())

    @property
    def num_ps(self) -> int:
        return sum(self.ps.values())

    @property
    def remaining_work(self) -> float:
        return max(self.spec.total_work - self.progress, 0.0)

    @property
    def fraction_done(self) -> float:
        return min(self.progress / self.spec.total_work, 1.0)

    @property
    def nodes(self) -> set[str]:
        return {n for n, c in self.workers.items() if c} | {n for n, c in self.ps.items() if c}

    def demand(self, workers: int | None = None, ps: int | None = None) -> Resources:
        w = self.spec.initial_workers if workers is None else workers
        p = self.spec.num_ps if ps is None else ps
        return self.spec.worker_demand * w + self.spec.ps_demand * p


@dataclass
class ClusterState:
    """A snapshot of the cluster: node arrays for fast policies, job views by name.

    `capacity`, `allocated` are (nodes x 3) arrays in CPU, MEM, GPU order.
    `gpu_free` is (nodes x max GPUs per node) of free fraction per physical GPU
    (1.0 = whole GPU free; NaN where the node has fewer GPUs).
    """

    now: float
    nodes: list[Node]
    capacity: np.ndarray
    allocated: np.ndarray
    gpu_free: np.ndarray
    node_up: np.ndarray
    jobs: dict[str, JobStatus]
    node_index: dict[str, int] = field(default_factory=dict)
    # Waiting jobs (PENDING/HOLDING) in arrival order, when the backend keeps that queue.
    queue: Iterable[JobStatus] | None = None
    # Jobs holding resources (holding, restarting, running), when the backend keeps that set.
    placed: Iterable[JobStatus] | None = None

    def __post_init__(self) -> None:
        if not self.node_index:
            self.node_index = {n.name: i for i, n in enumerate(self.nodes)}

    @property
    def free(self) -> np.ndarray:
        """Free resources per node; a node that is down has none."""
        free = self.capacity - self.allocated
        up = self.node_up
        # (checked first: a mask of all nodes costs more; count_nonzero has no Python wrapper)
        if np.count_nonzero(up) != len(up):
            free[~up] = 0.0
        return free

    @property
    def racks(self) -> np.ndarray:
        return np.array([n.rack for n in self.nodes])

    def jobs_in(self, *states: JobState) -> list[JobStatus]:
        return [j for j in self.jobs.values() if j.state in states]

    @property
    def waiting(self) -> list[JobStatus]:
        """Jobs waiting to be placed (pending or holding), oldest arrival first."""
        return list(self.iter_waiting())

    def iter_waiting(self) -> Iterable[JobStatus]:
        """Like `waiting` without copying the backend's queue (long traces queue thousands)."""
        if self.queue is not None:
            return self.queue
        jobs = [j for j in self.jobs.values() if j.state in (JobState.PENDING, JobState.HOLDING)]
        return sorted(jobs, key=lambda j: (j.spec.arrival, j.name))

    def iter_placed(self) -> Iterable[JobStatus]:
        """Jobs holding resources, without scanning every active job when the backend knows."""
        if self.placed is not None:
            return self.placed
        return [j for j in self.jobs.values() if j.state.placed]

    @property
    def active(self) -> list[JobStatus]:
        return [j for j in self.jobs.values() if not j.state.finished]

    def any_active(self) -> bool:
        """Whether any job is unfinished, without listing them as `active` does."""
        return any(not j.state.finished for j in self.jobs.values())

    @property
    def total_gpus(self) -> float:
        return float(self.capacity[self.node_up, GPU].sum())


# ---- Actions a policy may return ---------------------------------------------------------


@dataclass(frozen=True)
class Action:
    job: str
    reason: str


@dataclass(frozen=True)
class Place(Action):
    """Start a job on this placement. All of its tasks, unless `partial` (kube-default only):
    then the given tasks hold their resources and the job waits for the rest."""

    workers: Placement = field(default_factory=dict)
    ps: Placement = field(default_factory=dict)
    partial: bool = False


@dataclass(frozen=True)
class Scale(Action):
    """Give a running job a new worker/PS count on a new placement (checkpoint-restart)."""

    workers: Placement = field(default_factory=dict)
    ps: Placement = field(default_factory=dict)


@dataclass(frozen=True)
class Migrate(Action):
    """Move a job's tasks to another placement with the same counts (checkpoint-restart)."""

    workers: Placement = field(default_factory=dict)
    ps: Placement = field(default_factory=dict)


@dataclass(frozen=True)
class Suspend(Action):
    """Preempt a placed job: it releases everything and waits with its checkpointed progress."""


@dataclass(frozen=True)
class Admit(Action):
    """Accept a pending job into the queue (admission-controlled engines)."""


@dataclass(frozen=True)
class Reject(Action):
    """Refuse a pending job for good."""


@dataclass(frozen=True)
class Wait(Action):
    """Leave a job waiting; says why (shown in the UI)."""


def count_problem(spec: JobSpec, workers: Placement, ps: Placement) -> str | None:
    """Why these task counts are not a valid shape for the job, or None. Both backends
    refuse the same shapes with the same words."""
    w, p = total(workers), total(ps)
    if not (spec.min_workers <= w <= spec.max_workers):
        return f"{spec.name}: {w} workers outside [{spec.min_workers}, {spec.max_workers}]"
    if spec.num_ps and p < 1:
        return f"{spec.name}: a parameter-server job needs at least one PS"
    if not spec.num_ps and p:
        return f"{spec.name}: has no parameter servers"
    return None


def placement_counts(placement: Placement) -> tuple[int, ...]:
    """Replicas per node, largest first: the key the performance model takes."""
    return tuple(sorted((c for c in placement.values() if c > 0), reverse=True))


def placement_need(spec: JobSpec, workers: Placement, ps: Placement, nodes: list[Node],
                   node_index: dict[str, int], node_up: np.ndarray, capacity: np.ndarray,
                   used: np.ndarray) -> tuple[dict[int, list[float]], list[tuple[int, int, float]]]:
    """What a placement takes on each node it touches ([cpu, mem, gpu] in plain floats: a
    node's three numbers cost less than numpy calls, and are the same IEEE operations), and
    its tasks as (node, count, GPUs per task). ValueError naming the job and the node when a
    node is unknown or down, or the tasks do not fit in `capacity - used` there (both backends
    check the same way)."""
    need: dict[int, list[float]] = {}
    tasks: list[tuple[int, int, float]] = []
    for placement, demand in ((workers, spec.worker_demand), (ps, spec.ps_demand)):
        for name, count in placement.items():
            if not count:
                continue
            i = node_index.get(name)
            if i is None:
                raise ValueError(f"{spec.name}: unknown node {name!r}")
            if not node_up[i]:
                raise ValueError(f"{spec.name}: node {name} is down")
            add = [float(demand.cpu) * count, float(demand.mem) * count, float(demand.gpu) * count]
            if i in need:
                add = [a + b for a, b in zip(need[i], add)]
            need[i] = add
            tasks.append((i, count, demand.gpu))
    for i in (need if len(need) == 1 else sorted(need)):
        (u_cpu, u_mem, u_gpu), (n_cpu, n_mem, n_gpu) = used[i].tolist(), need[i]
        c_cpu, c_mem, c_gpu = capacity[i].tolist()
        if u_cpu + n_cpu > c_cpu + 1e-6 or u_mem + n_mem > c_mem + 1e-6 or \
                u_gpu + n_gpu > c_gpu + 1e-6:
            free = capacity[i] - used[i]
            raise ValueError(f"{spec.name}: does not fit on {nodes[i].name}"
                             f" (free {free[CPU]:g} CPU, {free[MEM]:g} GiB, {free[GPU]:g} GPU)")
    return need, tasks


def merge_placements(*placements: Placement) -> Placement:
    out: Placement = {}
    for p in placements:
        for node, count in p.items():
            if count:
                out[node] = out.get(node, 0) + count
    return out


def total(placement: Placement) -> int:
    return sum(placement.values())


def describe_placement(workers: Placement, ps: Iterable[tuple[str, int]] | Placement = ()) -> str:
    if not ps and len(workers) == 1:  # most placements: one node, no PS
        ((node, count),) = workers.items()
        return f"{node}×{count}" if count else "nowhere"
    ps_items = ps.items() if isinstance(ps, dict) else ps
    parts = [f"{n}×{c}" for n, c in sorted(workers.items()) if c]
    ps_parts = [f"{n}×{c}ps" for n, c in sorted(ps_items) if c]
    return ", ".join(parts + ps_parts) or "nowhere"


def tasks_per_node(capacity: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """How many tasks of `demand` ([CPU, MEM, GPU]) each empty node of `capacity` (nodes x 3)
    holds (inf on every node for a task needing nothing)."""
    used = demand > 0
    if not used.any():
        return np.full(len(capacity), math.inf)
    return np.floor(capacity[:, used] / demand[used] + 1e-9).min(axis=1)


def most_tasks(capacity: np.ndarray, demand: np.ndarray) -> int | float:
    """How many tasks of `demand` the empty nodes of `capacity` hold together, each task on
    one node (inf for a task needing nothing)."""
    if not (demand > 0).any():
        return math.inf
    return int(tasks_per_node(capacity, demand).sum())
