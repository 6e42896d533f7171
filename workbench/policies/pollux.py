"""Pollux (OSDI'21): co-adaptive allocation by goodput, as the Pollux artifact's simulator runs it.

Rules (petuum/adaptdl osdi21-artifact, `simulator/pollux.py`, `simulator.py`, `goodput.py`,
`speedup.py`; the goodput arithmetic is `perf/goodput.py`):

1. **Agent** (one per job, `Agent`): each round a running job adds the configuration it runs,
   (nodes, replicas, atomic batch) with its measured step and sync time, to its profile, and
   its throughput model is re-fitted on everything it has run so far (simulator.py
   `Job.update_params`); its gradient statistics are those of its batch in its current epoch.
   A job that picks its own batch (`JobSpec.adaptive_batch`) runs the candidate batch of best
   goodput on its placement; others run their submitted batch.
2. **Speedup** of (nodes, replicas): the agent's best predicted goodput there over its goodput
   at the fair share, one node × ceil(GPUs / jobs) replicas (pollux.py `Problem.__init__`); a
   job that has not run yet: replicas / fair replicas.
3. **Objective**: the power mean with exponent `p` (the paper's fairness knob; the artifact's
   `p = -1`) of each job's speedup × its dominant share × the number of nodes, a job whose
   allocation changes scaled by max(age - 30 · restarts, 0) / (age + 30) (the restart
   penalty), + 1e-3 (pollux.py `_evaluate`).
4. **Limits**: at most min(max(2 × most replicas profiled, 1), largest batch ÷ smallest local
   batch, the job's `max_workers`) replicas, ncf 1 (simulator.py `get_pollux_job_info`); at
   most one multi-node job per node; jobs first by least attained service, then arrival
   (pollux.py `optimize`).

**The optimiser differs from the artifact's** (a genetic algorithm, NSGA-II, 100 generations ×
100 states, pymoo): here a greedy on the same objective. Each job's options are 0 GPUs, 1 to
a node's GPUs on one node, whole nodes beyond (4, 8, 12, ... on 4-GPU nodes), and its
current placement as it is (no restart penalty); GPUs go one option step at a time to the
job whose objective improves most per GPU (looking past dips, as the keep-current option is
not convex), then the chosen shapes are placed (kept ones first, multi-node ones on whole free
nodes, others on the tightest node that fits); a shape that does not fit drops to the next
smaller option. The search space leaves out multi-node shapes that are not whole nodes.
`objective(state, plan)` evaluates any allocation, so the two can be compared. The greedy, and
the bounds that let a round leave most jobs' options unmade, are in `pollux_greedy.py`.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, NamedTuple

import numpy as np

from ..errors import ConfigError
from ..model import (
    Action,
    ClusterState,
    JobKind,
    JobSpec,
    JobState,
    JobStatus,
    Place,
    Placement,
    Scale,
    Suspend,
    Wait,
    placement_counts,
)
from ..perf.goodput import GoodputModel, app_goodput, fit_params, has_goodput
from .base import Policy, register
from .common import MAX_WAIT_REASONS, CheckedOnce, in_applicable_order
from .pollux_greedy import (
    BOUND_AHEAD,
    SPEEDUP_FLOOR,
    Bound,
    FitSteps,
    Lazy,
    Option,
    SureKeep,
    first_move_bound,
    greedy,
    kept_first,
    restart_factor_at,
    scaled_options,
)
from .teaching import top

MAX_REPLICAS = 64  # simulator.py get_pollux_job_info: "simulator can't handle more"
ONE_REPLICA_APPS = frozenset({"ncf"})  # simulator.py get_pollux_job_info: ncf max_replicas 1
_NO_GPU = "waiting: Pollux gave its GPUs to jobs whose speedup gains more of the objective"


@dataclass
class Agent:
    """What the job's Pollux agent knows: the configurations it ran and their step times."""

    fixed_batch: int | None
    points: dict[tuple[int, int, int], tuple[float, float]] = field(default_factory=dict)
    grad: tuple[float, float] | None = None  # (sqr, var) of its batch in its current epoch
    model: GoodputModel | None = None
    goodputs: dict[tuple[int, int], float] = field(default_factory=dict)
    seen: tuple | None = None  # (placement counts, epoch) of its last observation
    max_profiled_replicas: int = 0  # the most replicas among `points` (kept by `profile`)

    def profile(self, key: tuple[int, int, int], point: tuple[float, float]) -> None:
        """Record the step and sync times measured at `key` (nodes, replicas, atomic)."""
        self.points[key] = point
        _, replicas, _ = key
        self.max_profiled_replicas = max(self.max_profiled_replicas, replicas)


class _Current(NamedTuple):
    """A placed job's current placement (its workers without empty nodes), its
    `placement_counts` and its speedup there (None: not known yet)."""

    placement: Placement
    counts: tuple[int, ...]
    speedup: float | None


class _StepsContext(NamedTuple):
    """What every job's `_steps` depend on besides the job: the GPUs of the nodes that are up,
    GPUs per node, the fair share (replicas) and the dominant share × number of nodes."""

    gpus: int
    gpn: int
    fair: int
    share: float


class _StepsMemo(NamedTuple):
    """A job's `_steps`, with what they were made from (its spec, its agent's fit and most
    profiled replicas, whether it was frozen)."""

    spec: JobSpec
    model: GoodputModel | None
    most_replicas: int
    frozen: bool
    steps: list[tuple[int, float]]


class _Kept(NamedTuple):
    """A placed job's kept option (its current placement as an `Option`) and its speedup
    there, made with its agent's fit `model`."""

    model: GoodputModel | None
    option: Option
    speedup: float


@dataclass(slots=True)
class _KeptFirst:
    """What `_kept_record` made of a placed job: its steps, its kept option and whether its
    first move is surely to it (`sure`, `kept_first`), which hold up to `until` while its
    restarts, its agent's fit (`model`, `most_replicas`) and `frozen` stay; `current` is its
    entry of `_round_options`' kept placements."""

    steps: list[tuple[int, float]]
    restarts: int
    until: float
    keep: _Kept
    sure: SureKeep | None
    model: GoodputModel | None
    most_replicas: int
    frozen: bool
    current: _Current


@dataclass(slots=True)
class _Placed:
    """A placed job's placement as `_placed_options` last saw it: its workers then (a copy),
    its current placement (without empty nodes) and counts, its kept option once made, its
    `_kept_record` once made. Remade when its workers change."""

    workers: Placement
    current: Placement
    counts: tuple[int, ...]
    keep: _Kept | None = None
    first: _KeptFirst | None = None


@dataclass(slots=True)
class _JobRecord:
    """What `_round_options` keeps of a job (`_known`), remade when its spec changes: its
    agent (`agent(job)`); for an agent of a job with a fixed batch, the work per epoch and the
    last epoch as `epoch_of` computes its epoch (else None); whether it asks for whole numbers
    of each resource (`_round_trip_exact`); its `_steps` unfrozen with their fit once asked,
    its `first_move_bound` while waiting, and its placement's record while placed.
    `bound` is dropped when `fit_steps` is remade or its agent is observed (the only ways its
    agent's fit changes), so a bound kept was made with its `fit_steps` and its agent's fit
    as they are."""

    spec: JobSpec
    agent: Agent | None
    epoch_work: float | None
    last_epoch: int
    whole_demands: bool
    fit_steps: FitSteps | None = None
    bound: Bound | None = None
    placed: _Placed | None = None


@dataclass(slots=True)
class _Round:
    """What a round's options depend on besides the job: the GPUs of the nodes that are up,
    GPUs per node, the fair share, the dominant share × number of nodes, the time, the cost
    of 0 GPUs and every job's first option (0 GPUs at that cost), and whether the lazy greedy
    applies (`plain`: p < 0 and this class's restart factor, which bounds and kept first moves
    assume)."""

    gpus: int
    gpn: int
    fair: int
    share: float
    now: float
    zero_cost: float
    zero: Option
    plain: bool


class _RoundOptions(NamedTuple):
    """`_round_options`' answer: each job's options (unmade ones: [its first option], or a
    placed job's `SureKeep` options), each placed job's `_Current`, the jobs whose options
    were made, `choose`'s entries of the others, the bounds on the next moves of placed
    jobs entered at their kept placement (`later`), and `place`'s `placed`: the placed jobs
    and whether all of them ask for whole numbers of each resource."""

    options: list[list[Option | None]]
    kept: dict[str, _Current]
    made: list[int]
    bounds: list[tuple[float, int, int]]
    later: dict[int, float | None]
    placed: tuple[list[int], bool]


class _View(NamedTuple):
    """A round's jobs (in its order), plan, `_Current`s of its placed jobs, and the speedups
    of its planned jobs whose `_Current` does not give it (`_settle_view`)."""

    jobs: list[JobStatus]
    plan: dict[str, Placement]
    kept: dict[str, _Current]
    speedups: dict[str, float]


def epoch_of(perf, job: JobStatus) -> int:
    """The epoch `job` is in (adaptive jobs: by the artifact's epoch ends; others: equal
    epochs of its total work)."""
    app = app_goodput(perf, job.spec.application)
    if job.spec.adaptive_batch:
        return app.epoch_of(job.progress * app.total / job.spec.total_work)
    per_epoch = job.spec.total_work / app.epochs
    return min(int(job.progress / per_epoch), app.epochs - 1)


@register("pollux")
class PolluxPolicy(Policy):
    quiet_restarts = True
    # pollux.py optimizes every interval: ages, profiles and epochs move without events
    needs_every_round = True

    def __init__(self, perf=None, round_interval: float = 60.0, p: float = -1.0) -> None:
        if perf is None:
            from ..perf import default_perf

            perf = default_perf()
        self.perf = perf
        self.round_interval = round_interval  # simulator.py `--interval 60`
        if not math.isfinite(p) or p > 1:
            raise ConfigError(f"p: expected a finite power-mean exponent <= 1, got {p!r}")
        self.p = float(p)  # pollux.py _evaluate: `p = -1`, "more negative = more fair"
        self.agents: dict[str, Agent] = {}
        self._last_plan: dict[str, int] = {}  # (`last_plan`, `last_speedup`)
        self._last_speedup: dict[str, float] = {}
        self._view: _View | None = None  # the last round's, until `last_plan` is read
        self.ps_plan: dict[str, Placement] = {}  # this round's parameter servers per PS job
        self.last_placements: dict[str, Placement] = {}  # the last round's plan
        # per job, its option sizes and speedup × share (what `options` needs but the restart
        # factor), with what they were computed from (`_steps`)
        self._steps_memo: dict[str, _StepsMemo] = {}
        self._steps_on: _StepsContext | None = None  # what those were computed in
        self._agent_of: dict[str, _JobRecord] = {}  # job -> what `_round_options` keeps
        # a waiting job checked once per cluster shape
        self._reject_impossible = CheckedOnce(also=no_size_fits)
        # (app, fit, gradient statistics, fixed batch) -> (model, its goodputs), shared by agents
        self._shared_fits: dict[tuple, tuple] = {}
        self._grads: dict[tuple, tuple[list, list]] = {}  # (app, batch) -> sqr, var by epoch
        # the last round's jobs as given and in (arrival, name) order (`_in_service_order`)
        self._arrived: tuple[list[JobStatus], list[JobStatus]] = ([], [])

    def reset(self) -> None:
        self.agents.clear()
        self._agent_of.clear()

    def __getstate__(self) -> dict:
        # a copy runs on another backend's jobs: what was kept per job is remade as asked
        self._settle_view()
        return {**self.__dict__, "_steps_memo": {}, "_steps_on": None, "_agent_of": {},
                "_reject_impossible": CheckedOnce(also=no_size_fits), "_shared_fits": {},
                "_grads": {}, "_view": None, "_arrived": ([], [])}

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        for name in ("last_plan", "last_speedup"):  # (a copy pickled when they were attributes)
            if name in state:
                state["_" + name] = state.pop(name)
        self.__dict__.update(state)
        for memo in ("_shared_fits", "_grads", "_last_plan", "_last_speedup"):
            self.__dict__.setdefault(memo, {})  # (a copy pickled before they were kept)
        self.__dict__.setdefault("_view", None)
        self.__dict__.setdefault("_arrived", ([], []))

    @property
    def last_plan(self) -> dict[str, int]:
        """Each job of the last round (in its order) and its GPUs in the plan (0: none)."""
        self._settle_view()
        return self._last_plan

    @property
    def last_speedup(self) -> dict[str, float]:
        """Each job of the last round (in its order) and its speedup on its planned
        placement (0: none)."""
        self._settle_view()
        return self._last_speedup

    def _settle_view(self) -> None:
        """Make `last_plan` and `last_speedup` from the last round's `_View`: most rounds
        nobody reads them, and making them cost as much as a round's greedy."""
        view, self._view = self._view, None
        if view is None:
            return
        names = [j.name for j in view.jobs]
        self._last_plan = last_plan = dict.fromkeys(names, 0)
        self._last_speedup = last_speedup = dict.fromkeys(names, 0.0)
        for name, planned in view.plan.items():
            last_plan[name] = sum(planned.values())
            s = view.speedups.get(name)
            last_speedup[name] = view.kept[name].speedup if s is None else s

    # ---- the agent -----------------------------------------------------------------------

    def agent(self, job: JobStatus) -> Agent | None:
        """The job's agent; None for a job the goodput model cannot describe (no profile)."""
        spec = job.spec
        if spec.kind != JobKind.ALLREDUCE or not has_goodput(spec.application):
            return None
        agent = self.agents.get(job.name)
        if agent is None:
            fixed = None if spec.adaptive_batch else spec.batch_size
            agent = self.agents[job.name] = Agent(fixed)
        return agent

    def observe(self, job: JobStatus, agent: Agent, counts: tuple[int, ...] | None = None
                ) -> None:
        """A running job's agent records its configuration and re-fits (simulator.py
        `Job.update_params`: a new (nodes, replicas, atomic batch) point means a new fit).
        `counts`: `placement_counts(job.workers)` when the caller has it."""
        if job.state is not JobState.RUNNING or not job.workers:
            return
        app = app_goodput(self.perf, job.spec.application)
        if counts is None:
            counts = placement_counts(job.workers)
        epoch = epoch_of(self.perf, job)
        if agent.seen == (counts, epoch):  # the same point as last round: nothing to re-fit
            return
        agent.seen = (counts, epoch)
        if agent.fixed_batch is None:  # the batch it runs there (perf.goodput.Trajectory)
            run = app.trajectory(counts)
            atomic, accum = int(run.atomic[epoch]), int(run.accum[epoch])
        else:
            _, atomics, accums = app.table(counts, agent.fixed_batch)
            atomic, accum = int(atomics[epoch]), int(accums[epoch])
        batch = sum(counts) * atomic * (accum + 1)
        stats = self._grads.get((app, batch))
        if stats is None:  # (`grad_stats` of a batch: the same numbers every time)
            if len(self._grads) > 10_000:
                self._grads = {}
            sqr, var = app.grad_stats(batch)
            stats = self._grads[app, batch] = (sqr[0].tolist(), var[0].tolist())
        grad = (stats[0][epoch], stats[1][epoch])
        point = (len(counts), sum(counts), atomic)
        changed = grad != agent.grad
        if point not in agent.points:
            agent.profile(point, self.perf.step_and_sync(job.spec.application, counts, atomic))
            changed = True
        agent.grad = grad
        if changed:
            points = tuple(sorted((*k, *v) for k, v in agent.points.items()))
            # agents of one application with the same fit and statistics share the model and
            # its goodputs (what `goodput` answers depends on those alone)
            fit = fit_params(points)
            key = (app, fit, grad, agent.fixed_batch)
            shared = self._shared_fits.get(key)
            if shared is None:
                if len(self._shared_fits) > 20_000:
                    self._shared_fits = {}
                shared = self._shared_fits[key] = (GoodputModel(app, fit, *grad,
                                                           agent.fixed_batch), {})
            agent.model, agent.goodputs = shared  # (the model, its goodputs per shape)

    def cap(self, job: JobStatus, agent: Agent | None, gpus: int) -> int:
        """Most replicas the job may get (module docstring, rule 4)."""
        spec = job.spec
        cap = min(spec.max_workers, gpus)
        if agent is None:
            return cap
        if spec.application in ONE_REPLICA_APPS:
            explored = 1
        else:
            app = app_goodput(self.perf, spec.application)
            explored = min(max(2 * agent.max_profiled_replicas, 1), MAX_REPLICAS,
                           app.max_batch // app.min_local)
        # a job that needs N workers may have N (the artifact's jobs need none: min_replicas 0)
        return min(cap, max(explored, spec.min_workers))

    def goodput(self, agent: Agent, nodes: int, replicas: int) -> float:
        key = (nodes, replicas)
        hit = agent.goodputs.get(key)
        if hit is None:
            hit = agent.goodputs[key] = agent.model.best(nodes, replicas)
        return hit

    def speedup(self, agent: Agent | None, nodes: int, replicas: int, fair: int) -> float:
        """Goodput on (nodes, replicas) over goodput at the fair share (rule 2)."""
        if replicas <= 0:
            return 0.0
        if agent is None or agent.model is None:
            return replicas / fair
        base = self.goodput(agent, 1, fair)
        return self.goodput(agent, nodes, replicas) / base if base > 0 else replicas / fair

    # ---- the objective -------------------------------------------------------------------

    def cost(self, scaled: float) -> float:
        """One job's term of the objective, to minimise: the power mean of `scaled + 1e-3`
        is monotone in the sum of these (p < 0: x^p; p = 0: -log x; 0 < p: -x^p)."""
        x = scaled + SPEEDUP_FLOOR
        if self.p < 0:
            return x ** self.p
        return -math.log(max(scaled, SPEEDUP_FLOOR)) if self.p == 0 else -(x ** self.p)

    def power_mean(self, scaled: list[float]) -> float:
        """The artifact's objective value (pollux.py `_evaluate`, before its minus sign)."""
        if not scaled:
            return 0.0
        n = len(scaled)
        if self.p == 0:
            return math.exp(sum(math.log(max(s, SPEEDUP_FLOOR)) for s in scaled) / n)
        return (sum((s + SPEEDUP_FLOOR) ** self.p for s in scaled) / n) ** (1.0 / self.p)

    @staticmethod
    def restart_factor(job: JobStatus, now: float) -> float:
        """pollux.py _evaluate: a changed allocation weighs max(age - restarts · 30, 0) /
        (age + 30)."""
        return restart_factor_at(job.spec.arrival, job.restarts, now)

    def objective(self, state: ClusterState, plan: dict[str, Placement]) -> float:
        """The power mean of an allocation `plan` (job -> workers per node) of the active jobs,
        with the restart penalty against their current placements."""
        jobs = [j for j in state.active if j.state is not JobState.HOLDING]
        gpus, nodes = _cluster_size(state)
        fair = math.ceil(gpus / max(len(jobs), 1))
        share = nodes / gpus
        scaled = []
        for job in jobs:
            workers = {n: c for n, c in plan.get(job.name, {}).items() if c}
            counts = placement_counts(workers)
            s = self.speedup(self.agent(job), len(counts), sum(counts), fair) * share
            if workers != {n: c for n, c in job.workers.items() if c}:
                s *= self.restart_factor(job, state.now)
            scaled.append(s)
        return self.power_mean(scaled)

    # ---- a round -------------------------------------------------------------------------

    def options(self, job: JobStatus, agent: Agent | None, gpus: int, gpn: int, fair: int,
                share: float, now: float) -> list[Option]:
        """Each shape the job may take (`Option`s, by GPUs, its first 0 GPUs)."""
        current = {n: c for n, c in job.workers.items() if c} if job.state.placed else {}
        # still taking up its last change: the artifact's restart (30 s) always ends within
        # its 60 s round, a cluster's may not; re-planning it now would restart it again
        frozen = job.state is JobState.RESTARTING and bool(current)
        self._steps_context(_StepsContext(gpus, gpn, fair, share))
        zero_cost = self.cost(0.0)
        rnd = _Round(gpus, gpn, fair, share, now, zero_cost, (0, zero_cost, None), False)
        return self._options(job, agent, self._steps(job, agent, gpn, fair, share, frozen), rnd,
                             current, placement_counts(current) if current else None)

    def _options(self, job: JobStatus, agent: Agent | None, steps: list[tuple[int, float]],
                 rnd: _Round, current: Placement | None = None,
                 counts: tuple[int, ...] | None = None) -> list[Option]:
        """`options` from the job's `_steps`: their costs at its restart factor now, and its
        current placement kept (`current`, when placed; `counts`: its `placement_counts`)."""
        factor = self.restart_factor(job, rnd.now)
        if self.p < 0:
            out = scaled_options(steps, factor, self.p, rnd.zero)
        else:
            out = [rnd.zero, *[(r, self.cost(scaled * factor), None) for r, scaled in steps]]
        if current:
            s = self.speedup(agent, len(counts), sum(counts), rnd.fair)
            kept = (sum(counts), self.cost(s * rnd.share), current)
            # `out` ascends in GPUs (distinct sizes): the kept placement goes where a stable
            # sort by (GPUs, cost) would put it
            bisect.insort_right(out, kept, key=_gpus_cost)
        return out

    def _steps_context(self, context: _StepsContext) -> bool:
        """Forget every job's `_steps` when the cluster's size or the fair share changes
        (True when they were forgotten)."""
        if context != self._steps_on:
            self._steps_memo, self._steps_on = {}, context
            self._agent_of = {}  # (its records keep steps too)
            return True
        return False

    def _steps(self, job: JobStatus, agent: Agent | None, gpn: int, fair: int, share: float,
               frozen: bool) -> list[tuple[int, float]]:
        """(GPUs, speedup × share) of each size the job may take: 1 to a node's GPUs, whole
        nodes beyond, at least its `min_workers`, at most its `cap` (none while `frozen`).
        Remembered per job until its spec, its agent's fit or profile, or (`_steps_context`)
        the cluster's size or the fair share changes: most jobs wait round after round."""
        model = None if agent is None else agent.model
        most = 0 if agent is None else agent.max_profiled_replicas
        hit = self._steps_memo.get(job.name)
        if (hit is not None and hit.spec is job.spec and hit.model is model
                and hit.most_replicas == most and hit.frozen is frozen):
            return hit.steps
        if frozen:
            steps = []
        else:
            cap = self.cap(job, agent, self._steps_on.gpus)
            steps = [(r, self.speedup(agent, 1 if r <= gpn else math.ceil(r / gpn), r, fair)
                      * share) for r in option_sizes(cap, gpn) if r >= job.spec.min_workers]
        self._steps_memo[job.name] = _StepsMemo(job.spec, model, most, frozen, steps)
        return steps

    def _round_options(self, jobs: list[JobStatus], rnd: _Round) -> _RoundOptions:
        """Each job's `options`, in one pass (a running job's agent observed first): a round
        asks them of every active job, most of them waiting as they were the round before.
        Also each placed job's `_Current`; the jobs whose options were made; and `choose`'s
        entries of the others (`rnd.plain`; `_expander` makes their options): a waiting job's
        (-bound, j, -2 - GPUs) ([the first option] instead of its options), and a placed job's
        first move to its kept placement, exact (its `SureKeep` options instead), with the
        bound of its next move (`later`)."""
        self._steps_context(_StepsContext(rnd.gpus, rnd.gpn, rnd.fair, rnd.share))
        now, plain = rnd.now, rnd.plain
        known = self._agent_of
        none = [rnd.zero]  # a waiting job's options until they are made
        options: list[list[Option | None]] = [none] * len(jobs)
        kept: dict[str, _Current] = {}
        made: list[int] = []
        bounds: list[tuple[float, int, int]] = []
        later: dict[int, float | None] = {}
        placed_at, fractional = [], 0  # (`place`'s `placed`)
        whole = -2 - rnd.gpus  # a waiting job's first move is pushed with the whole budget
        for j, job in enumerate(jobs):
            rec = known.get(job.name)
            if rec is None or rec.spec is not job.spec:
                rec = known[job.name] = self._known(job)
            state = job.state
            if state.placed:
                agent = rec.agent
                # its placement's record, its agent observed if it runs (`observe` inlined as
                # far as "seen already")
                placed_at.append(j)
                fractional += not rec.whole_demands
                workers, placed = job.workers, rec.placed
                if placed is None or placed.workers != workers:
                    current = {n: c for n, c in workers.items() if c}
                    placed = rec.placed = _Placed(dict(workers), current,
                                                  placement_counts(current))
                first = placed.first
                if agent is not None and state is _RUNNING and workers and (
                        rec.epoch_work is None or agent.seen != (
                            placed.counts,
                            min(int(job.progress / rec.epoch_work), rec.last_epoch))):
                    self.observe(job, agent, placed.counts)
                    rec.bound = None  # (made with its agent's fit before this observation)
                    first = None  # `_placed_options` checks it against the fit observed
                # most placed jobs, most rounds: surely kept first as last round (its agent
                # not observed since: a record of `_placed_options` agrees with its fit)
                if (plain and first is not None and first.sure is not None
                        and first.until >= now and first.restarts == job.restarts
                        and first.frozen is (state is _RESTARTING and bool(placed.current))):
                    kept[job.name] = first.current
                    sure = first.sure
                    options[j] = sure.options
                    bounds.append((-sure.ratio, j, sure.move))
                    later[j] = sure.next_bound
                    continue
                opts = self._placed_options(job, state, agent, placed, kept, rnd)
                if type(opts) is SureKeep:  # its kept placement first (`kept_first`)
                    options[j] = opts.options
                    bounds.append((-opts.ratio, j, opts.move))
                    later[j] = opts.next_bound
                else:
                    made.append(j)
                    options[j] = opts
                continue
            # waiting (most of a long queue): its bound as last round (kept only while its
            # `fit_steps` and its agent's fit stay: `_JobRecord`), the checks below in one
            bound = rec.bound
            if plain and bound is not None and bound.until >= now and bound.restarts == job.restarts:
                bounds.append((bound.neg_bound, j, whole))
                continue
            entry = self._waiting_entry(job, rec, rec.agent, rnd)
            if type(entry) is list:  # its options, made now (a round that is not plain)
                made.append(j)
                options[j] = entry
            else:
                bounds.append((entry, j, whole))
        self._forget_gone(jobs)
        return _RoundOptions(options, kept, made, bounds, later, (placed_at, not fractional))

    def _forget_gone(self, jobs: list[JobStatus]) -> None:
        """Drop the records of jobs that left when they outnumber the round's `jobs`."""
        if len(self._agent_of) > 2 * len(jobs) + 1000:
            active = {j.name for j in jobs}
            self._agent_of = {k: v for k, v in self._agent_of.items() if k in active}
            self._steps_memo = {k: v for k, v in self._steps_memo.items() if k in active}

    def _waiting_entry(self, job: JobStatus, rec: _JobRecord, agent: Agent | None,
                       rnd: _Round) -> list[Option] | float:
        """A waiting job's entry in `_round_options` when last round's bound does not hold:
        its options, made now in a round that is not plain, else minus a bound on its first
        move (its options are made only if the greedy reaches it)."""
        fit_steps = rec.fit_steps  # `_steps` inlined
        if fit_steps is None or (agent is not None and (
                fit_steps.model is not agent.model
                or fit_steps.most_replicas != agent.max_profiled_replicas)):
            fit_steps = rec.fit_steps = FitSteps(
                None if agent is None else agent.model,
                0 if agent is None else agent.max_profiled_replicas,
                self._steps(job, agent, rnd.gpn, rnd.fair, rnd.share, False))
            rec.bound = None
        if not rnd.plain:
            return self._options(job, agent, fit_steps.steps, rnd)
        bound = rec.bound
        if (bound is None or bound.until < rnd.now or bound.fit_steps is not fit_steps
                or bound.restarts != job.restarts):
            bound = rec.bound = first_move_bound(job.spec, job.restarts, fit_steps, rnd.now,
                                                 rnd.zero_cost, self.p, rnd.gpus)
        return bound.neg_bound

    def _placed_options(self, job: JobStatus, state: JobState, agent: Agent | None,
                        placed: _Placed, kept: dict[str, _Current], rnd: _Round
                        ) -> list[Option] | SureKeep:
        """`options` of a placed job (`state`: its state, `agent`, `placed`: its placement's
        record, its agent observed already); its `_Current` into `kept`. Its current
        placement, counts and kept option are remembered (`_Placed`) until its workers or its
        agent's fit change (the record is remade with the fair share). Instead of its options,
        its `SureKeep` when its first move is surely to its kept placement."""
        frozen = state is _RESTARTING and bool(placed.current)
        model, most = (None, 0) if agent is None else (agent.model, agent.max_profiled_replicas)
        first = placed.first
        if (not rnd.plain or first is None or first.model is not model
                or first.most_replicas != most or first.frozen is not frozen
                or first.until < rnd.now or first.restarts != job.restarts):
            first = self._kept_record(job, agent, placed, kept, rnd, frozen)
            if type(first) is list:  # (its options)
                return first
        kept[job.name] = first.current
        if first.sure is not None:
            return first.sure
        return self._kept_options(job, first.steps, first.keep.option, rnd.now, rnd.zero)

    def _kept_record(self, job: JobStatus, agent: Agent | None, placed: _Placed,
                     kept: dict[str, _Current], rnd: _Round, frozen: bool
                     ) -> _KeptFirst | list[Option]:
        """`_placed_options`' record of a placed job (`placed`): its steps (`_steps`), kept
        option and `kept_first`, made anew; not `rnd.plain` or without workers: its
        `_options` (and its `_Current` into `kept`)."""
        current, counts = placed.current, placed.counts
        model = None if agent is None else agent.model
        most = 0 if agent is None else agent.max_profiled_replicas
        steps = self._steps(job, agent, rnd.gpn, rnd.fair, rnd.share, frozen)
        if not rnd.plain or not current:  # (no kept option without workers)
            placed.first = None  # (not made with its agent's fit as it is now)
            kept[job.name] = _Current(current, counts, None)
            return self._options(job, agent, steps, rnd, current, counts)
        keep = placed.keep
        if keep is None or keep.model is not model:
            s = self.speedup(agent, len(counts), sum(counts), rnd.fair)
            keep = placed.keep = _Kept(model, (sum(counts), self.cost(s * rnd.share), current),
                                       s)
        until = rnd.now + BOUND_AHEAD
        sure = kept_first(steps, keep.option, job, until, rnd.zero_cost, self.p, rnd.gpus)
        placed.first = first = _KeptFirst(steps, job.restarts, until, keep, sure, model, most,
                                          frozen, _Current(current, counts, keep.speedup))
        return first

    def _kept_options(self, job: JobStatus, steps: list[tuple[int, float]], keep: Option,
                      now: float, zero: Option) -> list[Option]:
        """`_options` of a placed job (p < 0, `cost` inlined) from its steps and its kept
        option `keep`."""
        out = scaled_options(steps, restart_factor_at(job.spec.arrival, job.restarts, now),
                             self.p, zero)
        bisect.insort_right(out, keep, key=_gpus_cost)
        return out

    def _expander(self, jobs: list[JobStatus], rnd: _Round) -> Callable[[int], list[Option]]:
        """`choose`'s `expand`: the options of job j that `_round_options` left out, as
        `_options` makes them from its steps of this round."""
        zero, now = rnd.zero, rnd.now
        p, known = self.p, self._agent_of

        def expand(j: int) -> list[Option]:
            job = jobs[j]
            rec = known[job.name]
            if job.state.placed:  # from its `_kept_record`
                first = rec.placed.first
                return self._kept_options(job, first.steps, first.keep.option, now, zero)
            return scaled_options(rec.fit_steps.steps,
                                  restart_factor_at(job.spec.arrival, job.restarts, now), p, zero)

        return expand

    def _known(self, job: JobStatus) -> _JobRecord:
        """A new `_JobRecord` of the job: its spec, agent, epoch arithmetic and whether its
        demands are whole; the rest is filled in as `_round_options` asks."""
        agent = self.agent(job)
        epoch_work, last_epoch = None, 0
        if agent is not None and not job.spec.adaptive_batch:
            app = app_goodput(self.perf, job.spec.application)
            epoch_work, last_epoch = job.spec.total_work / app.epochs, app.epochs - 1
        return _JobRecord(job.spec, agent, epoch_work, last_epoch, _whole_demands(job.spec))

    def choose(self, options: list[list[Option | None]], budget: int,
               lazy: Lazy | None = None) -> list[int]:
        """The greedy's chosen option per job (`pollux_greedy.greedy`)."""
        return greedy(options, budget, lazy)

    def schedule(self, state: ClusterState) -> list[Action]:
        # `state.active` but the holding jobs, in one pass (a holding job is never rejected)
        actions, jobs = self._reject_impossible(state, [
            j for j in state.jobs.values() if not (s := j.state).finished and s is not _HOLDING])
        if not jobs:
            return actions
        gpus, nodes = _cluster_size(state)
        gpn = int(max(state.capacity[:, 2].max(), 1))
        fair = math.ceil(gpus / len(jobs))  # pollux.py: ceil(1 / dominant share / jobs)
        share = nodes / gpus  # dominant share (1 GPU of all) × number of nodes
        jobs = self._in_service_order(jobs)
        plain = self.p < 0 and type(self).restart_factor is PolluxPolicy.restart_factor
        zero_cost = self.cost(0.0)
        rnd = _Round(gpus, gpn, fair, share, state.now, zero_cost, (0, zero_cost, None), plain)
        opts = self._round_options(jobs, rnd)
        chosen = self.choose(opts.options, gpus, Lazy(opts.bounds, self._expander(jobs, rnd),
                                                       opts.made, opts.later))
        plan = self.place(state, jobs, opts.options, chosen, gpn, opts.placed)
        self.last_placements = plan
        # the placed jobs planned at their kept placement (the placement of their `_Current`),
        # and the other placed or chosen jobs
        placed_at, options = opts.placed[0], opts.options
        kept_at = {j for j in placed_at if options[j][chosen[j]][2] is not None}
        moved = set(compress(range(len(chosen)), chosen)).union(placed_at)
        moved.difference_update(kept_at)
        # the speedups of the plan now (the agents' fits move on), but for kept placements
        # whose speedup is known (a plain round's: not looked at); `last_plan` and
        # `last_speedup` made of them when read
        known, kept, speedups = self._agent_of, opts.kept, {}
        for name in [jobs[j].name for j in moved] if plain else plan:
            planned = plan.get(name)
            if planned is None:
                continue
            hit = kept.get(name)
            if hit is None or hit.placement is not planned or hit.speedup is None:
                speedups[name] = self._plan_speedup(known[name].agent, planned, hit, fair)
        self._view = _View(jobs, plan, kept, speedups)
        astir = self._astir(jobs, kept_at, moved)
        return actions + in_applicable_order(state, self.actions(astir, plan, opts.kept))

    @staticmethod
    def _astir(jobs: list[JobStatus], kept_at: set[int], moved: set[int]) -> list[JobStatus]:
        """The round's jobs that `actions` may act on, in order: all but those it passes
        over without a word, a waiting job left waiting that already waits for GPUs and a
        placed job that keeps its placement as it is (`kept_at`: its chosen option is its kept
        placement, whose `Placement` its `_Current` is). `moved`: the other placed or chosen
        jobs. The others' reasons are read in one pass of C: ~900 of ~1,340 jobs in a long
        queue, every round."""
        other_reason = compress(range(len(jobs)), map(_NO_GPU.__ne__, map(_reason_of, jobs)))
        look = set(other_reason)
        look.difference_update(kept_at)
        look.update(moved)
        return [jobs[j] for j in sorted(look)]

    def _in_service_order(self, jobs: list[JobStatus]) -> list[JobStatus]:
        """`jobs` by (attained service, arrival, name): a stable sort by service alone of them
        in (arrival, name) order, that order kept while the round's jobs are the last round's
        (most rounds: a job's arrival and name never change, and reading them every round
        took as long as the sort)."""
        given, arrived = self._arrived
        if not (len(given) == len(jobs) and all(map(operator.is_, given, jobs))):
            arrived = sorted(jobs, key=_by_arrival)
            self._arrived = (jobs, arrived)
        return sorted(arrived, key=_by_service)

    def _plan_speedup(self, agent: Agent | None, planned: Placement | None,
                      kept: _Current | None, fair: int) -> float:
        """A job's speedup on its planned placement (0 without one); `kept`: its current
        placement, its counts and speedup there when known, which the plan often is."""
        if not planned:
            return 0.0
        if kept is not None and kept.placement is planned:
            if kept.speedup is not None:  # as `speedup` gives it
                return kept.speedup
            counts = kept.counts
        else:
            counts = placement_counts(planned)
        return self.speedup(agent, len(counts), sum(counts), fair)

    def place(self, state: ClusterState, jobs: list[JobStatus], options: list[list[Option]],
              chosen: list[int], gpn: int, placed: tuple[list[int], bool] | None = None
              ) -> dict[str, Placement]:
        """Nodes for the chosen shapes: kept placements first, then multi-node shapes on whole
        free nodes, then one-node shapes on the tightest node that fits; a shape that does not
        fit gives way to the job's cheapest smaller option that fits. `placed`: the placed
        jobs (indices) and whether all ask for whole numbers of each resource, when known."""
        ledger = self.ledger(state)
        # Every placed job's resources go back, then the kept placements are taken again.
        # When that round trip cannot change what the ledger answers it is skipped for the
        # kept ones (`_round_trip_exact`); an empty placement's is always (a no-op).
        if placed is None:
            placed_at = [j for j, job in enumerate(jobs) if job.state.placed]
            skip_kept = self._round_trip_exact(ledger, [jobs[j] for j in placed_at],
                                               self._agent_of)
        else:
            placed_at, whole = placed
            skip_kept = whole and self._round_trip_exact(ledger, [])
        for j in placed_at:
            job = jobs[j]
            if skip_kept and options[j][chosen[j]][2] is not None:  # (its kept placement)
                continue
            if job.workers:
                ledger.give_back(job.workers, job.spec.worker_demand)
            if job.ps:
                ledger.give_back(job.ps, job.spec.ps_demand)
        plan: dict[str, Placement] = {}
        self.ps_plan: dict[str, Placement] = {}
        order = []
        # a job at its first option (0 GPUs: most of a long queue) keeps nothing, takes nothing
        for j in compress(range(len(chosen)), chosen):
            job = jobs[j]
            gpus, _, keep = options[j][chosen[j]]
            if keep is not None:
                if not skip_kept:
                    ledger.take(keep, job.spec.worker_demand)
                    if job.ps:
                        ledger.take(job.ps, job.spec.ps_demand)
                plan[job.name] = keep
            elif gpus > 0:
                order.append(j)
        order.sort(key=lambda j: -_gpus_of(options[j][chosen[j]]))  # stable: priority order
        for j in order:
            job = jobs[j]
            # the chosen shape, else the cheapest smaller one that fits (its placement as it
            # was included, when those GPUs are still free)
            for t in sorted(range(1, chosen[j] + 1), key=lambda t: (t != chosen[j],
                                                                    _cost_of(options[j][t]))):
                r, _, keep = options[j][t]
                if keep is not None:
                    fits = ledger.fit_counts(job.spec.worker_demand)
                    if all(fits[ledger.names.index(n)] >= c for n, c in keep.items()):
                        ledger.take(keep, job.spec.worker_demand)
                        plan[job.name] = keep
                        break
                    continue
                placed = _fit(ledger, job, r, gpn)
                if placed is not None:
                    plan[job.name], self.ps_plan[job.name] = placed
                    break
        return plan

    @staticmethod
    def _round_trip_exact(ledger, placed: list[JobStatus],
                          known: dict[str, _JobRecord] | None = None) -> bool:
        """Giving a placed job's resources back to `ledger` and taking the same placement
        again leaves every answer of the ledger as it was: no placement plugin mirrors it, its
        free CPU, memory and GPUs are whole numbers (so adding and subtracting whole demands is
        exact), every GPU is wholly free, wholly used or down, and every placed job asks for
        whole numbers of each (whole GPUs: a round trip at most moves which of a node's GPUs
        are free, not how many, and fits count them per node)."""
        if ledger.view is not None:
            return False
        for job in placed:
            rec = known.get(job.name) if known else None  # (`_known`: this round's jobs)
            if not (rec.whole_demands if rec is not None and rec.spec is job.spec else
                    _whole_demands(job.spec)):
                return False
        free, gpus = ledger.free, ledger.gpu_free
        return bool(np.array_equal(free, np.floor(free))
                    and ((gpus == 0.0) | (gpus == 1.0) | (gpus == -1.0)).all())

    def actions(self, jobs: list[JobStatus], plan: dict[str, Placement],
                kept: dict[str, _Current] | None = None) -> list[Action]:
        """`kept`: each placed job's `_Current` (`_round_options`), whose placement a plan
        that keeps it is."""
        out: list[Action] = []
        waits = 0
        kept = kept or {}
        for job in jobs:
            new = plan.get(job.name, _NOTHING)
            if not new and not job.state.placed:  # most of a long queue: waits on
                if waits < MAX_WAIT_REASONS and job.reason != _NO_GPU:
                    out.append(Wait(job.name, _NO_GPU))
                    waits += 1
                continue
            hit = kept.get(job.name)
            current = (hit.placement if hit is not None
                       else {n: c for n, c in job.workers.items() if c})
            if new is current and new:  # kept as it is (most placed jobs): no action
                continue
            r = sum(new.values())
            if job.state.placed:
                if not new:
                    out.append(Suspend(job.name, f"preempted: {_NO_GPU[9:]}"))
                elif new != current:
                    out.append(Scale(job.name, f"rescaled {job.num_workers}→{r} GPUs: more"
                                     " goodput for the cluster's fairness-weighted speedup",
                                     new, self.ps_for(job, new)))
            elif new:
                out.append(Place(job.name, f"started on {r} GPUs by goodput",
                                 new, self.ps_for(job, new)))
            elif waits < MAX_WAIT_REASONS and job.reason != _NO_GPU:
                out.append(Wait(job.name, _NO_GPU))
                waits += 1
        return out

    def ps_for(self, job: JobStatus, workers: Placement) -> Placement:
        """Parameter servers of a PS job where this round's placement put them."""
        return self.ps_plan.get(job.name, {}) if job.spec.num_ps else {}

    def engine_view(self, state: ClusterState | None = None) -> dict[str, Any]:
        """Pollux's last round: each job's GPUs and its speedup over the fair share."""
        view: dict[str, Any] = {**super().engine_view(state),
                                "rule": "GPUs to the jobs whose goodput speedup most raises the"
                                f" power mean (p = {self.p:g}) of all jobs' speedups; a job"
                                " with an adaptive batch picks the one its fitted goodput"
                                " favours on what it gets"}
        speedups = {k: round(v, 3) for k, v in self.last_speedup.items()}
        return {**view, "speedup": top(speedups) or {"no active job": 0.0},
                "gpus": top(self.last_plan) or {"no job": 0}}


_by_service = operator.attrgetter("attained_service")  # (`_in_service_order`)
_reason_of = operator.attrgetter("reason")  # (`_astir`)
_by_arrival = operator.attrgetter("spec.arrival", "name")
_RUNNING, _RESTARTING, _HOLDING = JobState.RUNNING, JobState.RESTARTING, JobState.HOLDING
_NOTHING: Placement = {}  # (read only) no placement


# an `Option`'s GPUs, cost, and (GPUs, cost): the key options are sorted by
_gpus_of, _cost_of = operator.itemgetter(0), operator.itemgetter(1)
_gpus_cost = operator.itemgetter(0, 1)


def _whole_demands(spec) -> bool:
    """Whether the job asks for whole numbers of CPU, memory and GPUs (workers and PS)."""
    return all(float(d.cpu).is_integer() and float(d.mem).is_integer()
               and float(d.gpu).is_integer() for d in (spec.worker_demand, spec.ps_demand))


def _cluster_size(state: ClusterState) -> tuple[int, int]:
    """(GPUs, nodes) of the nodes that are up (at least 1 each)."""
    up = state.capacity[state.node_up]
    return max(int(up[:, 2].sum()), 1), max(int(np.count_nonzero(up[:, 2] > 0)), 1)


def _fit(ledger, job: JobStatus, replicas: int, gpn: int) -> tuple[Placement, Placement] | None:
    """`replicas` workers on one node (the tightest that fits) if they fit in a node's GPUs,
    else on whole free nodes; PS jobs through the ledger's gang placement. Taken on the
    ledger; None if they do not fit."""
    demand = job.spec.worker_demand
    if job.spec.num_ps:
        placed = ledger.place_gang(job, replicas)
        if placed is None:
            return None
        workers, ps = placed
        ledger.take(workers, demand)
        ledger.take(ps, job.spec.ps_demand)
        return placed
    fits = ledger.fit_counts(demand)
    if replicas <= gpn:
        ok = np.flatnonzero(fits >= replicas)
        if not len(ok):
            return None
        i = int(ok[np.argmin(fits[ok])])
        placement = {ledger.names[i]: replicas}
    else:
        whole = np.flatnonzero(fits >= gpn)
        need = math.ceil(replicas / gpn)
        if len(whole) < need:
            return None
        placement, left = {}, replicas
        for i in whole[:need].tolist():
            placement[ledger.names[i]] = min(gpn, left)
            left -= gpn
    ledger.take(placement, demand)
    return placement, {}


def option_sizes(cap: int, gpn: int) -> list[int]:
    """The GPUs Pollux may give a job of at most `cap` on nodes of `gpn`: 1 to a node's GPUs on
    one node, whole nodes beyond (module docstring)."""
    return list(range(1, min(cap, gpn) + 1)) + [k * gpn for k in range(2, cap // gpn + 1)]


def no_size_fits(state: ClusterState, job: JobStatus) -> str:
    """Why `job` can never run under Pollux's sizes ('' if it can): 1 to a node's GPUs on one
    node, or whole nodes, up to its `max_workers` (module docstring). A rigid job of 7 workers
    on 4-GPU nodes has none; it waited, told that other jobs gained more, until the run
    stalled with the cluster free. Judged on every node, up or not: a verdict that stays."""
    gpn = int(max(state.capacity[:, 2].max(), 1))
    spec = job.spec
    cap = min(spec.max_workers, int(state.capacity[:, 2].sum()))
    if any(r >= spec.min_workers for r in option_sizes(cap, gpn)):
        return ""
    wants = f"{spec.min_workers}" if spec.min_workers == spec.max_workers else \
        f"{spec.min_workers} to {spec.max_workers}"
    return (f"rejected: Pollux gives a job 1 to {gpn} GPUs on one node or whole {gpn}-GPU nodes;"
            f" it asks for {wants} workers, which is none of those")
