"""Steps most engines share: rejecting what can never run, ordering, waiting reasons, and the
node orders of gang placement (packed, or most free first as in the Pollux artifact)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..model import (
    Action,
    ClusterState,
    JobSpec,
    JobState,
    JobStatus,
    Place,
    Placement,
    Reject,
    Resources,
    Scale,
    Suspend,
    Wait,
)
from ..placement.ledger import Ledger, describe_shortfall, never_fits

MAX_WAIT_REASONS = 200  # reasons beyond this many queued jobs are summarised, for speed


# (a job's shape, cluster signature) -> verdict: a shape is checked once per cluster shape,
# not every round (long traces keep thousands of jobs queued, most of a few shapes).
_VERDICTS: dict[tuple, str | None] = {}
_UNKNOWN = object()
_LAST_SIGNATURE: tuple[bytes, tuple] = (b"", ())  # asked every round, of the same cluster


def cluster_signature(state: ClusterState) -> tuple:
    global _LAST_SIGNATURE
    key = state.node_up.tobytes() + state.capacity.tobytes()
    last_key, signature = _LAST_SIGNATURE
    if key != last_key:
        up = state.capacity[state.node_up]
        # every node's capacity too: `impossible` judges against every node, down or up, and
        # how many tasks they hold depends on each node's size, not only on the totals
        signature = tuple(up.sum(axis=0).round(6)) + tuple(up.max(axis=0, initial=0).round(6)) \
            + (hash(state.capacity.tobytes()),)
        _LAST_SIGNATURE = (key, signature)
    return signature


def impossible(state: ClusterState, job: JobStatus, signature: tuple | None = None,
               rigid: bool = False) -> str | None:
    """Why a pending job can never run on this cluster (cached per job and cluster shape): at
    its minimum size, or `rigid`, at its requested size (`initial_workers`), the only size an
    engine that never resizes gives it."""
    if job.state is not JobState.PENDING:
        return None
    spec = job.spec
    w, p = spec.worker_demand, spec.ps_demand  # by their fields: a tuple of floats hashes faster
    n = spec.initial_workers if rigid else spec.min_workers
    key = (w.cpu, w.mem, w.gpu, n, spec.min_workers, p.cpu, p.mem, p.gpu, spec.num_ps,
           signature or cluster_signature(state))
    verdict = _VERDICTS.get(key, _UNKNOWN)
    if verdict is _UNKNOWN:
        if len(_VERDICTS) > 100_000:
            _VERDICTS.clear()
        verdict = _VERDICTS[key] = never_fits(job, state, n if rigid else None)
    return verdict


def reject_impossible(state: ClusterState, jobs: list[JobStatus], rigid: bool = False
                      ) -> tuple[list[Action], list[JobStatus]]:
    """Reject the jobs that could not run even on the empty cluster (`rigid`: see
    `impossible`); return the rest."""
    actions: list[Action] = []
    keep = []
    signature = cluster_signature(state)
    for job in jobs:
        why = impossible(state, job, signature, rigid)
        if why:
            actions.append(Reject(job.name, why))
        else:
            keep.append(job)
    return actions, keep


class CheckedOnce:
    """`reject_impossible` that remembers the pending jobs that passed: the verdict depends
    only on a job's shape and the cluster's signature, and a thousand jobs wait in a long
    trace, so each is checked once per cluster shape rather than every round. Rejections come
    in the order of `jobs`, as `reject_impossible` gives them."""

    def __init__(self, rigid: bool = False,
                 also: Callable[[ClusterState, JobStatus], str] | None = None) -> None:
        self.rigid = rigid  # see `impossible`
        self.also = also  # an engine's own verdict on the same terms (a module-level function)
        self._fine: dict[str, JobSpec] = {}  # pending jobs that can run on `_fine_on`
        self._fine_on: tuple | None = None  # the cluster signature they were checked on

    def __call__(self, state: ClusterState, jobs: list[JobStatus]
                 ) -> tuple[list[Action], list[JobStatus]]:
        signature = cluster_signature(state)
        if signature != self._fine_on:
            self._fine, self._fine_on = {}, signature
        fine = self._fine
        unchecked = [j for j in jobs if fine.get(j.name) is not j.spec]  # new arrivals, mostly
        bad: dict[str, str] = {}
        for job in unchecked:
            if job.state is JobState.PENDING:  # `impossible` passes any other job
                why = impossible(state, job, signature, self.rigid) or (
                    self.also is not None and self.also(state, job))
                if why:
                    bad[job.name] = why
                else:
                    fine[job.name] = job.spec
        actions: list[Action] = [Reject(j.name, bad[j.name]) for j in unchecked if j.name in bad]
        keep = [j for j in jobs if j.name not in bad] if bad else list(jobs)
        if len(fine) > 2 * len(keep) + 1000:
            self._fine = {j.name: j.spec for j in keep if j.name in fine}
        return actions, keep


class ShapeNumbers:
    """Gang shapes as small numbers, remembered by job name: a number hashes in no time, a
    tuple of `Resources` does not. `shape(spec)` says what makes two jobs look alike to the
    engine; `known[name]` is (spec, number), for a hot loop to read without a call."""

    def __init__(self, shape: Callable[[JobSpec], tuple]) -> None:
        self.shape = shape  # a module-level function: the engine stays picklable
        self.ids: dict[tuple, int] = {}
        self.known: dict[str, tuple[JobSpec, int]] = {}

    def number(self, job: JobStatus) -> int:
        got = self.known.get(job.name)
        if got is not None and got[0] is job.spec:
            return got[1]
        s = job.spec
        number = self.ids.setdefault(self.shape(s), len(self.ids))
        if len(self.known) > 100_000:
            self.known.clear()
        self.known[job.name] = (s, number)
        return number


class NewArrivalCheck:
    """`reject_impossible` for engines that walk only the front of a long queue: each round it
    checks the jobs that arrived since the last round (all waiting jobs again when the
    cluster's shape changes), instead of every waiting job every round."""

    def __init__(self, rigid: bool = False) -> None:
        self.rigid = rigid  # see `impossible`
        self._signature: tuple | None = None
        self._since = -math.inf
        self.checked: list[JobStatus] = []  # the waiting jobs looked at in the last round
        self.everything = True  # whether that was every waiting job (first round, new shape)

    def reject(self, state: ClusterState) -> list[Action]:
        signature = cluster_signature(state)
        self.everything = signature != self._signature
        since = -math.inf if self.everything else self._since
        latest = since
        actions: list[Action] = []
        self.checked = []
        for job in reversed(list_or_view(state.iter_waiting())):  # newest arrivals first
            if job.spec.arrival < since:
                break
            latest = max(latest, job.spec.arrival)
            self.checked.append(job)
            if (why := impossible(state, job, signature, self.rigid)) is not None:
                actions.append(Reject(job.name, why))
        self._signature, self._since = signature, latest
        return actions


def list_or_view(jobs):
    """A reversible sequence or dict view of `jobs` (copied only if it is neither)."""
    return jobs if hasattr(jobs, "__reversed__") else list(jobs)


def wait_reason(ledger: Ledger, job: JobStatus, workers: int, position: int, prefix: str = "") -> Wait | None:
    if position >= MAX_WAIT_REASONS:
        return None
    text = describe_shortfall(ledger, job, workers)
    if prefix:
        text = f"{text} ({prefix})"
    return None if text == job.reason else Wait(job.name, text)


def by_arrival(jobs: list[JobStatus]) -> list[JobStatus]:
    return sorted(jobs, key=lambda j: (j.spec.arrival, j.name))  # Timsort: ~free if sorted


def commit_plans(ledger: Ledger, plans: list[tuple[JobStatus, int]], *, wait_label: str,
                 scale_reason: Callable[[JobStatus, int], str],
                 place_reason: Callable[[JobStatus, int], str],
                 ps_for: Callable[[JobStatus, int], int] | None = None,
                 node_order: str = "pack") -> list[Action]:
    """Turn planned worker counts, in the given order, into Place/Scale actions on the ledger,
    taking nodes in `node_order` (see `place_in_order`; `ps_for` implies `pack`).

    A running job whose new size does not fit keeps what it has; a waiting one gets a reason.
    """
    actions: list[Action] = []
    pos = 0
    for job, w in plans:
        if ps_for is None:
            placement = place_in_order(ledger, job, w, node_order)
        else:
            placement = ledger.place_gang(job, w, ps_for(job, w))
        if placement is None and job.state.placed:
            ledger.take(job.workers, job.spec.worker_demand)  # keep what it has
            ledger.take(job.ps, job.spec.ps_demand)
            continue
        if placement is None:
            wr = wait_reason(ledger, job, w, pos, wait_label)
            pos += 1
            if wr:
                actions.append(wr)
            continue
        workers, ps = placement
        ledger.take(workers, job.spec.worker_demand)
        ledger.take(ps, job.spec.ps_demand)
        if job.state.placed:
            actions.append(Scale(job.name, scale_reason(job, w), workers, ps))
        else:
            actions.append(Place(job.name, place_reason(job, w), workers, ps))
    return actions


# How an engine orders the nodes it takes a gang's GPUs from (`node_order` of tiresias/optimus).
MOST_FREE, PACK = "most-free", "pack"
NODE_ORDERS = (MOST_FREE, PACK)


def most_free_first(ledger: Ledger, demand: Resources, count: int) -> Placement | None:
    """`count` tasks taken node by node, each time from the node with room for the most tasks
    (the lowest index on a tie), as many as fit there; None if fewer than `count` fit in all.
    The Pollux artifact's Tiresias and Optimus place this way (osdi21-artifact
    simulator/tiresias.py and optimus.py: `free_gpus.most_common(1)` until the job is placed)."""
    fits = ledger.fit_list(demand)  # plain ints: a few reads of 50 numbers beat numpy calls
    if count <= 0:
        return {}
    if sum(fits) < count:
        return None
    if count == 1:  # most jobs: the loop below takes one task from the first largest
        return {ledger.names[fits.index(max(fits))]: 1}
    fits = fits.copy()
    placement: Placement = {}
    left = count
    while left:
        most = max(fits)
        i = fits.index(most)  # the first of the largest: the lowest index on a tie
        take = min(most, left)
        placement[ledger.names[i]] = take
        fits[i] -= take
        left -= take
    return placement


def place_in_order(ledger: Ledger, job: JobStatus, workers: int, node_order: str
                   ) -> tuple[Placement, Placement] | None:
    """A job's gang by `node_order`: `most-free` (the artifact's rule, see `most_free_first`) or
    `pack` (`Ledger.place_gang`: as few nodes as possible). A placement plugin, or a job with
    parameter servers (whose PS go next to the workers), always goes through the ledger."""
    if node_order == PACK or ledger.placer is not None or job.spec.num_ps > 0:
        return ledger.place_gang(job, workers)
    wp = most_free_first(ledger, job.spec.worker_demand, workers)
    return None if wp is None else (wp, {})


def check_node_order(node_order: str) -> str:
    if node_order not in NODE_ORDERS:
        from ..errors import ConfigError

        raise ConfigError(f"node_order: expected one of {', '.join(NODE_ORDERS)}, got"
                          f" {node_order!r}")
    return node_order


def _need(state: ClusterState, job: JobStatus, workers: Placement, ps: Placement) -> np.ndarray:
    """Resources (nodes x 3) that a job's tasks take, per node."""
    need = np.zeros_like(state.capacity)
    for placement, demand in ((workers, job.spec.worker_demand), (ps, job.spec.ps_demand)):
        d = demand.as_array()
        for name, count in placement.items():
            need[state.node_index[name]] += d * count
    return need


def in_applicable_order(state: ClusterState, actions: list[Action]) -> list[Action]:
    """`actions` planned on one ledger (every reshaped job's resources given back first),
    reordered so that a backend applying them one by one never finds a node full: a Place or
    Scale goes once its nodes have room, after the actions that free it. Jobs caught in a cycle
    (A moves onto B's GPUs and B onto A's) are suspended first and placed afresh, which costs
    the same checkpoint-restart as the Scale. Suspends lead; other actions keep their order."""
    moves = [a for a in actions if isinstance(a, (Place, Scale))]
    if not moves:
        return actions
    first = [a for a in actions if not isinstance(a, (Place, Scale))]
    jobs = state.jobs
    free = state.free.copy()
    for a in first:
        if isinstance(a, Suspend) and a.job in jobs:
            j = jobs[a.job]
            free += _need(state, j, j.workers, j.ps)
    ordered: list[Action] = []
    pending = moves
    while pending:
        stuck = []
        for a in pending:
            job = jobs[a.job]
            held = _need(state, job, job.workers, job.ps) if isinstance(a, Scale) else 0.0
            after = free + held - _need(state, job, a.workers, a.ps)
            if (after >= -1e-9).all():
                free = after
                ordered.append(a)
            else:
                stuck.append(a)
        if len(stuck) == len(pending):  # nothing went: break a cycle by suspending one job
            cycle = next((a for a in stuck if isinstance(a, Scale)), None)
            if cycle is None:
                ordered += stuck  # nothing more to free: let the backend say why
                break
            job = jobs[cycle.job]
            first.append(Suspend(cycle.job, "moving: its new nodes free up this round"))
            free += _need(state, job, job.workers, job.ps)
            stuck[stuck.index(cycle)] = Place(cycle.job, cycle.reason, cycle.workers, cycle.ps)
        pending = stuck
    return first + ordered
