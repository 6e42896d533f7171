"""The greedy of a Pollux round (`PolluxPolicy.choose`) and the bounds that let it leave most
jobs' options unmade (`policies/pollux.py` makes the options; docs/sim-performance.md).

The greedy starts every job at 0 GPUs and moves, step by step, the job whose cost falls most
per added GPU to a larger option, while GPUs are left. A round of a long queue has ~1,300 jobs,
of which the greedy reaches a few: a waiting job enters with a bound on its first move's ratio
(`first_move_bound`, valid for an hour: its restart factor only grows with age), a placed job
whose first move is surely its kept placement with that exact move (`kept_first`) and a bound
on its next; a job's options are made (`Lazy.expand`) only when such a bound is popped.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from ..model import JobStatus, Placement

if TYPE_CHECKING:
    from ..perf.goodput import GoodputModel

RESTART_DELAY = 30.0  # pollux.py _evaluate: `delay = 30` (the simulator's restart cost)
SPEEDUP_FLOOR = 1e-3  # pollux.py _evaluate: `scaled_speedups + 1e-3`


# One shape a job may take in a round (`options`), what the greedy (`greedy`) moves between:
# (GPUs, its term of the objective there (`cost`), its current placement when the shape is to
# keep it as it is, else None). A plain tuple, read by unpacking: a Philly simulation makes
# tens of millions, and a NamedTuple's constructor made it ~10 % slower.
Option = tuple[int, float, Placement | None]


class FitSteps(NamedTuple):
    """A waiting job's `PolluxPolicy._steps` (not frozen), with its agent's fit and most
    profiled replicas they were made from (None and 0 without an agent)."""

    model: GoodputModel | None
    most_replicas: int
    steps: list[tuple[int, float]]


class Bound(NamedTuple):
    """A waiting job's `first_move_bound`: minus a bound on the ratio of its first move
    (`greedy`'s entry key) in any round up to `until`, while its restarts and `fit_steps`
    stay."""

    neg_bound: float
    until: float
    restarts: int
    fit_steps: FitSteps


class SureKeep(NamedTuple):
    """`kept_first`'s answer for a placed job whose first move is surely to its kept
    placement: `options` its `PolluxPolicy._kept_options` with only the first and the kept
    one (index `move`) in place (None elsewhere), `ratio` that move's ratio, `next_bound` a
    bound on the ratio of its next move (None: it has none)."""

    options: list[Option | None]
    move: int
    ratio: float
    next_bound: float | None


class Lazy(NamedTuple):
    """`greedy`'s `lazy` argument (any 4-tuple in this order does)."""

    entries: list[tuple[float, int, int]]
    expand: Callable[[int], list[Option]]
    made: list[int]
    later: dict[int, float | None]


_NOT_LATER = object()  # (`greedy`: a job without a bound in `later`)


def greedy(options: list[list[Option | None]], budget: int, lazy: Lazy | None = None
           ) -> list[int]:
    """Greedy: the chosen option per job, starting from 0 GPUs, each step the move to a
    larger option with the largest drop in cost per added GPU that fits in `budget`.
    Options: `Option`s, (GPUs, cost, kept placement). A move's heap entry is (-ratio, j,
    index of the option it moves job j to).
    `lazy` (`Lazy`): job j's options are `expand(j)` unless j is in `made`. Its entry is
    (-bound, j, -2 - budget), its options made when it is popped and its move then pushed
    with that budget: no move of it has a ratio above `bound` (so every move popped
    before is popped as when its options were there from the start); or, j in `later`,
    the exact entry of its first move (its kept placement, in `options[j]` at that
    index), and `later[j]` bounds its next move (None: none)."""
    chosen = [0] * len(options)
    heap: list[tuple[float, int, int]] = []
    if lazy is None:
        entries, expand, made, later = [], None, range(len(options)), {}
    else:
        entries, expand, made, later = lazy

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

    for j in made:
        opts = options[j]
        if len(opts) == 2 and opts[0][0] == 0:  # `push` of a job with one size (most)
            (_, c0, _), (g, c, _) = opts
            if g > budget or g == 0:
                continue
            ratio = (c0 - c) / g
            if ratio > 0.0 + 1e-15:
                heap.append((-ratio, j, 1))
        elif len(opts) > 1:
            push(j)
    heap += entries
    heapq.heapify(heap)  # entries differ in `j`: popped in the same order as pushed one by one
    heappop, heappush = heapq.heappop, heapq.heappush
    while heap:
        if budget <= 0:  # every move left needs a GPU more: none is taken (nor pushed)
            break
        _, j, t = heappop(heap)
        if t < 0:  # a bound: the move `push` made with budget -2 - t, made now
            options[j] = expand(j)
            later.pop(j, None)
            budget, left = -2 - t, budget
            push(j)
            budget = left
            continue
        opts = options[j]
        need = opts[t][0] - opts[chosen[j]][0]  # (GPUs)
        if need > budget:
            if j in later:
                options[j] = expand(j)
                del later[j]
            push(j)
            continue
        budget -= need
        chosen[j] = t
        if t + 1 < len(opts):  # else no larger option to push
            bound = later.get(j, _NOT_LATER)
            if bound is _NOT_LATER:
                push(j)
            elif bound is not None:  # its next move's bound, made when popped
                heappush(heap, (-bound, j, -2 - budget))
    return chosen


BOUND_AHEAD = 3600.0  # s: how long a waiting job's bound (`first_move_bound`) holds


def restart_factor_at(arrival: float, restarts: int, now: float) -> float:
    """pollux.py _evaluate: a changed allocation weighs max(age - restarts · 30, 0) /
    (age + 30)."""
    age = max(now - arrival, 0.0)
    return max(age - restarts * RESTART_DELAY, 0.0) / (age + RESTART_DELAY)


def scaled_options(steps: list[tuple[int, float]], factor: float, p: float,
                   zero: Option) -> list[Option]:
    """`zero` and an option per step (replicas, speedup × share) at the restart `factor`, for
    p < 0 (`PolluxPolicy.cost` inlined: the same arithmetic, (s · share · factor + 1e-3) ** p)."""
    return [zero, *[(r, (scaled * factor + SPEEDUP_FLOOR) ** p, None) for r, scaled in steps]]


def first_move_bound(spec, restarts: int, fit_steps: FitSteps, now: float, zero_cost: float,
                     p: float, budget: int) -> Bound:
    """A `Bound`: a bound no smaller than the ratio of a waiting job's first move (`greedy`,
    p < 0) in any round up to `until`, while its restarts and `fit_steps` (its
    `_JobRecord`'s in pollux.py) stay. Its restart factor only grows with its age, and its
    costs fall as the factor grows, so the factor at `until` bounds the ratio; the margin
    covers rounding."""
    until = now + BOUND_AHEAD
    factor = restart_factor_at(spec.arrival, restarts, until)
    best = 0.0
    for r, scaled in fit_steps.steps:
        if 0 < r <= budget:
            best = max(best, (zero_cost - (scaled * factor + SPEEDUP_FLOOR) ** p) / r)
    return Bound(-(best + 1e-9 * (abs(best) + abs(zero_cost)) + 1e-12), until, restarts,
                 fit_steps)


def kept_first(steps: list[tuple[int, float]], keep: Option, job: JobStatus, until: float,
               zero_cost: float, p: float, budget: int) -> SureKeep | None:
    """A `SureKeep` when, in every round up to `until` while its restarts, `steps` and kept
    option `keep` stay, a placed job's first move (`greedy`'s `push` from 0 GPUs with
    `budget`) is surely to its kept placement; else None. As in `first_move_bound`, the other
    options' costs at `until` bound theirs now."""
    factor = restart_factor_at(job.spec.arrival, job.restarts, until)
    kept_gpus, kept_cost, _ = keep
    ratio = (zero_cost - kept_cost) / kept_gpus
    before, ahead, next_bound, sure = 0.0, 0, None, kept_gpus <= budget
    for r, scaled in steps:
        c = (scaled * factor + SPEEDUP_FLOOR) ** p
        c -= 1e-9 * (abs(c) + abs(zero_cost)) + 1e-12  # no more than its cost now
        bound = (zero_cost - c) / r
        bound += 1e-9 * abs(bound) + 1e-12
        if r < kept_gpus:
            ahead += 1
            if r <= budget:
                before = max(before, bound)
            continue
        # (a kept option goes after an equal size no dearer)
        if r == kept_gpus and not c > kept_cost:
            sure = False
        if r <= budget and not bound <= ratio + 1e-15:
            sure = False
        if r > kept_gpus:
            b = (kept_cost - c) / (r - kept_gpus)
            b += 1e-9 * abs(b) + 1e-12
            next_bound = b if next_bound is None else max(next_bound, b)
    if not (sure and ratio > before + 1e-15):
        return None
    options = [(0, zero_cost, None), *[None] * ahead, keep,
               *[None] * (len(steps) - ahead)]
    return SureKeep(options, ahead + 1, ratio, next_bound)
