"""DL2's policy network: a shared per-job MLP scores each window job's three actions (add a
worker, a PS, or both) from its features and the cluster's; a stop score comes from the mean of
the jobs' hidden features. Plain numpy forward, backward and Adam; the shipped weights.

Also the window and action layout every part of DL2 shares (`WINDOW`, `STOP`, the features).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from importlib import resources
from typing import Any

import numpy as np

WINDOW = 20  # jobs the network sees at once (DL2: SCHED_WINDOW_SIZE 20 on its testbed scale)
MAX_PS = 12  # per-job PS limit (the DL2 speed measurements cover up to 12 workers)
MAX_WORKERS = 12
JOB_FEATURES = 8  # besides the type one-hot
GLOBAL_FEATURES = 3
ACTION_NAMES = ("worker", "ps", "both")
STOP = 3 * WINDOW
WEIGHTS_FILE = "dl2.npz"
_EPS = 1e-9


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


def shipped_weights_path(scenario: str = ""):
    """The shipped weights: trained on Philly-derived workloads, or on `scenario`'s setting
    (`workbench train dl2 --scenario NAME --install`)."""
    return resources.files(__package__) / "data" / (f"{scenario}.npz" if scenario else WEIGHTS_FILE)


def load_shipped(perf=None) -> tuple[PolicyNet, dict]:
    """The shipped weights; an untrained network (said in its meta) if they are missing."""
    try:
        with shipped_weights_path().open("rb") as f:
            return PolicyNet.load(io.BytesIO(f.read()))
    except FileNotFoundError:
        if perf is None:
            from ...perf import default_perf

            perf = default_perf()
        return PolicyNet(perf.ps_models), {"untrained": True}
