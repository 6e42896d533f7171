"""The engines' placement ledger: how many tasks fit where, and gang placement.

All work on a `free` array (nodes x 3: CPU, MEM, GPU) plus the per-GPU free fractions, so a
policy can place several jobs in one round by subtracting as it goes (`Ledger`). Given a
`placer.Placer`, the ledger asks its placement plugin which nodes tasks go to.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import numpy as np

from ..model import CPU, GPU, MEM, ClusterState, JobStatus, Placement, Resources, most_tasks

if TYPE_CHECKING:
    from .placer import Placer

_EPS = 1e-9
_WHOLE = 1 - _EPS  # a GPU this free is whole
_VERSIONS = itertools.count(1)  # one number per ledger content, unique across ledgers and copies


_ONES: dict[int, np.ndarray] = {}


def _ones(n: int) -> np.ndarray:
    ones = _ONES.get(n)
    if ones is None:
        ones = _ONES[n] = np.ones(n)
        ones.setflags(write=False)
    return ones


def _whole(gpus: float) -> int:
    """A whole-GPU demand as an int (numpy 1.x rounds its floats to floats)."""
    return int(round(gpus))  # noqa: RUF046


class Ledger:
    """A policy's working copy of free resources within one round."""

    def __init__(self, state: ClusterState, placer: Placer | None = None) -> None:
        self.state = state
        up = state.node_up
        all_up = np.count_nonzero(up) == len(up)  # (ndarray.all has a Python wrapper)
        # free resources, a fresh array: `state.free` without asking twice whether all are up
        self.free = state.capacity - state.allocated
        # -1 marks "no such GPU" (or node down): never enough free, and no NaN handling.
        # fmax gives -1 for NaN (no such GPU) and keeps a free fraction (>= 0): fewer calls
        # than a mask of both.
        self.gpu_free = np.fmax(state.gpu_free, -1.0)
        if not all_up:
            self.free[~up] = 0.0
            self.gpu_free[~up] = -1.0
        self.names = _node_names(state.nodes)
        self.index = state.node_index
        self.placer = placer
        self.view = placer.view(state) if placer is not None else None  # the plugin's mirror
        # Gang shapes `place_gang` found no room for, by the content `version` they were tried
        # on: engines try long queues of look-alike jobs against an unchanged ledger.
        self.version = next(_VERSIONS)
        self._no_room: dict[tuple, int] = {}
        self._shortfalls: dict[tuple, str] = {}  # describe_shortfall's, by (version, demand, n)
        # The last fit counts: (version, demand, counts as a read-only array or None, as a
        # list or None, nodes changed since by take/give_back).
        self._fits: tuple | None = None

    # -- capacity questions -------------------------------------------------------------

    def fit_counts(self, demand: Resources) -> np.ndarray:
        """How many tasks of `demand` each node can take now (read-only: the last answer is
        kept for the same content, as a gang's packing and its 'why waiting' ask alike)."""
        memo = self._fit_memo(demand)
        if memo[2] is None:  # kept as a list only (`fit_list`)
            counts = np.array(memo[3], dtype=np.int64)
            counts.setflags(write=False)
            memo = self._fits = (memo[0], demand, counts, memo[3], ())
        return memo[2]

    def fit_list(self, demand: Resources) -> list[int]:
        """`fit_counts(demand).tolist()`, kept as those are (shared: do not modify it). A
        caller that reads a count or two in plain Python saves the array's calls."""
        memo = self._fit_memo(demand)
        if memo[3] is None:
            memo = self._fits = (memo[0], demand, memo[2], memo[2].tolist(), ())
        return memo[3]

    def _fit_memo(self, demand: Resources) -> tuple:
        """The memo of fit counts, brought up to this content for `demand`."""
        memo = self._fits
        if memo is not None and memo[0] == self.version and (memo[1] is demand
                                                             or memo[1] == demand):
            changed = memo[4]
            if not changed:
                return memo
            # A placement changes a node or two of fifty: count those again, not every node,
            # in the form the last caller read (a caller may still hold the old answer).
            if memo[3] is not None:
                counts = memo[3].copy()
                for i in changed:
                    counts[i] = self._fit_at(i, demand)
                memo = (self.version, demand, None, counts, ())
            else:
                array = memo[2].copy()
                for i in changed:
                    array[i] = self._fit_at(i, demand)
                array.setflags(write=False)  # (cheaper than through `array.flags`)
                memo = (self.version, demand, array, None, ())
        else:
            array = self._fit_counts(demand)
            array.setflags(write=False)
            memo = (self.version, demand, array, None, ())
        self._fits = memo
        return memo

    def _fit_counts(self, demand: Resources) -> np.ndarray:
        counts = None
        cpu, mem = demand.cpu, demand.mem
        if cpu > 0 or mem > 0:
            free = self.free + _EPS  # one pass over the whole (contiguous) array
            if cpu > 0:
                counts = free[:, CPU] / cpu
            if mem > 0:
                fit = free[:, MEM] / mem
                counts = fit if counts is None else np.minimum(counts, fit)
            counts = np.floor(counts, out=counts)  # floor(min(a, b)) = min(floor(a), floor(b))
        if demand.gpu > 0:
            fit = self._gpu_fit(demand.gpu)
            counts = fit if counts is None else np.minimum(counts, fit)
        if counts is None:  # asks for nothing: any number fits
            return np.full(len(self.free), 10**6, dtype=np.int64)
        return counts.astype(np.int64)

    def _fit_at(self, i: int, demand: Resources) -> int:
        """`_fit_counts(demand)[i]` in plain floats: the same IEEE operations per element, and
        the fractional GPU sum adds whole numbers, exact in any order."""
        free_cpu, free_mem, _ = self.free[i].tolist()
        count = None
        if demand.cpu > 0:
            count = math.floor((free_cpu + _EPS) / demand.cpu)
        if demand.mem > 0:
            fit = math.floor((free_mem + _EPS) / demand.mem)
            count = fit if count is None else min(count, fit)
        g = demand.gpu
        if g > 0:
            row = self.gpu_free[i].tolist()
            if g >= 1:
                fit = len([f for f in row if f >= _WHOLE])
                if g != 1:  # (// 1 changes nothing)
                    fit //= _whole(g)
            else:
                fit = sum(math.floor(max(f + _EPS, 0.0) / g) for f in row)
            count = fit if count is None else min(count, fit)
        return 10**6 if count is None else count

    def _changed(self, placement: Placement) -> None:
        """Note a take or give_back on `placement` in the fit_counts memo (a new version)."""
        memo = self._fits
        if memo is not None and memo[0] == self.version:
            nodes = tuple(map(self.index.__getitem__, placement))
            self._fits = (next(_VERSIONS), memo[1], memo[2], memo[3], memo[4] + nodes)
            self.version = self._fits[0]
        else:
            self.version = next(_VERSIONS)

    def _gpu_fit(self, g: float) -> np.ndarray:
        gf = self.gpu_free
        if g >= 1:
            # whole GPUs per node, as exact float sums: a product with ones beats a reduction
            # along rows this short
            whole = (gf >= _WHOLE).dot(_ones(gf.shape[1]))
            per = _whole(g)
            return whole if per == 1 else whole // per
        return np.floor(np.maximum(gf + _EPS, 0.0) / g).sum(axis=1)

    def total_fit(self, demand: Resources) -> int:
        return int(self.fit_counts(demand).sum())

    # -- taking resources -----------------------------------------------------------------

    def holds(self, worker: Resources, workers: Placement, ps: Resources, servers: Placement
              ) -> bool:
        """Whether `workers` (node -> count) of `worker` and `servers` of `ps` fit what is free
        now, together, node by node; False when one of the nodes is unknown (a placement
        planned before a node left)."""
        need = np.zeros_like(self.free)
        for demand, placement in ((worker, workers), (ps, servers)):
            for name, count in placement.items():
                i = self.index.get(name)
                if i is None:
                    return False
                need[i] += demand.as_array() * count
        return bool((need <= self.free + 1e-6).all())

    def take(self, placement: Placement, demand: Resources) -> None:
        if not placement:  # no tasks (a job without parameter servers): the content stays
            return
        self._changed(placement)
        d = demand.as_array()
        for name, count in placement.items():
            i = self.index[name]
            row = self.free[i]  # (in place on the row: `free[i] -= d` also stores it back)
            row -= d if count == 1 else d * count  # d * 1 is d: one numpy call fewer
            self._take_gpus(i, demand.gpu, count)
            if self.view is not None:
                self.placer.mirror(self.view, i, self.free[i], self.gpu_free[i], demand, count)

    def give_back(self, placement: Placement, demand: Resources) -> None:
        """Return a job's resources to the ledger (e.g. when planning a preemption)."""
        if not placement:
            return
        self._changed(placement)
        d = demand.as_array()
        for name, count in placement.items():
            i = self.index[name]
            row = self.free[i]
            row += d if count == 1 else d * count
            self._return_gpus(i, demand.gpu, count)
            if self.view is not None:
                self.placer.mirror(self.view, i, self.free[i], self.gpu_free[i], demand, -count)

    def _take_gpus(self, i: int, g: float, count: int) -> None:
        if g <= 0:
            return
        row = self.gpu_free[i]
        if g >= 1:  # whole GPUs, first free first (as the simulator takes them)
            left = _whole(g) * count
            for k, free in enumerate(row.tolist()):  # a node's few GPUs: faster than numpy calls
                if left <= 0:
                    break
                if free >= _WHOLE:
                    row[k] = 0.0
                    left -= 1
            return
        for _ in range(count):
            ok = np.flatnonzero(row + _EPS >= g)
            if len(ok):
                best = ok[np.argmin(row[ok])]
                row[best] -= g

    def _return_gpus(self, i: int, g: float, count: int) -> None:
        if g <= 0:
            return
        row = self.gpu_free[i]
        if g >= 1:
            left = _whole(g) * count
            for k, free in enumerate(row.tolist()):
                if left <= 0:
                    break
                if 0 <= free <= _EPS:
                    row[k] = 1.0
                    left -= 1
            return
        valid = row >= 0
        for _ in range(count):
            idx = np.flatnonzero(valid & (row + g <= 1 + _EPS))
            if len(idx):
                row[idx[np.argmax(1 - row[idx])]] += g

    # -- placement strategies -------------------------------------------------------------

    def pack(self, demand: Resources, count: int, *, max_per_node: int | None = None,
             prefer: np.ndarray | None = None) -> Placement | None:
        """Place `count` tasks on as few nodes as possible, fullest fit first; None if not.
        With a placement plugin the plugin chooses, except for tasks that `prefer` nodes."""
        if count <= 0:
            return {}
        if self.view is not None and prefer is None:
            return self.placer.place(self.view, demand, count)
        fits = self.fit_counts(demand)
        if max_per_node is not None:
            fits = np.minimum(fits, max_per_node)
        if np.add.reduce(fits) < count:  # fits.sum() without its wrapper
            return None
        # A node that takes the whole job alone, the tightest such: best locality, least waste.
        # (array methods rather than np.flatnonzero / np.argmin: no dispatch, same answers)
        whole = (fits >= count).nonzero()[0]
        if len(whole):
            key = fits[whole] - (0 if prefer is None else prefer[whole] * 1e6)
            return {self.names[whole[key.argmin()]]: count}
        order = np.argsort(-fits, kind="stable")
        if prefer is not None:
            order = np.lexsort((-fits, -prefer))
        placement: Placement = {}
        left = count
        for i in order:
            if left == 0 or fits[i] == 0:
                break
            take = int(min(fits[i], left))
            placement[self.names[i]] = take
            left -= take
        return placement if left == 0 else None

    def spread_one(self, demand: Resources) -> str | None:
        """Kube-default style for one pod: feasible node with the least allocated share (or
        the placement plugin's choice)."""
        if self.view is not None:
            placed = self.placer.place(self.view, demand, 1)
            return next(iter(placed)) if placed else None
        fits = self.fit_counts(demand)
        ok = np.flatnonzero(fits > 0)
        if not len(ok):
            return None
        cap = self.state.capacity[ok]
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(cap > 0, self.free[ok] / cap, 0.0)
        # LeastAllocated: mean free share over CPU and memory (and GPU where the node has any).
        used = cap > 0
        score = (share * used).sum(axis=1) / np.maximum(used.sum(axis=1), 1)
        return self.names[ok[int(np.argmax(score))]]

    def place_gang(self, job: JobStatus, workers: int, ps: int | None = None
                   ) -> tuple[Placement, Placement] | None:
        """All of a job's workers and PS on as few nodes as possible, or None. Leaves the
        ledger as it found it; a shape that found no room is not tried again on the same
        content (without a plugin, whose choices may draw random numbers)."""
        ps = job.spec.num_ps if ps is None else ps
        if self.view is not None:
            return self._place_gang(job, workers, ps)
        w, p = job.spec.worker_demand, job.spec.ps_demand
        key = (w.cpu, w.mem, w.gpu, p.cpu, p.mem, p.gpu, workers, ps)  # floats hash faster
        version = self.version
        if self._no_room.get(key) == version:
            return None
        placed = self._place_gang(job, workers, ps)
        self.version = version  # tried on scratch, undone exactly: the same content
        if placed is None:
            if len(self._no_room) > 10_000:
                self._no_room.clear()
            self._no_room[key] = version
        return placed

    def _place_gang(self, job: JobStatus, workers: int, ps: int
                    ) -> tuple[Placement, Placement] | None:
        if ps <= 0:
            wp = self.pack(job.spec.worker_demand, workers)
            return None if wp is None else (wp, {})
        need = job.spec.worker_demand.as_array() * workers + job.spec.ps_demand.as_array() * ps
        if (need > self.free.sum(axis=0) + _EPS).any():  # cheap: not even in total
            return None
        wp = self.pack(job.spec.worker_demand, workers)
        if wp is None:
            return None
        rows = {self.index[n]: self.gpu_free[self.index[n]].copy() for n in wp}
        self.take(wp, job.spec.worker_demand)
        # PS next to the workers where possible: prefer nodes already hosting the job.
        prefer = np.zeros(len(self.names))
        for n in wp:
            prefer[self.index[n]] = 1
        pp = self.pack(job.spec.ps_demand, ps, prefer=prefer)
        self.give_back(wp, job.spec.worker_demand)
        for i, row in rows.items():  # give_back guesses which GPU a fraction came from: undo exactly
            self.gpu_free[i] = row
            if self.view is not None:
                self.placer.mirror(self.view, i, self.free[i], row, job.spec.worker_demand, 0)
        self._fits = None  # `free` may differ from before in its last bits, under the same version
        if pp is None:
            return None
        return wp, pp

    def largest_block(self, demand: Resources) -> int:
        return int(self.fit_counts(demand).max(initial=0))


_NAMES: tuple[list, list[str]] | None = None  # the last node list seen, and its names


def _node_names(nodes: list) -> list[str]:
    """The nodes' names, remembered for the node list a backend passes every round."""
    global _NAMES
    cached = _NAMES
    if cached is None or cached[0] is not nodes:
        cached = _NAMES = (nodes, [n.name for n in nodes])
    return cached[1]


def never_fits(job: JobStatus, state: ClusterState, workers: int | None = None) -> str | None:
    """Why a job cannot run even on the empty cluster at its minimum size (or with `workers`,
    the one size a rigid engine gives it), or None."""
    spec = job.spec
    # every node, those down too: a job that fits the cluster once they recover waits for them
    # (a rigid job rejected during an outage would be lost to it)
    n = spec.min_workers if workers is None else workers
    size = "" if n == spec.min_workers else " at its requested size"
    return shape_refusal(state.capacity, spec.worker_demand, spec.ps_demand, n, spec.num_ps, size)


# a job short of GPUs is said to be, before its CPUs or memory
_SAY_FIRST = ((GPU, "GPUs"), (CPU, "CPUs"), (MEM, "GiB memory"))


def shape_refusal(capacity: np.ndarray, worker: Resources, ps: Resources, workers: int,
                  num_ps: int, size: str = "") -> str | None:
    """Why `workers` workers and `num_ps` parameter servers of these demands can never all be
    placed on nodes of `capacity` (nodes x [CPU, MEM, GPU]), even empty; or None. The one rule
    for the session's check of a workload and the engines': their totals, each task against
    the largest node, and each kind of task against how many of it the nodes hold (a task
    cannot span nodes: four 3-GPU workers never fit three 4-GPU nodes, though 12 GPUs do).
    Then workers and servers together: a node's servers leave less room for its workers
    (`most_workers_beside`). `size` follows the count in the text."""
    if not len(capacity):
        return None  # no node yet: wait for some rather than reject
    w, p = worker.as_array(), ps.as_array()
    need = w * workers + p * num_ps
    have, largest = capacity.sum(axis=0), capacity.max(axis=0)
    unit = f" ({workers:,} workers)" if size else ""
    for r, name in _SAY_FIRST:
        if need[r] > have[r] + _EPS:
            return f"rejected: needs {need[r]:,g} {name}{size}{unit}, the cluster has {have[r]:,g}"
    tasks = [("worker", w, workers)] + ([("parameter server", p, num_ps)] if num_ps else [])
    for r, name in _SAY_FIRST:
        for task, demand, _ in tasks:
            if demand[r] > largest[r] + _EPS:
                return (f"rejected: one {task} needs {demand[r]:,g} {name}, the largest node"
                        f" has {largest[r]:,g}")
    for task, demand, count in tasks:
        held = most_tasks(capacity, demand)
        if held < count:
            return (f"rejected: needs {count:,} {task}s{size}, the nodes hold at most {held:,}"
                    f" (one takes {_takes(demand)} of a node)")
    if num_ps and workers > 0 and w.any() and p.any() and num_ps <= MAX_JOINT_SERVERS:
        held = most_workers_beside(capacity, w, p, workers, num_ps)
        if held < workers:
            servers = "1 parameter server" if num_ps == 1 else f"{num_ps:,} parameter servers"
            return (f"rejected: needs {workers:,} workers{size} beside its {servers}, the nodes"
                    f" hold at most {held:,} beside them (a worker takes {_takes(w)}; a server"
                    f" {_takes(p)})")
    return None


def _takes(demand: np.ndarray) -> str:
    return ", ".join(f"{demand[r]:,g} {name}" for r, name in _SAY_FIRST if demand[r] > 0)


# Beyond this many servers a job's workers and servers are judged apart only (the joint check
# costs ~servers numpy operations per distinct node shape).
MAX_JOINT_SERVERS = 256
_NONE = -(2**40)  # "cannot": far below any count, and twice it still fits an int64


def most_workers_beside(capacity: np.ndarray, worker: np.ndarray, ps: np.ndarray,
                        workers: int, num_ps: int) -> int:
    """How many workers (up to `workers`) the empty nodes hold beside all `num_ps` servers,
    or -1 if the servers alone do not fit. Exact: a node given j servers has room for f(j)
    workers, and the best split of the servers over the nodes is the max-plus convolution of
    the nodes' f, taken for identical nodes by repeated squaring."""
    shapes, counts = np.unique(capacity, axis=0, return_counts=True)
    servers = np.arange(num_ps + 1)
    rest = shapes[:, None, :] - servers[None, :, None] * ps  # node shape x servers x resource
    used = worker > 0
    room = np.floor(np.maximum(rest[:, :, used], 0.0) / worker[used] + _EPS).min(axis=2)
    room = np.where((rest >= -_EPS).all(axis=2), np.minimum(room, workers), _NONE)
    best = np.full(num_ps + 1, _NONE, dtype=np.int64)
    best[0] = 0
    for f, m in zip(room.astype(np.int64), counts):
        while m:
            if m & 1:
                best = _max_plus(best, f, workers)
            m >>= 1
            if m:
                f = _max_plus(f, f, workers)
    return int(max(best[num_ps], -1))


def _max_plus(a: np.ndarray, b: np.ndarray, cap: int) -> np.ndarray:
    """c[k] = max over j of a[j] + b[k - j]: the most workers with k servers over two sets of
    nodes (capped at `cap`, all a caller asks about)."""
    out = np.full(len(a), _NONE, dtype=np.int64)
    if np.count_nonzero(b > _NONE) < np.count_nonzero(a > _NONE):
        a, b = b, a  # walk the shorter: a node holds few servers, a cluster many
    for j in np.flatnonzero(a > _NONE):
        np.maximum(out[j:], a[j] + b[:len(a) - j], out=out[j:])
    return np.clip(out, _NONE, cap)


def describe_shortfall(ledger: Ledger, job: JobStatus, workers: int) -> str:
    """A short 'why waiting' for a gang that does not fit. Kept per ledger content, demand
    and size: engines ask it of the first 200 waiting jobs, which mostly look alike."""
    d, servers = job.spec.worker_demand, job.spec.num_ps
    key = (ledger.version, d, workers, servers and job.spec.ps_demand, servers)
    text = ledger._shortfalls.get(key)
    if text is not None:
        return text
    fits = ledger.fit_counts(d)
    # fits.sum() and fits.max(initial=0) without their wrappers
    free_tasks, block = int(np.add.reduce(fits)), int(np.maximum.reduce(fits, initial=0))
    unit = "GPUs" if d.gpu >= 1 else "worker slots"
    per = _whole(d.gpu) if d.gpu >= 1 else 1
    if free_tasks < workers:
        text = f"waiting: needs {workers * per} {unit}, {free_tasks * per} free in the cluster"
        if d.gpu >= 1:  # GPUs free in pieces smaller than a worker, or on nodes short of CPUs
            free = int(np.floor(ledger.free[:, GPU] + _EPS).sum())
            if free > free_tasks * per:
                text = (f"waiting: needs {workers * per} {unit} as {workers} workers of {per};"
                        f" {free} free, room for {free_tasks} such workers")
    elif servers and job.spec.ps_demand.as_array().any():  # the workers fit: the servers not
        room = int(np.add.reduce(ledger.fit_counts(job.spec.ps_demand)))
        its = "its worker" if workers == 1 else f"its {workers} workers"
        takes = _takes(job.spec.ps_demand.as_array())
        if room < servers:
            text = (f"waiting: room for {its}, for {room} of its {servers} parameter servers"
                    f" (one takes {takes})" if servers > 1 else
                    f"waiting: room for {its}, not for its parameter server (it takes {takes})")
        else:
            theirs = "its parameter server" if servers == 1 else f"its {servers} parameter servers"
            text = f"waiting: room for {its} and for {theirs}, not both: they need the same nodes"
    else:
        text = (f"waiting: needs {workers * per} {unit}; {free_tasks * per} free but spread,"
                f" largest block {block * per}")
    if len(ledger._shortfalls) > 1000:
        ledger._shortfalls.clear()
    ledger._shortfalls[key] = text
    return text


__all__ = ["MEM", "Ledger", "describe_shortfall", "most_tasks", "most_workers_beside", "never_fits",
           "shape_refusal"]
