"""DL2 (Peng et al., 2019): a policy network resizes parameter-server jobs slot by slot.

Each slot (`round_interval`, 600 s) every job's allocation is decided afresh, step by step: the
network sees the scheduling window (up to `WINDOW` unfinished jobs, oldest first) and picks one
action: add a worker to job i, add a PS to job i, add both, or stop. Each step places one task on
the server with the most free room for it; invalid actions (job at its limit, no server fits) are
masked out. The slot ends on "stop" or when nothing more fits. Jobs whose worker and PS counts
did not change keep their placement; the others are (re)placed, paying a checkpoint-restart.

State per window job (as DL2's `INPUTS_GATE`): model type (one-hot over the PS models), time
since arrival, remaining work (fraction, and hours at one worker and one PS), dominant resource
share, workers and PS so far in this slot; we add the previous slot's workers and PS (so the
network can see what a change would restart) and three cluster features (free GPU and CPU
share, window fill). Deviation from the paper, said here once: the network's weights are shared
across window positions (DL2's JOB_CENTRAL_REPRESENTATION variant): a two-layer MLP scores each
job's three actions from that job's features, and a stop score comes from the mean of the jobs'
hidden features. It learns from far fewer samples than one dense layer over the whole window.

Training (`train_dl2`, `workbench train dl2`): supervised warm-up on the decisions of DRF
(DL2's elastic DRF: from zero each slot, a worker+PS bundle to the job with the smallest dominant
share until nothing fits) on Philly-derived workloads, then policy gradient with a time-based
baseline (REINFORCE; the mean return of several rollouts of the same workload at that slot) and
an entropy bonus, with DL2's reward: the sum over jobs of the fraction of the job's work done in
the slot. Rollouts run in `SlotEnv`, a slot-level twin of the simulator that uses the same
speed model and restart delay. The shipped weights (`data/dl2.npz`) are what `workbench train
dl2` writes with its default seed and settings.

Online learning (`learn=True`): the engine samples its actions, takes the observed normalised
progress between two rounds as that slot's reward, and does one policy-gradient step per slot
against a running-mean baseline.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from ..model import (
    CPU,
    GPU,
    Action,
    ClusterState,
    JobKind,
    JobSpec,
    JobStatus,
    Place,
    Placement,
    Reject,
    Suspend,
    Wait,
    describe_placement,
)
from ..placement.ledger import Ledger
from .base import Policy, register

WINDOW = 20  # jobs the network sees at once (DL2: SCHED_WINDOW_SIZE 20 on its testbed scale)
MAX_PS = 12  # per-job PS limit (the DL2 speed measurements cover up to 12 workers)
MAX_WORKERS = 12
JOB_FEATURES = 8  # besides the type one-hot
GLOBAL_FEATURES = 3
ACTION_NAMES = ("worker", "ps", "both")
STOP = 3 * WINDOW
WEIGHTS_FILE = "dl2.npz"
_EPS = 1e-9


# ---- the policy network ---------------------------------------------------------------------


class PolicyNet:
    """Shared per-job MLP: job features + cluster features -> 3 action scores; a stop score from
    the mean hidden state. Plain numpy forward and backward; Adam updates."""

    def __init__(self, types: Sequence[str], hidden: int = 32, seed: int = 0) -> None:
        self.types = tuple(types)
        self.hidden = hidden
        f = len(self.types) + JOB_FEATURES + GLOBAL_FEATURES
        rng = np.random.default_rng(seed)

        def init(n_in: int, n_out: int) -> np.ndarray:
            return rng.normal(0.0, math.sqrt(2.0 / n_in), (n_in, n_out))

        self.params: dict[str, np.ndarray] = {
            "W1": init(f, hidden), "b1": np.zeros(hidden),
            "W2": init(hidden, hidden), "b2": np.zeros(hidden),
            "W3": init(hidden, 3) * 0.1, "b3": np.zeros(3),
            "ws": init(hidden + GLOBAL_FEATURES, 1) * 0.1, "bs": np.zeros(1),
        }
        self._adam: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._step = 0

    @property
    def n_features(self) -> int:
        return len(self.types) + JOB_FEATURES

    # -- forward / backward -------------------------------------------------------------------

    def logits(self, X: np.ndarray, G: np.ndarray, jm: np.ndarray) -> tuple[np.ndarray, dict]:
        """X (B, W, F) job features, G (B, 3) cluster features, jm (B, W) real jobs.
        Returns logits (B, 3W+1) and a cache for `backward`."""
        p = self.params
        B, W, _ = X.shape
        Gj = np.broadcast_to(G[:, None, :], (B, W, G.shape[1]))
        Z0 = np.concatenate([X, Gj], axis=2)
        A1 = Z0 @ p["W1"] + p["b1"]
        H1 = np.maximum(A1, 0.0)
        A2 = H1 @ p["W2"] + p["b2"]
        H2 = np.maximum(A2, 0.0)
        job_logits = (H2 @ p["W3"] + p["b3"]).reshape(B, 3 * W)
        count = np.maximum(jm.sum(axis=1, keepdims=True), 1.0)
        pooled = (H2 * jm[:, :, None]).sum(axis=1) / count
        S = np.concatenate([pooled, G], axis=1)
        stop = S @ p["ws"] + p["bs"]
        cache = {"Z0": Z0, "A1": A1, "H1": H1, "A2": A2, "H2": H2, "S": S, "jm": jm,
                 "count": count}
        return np.concatenate([job_logits, stop], axis=1), cache

    def probs(self, X, G, jm, am) -> tuple[np.ndarray, dict]:
        z, cache = self.logits(X, G, jm)
        return masked_softmax(z, am), cache

    def backward(self, cache: dict, dz: np.ndarray) -> dict[str, np.ndarray]:
        p = self.params
        H2, S = cache["H2"], cache["S"]
        B, W, H = H2.shape
        d_job = dz[:, :3 * W].reshape(B, W, 3)
        d_stop = dz[:, 3 * W:]
        g = {"W3": np.einsum("bwh,bwk->hk", H2, d_job), "b3": d_job.sum(axis=(0, 1)),
             "ws": S.T @ d_stop, "bs": d_stop.sum(axis=0)}
        dS = d_stop @ p["ws"].T
        dpooled = dS[:, :H]
        dH2 = d_job @ p["W3"].T + (dpooled / cache["count"])[:, None, :] * cache["jm"][:, :, None]
        dA2 = dH2 * (cache["A2"] > 0)
        g["W2"] = np.einsum("bwh,bwk->hk", cache["H1"], dA2)
        g["b2"] = dA2.sum(axis=(0, 1))
        dA1 = (dA2 @ p["W2"].T) * (cache["A1"] > 0)
        g["W1"] = np.einsum("bwf,bwh->fh", cache["Z0"], dA1)
        g["b1"] = dA1.sum(axis=(0, 1))
        return g

    def reset_optimizer(self) -> None:
        self._adam.clear()
        self._step = 0

    def adam(self, grads: dict[str, np.ndarray], lr: float, clip: float = 5.0) -> None:
        norm = math.sqrt(sum(float((v * v).sum()) for v in grads.values()))
        scale = min(1.0, clip / (norm + 1e-12))
        self._step += 1
        b1, b2 = 0.9, 0.999
        for k, gk in grads.items():
            gk = gk * scale
            m, v = self._adam.get(k, (np.zeros_like(gk), np.zeros_like(gk)))
            m = b1 * m + (1 - b1) * gk
            v = b2 * v + (1 - b2) * gk * gk
            self._adam[k] = (m, v)
            mh = m / (1 - b1 ** self._step)
            vh = v / (1 - b2 ** self._step)
            self.params[k] = self.params[k] - lr * mh / (np.sqrt(vh) + 1e-8)

    # -- losses -------------------------------------------------------------------------------

    def imitation_loss(self, X, G, jm, am, actions, train_lr: float | None = None) -> float:
        """Mean cross-entropy of `actions` (one step of Adam at `train_lr` if given)."""
        z, cache = self.logits(X, G, jm)
        P = masked_softmax(z, am)
        n = len(actions)
        loss = -float(np.log(P[np.arange(n), actions] + 1e-12).mean())
        if train_lr is not None:
            dz = P.copy()
            dz[np.arange(n), actions] -= 1.0
            self.adam(self.backward(cache, dz / n), train_lr)
        return loss

    def policy_gradient(self, X, G, jm, am, actions, advantages, lr: float,
                        entropy: float = 0.01) -> float:
        """One REINFORCE step: minimise -A log p(a) - β H(p); returns the mean entropy."""
        z, cache = self.logits(X, G, jm)
        P = masked_softmax(z, am)
        n = len(actions)
        logP = np.where(am > 0, np.log(P + 1e-12), 0.0)
        H = -(P * logP).sum(axis=1, keepdims=True)
        dz = advantages[:, None] * P
        dz[np.arange(n), actions] -= advantages
        dz += entropy * P * (logP + H)
        dz = np.where(am > 0, dz, 0.0)
        self.adam(self.backward(cache, dz / n), lr)
        return float(H.mean())

    def actor_update(self, X, G, jm, am, Q, actions, advantages, lr: float,
                     entropy: float = 0.01, long_term: float = 0.5) -> float:
        """One step on -E_π[Q] (exact over all actions: each action's progress in the slot, known
        from the speed model), plus `long_term` × REINFORCE on the later slots' advantage of the
        taken action, minus β H(π). Returns the mean entropy."""
        z, cache = self.logits(X, G, jm)
        P = masked_softmax(z, am)
        n = len(actions)
        Qbar = (P * Q).sum(axis=1, keepdims=True)
        spread = np.where(am > 0, Q - Qbar, 0.0)
        scale = float(np.sqrt((P * spread ** 2).sum(axis=1).mean())) + 1e-8
        dz = -P * spread / scale
        if long_term:
            dz += long_term * advantages[:, None] * P
            dz[np.arange(n), actions] -= long_term * advantages
        logP = np.where(am > 0, np.log(P + 1e-12), 0.0)
        H = -(P * logP).sum(axis=1, keepdims=True)
        dz += entropy * P * (logP + H)
        dz = np.where(am > 0, dz, 0.0)
        self.adam(self.backward(cache, dz / n), lr)
        return float(H.mean())

    # -- persistence --------------------------------------------------------------------------

    def to_bytes(self, meta: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        meta = {**meta, "types": list(self.types), "hidden": self.hidden, "window": WINDOW}
        np.savez_compressed(buf, meta=np.array(json.dumps(meta, sort_keys=True)),
                            **{k: v.astype(np.float32) for k, v in self.params.items()})
        return buf.getvalue()

    def save(self, path: str, meta: dict[str, Any]) -> None:
        with open(path, "wb") as f:
            f.write(self.to_bytes(meta))

    @classmethod
    def load(cls, source) -> tuple[PolicyNet, dict]:
        with np.load(source, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            net = cls(meta["types"], hidden=int(meta["hidden"]))
            for k in net.params:
                net.params[k] = data[k].astype(float)
        return net, meta


def masked_softmax(z: np.ndarray, mask: np.ndarray) -> np.ndarray:
    z = np.where(mask > 0, z, -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    e = np.where(mask > 0, np.exp(z), 0.0)
    return e / e.sum(axis=1, keepdims=True)


def shipped_weights_path():
    return resources.files(__package__) / "data" / WEIGHTS_FILE


def load_shipped(perf=None) -> tuple[PolicyNet, dict]:
    """The shipped weights; an untrained network (said in its meta) if they are missing."""
    try:
        with shipped_weights_path().open("rb") as f:
            return PolicyNet.load(io.BytesIO(f.read()))
    except FileNotFoundError:
        if perf is None:
            from ..perf import default_perf

            perf = default_perf()
        return PolicyNet(perf.ps_models), {"untrained": True}


# ---- one slot's allocation, step by step ------------------------------------------------------


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

    @staticmethod
    def _best(free: np.ndarray, demand: np.ndarray, key: int) -> int:
        """The server with the most free `key` resource that fits `demand`, or -1."""
        ok = (free + _EPS >= demand).all(axis=1)
        if not ok.any():
            return -1
        score = np.where(ok, free[:, key] * 1e6 + free[:, CPU], -np.inf)
        return int(np.argmax(score))

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
        w = np.zeros(n, dtype=np.int64)
        p = np.zeros(n, dtype=np.int64)
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


# ---- the slot-level training environment --------------------------------------------------------


class SlotEnv:
    """A slot-level twin of the simulator for PS jobs: per slot, allocate afresh, advance each
    job at the fitted PS speed for the slot (minus the restart delay if its counts changed)."""

    def __init__(self, jobs: Sequence[JobSpec], capacity: np.ndarray, perf, types: Sequence[str],
                 slot: float = 600.0, restart_delay: float = 30.0, max_slots: int = 2000) -> None:
        self.specs = sorted(jobs, key=lambda s: (s.arrival, s.name))
        self.capacity = np.asarray(capacity, dtype=float)
        self.perf = perf
        self.types = tuple(types)
        self.slot = slot
        self.restart_delay = restart_delay
        self.max_slots = max_slots
        self.allocator = SlotAllocator(self.capacity, self.types, slot)
        self._speed: dict[tuple[str, int, int], float] = {}

    def speed(self, app: str, w: int, p: int) -> float:
        key = (app, w, p)
        s = self._speed.get(key)
        if s is None:
            s = self._speed[key] = float(self.perf.ps_speed(app, w, p)) if w and p else 0.0
        return s

    def run(self, choose: Chooser, record: bool = False) -> dict[str, Any]:
        """One episode. Returns rewards per slot, per-slot trajectories and the JCTs."""
        t = self.specs[0].arrival if self.specs else 0.0
        nxt = 0
        progress: dict[str, float] = {}
        prev: dict[str, tuple[int, int]] = {}
        active: list[JobSpec] = []
        finish: dict[str, float] = {}
        rewards: list[float] = []
        trajectories: list[Trajectory] = []
        for _ in range(self.max_slots):
            while nxt < len(self.specs) and self.specs[nxt].arrival <= t + 1e-9:
                active.append(self.specs[nxt])
                progress[self.specs[nxt].name] = 0.0
                nxt += 1
            if not active and nxt >= len(self.specs):
                break
            if not active:
                t += self.slot * math.ceil((self.specs[nxt].arrival - t) / self.slot - 1e-9)
                continue
            views = [self._view(s, t, progress[s.name], prev.get(s.name, (0, 0)))
                     for s in active]
            traj = Trajectory() if record else None
            step = choose
            if record:
                def step(X, G, jm, am, window, _choose=choose, _traj=traj):
                    _traj.Q.append(self.step_values(X, am, window))
                    return _choose(X, G, jm, am, window)
            self.allocator.allocate(views, self.capacity, step, traj)
            reward = 0.0
            still = []
            for s, v in zip(active, views):
                w, p = len(v.workers), len(v.ps)
                if w < s.min_workers or p < 1:
                    w, p = 0, 0
                rate = self.speed(s.application, w, p)
                changed = (w, p) != prev.get(s.name, (0, 0))
                prev[s.name] = (w, p)
                run = self.slot - (self.restart_delay if changed and w else 0.0)
                left = s.total_work - progress[s.name]
                if rate > 0 and rate * run >= left - 1e-9:
                    finish[s.name] = t + (self.slot - run) + left / rate
                    reward += left / s.total_work
                    continue
                done = rate * run
                progress[s.name] += done
                reward += done / s.total_work
                still.append(s)
            active = still
            rewards.append(reward)
            if record:
                trajectories.append(traj)
            t += self.slot
        jct = [finish[s.name] - s.arrival for s in self.specs if s.name in finish]
        return {"rewards": np.array(rewards), "trajectories": trajectories,
                "avg_jct": float(np.mean(jct)) if jct else float("nan"),
                "completed": len(jct), "jobs": len(self.specs)}

    def _gain(self, v: JobView, w: int, p: int) -> float:
        """Fraction of the job's work done this slot at (w, p) workers and PS."""
        if w < v.min_workers or p < 1:
            return 0.0
        run = self.slot - (self.restart_delay if (w, p) != (v.prev_workers, v.prev_ps) else 0.0)
        return min(self.speed(v.app, w, p) * run / v.total, v.remaining)

    def step_values(self, X: np.ndarray, am: np.ndarray, window: list[JobView]) -> np.ndarray:
        """Each action's change of the slot's normalised progress (DL2's reward, per step)."""
        base = len(self.types)
        Q = np.zeros(3 * WINDOW + 1)
        for i, v in enumerate(window):
            if not am[3 * i:3 * i + 3].any():
                continue
            w, p = round(X[i, base + 4] * MAX_WORKERS), round(X[i, base + 5] * MAX_PS)
            g0 = self._gain(v, w, p)
            for k, (dw, dp) in enumerate(((1, 0), (0, 1), (1, 1))):
                if am[3 * i + k]:
                    Q[3 * i + k] = self._gain(v, w + dw, p + dp) - g0
        return Q

    def _view(self, s: JobSpec, t: float, done: float, prev: tuple[int, int]) -> JobView:
        left = max(s.total_work - done, 0.0)
        return JobView(
            name=s.name, type_index=type_index(self.types, s.application), age=t - s.arrival,
            remaining=left / s.total_work,
            remaining_hours=left / max(self.speed(s.application, 1, 1), _EPS) / 3600.0,
            worker_demand=s.worker_demand.as_array(), ps_demand=s.ps_demand.as_array(),
            max_workers=min(s.max_workers, MAX_WORKERS), min_workers=s.min_workers,
            prev_workers=prev[0], prev_ps=prev[1], app=s.application, total=s.total_work)


# ---- training -------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    seed: int = 0
    jobs: int = 40
    load: float = 1.5
    nodes: int = 4
    gpus_per_node: int = 4
    slot: float = 600.0
    sl_traces: int = 24
    sl_epochs: int = 20
    sl_lr: float = 3e-3
    rl_iters: int = 40
    rl_rollouts: int = 2
    rl_lr: float = 1e-3
    rl_passes: int = 8
    rl_greedy: int = 1  # how many of the rollouts act greedily
    entropy: float = 0.001
    long_term: float = 0.3  # weight of the later slots' REINFORCE term (0: the slot's own only)
    gamma: float = 0.95
    hidden: int = 32
    val_traces: int = 4

    def cluster(self):
        from ..clusters import make_cluster

        return make_cluster(self.nodes, self.gpus_per_node)


TRAIN_SEED_BASE = 1_000  # training workloads use seeds from here; benches hold out others
VAL_SEED_BASE = 5_000


def _workload(cfg: TrainConfig, seed: int, perf):
    from ..traces.ps_jobs import philly_ps_workload

    return philly_ps_workload(cfg.jobs, seed=seed, load=cfg.load,
                              cluster_gpus=cfg.nodes * cfg.gpus_per_node, perf=perf)


def _capacity(cfg: TrainConfig) -> np.ndarray:
    return np.array([[n.cpus, n.mem, n.gpus] for n in cfg.cluster()], dtype=float)


def teacher_dataset(cfg: TrainConfig, perf, types, seeds: Sequence[int]) -> Trajectory:
    """States and DRF's actions on the workloads of `seeds`."""
    data = Trajectory()
    for s in seeds:
        env = SlotEnv(_workload(cfg, s, perf), _capacity(cfg), perf, types, cfg.slot)
        out = env.run(drf_teacher, record=True)
        for traj in out["trajectories"]:
            data.extend(traj)
    return data


def evaluate(net: PolicyNet, cfg: TrainConfig, perf, seeds: Sequence[int],
             chooser: Chooser | None = None) -> float:
    """Mean of the average JCT (hours) over `seeds`, greedy actions, in the slot environment."""
    out = []
    for s in seeds:
        env = SlotEnv(_workload(cfg, s, perf), _capacity(cfg), perf, net.types, cfg.slot)
        res = env.run(chooser or net_chooser(net, None, greedy=True))
        out.append(res["avg_jct"] / 3600.0)
    return float(np.mean(out))


def train_dl2(cfg: TrainConfig | None = None, perf=None,
              progress: Callable[[str, int, int, dict], None] | None = None
              ) -> tuple[PolicyNet, list[dict]]:
    """Supervised warm-up on DRF, then REINFORCE. Returns the network and the learning curve
    (one row per SL epoch and per RL iteration). Deterministic for a given config."""
    cfg = cfg or TrainConfig()
    if perf is None:
        from ..perf import default_perf

        perf = default_perf()
    types = tuple(perf.ps_models)
    rng = np.random.default_rng(cfg.seed)
    net = PolicyNet(types, hidden=cfg.hidden, seed=cfg.seed)
    curve: list[dict] = []
    val = [VAL_SEED_BASE + i for i in range(cfg.val_traces)]
    teacher_jct = evaluate(net, cfg, perf, val, chooser=drf_teacher)

    sl_seeds = [TRAIN_SEED_BASE + i for i in range(cfg.sl_traces)]
    data = teacher_dataset(cfg, perf, types, sl_seeds)
    X, G, jm, am, acts = data.arrays()
    n = len(acts)
    for epoch in range(cfg.sl_epochs):
        order = rng.permutation(n)
        losses = []
        for start in range(0, n, 256):
            idx = order[start:start + 256]
            losses.append(net.imitation_loss(X[idx], G[idx], jm[idx], am[idx], acts[idx],
                                             train_lr=cfg.sl_lr))
        row = {"phase": "sl", "step": epoch + 1, "loss": float(np.mean(losses)),
               "samples": n, "teacher_jct_h": teacher_jct}
        if epoch + 1 == cfg.sl_epochs or (epoch + 1) % 10 == 0:
            row["val_jct_h"] = evaluate(net, cfg, perf, val)
            row["accuracy"] = float(np.mean(
                net.probs(X, G, jm, am)[0].argmax(axis=1) == acts))
        curve.append(row)
        if progress:
            progress("sl", epoch + 1, cfg.sl_epochs, row)

    net.reset_optimizer()  # SL's Adam moments would damp the first RL steps for long
    rl_seeds = [TRAIN_SEED_BASE + 100 + i for i in range(cfg.rl_iters)]
    for it, s in enumerate(rl_seeds):
        env = SlotEnv(_workload(cfg, s, perf), _capacity(cfg), perf, types, cfg.slot)
        # Rollouts: the greedy policy (the states it will meet when deployed) and sampled ones
        # (exploration, and the later-slot returns for REINFORCE).
        runs = [env.run(net_chooser(net, rng, greedy=k < cfg.rl_greedy), record=True)
                for k in range(cfg.rl_rollouts)]
        returns = [_discounted(r["rewards"], cfg.gamma) for r in runs]
        longest = max(len(g) for g in returns)
        padded = np.zeros((len(returns), longest))
        for k, g in enumerate(returns):
            padded[k, :len(g)] = g
        baseline = np.append(padded.mean(axis=0), 0.0)
        batch = Trajectory()
        adv: list[float] = []
        for r, g in zip(runs, returns):
            g = np.append(g, 0.0)
            for k, traj in enumerate(r["trajectories"]):
                batch.extend(traj)
                # The slot's own progress is credited exactly through Q; the later slots'
                # return (against the mean of the rollouts) goes to the actions taken.
                adv += [cfg.gamma * (g[k + 1] - baseline[k + 1])] * len(traj)
        A = np.array(adv)
        A = A / (A.std() + 1e-8)
        Xb, Gb, jmb, amb, ab = batch.arrays()
        Qb = np.array(batch.Q)
        ents = []
        for _ in range(cfg.rl_passes):
            order = rng.permutation(len(ab))
            for start in range(0, len(ab), 512):
                i = order[start:start + 512]
                ents.append(net.actor_update(Xb[i], Gb[i], jmb[i], amb[i], Qb[i], ab[i], A[i],
                                             cfg.rl_lr, cfg.entropy, cfg.long_term))
        ent = float(np.mean(ents)) if ents else 0.0
        row = {"phase": "rl", "step": it + 1, "train_jct_h": float(np.mean(
            [r["avg_jct"] for r in runs])) / 3600.0, "reward": float(np.mean(
                [r["rewards"].sum() for r in runs])), "entropy": ent,
            "teacher_jct_h": teacher_jct}
        if (it + 1) % 10 == 0 or it + 1 == cfg.rl_iters:
            row["val_jct_h"] = evaluate(net, cfg, perf, val)
        curve.append(row)
        if progress:
            progress("rl", it + 1, cfg.rl_iters, row)
    return net, curve


def _discounted(rewards: np.ndarray, gamma: float) -> np.ndarray:
    out = np.zeros(len(rewards))
    acc = 0.0
    for k in range(len(rewards) - 1, -1, -1):
        acc = rewards[k] + gamma * acc
        out[k] = acc
    return out


# ---- the engine -----------------------------------------------------------------------------


@register("dl2")
class Dl2Policy(Policy):
    """DL2: a policy network (SL on DRF, then RL) resizes PS jobs each slot."""

    needs_every_round = True

    def __init__(self, perf=None, round_interval: float = 600.0, weights: str | None = None,
                 learn: bool = False, learning_rate: float = 1e-4, seed: int = 0,
                 greedy: bool | None = None, teacher: bool = False) -> None:
        if perf is None:
            from ..perf import default_perf

            perf = default_perf()
        self.perf = perf
        self.round_interval = float(round_interval)
        self.weights = weights
        self.learn = learn
        self.learning_rate = learning_rate
        self.seed = seed
        self.greedy = (not learn) if greedy is None else greedy
        self.teacher = teacher  # True: DL2's elastic DRF (the warm-up teacher) instead of the net
        self.reset()

    def reset(self) -> None:
        if self.weights is None:
            self.net, self.meta = load_shipped(self.perf)
        else:
            self.net, self.meta = PolicyNet.load(self.weights)
        self.rng = np.random.default_rng(self.seed)
        self._prev: dict[str, tuple[int, int]] = {}
        self._last_probs: list = []
        self._last_view: dict[str, Any] = {}
        self._pending: tuple[Trajectory, dict[str, float], dict[str, float]] | None = None
        self._baseline: float | None = None
        self.updates = 0

    def schedule(self, state: ClusterState) -> list[Action]:
        jobs = sorted((j for j in state.jobs.values() if not j.state.finished),
                      key=lambda j: (j.spec.arrival, j.name))
        if self.learn:
            self._learn_from(state)
        ps_jobs = [j for j in jobs if j.spec.kind == JobKind.PS]
        actions: list[Action] = []
        for j in jobs:
            if j.spec.kind != JobKind.PS and not j.state.placed:
                # Its network was trained on PS jobs only: refuse at once rather than hold forever.
                actions.append(Reject(j.name, "rejected: DL2 schedules parameter-server jobs only"
                                      " (switch engine for all-reduce jobs)"))
        alloc = SlotAllocator(state.capacity, self.net.types, self.round_interval)
        views = [self._view(j, state.now) for j in ps_jobs]
        # Resources held by jobs the network does not steer (not PS) stay taken.
        free = state.capacity.copy()
        free[~state.node_up] = 0.0
        for j in jobs:
            if j.spec.kind != JobKind.PS and j.state.placed:
                free -= _held(state, j)
        free = np.maximum(free, 0.0)
        traj = Trajectory()
        log: list = []
        choose = drf_teacher if self.teacher else net_chooser(self.net, self.rng, self.greedy, log)
        alloc.allocate(views, free, choose, traj)
        self._last_probs = log
        counts = {}
        for j, v in zip(ps_jobs, views):
            w, p = len(v.workers), len(v.ps)
            if w < j.spec.min_workers or p < 1:
                w, p = 0, 0
            counts[j.name] = (w, p, v)
        actions += self._realise(state, ps_jobs, counts)
        for j in ps_jobs:
            self._prev[j.name] = counts[j.name][:2]
        if self.learn and len(traj) and not self.teacher:
            progress = {j.name: j.progress for j in ps_jobs}
            totals = {j.name: j.spec.total_work for j in ps_jobs}
            self._pending = (traj, progress, totals)
        self._last_view = self._view_summary(state.now, counts)
        return actions

    def _view(self, j: JobStatus, now: float) -> JobView:
        s = j.spec
        left = j.remaining_work
        one = float(self.perf.ps_speed(s.application, 1, 1)) if s.application in \
            getattr(self.perf, "ps_models", ()) else 0.0
        return JobView(
            name=j.name, type_index=type_index(self.net.types, s.application), age=now - s.arrival,
            remaining=left / s.total_work, remaining_hours=left / max(one, _EPS) / 3600.0,
            worker_demand=s.worker_demand.as_array(), ps_demand=s.ps_demand.as_array(),
            max_workers=min(s.max_workers, MAX_WORKERS), min_workers=s.min_workers,
            prev_workers=self._prev.get(j.name, (j.num_workers, j.num_ps))[0] if j.state.placed else 0,
            prev_ps=self._prev.get(j.name, (j.num_workers, j.num_ps))[1] if j.state.placed else 0)

    def _realise(self, state: ClusterState, jobs: list[JobStatus], counts: dict) -> list[Action]:
        """Turn counts into placements: unchanged jobs stay put, the rest are (re)placed."""
        ledger = Ledger(state)
        for j in jobs:
            if j.state.placed:
                ledger.give_back(j.workers, j.spec.worker_demand)
                ledger.give_back(j.ps, j.spec.ps_demand)
        keep, move = [], []
        for j in jobs:
            w, p, _ = counts[j.name]
            if j.state.placed and (w, p) == (j.num_workers, j.num_ps) and w:
                ledger.take(j.workers, j.spec.worker_demand)
                ledger.take(j.ps, j.spec.ps_demand)
                keep.append(j)
            else:
                move.append(j)
        suspends: list[Action] = []
        places: list[Action] = []
        names = [n.name for n in state.nodes]
        for j in move:
            w, p, v = counts[j.name]
            got = None
            if w:
                planned = (_counts(names, v.workers), _counts(names, v.ps))
                if _fits(ledger, j.spec, *planned):
                    got = planned
                else:
                    got = ledger.place_gang(j, w, p)
            if j.state.placed:
                suspends.append(Suspend(j.name, f"DL2 resizes it to {w} workers, {p} PS" if w else
                                        "DL2 gives it nothing this slot"))
            if got is None:
                why = ("waiting: DL2 gave it no workers this slot" if not w else
                       f"waiting: {w} workers, {p} PS do not fit now")
                if j.reason != why or j.state.placed:
                    places.append(Wait(j.name, why))
                continue
            ledger.take(got[0], j.spec.worker_demand)
            ledger.take(got[1], j.spec.ps_demand)
            places.append(Place(j.name, f"DL2 network: {w} workers, {p} PS"
                                f" ({describe_placement(*got)})", got[0], got[1]))
        return suspends + places

    # ---- online learning -------------------------------------------------------------------

    def _learn_from(self, state: ClusterState) -> None:
        if self._pending is None:
            return
        traj, before, totals = self._pending
        self._pending = None
        reward = 0.0
        for name, p0 in before.items():
            job = state.jobs.get(name)
            now = job.progress if job is not None else totals[name]  # gone: completed
            reward += max(now - p0, 0.0) / totals[name]
        if self._baseline is None:
            self._baseline = reward
        adv = reward - self._baseline
        self._baseline = 0.9 * self._baseline + 0.1 * reward
        X, G, jm, am, acts = traj.arrays()
        A = np.full(len(acts), adv / (abs(self._baseline) + 1e-6))
        self.net.policy_gradient(X, G, jm, am, acts, A, self.learning_rate, 0.01)
        self.updates += 1

    # ---- teaching view -----------------------------------------------------------------------

    def _view_summary(self, now: float, counts: dict) -> dict[str, Any]:
        steps = []
        for p, names in self._last_probs[:200]:
            per_job = {}
            for i, n in enumerate(names):
                per_job[n] = {a: float(p[3 * i + k]) for k, a in enumerate(ACTION_NAMES)}
            steps.append({"jobs": per_job, "stop": float(p[STOP]), "chosen": int(np.argmax(p))})
        first = steps[0] if steps else {"jobs": {}, "stop": 1.0}
        return {"time": now, "first_step": first, "steps": steps,
                "allocation": {n: {"workers": c[0], "ps": c[1]} for n, c in counts.items()}}

    def engine_view(self) -> dict[str, Any]:
        return {"engine": "dl2", "actions": list(ACTION_NAMES) + ["stop"],
                "window": WINDOW, "weights": self.weights or "shipped",
                "trained": {k: self.meta.get(k) for k in ("seed", "sl_traces", "rl_iters")},
                "learning": self.learn, "updates": self.updates,
                "probabilities": self._last_view}


def _held(state: ClusterState, j: JobStatus) -> np.ndarray:
    out = np.zeros_like(state.capacity)
    for n, c in j.workers.items():
        out[state.node_index[n]] += j.spec.worker_demand.as_array() * c
    for n, c in j.ps.items():
        out[state.node_index[n]] += j.spec.ps_demand.as_array() * c
    return out


def _counts(names: list[str], nodes: list[int]) -> Placement:
    out: Placement = {}
    for i in nodes:
        out[names[i]] = out.get(names[i], 0) + 1
    return out


def _fits(ledger: Ledger, spec: JobSpec, workers: Placement, ps: Placement) -> bool:
    need = np.zeros_like(ledger.free)
    for n, c in workers.items():
        need[ledger.index[n]] += spec.worker_demand.as_array() * c
    for n, c in ps.items():
        need[ledger.index[n]] += spec.ps_demand.as_array() * c
    return bool((need <= ledger.free + 1e-6).all())


__all__ = ["Dl2Policy", "PolicyNet", "SlotAllocator", "SlotEnv", "TrainConfig", "drf_teacher",
           "load_shipped", "train_dl2"]
