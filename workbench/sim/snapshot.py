"""A cluster's present as data: `Snapshot`, taken from any backend and saved as versioned JSON.

A snapshot holds what the simulator needs to carry on from that moment (`sim.restore` makes
the `SimBackend`): the nodes (capacity, GPUs, rack, whether they take new work, what pods the
workbench does not schedule hold there), every job the backend knows with its spec (requests,
deadline, worker range), state, placement, progress, measured throughput and history, the
jobs submitted that have not arrived yet, the engine that was scheduling, the clock, and the
simulator's own settings (restart delay, checkpoint interval).

`take(backend, state)` builds one from the `ClusterState` a backend reports and its `jobs`,
so a live Kubernetes cluster and the simulator are snapshotted alike. On a live cluster a
job's progress is that of its last report; `progress_at` (the Kubernetes backend's estimate
of progress now, from when it saw the report) replaces it.

The file (`save`/`load`) is JSON with `format: "workbench-snapshot"` and `version: 1`. A file
of another format or version, or with a field missing, of the wrong type or out of range, is
refused with one `InputError` naming the file and the field (`jobs[3].spec.total_work`).
What it does not hold: an engine's learning state (DL2's network, Tiresias' queues are
rebuilt from the jobs' attained service), and a job's checkpoint separate from its progress.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..model import (
    ClusterState,
    JobKind,
    JobSpec,
    JobState,
    JobStatus,
    Node,
    Placement,
    Resources,
)

FORMAT = "workbench-snapshot"
VERSION = 1


# The longest restart the simulator accepts, from a file, an option or a notebook: a day
# already stops most jobs; 1e300 s "ran" a workload to a mean JCT of 2.8e296 h.
MAX_RESTART_DELAY = 86_400.0


@dataclass(frozen=True)
class NodeRecord:
    """A node as the snapshot found it."""

    node: Node
    up: bool = True  # takes new work: ready and not cordoned
    other: Resources = field(default_factory=Resources)  # held by pods no engine schedules


@dataclass
class JobRecord:
    """A job as the snapshot found it (the fields of `JobStatus` that outlive the moment)."""

    spec: JobSpec
    state: JobState = JobState.PENDING
    workers: Placement = field(default_factory=dict)
    ps: Placement = field(default_factory=dict)
    target_workers: int = 0
    target_ps: int = 0
    progress: float = 0.0
    throughput: float = 0.0  # measured iterations/s at its placement (0 when not training)
    metric: float | None = None
    restarts: int = 0
    first_start: float | None = None
    last_start: float | None = None
    finish_time: float | None = None
    attained_service: float = 0.0
    executed_time: float = 0.0
    admitted: bool = False
    reason: str = ""
    history: list[tuple[float, float, float]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @classmethod
    def of(cls, job: JobStatus, progress: float | None = None) -> JobRecord:
        """The record of `job` as it is now (`progress`: a better estimate of its progress)."""
        done = job.progress if progress is None else min(progress, job.spec.total_work)
        return cls(job.spec, job.state, dict(job.workers), dict(job.ps), job.target_workers,
                   job.target_ps, float(done), float(job.throughput), job.metric, job.restarts,
                   job.first_start, job.last_start, job.finish_time, float(job.attained_service),
                   float(job.executed_time), job.admitted, job.reason,
                   [tuple(map(float, h)) for h in job.history])

    def status(self) -> JobStatus:
        """A plain `JobStatus` holding this record."""
        return JobStatus(self.spec, self.state, dict(self.workers), dict(self.ps),
                         self.target_workers, self.target_ps, self.progress, self.throughput,
                         self.metric, list(self.history), self.attained_service,
                         self.executed_time, self.first_start, self.last_start,
                         self.finish_time, self.restarts, self.admitted, self.reason)


@dataclass
class Snapshot:
    """A backend's present (see the module docstring). `jobs`: waiting ones in queue order
    first, then placed ones, then finished ones."""

    taken_at: float  # the backend's clock
    wall_time: float  # Unix time it was taken
    source: str  # "kubernetes" or "simulator"
    nodes: list[NodeRecord]
    jobs: list[JobRecord]
    upcoming: list[JobSpec] = field(default_factory=list)  # submitted, not arrived yet
    engine: str = ""
    restart_delay: float = 30.0
    checkpoint_interval: float = 600.0
    clock_origin: float = 0.0  # where a console's hours count from

    def job(self, name: str) -> JobRecord:
        return next(j for j in self.jobs if j.name == name)

    @property
    def active(self) -> list[JobRecord]:
        return [j for j in self.jobs if not j.state.finished]

    def describe(self) -> str:
        """One line: where it came from, when, and what it holds."""
        placed = sum(1 for j in self.jobs if j.state.placed)
        waiting = sum(1 for j in self.jobs if j.state in (JobState.PENDING, JobState.HOLDING))
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.wall_time))
        return (f"snapshot of a {self.source} cluster at {when}: {len(self.nodes)} nodes,"
                f" {placed} jobs placed, {waiting} waiting, {len(self.upcoming)} to come")

    # ---- JSON ----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "source": self.source,
                "taken_at": self.taken_at, "wall_time": self.wall_time,
                "clock_origin": self.clock_origin, "engine": self.engine,
                "simulator": {"restart_delay": self.restart_delay,
                              "checkpoint_interval": self.checkpoint_interval},
                "nodes": [_node_json(r) for r in self.nodes],
                "jobs": [_job_json(j) for j in self.jobs],
                "upcoming": [_spec_json(s) for s in self.upcoming]}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1, allow_nan=False) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Snapshot:
        """The snapshot in file `path`; `InputError` naming the file and field if it is not one."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(f"cannot read it ({e.strerror})", file=str(p)) from None
        except UnicodeDecodeError:
            raise InputError("not UTF-8 text, expected a snapshot's JSON", file=str(p)) from None
        try:
            data = json.loads(text)
        except ValueError as e:
            raise InputError(f"not JSON ({e})", file=str(p)) from None
        return cls.from_json(data, str(p))

    @classmethod
    def from_json(cls, data: Any, file: str | None = None) -> Snapshot:
        return _Reader(file).snapshot(data)


def take(backend: Any, state: ClusterState, *, source: str, engine: str = "",
         restart_delay: float = 30.0, checkpoint_interval: float = 600.0,
         progress_at: Mapping[str, float] | None = None, upcoming: Iterable[JobSpec] = (),
         clock_origin: float = 0.0) -> Snapshot:
    """The snapshot of `backend` (its `jobs`) whose cluster is `state` (its `observe()`)."""
    progress_at = progress_at or {}
    jobs = list(backend.jobs.values())
    waiting = list(state.iter_waiting())
    names = {j.name for j in waiting}
    placed = [j for j in jobs if j.state.placed and j.name not in names]
    finished = [j for j in jobs if j.state.finished]
    records = [JobRecord.of(j, progress_at.get(j.name)) for j in waiting + placed + finished]
    used = np.zeros_like(state.capacity)
    for j in placed:
        for role, demand in ((j.workers, j.spec.worker_demand), (j.ps, j.spec.ps_demand)):
            for node, count in role.items():
                if node in state.node_index:
                    used[state.node_index[node]] += demand.as_array() * count
    other = np.maximum(state.allocated - used, 0.0)
    other[other < 1e-6] = 0.0
    nodes = [NodeRecord(n, bool(state.node_up[i]), Resources(*map(float, other[i])))
             for i, n in enumerate(state.nodes)]
    return Snapshot(float(state.now), time.time(), source, nodes, records, list(upcoming),
                    engine, float(restart_delay), float(checkpoint_interval), float(clock_origin))


# ---- writing ---------------------------------------------------------------------------------


def _spec_json(s: JobSpec) -> dict[str, Any]:
    d = dataclasses.asdict(s)
    d["kind"] = s.kind.value
    return d


def _node_json(r: NodeRecord) -> dict[str, Any]:
    return {**dataclasses.asdict(r.node), "up": r.up, "other": dataclasses.asdict(r.other)}


def _job_json(j: JobRecord) -> dict[str, Any]:
    d = {f.name: getattr(j, f.name) for f in dataclasses.fields(j) if f.name != "spec"}
    d["state"] = j.state.value
    d["metric"] = _finite_or_none(j.metric)
    d["history"] = [[t, i, _finite_or_none(m)] for t, i, m in j.history]
    return {"spec": _spec_json(j.spec), **d}


def _finite_or_none(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


# ---- reading ---------------------------------------------------------------------------------

_NUMBER = (int, float)
_SPEC_FIELDS = {f.name: f for f in dataclasses.fields(JobSpec)}
_JOB_FIELDS = {f.name for f in dataclasses.fields(JobRecord)}


class _Reader:
    """Reads the JSON of a snapshot, failing with one line naming the file and the field."""

    def __init__(self, file: str | None) -> None:
        self.file = file

    def fail(self, path: str, what: str) -> None:
        raise InputError(f"field {path}: {what}", file=self.file)

    def get(self, d: dict, key: str, path: str, kind: type | tuple, *, optional: bool = False,
            default: Any = None) -> Any:
        full = f"{path}.{key}" if path else key
        if key not in d:
            if optional:
                return default
            self.fail(full, "missing")
        value = d[key]
        if value is None and optional:
            return default
        if isinstance(value, bool) and kind is not bool:
            self.fail(full, f"expected {_kind_name(kind)}, got {value!r}")
        if not isinstance(value, kind):
            self.fail(full, f"expected {_kind_name(kind)}, got {type(value).__name__}"
                            f" {json.dumps(value)[:40]}")
        if kind == _NUMBER and not math.isfinite(value):
            self.fail(full, f"expected a finite number, got {value!r}")
        return value

    def snapshot(self, data: Any) -> Snapshot:
        if not isinstance(data, dict):
            self.fail("(top)", "expected a JSON object")
        if data.get("format") != FORMAT:
            self.fail("format", f"expected {FORMAT!r}, got {data.get('format')!r}"
                                " (not a workbench snapshot)")
        version = data.get("version")
        if version != VERSION:
            self.fail("version", f"this workbench reads version {VERSION}, the file is"
                                 f" version {version!r}")
        sim = self.get(data, "simulator", "", dict)
        nodes = [self.node(n, f"nodes[{i}]")
                 for i, n in enumerate(self.get(data, "nodes", "", list))]
        if not nodes:
            self.fail("nodes", "the cluster has no nodes")
        names = {r.node.name for r in nodes}
        if len(names) != len(nodes):
            self.fail("nodes", "node names must be unique")
        jobs = [self.job(j, f"jobs[{i}]", names)
                for i, j in enumerate(self.get(data, "jobs", "", list))]
        upcoming = [self.spec(s, f"upcoming[{i}]")
                    for i, s in enumerate(self.get(data, "upcoming", "", list, optional=True,
                                                   default=[]))]
        seen: set[str] = set()
        for i, spec in enumerate([j.spec for j in jobs] + upcoming):
            if spec.name in seen:
                self.fail(f"jobs[{i}].spec.name" if i < len(jobs) else
                          f"upcoming[{i - len(jobs)}].name", f"duplicate job name {spec.name!r}")
            seen.add(spec.name)
        return Snapshot(
            taken_at=float(self.get(data, "taken_at", "", _NUMBER)),
            wall_time=float(self.get(data, "wall_time", "", _NUMBER)),
            source=self.get(data, "source", "", str), nodes=nodes, jobs=jobs, upcoming=upcoming,
            engine=self.get(data, "engine", "", str, optional=True, default=""),
            restart_delay=self.restart_delay(sim),
            checkpoint_interval=self.nonnegative(sim, "checkpoint_interval", "simulator"),
            clock_origin=float(self.get(data, "clock_origin", "", _NUMBER, optional=True,
                                        default=0.0)))

    def restart_delay(self, sim: dict) -> float:
        value = self.nonnegative(sim, "restart_delay", "simulator")
        if not value <= MAX_RESTART_DELAY:
            self.fail("simulator.restart_delay",
                      f"expected at most {MAX_RESTART_DELAY:g} s, got {value:g}")
        return value

    def nonnegative(self, d: dict, key: str, path: str) -> float:
        value = float(self.get(d, key, path, _NUMBER))
        if value < 0:
            self.fail(f"{path}.{key}", f"expected a number >= 0, got {value:g}")
        return value

    def node(self, d: Any, path: str) -> NodeRecord:
        if not isinstance(d, dict):
            self.fail(path, "expected an object")
        gpus = self.get(d, "gpus", path, int)
        if gpus < 0:
            self.fail(f"{path}.gpus", f"expected a count >= 0, got {gpus}")
        node = Node(self.get(d, "name", path, str), self.nonnegative(d, "cpus", path),
                    self.nonnegative(d, "mem", path), gpus,
                    self.get(d, "gpu_model", path, str, optional=True, default="V100"),
                    self.get(d, "rack", path, str, optional=True, default="rack-0"))
        other = self.get(d, "other", path, dict, optional=True, default={})
        return NodeRecord(node, self.get(d, "up", path, bool, optional=True, default=True),
                          self.resources(other, f"{path}.other"))

    def resources(self, d: dict, path: str) -> Resources:
        return Resources(*(float(self.get(d, k, path, _NUMBER, optional=True, default=0.0))
                           for k in ("cpu", "mem", "gpu")))

    def spec(self, d: Any, path: str) -> JobSpec:
        if not isinstance(d, dict):
            self.fail(path, "expected an object")
        for key in d:
            if key not in _SPEC_FIELDS:
                self.fail(f"{path}.{key}", "unknown field")
        kw: dict[str, Any] = {}
        for key in ("name", "application", "user"):
            if key in d or key != "user":
                kw[key] = self.get(d, key, path, str)
        for key in ("arrival", "total_work"):
            kw[key] = float(self.get(d, key, path, _NUMBER))
        for key in ("batch_size", "initial_workers", "min_workers", "max_workers", "num_ps",
                    "priority"):
            if key in d or key == "batch_size":
                kw[key] = self.get(d, key, path, int)
        for key in ("deadline", "target_metric"):
            kw[key] = self.get(d, key, path, _NUMBER, optional=True)
        if "cpu_burst" in d:
            kw["cpu_burst"] = float(self.get(d, "cpu_burst", path, _NUMBER))
        if "adaptive_batch" in d:
            kw["adaptive_batch"] = self.get(d, "adaptive_batch", path, bool)
        for key in ("worker_demand", "ps_demand"):
            if key in d:
                kw[key] = self.resources(self.get(d, key, path, dict), f"{path}.{key}")
        if "kind" in d:
            kind = self.get(d, "kind", path, str)
            if kind not in {k.value for k in JobKind}:
                self.fail(f"{path}.kind", f"expected one of {[k.value for k in JobKind]},"
                                          f" got {kind!r}")
            kw["kind"] = JobKind(kind)
        try:
            return JobSpec(**kw)
        except ValueError as e:
            self.fail(path, str(e))
            raise  # not reached: fail raises

    def job(self, d: Any, path: str, nodes: set[str]) -> JobRecord:
        if not isinstance(d, dict):
            self.fail(path, "expected an object")
        for key in d:
            if key not in _JOB_FIELDS:
                self.fail(f"{path}.{key}", "unknown field")
        spec = self.spec(self.get(d, "spec", path, dict), f"{path}.spec")
        state = self.get(d, "state", path, str)
        if state not in {s.value for s in JobState}:
            self.fail(f"{path}.state", f"expected one of {[s.value for s in JobState]},"
                                       f" got {state!r}")
        places = [self.placement(d, key, path, nodes) for key in ("workers", "ps")]
        if JobState(state).placed and not places[0] and not places[1]:
            self.fail(f"{path}.workers", f"a {state} job holds no tasks")
        opt = {k: self.get(d, k, path, _NUMBER, optional=True)
               for k in ("first_start", "last_start", "finish_time", "metric")}
        history = self.get(d, "history", path, list, optional=True, default=[])
        for i, h in enumerate(history):
            if not (isinstance(h, list) and len(h) == 3 and
                    all(isinstance(x, _NUMBER) or (k == 2 and x is None) for k, x in enumerate(h))):
                self.fail(f"{path}.history[{i}]", "expected [time, iterations, metric]")
        return JobRecord(
            spec, JobState(state), places[0], places[1],
            self.get(d, "target_workers", path, int, optional=True, default=0),
            self.get(d, "target_ps", path, int, optional=True, default=0),
            self.nonnegative(d, "progress", path), self.nonnegative(d, "throughput", path),
            opt["metric"], self.get(d, "restarts", path, int, optional=True, default=0),
            opt["first_start"], opt["last_start"], opt["finish_time"],
            float(self.get(d, "attained_service", path, _NUMBER, optional=True, default=0.0)),
            float(self.get(d, "executed_time", path, _NUMBER, optional=True, default=0.0)),
            self.get(d, "admitted", path, bool, optional=True, default=False),
            self.get(d, "reason", path, str, optional=True, default=""),
            [(float(t), float(i), math.nan if m is None else float(m)) for t, i, m in history])

    def placement(self, d: dict, key: str, path: str, nodes: set[str]) -> Placement:
        raw = self.get(d, key, path, dict, optional=True, default={})
        for node, count in raw.items():
            if node not in nodes:
                self.fail(f"{path}.{key}", f"unknown node {node!r}")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                self.fail(f"{path}.{key}.{node}", f"expected a task count >= 0, got {count!r}")
        return {n: c for n, c in raw.items() if c}


def _kind_name(kind: type | tuple) -> str:
    if kind == _NUMBER:
        return "a number"
    return {str: "a string", int: "an integer", bool: "true or false", list: "a list",
            dict: "an object"}.get(kind, str(kind))


__all__ = ["FORMAT", "VERSION", "JobRecord", "NodeRecord", "Snapshot", "take"]
