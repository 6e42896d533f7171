"""Looking ahead: fork the present and run engines forward on the copies.

The simulator forks itself; any other backend (a live Kubernetes cluster) is written down as a
snapshot and restored as a simulator (`look_ahead_base`, `sim.restore`): previews and
what-ifs then work on it alike, their results saying when the snapshot was taken.

- `run_forks`: each engine on its own fork of a backend, run to a time or to the end, each
  within an optional wall-clock budget (`Controller.what_if` is this).
- `prepare_preview`: what switching engines is forecast to change over a horizon: the engine
  scheduling now (a copy keeping its learning state) and the candidate side by side.
- `prepare_what_if`: every engine from here to the end, measured as `workbench simulate`
  measures a run (`metrics.run_metrics`).

Both take an optional `executor` (the app's shared process pool, `sweeps.executors.shared_pool`):
the fork is pickled once and each engine runs on its own unpickled copy in a worker, which
sends back only its measures (a row, JCTs, the jobs' outcomes), never the run itself. The
results equal a serial run's but for wall times (`tests/test_whatif.py`).

The `prepare_*` functions fork at once, on the caller's thread while the live run stands
still, and return a function that runs on the fork and touches nothing live: it may run in
a worker thread while the live run goes on. Figures come from `metrics`, as for any run.
"""

from __future__ import annotations

import copy
import copyreg
import dataclasses
import gc
import math
import operator
import pickle
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from .backend import Forkable, Snapshottable
from .control import Controller
from .metrics import job_metrics, run_metrics, usage_metrics
from .model import JobState, JobStatus
from .policies import check_engine, make_policy
from .policies.base import Policy
from .sim.engine import pickled_without_settled
from .sim.restore import from_snapshot
from .stop import StopRequest

WHAT_IF_COLUMNS = ("completed", "rejected", "unfinished", "avg_jct_h", "median_jct_h",
                   "p95_jct_h", "makespan_h", "avg_queue_h", "deadline_hit_rate",
                   "gpu_alloc_util", "restarts")
WHAT_IF_ROW = ["policy", *WHAT_IF_COLUMNS, "stalled", "ran_to_h", "note", "wall_s"]  # a row's fields
T = TypeVar("T")
RUN_SLICE = 50  # rounds between two looks at the wall clock of a budgeted run
STOP_POLL_S = 0.2  # seconds between two looks at a stop request while forks run on a pool


def fork_blob(base: Forkable, settled_by: float | None = None, until: float | None = None
              ) -> bytes:
    """`base` pickled, to be sent once to every worker of an executor (`own_copy`).
    `settled_by`: leave out the jobs finished by then, and with `until` the jobs arriving
    after it but the first (`sim.engine.pickled_without_settled`), for tasks that read only
    the others (a preview's sides, run to `until`); None: the whole run."""
    pickle_dict_views()
    if settled_by is None:
        return pickle.dumps(base, protocol=pickle.HIGHEST_PROTOCOL)
    with pickled_without_settled(settled_by, until):
        return pickle.dumps(base, protocol=pickle.HIGHEST_PROTOCOL)


@dataclass(frozen=True)
class HandedOver:
    """A fork handed to its last user, who runs on it rather than on a copy of it (a copy of
    a Philly-scale fork costs about half a second)."""

    base: Forkable


def own_copy(base: Forkable | bytes | HandedOver) -> Forkable:
    """A copy of `base` to run on: a fork of it, unpickled from `fork_blob`'s bytes, or the
    fork itself when it was handed over."""
    if isinstance(base, HandedOver):
        return base.base
    if not isinstance(base, bytes):
        return aged(base.fork())
    collecting = gc.isenabled()
    gc.disable()  # hundreds of thousands of new objects: no collections meanwhile
    try:
        return aged(pickle.loads(base))
    finally:
        if collecting:
            gc.enable()


def aged(fork: T) -> T:
    """`fork`, just made, with every object the cyclic collector tracks moved to its oldest
    generation at once (`gc.freeze` and back): the ~150 k objects a Philly fork adds live as
    long as it does, and the young collection due next scanned them all to free nothing
    (85-130 ms a fork). Young garbage, if any, waits for a full collection instead."""
    gc.freeze()
    gc.unfreeze()
    return fork


def on_executor(executor: Executor | None, task: Callable[..., T], base: Forkable | bytes,
                args: Sequence[tuple], hand_over: bool = False,
                stop: StopRequest | None = None, done: Callable[[int], None] | None = None
                ) -> list[T | None]:
    """`task(base, *a)` for each `a` of `args`, in order: one after another here (None), or
    side by side on `executor` with `base` pickled once (bytes: `fork_blob`'s already).
    `hand_over`: `base` is not needed afterwards, so the last task here runs on it rather
    than on a copy (`HandedOver`; not for bytes, which every task unpickles).
    `stop`: once asked, tasks not yet started never start (None in their place); `done(i,
    result)` is called as task i ends."""
    if executor is None or not picklable(args):
        last = HandedOver(base) if hand_over and args and not isinstance(base, bytes) else base
        results: list[T | None] = []
        for i, a in enumerate(args):
            results.append(None if stop is not None and stop.asked else
                           task(last if i == len(args) - 1 else base, *a))
            if done is not None and results[-1] is not None:
                done(i, results[-1])
        return results
    blob = base if isinstance(base, bytes) else fork_blob(base)
    futures = [executor.submit(task, blob, *a) for a in args]
    index = {f: i for i, f in enumerate(futures)}
    pending = set(futures)
    while pending:
        if stop is not None and stop.asked:
            for f in pending:
                f.cancel()  # those already handed to a worker go on, to their next slice
            pending = {f for f in pending if not f.cancelled()}
        ended, pending = wait(pending, timeout=STOP_POLL_S, return_when=FIRST_COMPLETED)
        for f in ended:
            if done is not None and not f.cancelled():
                done(index[f], f.result())  # a task's error is raised here, as one after another
    return [None if f.cancelled() else f.result() for f in futures]


def picklable(value: Any) -> bool:
    """`value` can be sent to a worker process (an engine from a plugin may hold something
    that cannot: its forks then run here, one after another)."""
    pickle_dict_views()
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001 - pickling raises many kinds (TypeError, AttributeError...)
        return False
    return True


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Leave the objects alive now (a fork of a Philly run holds millions) out of the cyclic
    collector's passes while a fork runs, and put them back after: full passes over them
    took 35-50 % of a preview's CPU (docs/sim-performance.md). Nothing else changes."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def look_ahead_base(backend: Any, engine: str = "") -> tuple[Forkable, float | None]:
    """A copy of `backend`'s present to run engines forward on, and the Unix time of the
    snapshot it was restored from (None: the simulator's own exact fork). `engine`: the
    engine scheduling now, recorded in the snapshot."""
    if isinstance(backend, Forkable):
        return aged(backend.fork()), None
    if isinstance(backend, Snapshottable):
        snapshot = backend.snapshot(engine)
        return aged(from_snapshot(snapshot)), snapshot.wall_time
    raise TypeError(f"{type(backend).__name__} can neither fork nor take a snapshot")


def snapshot_note(wall_time: float | None) -> str:
    """' (from a snapshot of the cluster at 21:04:05 UTC)', or '' for a simulator's fork."""
    if wall_time is None:
        return ""
    when = time.strftime("%H:%M:%S UTC", time.gmtime(wall_time))
    return f" (from a snapshot of the cluster at {when})"


@dataclass
class ForkRun:
    """One engine run forward on its own fork."""

    label: str
    controller: Controller  # its backend is the fork
    complete: bool  # got to where it was asked to (or to the end) within its budget
    seconds: float  # wall time of the run


def run_forks(base: Forkable, engines: Mapping[str, Policy | str], until: float | None = None,
              budget_s: float | None = None, executor: Executor | None = None) -> list[ForkRun]:
    """Each engine (an engine, or a name made afresh) on its own fork of `base`, run to
    `until` (None: the end), for at most `budget_s` seconds of wall time each (None: no
    limit). `base` itself is not moved. With an `executor` (a process pool: the sweep's
    executor) the forks run on it side by side, each fork and engine sent to a worker and
    its run sent back (the caller's engine objects are then copies); None: one after another
    on this thread."""
    twins = [(label, Controller(base.fork(),
                                make_policy(engine) if isinstance(engine, str) else engine))
             for label, engine in engines.items()]
    if executor is None:
        return [run_fork(label, twin, until, budget_s) for label, twin in twins]
    pickle_dict_views()
    futures = [executor.submit(run_fork, label, twin, until, budget_s) for label, twin in twins]
    return [future.result() for future in futures]


def run_fork(label: str, twin: Controller, until: float | None, budget_s: float | None,
             stop: StopRequest | None = None) -> ForkRun:
    """`twin` (a Controller on a fork) run forward as `run_forks` runs each."""
    pickle_dict_views()  # in a worker process: the run is pickled back
    t0 = time.perf_counter()
    complete = run_ahead(twin, until, None if budget_s is None else t0 + budget_s, stop)
    return ForkRun(label, twin, complete, time.perf_counter() - t0)


def pickle_dict_views() -> None:
    """Let a dict's live view (`ClusterState.placed`, an engine's cached view of it) cross
    to another process, as a list: a fork's last snapshot holds one. Idempotent."""
    copyreg.pickle(type({}.values()), _values_as_list)


def _values_as_list(view) -> tuple:
    return list, (list(view),)


def run_ahead(controller: Controller, until: float | None, deadline: float | None = None,
              stop: StopRequest | None = None) -> bool:
    """Run to the end (or `until`); with a wall-clock `deadline`, in slices, stopping once it
    has passed: a slow engine must not hold a what-if hostage; with `stop`, in slices too,
    stopping once it is asked. True when it got there."""
    if deadline is None and stop is None:
        controller.run(until=until)
        return True
    backend = controller.backend
    while not backend.done():
        before = (backend.now, controller.rounds)
        controller.run(until=until, max_rounds=RUN_SLICE)
        if until is not None and backend.now >= until:
            return True
        if (backend.now, controller.rounds) == before or controller.stalled:
            return True  # nothing more will happen (the run ended or stalled)
        if (deadline is not None and time.perf_counter() > deadline) or (
                stop is not None and stop.asked):
            return False
    return True


# ---- a switch preview ------------------------------------------------------------------------

PREVIEW_LABELS = {"completed": "jobs completed", "rejected": "jobs rejected",
                  "deadline_hits": "deadlines met", "mean_jct_h": "mean JCT of those (h)",
                  "queued_at_end": "queued at the end", "unfinished": "unfinished at the end",
                  "gpu_util": "GPU allocation", "restarts": "restarts (all jobs)"}
CANNOT_RUN_SHARE = 0.5  # an engine rejecting this share of the jobs it saw cannot run them
HARM_SHARE = 0.1  # fewer completions by this share (and at least 2) is predicted harm


@dataclass
class SwitchPreview:
    """What switching from `current` to `candidate` is forecast to change over `horizon` s,
    computed for the cluster as it was at `start` (the fork): it goes stale as the run moves."""

    current: str
    candidate: str
    start: float  # the backend clock it was computed for
    horizon: float
    table: pd.DataFrame  # one row per policy: completed, deadline hits, JCT, queue, utilisation
    changes: pd.DataFrame  # jobs whose outcome differs most
    decisions: pd.DataFrame  # the first decisions each policy would take
    seconds: float
    snapshot_at: float | None = None  # Unix time of the live cluster's snapshot (None: a fork)

    def comparison(self) -> pd.DataFrame:
        """The table transposed: one row per measure, one column per engine (fits a sidebar)."""
        t = self.table.set_index("policy")[list(PREVIEW_LABELS)].T
        t.index = [PREVIEW_LABELS[i] for i in t.index]
        t.columns.name = None  # "policy", from the rows it was: a notebook shows it as a header
        out = t.reset_index(names="over the horizon")
        for c in out.columns[1:]:
            out[c] = [_short(v, k) for v, k in zip(out[c], PREVIEW_LABELS)]
        return out

    def summary(self) -> str:
        t = self.table.set_index("policy")
        a, b = t.iloc[0], t.iloc[1]
        parts = [f"completions {a.completed:.0f} → {b.completed:.0f}",
                 f"queued at end {a.queued_at_end:.0f} → {b.queued_at_end:.0f}"]
        if not (math.isnan(a.mean_jct_h) or math.isnan(b.mean_jct_h)):
            parts.append(f"mean JCT of those {a.mean_jct_h:.2f} h → {b.mean_jct_h:.2f} h")
        if a.deadline_jobs or b.deadline_jobs:
            parts.append(f"deadlines met {a.deadline_hits:.0f} → {b.deadline_hits:.0f}")
        if a.rejected or b.rejected:
            parts.append(f"rejected {a.rejected:.0f} → {b.rejected:.0f}")
        return (f"over the next {self.horizon / 3600:g} h{snapshot_note(self.snapshot_at)}: "
                + ", ".join(parts))

    def warnings(self) -> list[str]:
        """What the switch is predicted to make worse, and whether the candidate can run this
        workload at all; empty when nothing is predicted to get worse."""
        t = self.table.set_index("policy")
        a, b = t.iloc[0], t.iloc[1]
        out = []
        seen = max(int(b.jobs_seen), 1)
        if b.rejected >= CANNOT_RUN_SHARE * seen and b.rejected > a.rejected:
            why = f" ({b.top_rejection})" if b.top_rejection else ""
            out.append(f"{self.candidate} cannot run most of this workload: it rejects"
                       f" {b.rejected:.0f} of the {seen} jobs it sees in the next"
                       f" {self.horizon / 3600:g} h{why}")
        elif b.rejected > a.rejected:
            out.append(f"{self.candidate} rejects {b.rejected - a.rejected:.0f} more jobs"
                       f" ({a.rejected:.0f} → {b.rejected:.0f})")
        if a.completed - b.completed >= max(2.0, HARM_SHARE * a.completed):
            out.append(f"fewer jobs completed: {a.completed:.0f} → {b.completed:.0f}")
        if b.deadline_hits < a.deadline_hits:
            out.append(f"fewer deadlines met: {a.deadline_hits:.0f} → {b.deadline_hits:.0f}")
        return out

    @property
    def harmful(self) -> bool:
        """The switch is predicted to do harm: applying it should be confirmed."""
        return bool(self.warnings())

    def stale(self, now: float) -> bool:
        """The run has moved on since the preview was computed."""
        return now > self.start


def prepare_preview(backend: Any, current: Policy, candidate: Policy, horizon: float,
                    executor: Executor | None = None, last_round: float | None = None
                    ) -> Callable[[], SwitchPreview]:
    """Fork `backend` now (a live cluster: its snapshot, see `look_ahead_base`; a simulator
    on an `executor`: its present pickled, as `fork_blob` sends it); return a function
    running `current` (a copy, keeping its learning state) and `candidate` side by side on the
    fork for `horizon` seconds (on `executor` when given). `last_round`: when the
    live run's last round was; the current side then rounds where the live run will
    (`Controller.carry_on`), the candidate at once, as a switch does (None: both at once). The
    function runs once: run here, its last side runs on the fork itself."""
    if candidate.name == current.name:
        raise ValueError(f"{candidate.name} is already the engine scheduling now")
    try:
        keep = copy.deepcopy(current)  # keeps the engine's learning state
    except Exception:  # noqa: BLE001 - an engine that cannot be copied starts afresh
        keep = make_policy(current.name)
    # forked now: on a pool a simulator's present is pickled now instead (the pickle is the
    # copy; at Philly scale a fork and then its pickle took 0.2 s each), without the jobs no
    # side reads (those finished by the last round)
    pickled = executor is not None and isinstance(backend, Forkable)
    base, taken = (backend, None) if pickled else look_ahead_base(backend, current.name)
    start = base.now
    base_usage = copy.copy(base.usage)
    gone = Finished.at(base)
    if executor is not None:
        base = fork_blob(base, start if last_round is None else min(start, last_round),
                         start + horizon)
    ran: list[bool] = []
    cur, new = current.name, candidate.name

    def run() -> SwitchPreview:
        _run_once(ran)
        t0 = time.perf_counter()
        (row_a, jobs_a, acts_a), (row_b, jobs_b, acts_b) = on_executor(
            executor, preview_side, base,
            [(cur, keep, start, horizon, base_usage, last_round, gone),
             (new, candidate, start, horizon, base_usage, None, gone)],
            hand_over=True)
        changes = job_changes(jobs_a, jobs_b, cur, new, start)
        decisions = pd.DataFrame(acts_a + acts_b, columns=DECISION_COLUMNS)
        return SwitchPreview(cur, new, start, horizon, pd.DataFrame([row_a, row_b]), changes,
                             decisions, time.perf_counter() - t0, taken)

    return run


def _run_once(ran: list[bool]) -> None:
    # the last side runs on the fork itself (`HandedOver`): a second run would start from
    # where that side ended
    if ran:
        raise RuntimeError("a prepared preview or what-if runs once: prepare another")
    ran.append(True)


def preview_side(base: Forkable | bytes, label: str, engine: Policy, start: float,
                 horizon: float, base_usage: Any, last_round: float | None = None,
                 gone: Finished | None = None
                 ) -> tuple[dict[str, Any], dict[str, JobStatus], list[dict[str, Any]]]:
    """One side of a preview, run on its own copy of `base` (see `own_copy`): its
    `horizon_row`, the outcomes of the jobs not finished at `start` (plain statuses, small to
    send back), and its first decisions. `last_round`: see `prepare_preview`; `gone`: the
    jobs finished at `start` (`Finished.at(base)`), or None."""
    twin = Controller(own_copy(base), engine)
    twin.carry_on(last_round)
    with frozen_heap():  # the copy too
        run = run_fork(label, twin, start + horizon, None)
    jobs = {name: settled(j) for name, j in _unsettled(run.controller.backend.jobs, gone)
            if not (j.state.finished and (j.finish_time or 0) <= start)}
    return horizon_row(run, start, base_usage, gone), jobs, decision_rows(run)


@dataclass(frozen=True)
class Finished:
    """The jobs a fork holds finished (at its `start`), which no run on it changes: their
    names, their restarts, and the deadlines of the rejected ones after `start` (missed by
    any run that passes them). A preview's sides read the other jobs only: a Philly fork holds
    ~50 k finished jobs, and each pass over them cost 10-20 ms (cold in memory)."""

    names: frozenset[str]
    restarts: int
    rejected_deadlines: tuple[float, ...]

    @classmethod
    def at(cls, base: Any) -> Finished:
        active, start = base.active, base.now
        jobs = [j for name, j in base.jobs.items() if name not in active]  # (arrived)
        rejected = [j.spec.deadline for j in jobs if j.state is JobState.REJECTED]
        return cls(frozenset(base.jobs.keys() - active.keys()), sum(map(_restarts, jobs)),
                   tuple(d for d in rejected if d is not None and d > start))


_restarts = operator.attrgetter("restarts")


def _unsettled(jobs: dict[str, JobStatus], gone: Finished | None
               ) -> Iterable[tuple[str, JobStatus]]:
    """`jobs`' items (in order) but those finished in `gone` (None: all)."""
    if gone is None:
        return jobs.items()
    names = gone.names
    return [(name, j) for name, j in jobs.items() if name not in names]


def settled(job: JobStatus) -> JobStatus:
    """What `job_changes` reads of `job`, as a plain `JobStatus` (a simulated job's status
    refers to its whole simulator)."""
    return JobStatus(spec=job.spec, state=job.state, progress=job.progress,
                     finish_time=job.finish_time)


def horizon_row(run: ForkRun, start: float, base_usage: Any, gone: Finished | None = None
                ) -> dict[str, Any]:
    """A run's outcome since `start` (when it was forked): jobs completed since, the deadlines
    among them met, their mean JCT, jobs rejected since (and the commonest reason), the queue
    and the unfinished jobs at the end, the GPU allocation since, the jobs it saw. `gone`: the
    jobs finished at `start` (`Finished.at` the fork), counted from it (None: read)."""
    backend = run.controller.backend
    jobs = [j for _, j in _unsettled(backend.jobs, gone)]
    # (a job finished at `start` is neither completed, rejected nor seen since, and misses a
    # deadline after `start` only if it was rejected)
    restarts, missed = 0, 0
    if gone is not None:
        restarts = gone.restarts
        missed = sum(1 for d in gone.rejected_deadlines if d <= backend.now)
    done = job_metrics(j for j in jobs if j.state is JobState.COMPLETED and j.finish_time > start)
    rejected = [j for j in jobs if j.state is JobState.REJECTED and j.finish_time > start]
    seen = sum(1 for j in jobs if not (j.state.finished and j.finish_time <= start))
    hits = round(done["deadline_hit_rate"] * done["deadline_jobs"]) if done["deadline_jobs"] else 0
    since = usage_since(backend.usage, base_usage)
    queued = sum(1 for j in list(backend.active.values())
                 if j.state in (JobState.PENDING, JobState.HOLDING))
    return {"policy": run.label, "completed": done["completed"], "rejected": len(rejected),
            "deadline_jobs": done["deadline_jobs"] + missed + _missed_since(jobs, start,
                                                                             backend.now),
            "deadline_hits": hits, "mean_jct_h": done["avg_jct_h"], "queued_at_end": queued,
            "unfinished": len(backend.active), "gpu_util": usage_metrics(since)["gpu_alloc_util"],
            "restarts": restarts + sum(j.restarts for j in jobs), "rounds": run.controller.rounds,
            "jobs_seen": seen, "top_rejection": commonest_rejection(rejected)}


def usage_since(usage: Any, before: Any) -> Any:
    """The resource-time integrals accumulated between `before` and `usage` (two `Usage`s)."""
    return type(usage)(**{f.name: getattr(usage, f.name) - getattr(before, f.name)
                          for f in dataclasses.fields(usage)})


def _missed_since(jobs: Iterable[JobStatus], start: float, now: float) -> int:
    """Jobs whose deadline fell between `start` and `now` that had not completed by it."""
    return sum(1 for j in jobs if j.spec.deadline is not None and start < j.spec.deadline <= now
               and not (j.state is JobState.COMPLETED and j.finish_time <= j.spec.deadline))


DECISION_COLUMNS = ["policy", "time_h", "action", "job", "reason"]


def first_decisions(runs: Sequence[ForkRun], per_run: int = 12) -> pd.DataFrame:
    """The first decisions (not waits) each run took."""
    return pd.DataFrame([row for r in runs for row in decision_rows(r, per_run)],
                        columns=DECISION_COLUMNS)


def decision_rows(run: ForkRun, per_run: int = 12) -> list[dict[str, Any]]:
    """The first `per_run` decisions (not waits) of `run`, as rows of `first_decisions`."""
    acts = [d for d in run.controller.recorder.decisions if d.action != "Wait"][:per_run]
    return [{"policy": run.label, "time_h": d.time / 3600, "action": d.action, "job": d.job,
             "reason": d.reason} for d in acts]


def job_changes(a: dict[str, JobStatus], b: dict[str, JobStatus], name_a: str, name_b: str,
                start: float, top: int = 12) -> pd.DataFrame:
    """The `top` jobs whose outcomes under `name_a` (`a`) and `name_b` (`b`) differ most."""
    rows = []
    for name in set(a) | set(b):
        ja, jb = a.get(name), b.get(name)
        if ja is None or jb is None:
            continue
        if ja.state.finished and (ja.finish_time or 0) <= start:
            continue  # finished before the fork: the switch cannot change it
        fa = ja.finish_time if ja.state is JobState.COMPLETED else None
        fb = jb.finish_time if jb.state is JobState.COMPLETED else None
        if fa is None and fb is None:
            delta = 0.0 if ja.state == jb.state else 1e9
            if (ja.fraction_done - jb.fraction_done) and not delta:
                delta = abs(ja.fraction_done - jb.fraction_done) * 1e3
        elif fa is None or fb is None:
            delta = 1e8
        else:
            delta = abs(fa - fb)
        if delta < 1.0:
            continue
        rows.append({"job": name, name_a: _outcome(ja), name_b: _outcome(jb), "_delta": delta})
    rows.sort(key=lambda r: (-r["_delta"], r["job"]))  # ties by name: the same list every run
    df = pd.DataFrame(rows[:top], columns=["job", name_a, name_b, "_delta"])
    return df.drop(columns="_delta")


def _outcome(j: JobStatus) -> str:
    if j.state is JobState.COMPLETED:
        return f"done at {j.finish_time / 3600:.2f} h"
    if j.state is JobState.REJECTED:
        return "rejected"
    return f"{j.state.value}, {j.fraction_done:.0%} done"


def _short(value: Any, key: str) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "–"
    if key == "gpu_util":
        return f"{value:.0%}"
    if key == "mean_jct_h":
        return f"{value:.2f}"
    return f"{value:.0f}"


# ---- every engine to the end --------------------------------------------------------------


class Busy(RuntimeError):
    """Refused: the same kind of heavy work is already running on this store."""


class OneAtATime:
    """Heavy fork work on one store, one at a time. A what-if runs every engine to the end
    (seconds to minutes of CPU each); on a shared console a second one asked for meanwhile is
    refused, naming the first, rather than queued behind it or run beside it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = ""  # what runs now

    def guard(self, what: str, job: Callable[[], T]) -> Callable[[], T]:
        """`job`, refused with `Busy` when called while another guarded job runs."""

        def run() -> T:
            if not self._lock.acquire(blocking=False):
                raise Busy(f"{self.running or 'another what-if'} is running on this cluster;"
                           " try again when it is done")
            self.running = what
            try:
                return job()
            finally:
                self.running = ""
                self._lock.release()

        return run



@dataclass
class WhatIfResult:
    start: float
    until: float | None
    table: pd.DataFrame  # one row per engine
    jct_h: dict[str, np.ndarray] = field(default_factory=dict)  # completed jobs' JCT per engine
    seconds: float = 0.0
    snapshot_at: float | None = None  # Unix time of the live cluster's snapshot (None: a fork)
    left_out: list[str] = field(default_factory=list)  # engines a stop came before
    stopped: bool = False  # a stop was asked while it ran


def prepare_what_if(backend: Any, names: Sequence[str], until: float | None,
                    budget_s: float, executor: Executor | None = None,
                    stop: StopRequest | None = None, done: Callable[[str], None] | None = None,
                    so_far: Callable[[WhatIfResult], None] | None = None
                    ) -> Callable[[], WhatIfResult]:
    """Fork `backend` now (a live cluster: its snapshot, see `look_ahead_base`); return a
    function running each engine of `names` on its own copy of the fork to `until` (None: the
    end), each for at most `budget_s` seconds of wall time; on `executor` side by side when
    given, else one after another (each copy dropped once measured; the last engine runs on
    the fork itself, so the function runs once). Once `stop` is asked, the engines running
    end at their next slice of rounds (their rows say so) and those not started are left out;
    `done(name)` is called as each engine's run ends, and `so_far(result)` with the result of
    the engines ended so far (a what-if of a Philly trace runs for minutes: rows as they come)."""
    for name in names:
        check_engine(name)
    base, taken = look_ahead_base(backend)
    start = base.now
    ran: list[bool] = []

    def result(sides: Sequence, seconds: float, left_out: list[str]) -> WhatIfResult:
        """The result of the engines whose `sides` have ended (None: not run), in `names`'
        order."""
        rows, jct = [], {}
        for name, side in zip(names, sides):
            if side is not None:
                row, times = side
                rows.append({**row, "note": (row["note"] + snapshot_note(taken)).strip()})
                jct[name] = times
        table = pd.DataFrame(rows, columns=None if rows else WHAT_IF_ROW)
        return WhatIfResult(start, until, table, jct, seconds, taken, left_out,
                            stop is not None and stop.asked)

    def run() -> WhatIfResult:
        _run_once(ran)
        t0 = time.perf_counter()
        ended: list = [None] * len(names)

        def one_ended(i: int, side) -> None:
            ended[i] = side
            if done is not None:
                done(names[i])
            if so_far is not None:
                so_far(result(ended, time.perf_counter() - t0, []))  # (read, not kept)

        sides = on_executor(executor, what_if_side, base,
                            [(name, until, budget_s, stop) for name in names], hand_over=True,
                            stop=stop, done=one_ended)
        left_out = [name for name, side in zip(names, sides) if side is None]  # stopped first
        return result(sides, time.perf_counter() - t0, left_out)

    return run


def what_if_side(base: Forkable | bytes, name: str, until: float | None, budget_s: float,
                 stop: StopRequest | None = None) -> tuple[dict[str, Any], np.ndarray]:
    """Engine `name` on its own copy of `base` (see `own_copy`): its what-if row and the
    JCTs (h) of the jobs it completed."""
    copy_of_base = Controller(own_copy(base), make_policy(name))
    forked_at = copy_of_base.backend.now
    with frozen_heap():  # the copy too
        r = run_fork(name, copy_of_base, until, budget_s, stop)
    twin = r.controller
    m = run_metrics(twin.backend)
    # how far it got: engines stopped at their budget cover different spans (and so different
    # jobs) of a long trace, which the counts beside each other do not show
    reached = f", {(twin.backend.now - forked_at) / 3600:,.1f} h past the fork"
    stopped = "" if r.complete else (
        f"stopped on request after {wall_time(r.seconds)}{reached}" if stop is not None and
        stop.asked else f"stopped after {wall_time(budget_s)} of wall time{reached}")
    rejected = [j for j in twin.backend.jobs.values() if j.state is JobState.REJECTED]
    why = f"rejected: {commonest_rejection(rejected)}" if rejected else ""
    row = {"policy": name, **{k: m[k] for k in WHAT_IF_COLUMNS},
           "stalled": len(twin.stalled), "ran_to_h": twin.backend.now / 3600,
           "note": "; ".join(n for n in (stopped, why) if n), "wall_s": r.seconds}
    return row, completed_jct_h(twin.backend.jobs.values())


def wall_time(seconds: float) -> str:
    """A span of wall time as the app says it: '0.001 s', '12.3 s', '1 min', '3 min 20 s'."""
    if seconds < 59.5:
        return f"{seconds:.3g} s"
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes} min {s} s" if s else f"{minutes} min"


def commonest_rejection(rejected: Iterable[JobStatus]) -> str:
    """The reason given most often among the `rejected` jobs ("" for none), without the
    "rejected: " every such reason begins with."""
    reasons = Counter(j.reason.removeprefix("rejected: ") for j in rejected).most_common(1)
    return reasons[0][0] if reasons else ""


def completed_jct_h(jobs: Iterable[JobStatus]) -> np.ndarray:
    """The completion times (h) of the completed jobs among `jobs`."""
    return np.array([(j.finish_time - j.spec.arrival) / 3600 for j in jobs
                     if j.state is JobState.COMPLETED])
