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
`objective(state, plan)` evaluates any allocation, so the two can be compared.
"""

from __future__ import annotations

import bisect
import heapq
import math
import operator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..model import (
    Action,
    ClusterState,
    JobKind,
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
from .teaching import top

RESTART_DELAY = 30.0  # pollux.py _evaluate: `delay = 30` (the simulator's restart cost)
SPEEDUP_FLOOR = 1e-3  # pollux.py _evaluate: `scaled_speedups + 1e-3`
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
        self.max_profiled_replicas = max(self.max_profiled_replicas, key[1])


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
        self.last_plan: dict[str, int] = {}
        self.last_speedup: dict[str, float] = {}
        self.ps_plan: dict[str, Placement] = {}  # this round's parameter servers per PS job
        self.last_placements: dict[str, Placement] = {}  # the last round's plan
        # per job, its option sizes and speedup × share (what `options` needs but the restart
        # factor), with what they were computed from (`_steps`)
        self._steps_memo: dict[str, tuple] = {}
        self._steps_on: tuple | None = None  # (GPUs, GPUs per node, fair share, share) of those
        self._agent_of: dict[str, list] = {}  # job -> what `_round_options` keeps (`_known`)
        self._reject_impossible = CheckedOnce()  # a waiting job checked once per cluster shape
        # (app, fit, gradient statistics, fixed batch) -> (model, its goodputs), shared by agents
        self._shared_fits: dict[tuple, tuple] = {}
        self._grads: dict[tuple, tuple[float, float]] = {}  # (app, batch, epoch) -> (sqr, var)

    def reset(self) -> None:
        self.agents.clear()
        self._agent_of.clear()

    def __getstate__(self) -> dict:
        # a copy runs on another backend's jobs: what was kept per job is remade as asked
        return {**self.__dict__, "_steps_memo": {}, "_steps_on": None, "_agent_of": {},
                "_reject_impossible": CheckedOnce(), "_shared_fits": {}, "_grads": {}}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        for memo in ("_shared_fits", "_grads"):  # (a copy pickled before they were kept)
            self.__dict__.setdefault(memo, {})

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
        grad = self._grads.get((app, batch, epoch))
        if grad is None:  # (`grad_stats` of a batch: the same numbers every time)
            if len(self._grads) > 100_000:
                self._grads = {}
            sqr, var = app.grad_stats(batch)
            grad = self._grads[app, batch, epoch] = (float(sqr[0, epoch]), float(var[0, epoch]))
        key = (len(counts), sum(counts), atomic)
        changed = grad != agent.grad
        if key not in agent.points:
            agent.profile(key, self.perf.step_and_sync(job.spec.application, counts, atomic))
            changed = True
        agent.grad = grad
        if changed:
            points = tuple(sorted((*k, *v) for k, v in agent.points.items()))
            # agents of one application with the same fit and statistics share the model and
            # its goodputs (what `goodput` answers depends on those alone)
            key = (app, fit_params(points), grad, agent.fixed_batch)
            shared = self._shared_fits.get(key)
            if shared is None:
                if len(self._shared_fits) > 20_000:
                    self._shared_fits = {}
                shared = self._shared_fits[key] = (GoodputModel(app, key[1], *grad,
                                                           agent.fixed_batch), {})
            agent.model, agent.goodputs = shared

    def cap(self, job: JobStatus, agent: Agent | None, gpus: int) -> int:
        """Most replicas the job may get (module docstring, rule 4)."""
        spec = job.spec
        cap = min(spec.max_workers, gpus)
        if agent is None:
            return cap
        if spec.application in ONE_REPLICA_APPS:
            return min(cap, 1)
        app = app_goodput(self.perf, spec.application)
        return min(cap, max(2 * agent.max_profiled_replicas, 1), MAX_REPLICAS,
                   app.max_batch // app.min_local)

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
        age = max(now - job.spec.arrival, 0.0)
        return max(age - job.restarts * RESTART_DELAY, 0.0) / (age + RESTART_DELAY)

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
                share: float, now: float) -> list[tuple[int, float, Placement | None]]:
        """(GPUs, cost, kept placement or None) for each shape the job may take, by GPUs."""
        current = {n: c for n, c in job.workers.items() if c} if job.state.placed else {}
        # still taking up its last change: the artifact's restart (30 s) always ends within
        # its 60 s round, a cluster's may not; re-planning it now would restart it again
        frozen = job.state is JobState.RESTARTING and bool(current)
        self._steps_context((gpus, gpn, fair, share))
        return self._options(job, agent, self._steps(job, agent, gpn, fair, share, frozen),
                             current, fair, share, now, self.cost(0.0),
                             placement_counts(current) if current else None)

    def _options(self, job: JobStatus, agent: Agent | None, steps: list[tuple[int, float]],
                 current: Placement | None, fair: int, share: float, now: float, zero_cost: float,
                 counts: tuple[int, ...] | None = None
                 ) -> list[tuple[int, float, Placement | None]]:
        """`options` from the job's `_steps`: their costs at its restart factor now, and its
        current placement kept (`current`, when placed; `counts`: its `placement_counts`)."""
        factor = self.restart_factor(job, now)
        out = [(0, zero_cost, None)]
        p = self.p
        if p < 0:  # `cost` inlined: the same arithmetic, (s · share · factor + 1e-3) ** p
            for r, ss in steps:
                out.append((r, (ss * factor + SPEEDUP_FLOOR) ** p, None))
        else:
            for r, ss in steps:
                out.append((r, self.cost(ss * factor), None))
        if current:
            s = self.speedup(agent, len(counts), sum(counts), fair)
            kept = (sum(counts), self.cost(s * share), current)
            # `out` ascends in GPUs (distinct sizes): the kept placement goes where a stable
            # sort by (GPUs, cost) would put it
            bisect.insort_right(out, kept, key=_gpus_cost)
        return out

    def _steps_context(self, context: tuple) -> bool:
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
        if (hit is not None and hit[0] is job.spec and hit[1] is model and hit[2] == most
                and hit[3] is frozen):
            return hit[4]
        if frozen:
            steps = []
        else:
            gpus = self._steps_on[0]
            cap = self.cap(job, agent, gpus)
            sizes = [r for r in range(1, min(cap, gpn) + 1)] + \
                [k * gpn for k in range(2, cap // gpn + 1)]
            steps = [(r, self.speedup(agent, 1 if r <= gpn else math.ceil(r / gpn), r, fair)
                      * share) for r in sizes if r >= job.spec.min_workers]
        self._steps_memo[job.name] = (job.spec, model, most, frozen, steps)
        return steps

    def _round_options(self, jobs: list[JobStatus], gpus: int, gpn: int, fair: int,
                       share: float, now: float
                       ) -> tuple[list[list[tuple[int, float, Placement | None]]],
                                  dict[str, tuple[Placement, tuple[int, ...], float | None]],
                                  list[int], tuple[list[tuple[float, int, int]], dict]]:
        """Each job's `options`, in one pass (a running job's agent observed first): a round
        asks them of every active job, most of them waiting as they were the round before.
        Also each placed job's current placement (its kept option's), its `placement_counts`
        and its speedup there (None: not known yet); the jobs whose options were made; and
        `choose`'s entries of the others (p < 0, `_expander` makes their options): a waiting
        job's (-bound, j, -2 - GPUs) ([the first option] instead of its options), and a
        placed job's first move to its kept placement, exact (a list with its first option
        and that one instead), with the bound of its next move (`later`)."""
        self._steps_context((gpus, gpn, fair, share))
        zero = (0, self.cost(0.0), None)  # every job's first option (a tuple: shared)
        zero_cost = zero[1]
        known, memo = self._agent_of, self._steps_memo
        p = self.p
        plain = p < 0 and type(self).restart_factor is PolluxPolicy.restart_factor
        none = [zero]  # a waiting job's options until they are made
        options = [none] * len(jobs)
        kept: dict[str, tuple[Placement, tuple[int, ...], float | None]] = {}
        made: list[int] = []
        bounds: list[tuple[float, int, int]] = []
        later: dict[int, float | None] = {}
        whole = -2 - gpus  # a waiting job's first move is pushed with the whole budget
        for j, job in enumerate(jobs):
            spec = job.spec
            rec = known.get(job.name)  # `_known`
            if rec is None or rec[0] is not spec:
                rec = known[job.name] = self._known(job)
            if job.state.placed:
                opts = self._placed_options(job, rec, kept, zero, gpn, fair, share, now, plain)
                if type(opts) is tuple:  # its kept placement first (`_kept_first`)
                    options[j] = opts[4]
                    bounds.append((-opts[6], j, opts[5]))
                    later[j] = opts[7]
                else:
                    made.append(j)
                    options[j] = opts
                continue
            # waiting (most of a long queue): `_steps` inlined
            agent, steps = rec[1], rec[3]
            if steps is None or (agent is not None and (
                    rec[2] is not agent.model or steps[0] != agent.max_profiled_replicas)):
                steps = (0 if agent is None else agent.max_profiled_replicas,
                         self._steps(job, agent, gpn, fair, share, False))
                rec[2], rec[3] = None if agent is None else agent.model, steps
            if not plain:
                made.append(j)
                options[j] = self._options(job, agent, steps[1], None, fair, share, now,
                                           zero_cost)
                continue
            # its options are made only if the greedy reaches its bound (`choose`)
            bound = rec[5]
            if (bound is None or bound[1] < now or bound[3] is not steps
                    or bound[2] != job.restarts):
                bound = rec[5] = _bound(spec, job.restarts, steps, now, zero_cost, p, gpus)
            bounds.append((bound[0], j, whole))
        if len(known) > 2 * len(jobs) + 1000:
            active = {j.name for j in jobs}
            self._agent_of = {k: v for k, v in known.items() if k in active}
            self._steps_memo = {k: v for k, v in memo.items() if k in active}
        return options, kept, made, (bounds, later)

    def _placed_options(self, job: JobStatus, rec: list, kept: dict, zero: tuple, gpn: int,
                        fair: int, share: float, now: float, plain: bool
                        ) -> list[tuple[int, float, Placement | None]] | tuple:
        """`options` of a placed job (`rec`: its `_known` record), its agent observed first if
        it runs; its current placement, counts and speedup there into `kept`. Its current
        placement, counts and kept option are remembered until its workers or its agent's fit
        change (the record is remade with the fair share). Instead of its options, its
        `_kept_first` record when its first move is surely to its kept placement."""
        agent, workers, state = rec[1], job.workers, job.state
        at = rec[6]  # [workers as last seen, current placement, counts, kept, `_kept_first`]
        if at is None or at[0] != workers:
            current = {n: c for n, c in workers.items() if c}
            at = rec[6] = [dict(workers), current, placement_counts(current), None, None]
        if agent is not None and state is JobState.RUNNING and workers:
            epochs = rec[4]
            if epochs is None or agent.seen != (
                    at[2], min(int(job.progress / epochs[0]), epochs[1])):
                self.observe(job, agent, at[2])  # (else: as `observe`, seen already)
        frozen = state is JobState.RESTARTING and bool(at[1])
        model, most = (None, 0) if agent is None else (agent.model, agent.max_profiled_replicas)
        first = at[4]  # its `_kept_first` record, + (fit, most replicas, frozen, kept entry)
        if (not plain or first is None or first[8] is not model or first[9] != most
                or first[10] is not frozen or first[2] < now or first[1] != job.restarts):
            first = self._kept_record(job, agent, at, kept, zero, gpn, fair, share, now, plain,
                                      frozen)
            if type(first) is list:  # (its options)
                return first
        kept[job.name] = first[11]
        if first[4] is not None:
            return first
        return self._kept_options(job, first[0], first[3][1], now, zero)

    def _kept_record(self, job: JobStatus, agent: Agent | None, at: list, kept: dict,
                     zero: tuple, gpn: int, fair: int, share: float, now: float, plain: bool,
                     frozen: bool) -> tuple | list:
        """`_placed_options`' record of a placed job (`at`): its steps (`_steps`), kept option
        and `_kept_first` record, made anew; not `plain` or without workers: its `_options`."""
        current, counts = at[1], at[2]
        model = None if agent is None else agent.model
        hit = self._steps_memo.get(job.name)  # `_steps`' memo, checked as there
        most = 0 if agent is None else agent.max_profiled_replicas
        if (hit is not None and hit[0] is job.spec and hit[1] is model and hit[3] is frozen
                and hit[2] == most):
            steps = hit[4]
        else:
            steps = self._steps(job, agent, gpn, fair, share, frozen)
        if not plain or not current:  # (no kept option without workers)
            kept[job.name] = (current, counts, None)
            return self._options(job, agent, steps, current, fair, share, now, zero[1], counts)
        keep = at[3]
        if keep is None or keep[0] is not model:
            s = self.speedup(agent, len(counts), sum(counts), fair)
            keep = at[3] = (model, (sum(counts), self.cost(s * share), current), s)
        first = _kept_first(steps, keep, job, now, zero[1], self.p, self._steps_on[0])
        at[4] = first = (*first, model, most, frozen, (current, counts, keep[2]))
        return first

    def _kept_options(self, job: JobStatus, steps: list[tuple[int, float]], keep: tuple,
                      now: float, zero: tuple) -> list[tuple[int, float, Placement | None]]:
        """`_options` of a placed job (p < 0, `cost` inlined) from its steps and its kept
        option `keep`."""
        age = max(now - job.spec.arrival, 0.0)
        factor = max(age - job.restarts * RESTART_DELAY, 0.0) / (age + RESTART_DELAY)
        p = self.p
        out = [zero]
        for r, ss in steps:
            out.append((r, (ss * factor + SPEEDUP_FLOOR) ** p, None))
        bisect.insort_right(out, keep, key=_gpus_cost)
        return out

    def _expander(self, jobs: list[JobStatus], now: float):
        """`choose`'s `expand`: the options of job j that `_round_options` left out, as
        `_options` makes them from its steps of this round."""
        zero = (0, self.cost(0.0), None)
        p, known = self.p, self._agent_of

        def expand(j: int) -> list[tuple[int, float, Placement | None]]:
            job = jobs[j]
            if job.state.placed:  # its `_kept_first` record: (steps, ..., kept option, ...)
                first = known[job.name][6][4]
                return self._kept_options(job, first[0], first[3][1], now, zero)
            age = max(now - job.spec.arrival, 0.0)  # `restart_factor`
            factor = max(age - job.restarts * RESTART_DELAY, 0.0) / (age + RESTART_DELAY)
            return [zero, *[(r, (ss * factor + SPEEDUP_FLOOR) ** p, None)
                            for r, ss in known[job.name][3][1]]]

        return expand

    def _known(self, job: JobStatus) -> list:
        """What `_round_options` keeps of a job: [its spec, `agent(job)`, the agent's model and
        (its most profiled replicas, its `_steps` unfrozen) once asked, for an agent of a job
        with a fixed batch (work per epoch, last epoch) as `epoch_of` computes its epoch, its
        `_bound` while waiting, `_placed_options`' record while placed, and whether it asks
        for whole numbers of each resource (`_round_trip_exact`)]."""
        agent = self.agent(job)
        epochs = None
        if agent is not None and not job.spec.adaptive_batch:
            app = app_goodput(self.perf, job.spec.application)
            epochs = (job.spec.total_work / app.epochs, app.epochs - 1)
        return [job.spec, agent, None, None, epochs, None, None, _whole_demands(job.spec)]

    def choose(self, options: list[list], budget: int,
               lazy: tuple[list, Any] | None = None) -> list[int]:
        """Greedy: the chosen option per job, starting from 0 GPUs, each step the move to a
        larger option with the largest drop in cost per added GPU that fits in `budget`.
        `lazy`: (entries, expand, made, later): job j's options are `expand(j)` unless j is in
        `made`. Its entry is (-bound, j, -2 - budget), its options made when it is popped
        and its move then pushed with that budget: no move of it has a ratio above `bound`
        (so every move popped before is popped as when its options were there from the
        start); or, j in `later`, the exact entry of its first move (its kept placement, in
        `options[j]` at that index), and `later[j]` bounds its next move (None: none)."""
        chosen = [0] * len(options)
        heap: list[tuple[float, int, int]] = []

        def push(j: int) -> None:
            opts, at = options[j], chosen[j]
            g0, c0, _ = opts[at]
            best, target = 0.0, -1
            t = at
            for g, c, _ in opts[at + 1:]:
                t += 1
                if g - g0 > budget or g == g0:
                    continue
                ratio = (c0 - c) / (g - g0)
                if ratio > best + 1e-15:
                    best, target = ratio, t
            if target >= 0:
                heapq.heappush(heap, (-best, j, target))

        for j in range(len(options)) if lazy is None else lazy[2]:
            opts = options[j]
            if len(opts) == 2 and opts[0][0] == 0:  # `push` of a job with one size (most)
                g, c = opts[1][0], opts[1][1]
                if g > budget or g == 0:
                    continue
                ratio = (opts[0][1] - c) / g
                if ratio > 0.0 + 1e-15:
                    heap.append((-ratio, j, 1))
            elif len(opts) > 1:
                push(j)
        later: dict[int, float | None] = {}
        if lazy is not None:
            heap += lazy[0]
            expand, later = lazy[1], lazy[3]
        heapq.heapify(heap)  # entries differ in `j`: popped in the same order as pushed one by one
        while heap:
            if budget <= 0:  # every move left needs a GPU more: none is taken (nor pushed)
                break
            _, j, t = heapq.heappop(heap)
            if t < 0:  # a bound: the move `push` made with budget -2 - t, made now
                options[j] = expand(j)
                later.pop(j, None)
                budget, left = -2 - t, budget
                push(j)
                budget = left
                continue
            need = options[j][t][0] - options[j][chosen[j]][0]
            if need > budget:
                if j in later:
                    options[j] = expand(j)
                    del later[j]
                push(j)
                continue
            budget -= need
            chosen[j] = t
            if t + 1 < len(options[j]):  # else no larger option to push
                if j not in later:
                    push(j)
                elif later[j] is not None:  # its next move's bound, made when popped
                    heapq.heappush(heap, (-later[j], j, -2 - budget))
        return chosen

    def schedule(self, state: ClusterState) -> list[Action]:
        actions, jobs = self._reject_impossible(state, list(state.active))
        jobs = [j for j in jobs if j.state is not JobState.HOLDING]
        if not jobs:
            return actions
        gpus, nodes = _cluster_size(state)
        gpn = int(max(state.capacity[:, 2].max(), 1))
        fair = math.ceil(gpus / len(jobs))  # pollux.py: ceil(1 / dominant share / jobs)
        share = nodes / gpus  # dominant share (1 GPU of all) × number of nodes
        jobs.sort(key=_by_service)  # (attained service, arrival, name)
        options, kept, made, (bounds, later) = self._round_options(jobs, gpus, gpn, fair,
                                                                   share, state.now)
        chosen = self.choose(options, gpus, (bounds, self._expander(jobs, state.now), made,
                                             later))
        plan = self.place(state, jobs, options, chosen, gpn)
        self.last_placements = plan
        # a job left out of the plan (most of a long queue): 0 GPUs, speedup 0
        names = [j.name for j in jobs]
        self.last_plan = last_plan = dict.fromkeys(names, 0)
        self.last_speedup = last_speedup = dict.fromkeys(names, 0.0)
        known = self._agent_of
        for name, planned in plan.items():
            last_plan[name] = sum(planned.values())
            last_speedup[name] = self._plan_speedup(known[name][1], planned, kept.get(name), fair)
        return actions + in_applicable_order(state, self.actions(jobs, plan, kept))

    def _plan_speedup(self, agent: Agent | None, planned: Placement | None,
                      kept: tuple[Placement, tuple[int, ...]] | None, fair: int) -> float:
        """A job's speedup on its planned placement (0 without one); `kept`: its current
        placement and its counts, which the plan often is."""
        if not planned:
            return 0.0
        if kept is not None and kept[0] is planned:
            if kept[2] is not None:  # its speedup there, as `speedup` gives it
                return kept[2]
            counts = kept[1]
        else:
            counts = placement_counts(planned)
        return self.speedup(agent, len(counts), sum(counts), fair)

    def place(self, state: ClusterState, jobs: list[JobStatus], options: list[list],
              chosen: list[int], gpn: int) -> dict[str, Placement]:
        """Nodes for the chosen shapes: kept placements first, then multi-node shapes on whole
        free nodes, then one-node shapes on the tightest node that fits; a shape that does not
        fit gives way to the job's cheapest smaller option that fits."""
        ledger = self.ledger(state)
        placed = [j for j, job in enumerate(jobs) if job.state.placed]
        # Every placed job's resources go back, then the kept placements are taken again.
        # When that round trip cannot change what the ledger answers it is skipped for the
        # kept ones (`_round_trip_exact`); an empty placement's is always (a no-op).
        skip_kept = self._round_trip_exact(ledger, [jobs[j] for j in placed], self._agent_of)
        for j in placed:
            job = jobs[j]
            if skip_kept and options[j][chosen[j]][2] is not None:
                continue
            if job.workers:
                ledger.give_back(job.workers, job.spec.worker_demand)
            if job.ps:
                ledger.give_back(job.ps, job.spec.ps_demand)
        plan: dict[str, Placement] = {}
        self.ps_plan: dict[str, Placement] = {}
        order = []
        # a job at its first option (0 GPUs: most of a long queue) keeps nothing, takes nothing
        for j in [j for j, t in enumerate(chosen) if t]:
            job = jobs[j]
            keep = options[j][chosen[j]][2]
            if keep is not None:
                if not skip_kept:
                    ledger.take(keep, job.spec.worker_demand)
                    if job.ps:
                        ledger.take(job.ps, job.spec.ps_demand)
                plan[job.name] = keep
            elif options[j][chosen[j]][0] > 0:
                order.append(j)
        order.sort(key=lambda j: -options[j][chosen[j]][0])  # stable: priority order
        for j in order:
            job = jobs[j]
            # the chosen shape, else the cheapest smaller one that fits (its placement as it
            # was included, when those GPUs are still free)
            for t in sorted(range(1, chosen[j] + 1), key=lambda t: (t != chosen[j],
                                                                    options[j][t][1])):
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
    def _round_trip_exact(ledger, placed: list[JobStatus], known: dict | None = None) -> bool:
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
            if not (rec[7] if rec is not None and rec[0] is job.spec else
                    _whole_demands(job.spec)):
                return False
        free, gpus = ledger.free, ledger.gpu_free
        return bool(np.array_equal(free, np.floor(free))
                    and ((gpus == 0.0) | (gpus == 1.0) | (gpus == -1.0)).all())

    def actions(self, jobs: list[JobStatus], plan: dict[str, Placement],
                kept: dict[str, tuple] | None = None) -> list[Action]:
        """`kept`: a placed job's current placement first in each (`_round_options`)."""
        out: list[Action] = []
        waits = 0
        kept = kept or {}
        for job in jobs:
            new = plan.get(job.name, {})
            if not new and not job.state.placed:  # most of a long queue: waits on
                if waits < MAX_WAIT_REASONS and job.reason != _NO_GPU:
                    out.append(Wait(job.name, _NO_GPU))
                    waits += 1
                continue
            hit = kept.get(job.name)
            current = hit[0] if hit is not None else {n: c for n, c in job.workers.items() if c}
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


_by_service = operator.attrgetter("attained_service", "spec.arrival", "name")


def _gpus_cost(option: tuple) -> tuple:
    return option[0], option[1]


def _whole_demands(spec) -> bool:
    """Whether the job asks for whole numbers of CPU, memory and GPUs (workers and PS)."""
    return all(float(d.cpu).is_integer() and float(d.mem).is_integer()
               and float(d.gpu).is_integer() for d in (spec.worker_demand, spec.ps_demand))


def _cluster_size(state: ClusterState) -> tuple[int, int]:
    """(GPUs, nodes) of the nodes that are up (at least 1 each)."""
    up = state.capacity[state.node_up]
    return max(int(up[:, 2].sum()), 1), max(int(np.count_nonzero(up[:, 2] > 0)), 1)


BOUND_AHEAD = 3600.0  # s: how long a waiting job's bound (`_bound`) holds


def _bound(spec, restarts: int, steps: tuple, now: float, zero_cost: float, p: float,
           budget: int) -> tuple[float, float, int, tuple]:
    """(-bound, until, restarts, steps): `bound` no smaller than the ratio of a waiting job's
    first move (`choose`, p < 0) in any round up to `until`, while its restarts and `steps`
    (`_round_options`'s record) stay. Its restart factor only grows with its age, and its
    costs fall as the factor grows, so the factor at `until` bounds the ratio; the margin
    covers rounding."""
    until = now + BOUND_AHEAD
    age = max(until - spec.arrival, 0.0)
    factor = max(age - restarts * RESTART_DELAY, 0.0) / (age + RESTART_DELAY)
    best = 0.0
    for r, ss in steps[1]:
        if 0 < r <= budget:
            best = max(best, (zero_cost - (ss * factor + SPEEDUP_FLOOR) ** p) / r)
    return -(best + 1e-9 * (abs(best) + abs(zero_cost)) + 1e-12), until, restarts, steps


def _kept_first(steps: list[tuple[int, float]], keep: tuple, job: JobStatus, now: float,
                zero_cost: float, p: float, budget: int) -> tuple:
    """(steps, restarts, until, keep, options, t, ratio, next): when, in every round up to
    `until` while its restarts, `steps` and kept option (`keep[1]`) stay, a placed job's first
    move (`choose`'s `push` from 0 GPUs with `budget`) is surely to its kept placement:
    `options` its `_kept_options` with only the first and that one (index `t`) in place,
    `ratio` that move's, `next` a bound on its next move's (None: it has none). Else options
    is None. As in `_bound`, the other options' costs at `until` bound theirs now."""
    until = now + BOUND_AHEAD
    age = max(until - job.spec.arrival, 0.0)
    factor = max(age - job.restarts * RESTART_DELAY, 0.0) / (age + RESTART_DELAY)
    gk, ck, _ = option = keep[1]
    ratio = (zero_cost - ck) / gk
    before, ahead, nxt, sure = 0.0, 0, None, gk <= budget
    for r, ss in steps:
        c = (ss * factor + SPEEDUP_FLOOR) ** p
        c -= 1e-9 * (abs(c) + abs(zero_cost)) + 1e-12  # no more than its cost now
        bound = (zero_cost - c) / r
        bound += 1e-9 * abs(bound) + 1e-12
        if r < gk:
            ahead += 1
            if r <= budget:
                before = max(before, bound)
            continue
        if r == gk and not c > ck:  # (a kept option goes after an equal size no dearer)
            sure = False
        if r <= budget and not bound <= ratio + 1e-15:
            sure = False
        if r > gk:
            b = (ck - c) / (r - gk)
            b += 1e-9 * abs(b) + 1e-12
            nxt = b if nxt is None else max(nxt, b)
    if not (sure and ratio > before + 1e-15):
        return steps, job.restarts, until, keep, None, 0, 0.0, None
    options = [(0, zero_cost, None)] + [None] * ahead + [option] + [None] * (len(steps) - ahead)
    return steps, job.restarts, until, keep, options, ahead + 1, ratio, nxt


def _fit(ledger, job: JobStatus, replicas: int, gpn: int) -> tuple[Placement, Placement] | None:
    """`replicas` workers on one node (the tightest that fits) if they fit in a node's GPUs,
    else on whole free nodes; PS jobs through the ledger's gang placement. Taken on the
    ledger; None if they do not fit."""
    demand = job.spec.worker_demand
    if job.spec.num_ps:
        placed = ledger.place_gang(job, replicas)
        if placed is None:
            return None
        ledger.take(placed[0], demand)
        ledger.take(placed[1], job.spec.ps_demand)
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
