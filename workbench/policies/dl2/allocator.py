"""One DL2 slot's allocation, step by step: the network (or DRF, its warm-up teacher) picks one
action at a time for the window's jobs; each step places one task on the server with the most
free room for it; invalid actions are masked out. Used by the engine and by `SlotEnv`.

A job that needs at least `min_workers` > 1 workers (a gang; DL2's jobs are all elastic) gets
its minimum and one PS before the network's steps where they fit (DL2's ASSIGN_BUNDLE
starvation guard, extended to gangs), else nothing that slot: one worker at a time, the network
could hand such a job some workers every slot and never its minimum, and it would wait forever
(the 1,000-job Kubernetes soak left 189 rigid jobs so)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ...model import CPU, GPU
from .net import _EPS, JOB_FEATURES, MAX_PS, MAX_WORKERS, STOP, WINDOW, PolicyNet


@dataclass
class JobView:
    """What the allocator knows of one job in a slot."""

    name: str
    type_index: int  # index into the network's types, -1 if unknown
    age: float  # seconds since arrival
    remaining: float  # fraction of the work left
    remaining_hours: float  # at one worker and one PS
    worker_demand: np.ndarray
    ps_demand: np.ndarray
    max_workers: int
    min_workers: int
    prev_workers: int = 0
    prev_ps: int = 0
    app: str = ""
    total: float = 1.0  # total work (iterations)
    workers: list[int] = field(default_factory=list)  # server index per task
    ps: list[int] = field(default_factory=list)


@dataclass
class Trajectory:
    """The steps of one slot (for learning): inputs, masks and the actions taken."""

    X: list[np.ndarray] = field(default_factory=list)
    G: list[np.ndarray] = field(default_factory=list)
    jm: list[np.ndarray] = field(default_factory=list)
    am: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    Q: list[np.ndarray] = field(default_factory=list)  # per step: each action's slot progress

    def __len__(self) -> int:
        return len(self.actions)

    def extend(self, other: Trajectory) -> None:
        for k in ("X", "G", "jm", "am", "actions", "Q"):
            getattr(self, k).extend(getattr(other, k))

    def arrays(self):
        return (np.array(self.X), np.array(self.G), np.array(self.jm), np.array(self.am),
                np.array(self.actions, dtype=np.int64))


Chooser = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[JobView]], int]


class SlotAllocator:
    """Runs one slot's step-by-step allocation over `free` (servers x 3) with a chooser."""

    def __init__(self, capacity: np.ndarray, types: Sequence[str], slot: float) -> None:
        self.capacity = np.asarray(capacity, dtype=float)
        self.total = np.maximum(self.capacity.sum(axis=0), _EPS)
        self.types = tuple(types)
        self.slot = slot

    def _static(self, window: list[JobView]) -> np.ndarray:
        """The features that do not change within the slot (type, age, work left, previous)."""
        n_types = len(self.types)
        X = np.zeros((WINDOW, n_types + JOB_FEATURES))
        for i, v in enumerate(window):
            if v.type_index >= 0:
                X[i, v.type_index] = 1.0
            X[i, n_types:n_types + 3] = (math.log1p(v.age / self.slot) / 3.0, v.remaining,
                                         math.log1p(v.remaining_hours) / 2.0)
            X[i, n_types + 6:] = (v.prev_workers / MAX_WORKERS, v.prev_ps / MAX_PS)
        return X

    @classmethod
    def _gang(cls, free: np.ndarray, demand: np.ndarray, key: int, count: int
              ) -> tuple[list[int], np.ndarray] | None:
        """`count` workers of `demand`, each on the server with the most free room left:
        (their servers, the free array after), or None when they do not all fit."""
        after, servers = free.copy(), []
        for _ in range(count):
            k = cls._best(after, demand, key)
            if k < 0:
                return None
            after[k] -= demand
            servers.append(k)
        return servers, after

    @staticmethod
    def _best(free: np.ndarray, demand: np.ndarray, key: int) -> int:
        """The server with the most free `key` resource that fits `demand`, or -1."""
        ok = (free + _EPS >= demand).all(axis=1)
        if not ok.any():
            return -1
        score = np.where(ok, free[:, key] * 1e6 + free[:, CPU], -np.inf)
        return int(np.argmax(score))

    def _assign_gangs(self, window: list[JobView], free: np.ndarray, wd: np.ndarray,
                      pd: np.ndarray, wkey: list[int], minw: np.ndarray, w: np.ndarray,
                      p: np.ndarray) -> np.ndarray:
        """Starvation guard for gangs, after DL2's ASSIGN_BUNDLE (its simulator gives every job
        one worker and one PS before the network's steps, `parameters.py`): each job whose
        minimum is above one gets its minimum and one PS first, oldest first, where they fit
        (counted into `w`, `p`). Elastic jobs (minimum one, all of DL2's own) are left to the
        network. Returns the free array left."""
        for i in np.flatnonzero(minw > 1):
            gang = self._gang(free, wd[i], wkey[i], int(minw[i]))
            if gang is None:
                continue
            servers, after = gang
            k = self._best(after, pd[i], CPU)
            if k < 0:
                continue
            window[i].workers.extend(servers)
            window[i].ps.append(k)
            after[k] -= pd[i]
            free, w[i], p[i] = after, len(servers), 1
        return free

    def allocate(self, jobs: list[JobView], free: np.ndarray, choose: Chooser,
                 record: Trajectory | None = None, max_steps: int = 10_000) -> np.ndarray:
        """Fill `jobs` (in window order) from `free`; returns the free array left."""
        free = free.copy()
        for v in jobs:
            v.workers, v.ps = [], []
        window = jobs[:WINDOW]
        n = len(window)
        static = self._static(window)
        base = len(self.types)
        jm = np.zeros(WINDOW)
        jm[:n] = 1.0
        wd = np.array([v.worker_demand for v in window]).reshape(n, 3)
        pd = np.array([v.ps_demand for v in window]).reshape(n, 3)
        pairs, group = np.unique(np.concatenate([wd, pd], axis=1), axis=0, return_inverse=True)
        group = group.ravel()
        wkey = [GPU if row[GPU] > 0 else CPU for row in pairs[:, :3]]
        maxw = np.array([v.max_workers for v in window])
        minw = np.minimum([v.min_workers for v in window], maxw) if n else np.zeros(0, np.int64)
        w = np.zeros(n, dtype=np.int64)
        p = np.zeros(n, dtype=np.int64)
        free = self._assign_gangs(window, free, wd, pd, [wkey[g] for g in group], minw, w, p)
        starved = (w == 0) & (minw > 1)  # minimum did not fit: free only shrinks from here
        for _ in range(max_steps):
            # Where one more worker / PS / both would go, per distinct demand.
            spots = []
            for g, row in enumerate(pairs):
                wk = self._best(free, row[:3], wkey[g])
                pk = self._best(free, row[3:], CPU)
                bp = pk
                if wk >= 0 and pk == wk:
                    after = free.copy()
                    after[wk] -= row[:3]
                    bp = self._best(after, row[3:], CPU)
                spots.append((wk, pk, bp))
            spot = np.array(spots, dtype=np.int64)[group] if n else np.zeros((0, 3), np.int64)
            spot[starved] = -1
            can_w = (w < maxw) & (spot[:, 0] >= 0)
            can_p = (p < MAX_PS) & (spot[:, 1] >= 0)
            can_b = can_w & (p < MAX_PS) & (spot[:, 2] >= 0)
            am = np.zeros(3 * WINDOW + 1)
            am[STOP] = 1.0
            am[0:3 * n:3], am[1:3 * n:3], am[2:3 * n:3] = can_w, can_p, can_b
            if am.sum() <= 1:  # only stop is left
                break
            X = static.copy()
            if n:
                share = ((wd * w[:, None] + pd * p[:, None]) / self.total).max(axis=1)
                X[:n, base + 3] = share * 4.0
                X[:n, base + 4] = w / MAX_WORKERS
                X[:n, base + 5] = p / MAX_PS
            G = np.array([free[:, GPU].sum() / max(self.total[GPU], _EPS),
                          free[:, CPU].sum() / self.total[CPU], n / WINDOW])
            a = choose(X, G, jm, am, window)
            if record is not None:
                record.X.append(X)
                record.G.append(G)
                record.jm.append(jm)
                record.am.append(am)
                record.actions.append(a)
            if a == STOP:
                break
            i, kind = divmod(a, 3)
            v = window[i]
            wk, pk, bp = spot[i]
            if kind in (0, 2):
                v.workers.append(int(wk))
                free[wk] -= wd[i]
                w[i] += 1
            if kind in (1, 2):
                node = int(pk if kind == 1 else bp)
                v.ps.append(node)
                free[node] -= pd[i]
                p[i] += 1
        return free


def drf_teacher(X, G, jm, am, window: list[JobView], total: np.ndarray | None = None) -> int:
    """DL2's DRF: a worker+PS bundle to the job with the smallest dominant share; else stop."""
    best, best_key = STOP, None
    for i, v in enumerate(window):
        if not am[3 * i + 2]:
            continue
        key = (X[i, -5], i)  # dominant-share feature, then window (arrival) order
        if best_key is None or key < best_key:
            best, best_key = 3 * i + 2, key
    return best


def net_chooser(net: PolicyNet, rng: np.random.Generator | None, greedy: bool = False,
                log: list | None = None) -> Chooser:
    def choose(X, G, jm, am, window) -> int:
        P, _ = net.probs(X[None], G[None], jm[None], am[None])
        p = P[0]
        if log is not None:
            log.append((p, [v.name for v in window]))
        if greedy or rng is None:
            return int(np.argmax(p))
        return int(rng.choice(len(p), p=p))

    return choose


def type_index(types: Sequence[str], app: str) -> int:
    try:
        return list(types).index(app)
    except ValueError:
        return -1
