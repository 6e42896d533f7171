"""Training DL2 (`train_dl2`, `workbench train dl2`): supervised warm-up on DRF's decisions
on Philly-derived PS workloads (`traces.ps_jobs`), or on a paper scenario's cluster and
seeded workloads (`scenario`, e.g. "dl2-paper"), then policy gradient with a time-based
baseline and an entropy bonus in `SlotEnv`. Deterministic for a given `TrainConfig`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ...model import JobSpec, Node
from .allocator import Chooser, Trajectory, drf_teacher, net_chooser
from .env import SlotEnv
from .net import PolicyNet


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
    # The paper scenario trained on (`workbench train dl2 --scenario`), recorded with the
    # weights; its cluster, workloads and slot come as a `Setting` (policies do not import
    # scenarios). Empty: the Philly-derived workloads of the fields above.
    scenario: str = ""

    def cluster(self):
        from ...clusters import make_cluster

        return make_cluster(self.nodes, self.gpus_per_node)


@dataclass(frozen=True)
class Setting:
    """Where DL2 trains and is validated: a cluster and a seeded workload per seed."""

    nodes: Sequence[Node]
    workload: Callable[[int], Sequence[JobSpec]]

    @classmethod
    def philly(cls, cfg: TrainConfig, perf) -> Setting:
        from ...traces.ps_jobs import philly_ps_workload

        def workload(seed: int):
            return philly_ps_workload(cfg.jobs, seed=seed, load=cfg.load,
                                      cluster_gpus=cfg.nodes * cfg.gpus_per_node, perf=perf)

        return cls(cfg.cluster(), workload)

    def capacity(self) -> np.ndarray:
        return np.array([[n.cpus, n.mem, n.gpus] for n in self.nodes], dtype=float)


# A scenario's cluster is larger than the Philly one (dl2-paper: 96 nodes, 60 jobs, ~300 slots
# an episode), so its training takes fewer traces and steps to stay within 30 min on 2 cores.
SCENARIO_BUDGET = {"sl_traces": 8, "sl_epochs": 10, "rl_iters": 20, "val_traces": 2}


TRAIN_SEED_BASE = 1_000  # training workloads use seeds from here; benches hold out others
VAL_SEED_BASE = 5_000


def teacher_dataset(cfg: TrainConfig, perf, types, seeds: Sequence[int],
                    setting: Setting | None = None) -> Trajectory:
    """States and DRF's actions on the workloads of `seeds`."""
    setting = setting or Setting.philly(cfg, perf)
    data = Trajectory()
    for s in seeds:
        env = SlotEnv(setting.workload(s), setting.capacity(), perf, types, cfg.slot)
        out = env.run(drf_teacher, record=True)
        for traj in out["trajectories"]:
            data.extend(traj)
    return data


def evaluate(net: PolicyNet, cfg: TrainConfig, perf, seeds: Sequence[int],
             chooser: Chooser | None = None, setting: Setting | None = None) -> float:
    """Mean of the average JCT (hours) over `seeds`, greedy actions, in the slot environment."""
    setting = setting or Setting.philly(cfg, perf)
    out = []
    for s in seeds:
        env = SlotEnv(setting.workload(s), setting.capacity(), perf, net.types, cfg.slot)
        res = env.run(chooser or net_chooser(net, None, greedy=True))
        out.append(res["avg_jct"] / 3600.0)
    return float(np.mean(out))


def train_dl2(cfg: TrainConfig | None = None, perf=None,
              progress: Callable[[str, int, int, dict], None] | None = None,
              setting: Setting | None = None) -> tuple[PolicyNet, list[dict]]:
    """Supervised warm-up on DRF, then REINFORCE, on `setting` (default: the Philly-derived
    workloads `cfg` describes). Returns the network and the learning curve (one row per SL
    epoch and per RL iteration). Deterministic for a given config and setting."""
    cfg = cfg or TrainConfig()
    if perf is None:
        from ...perf import default_perf

        perf = default_perf()
    setting = setting or Setting.philly(cfg, perf)
    types = tuple(perf.ps_models)
    rng = np.random.default_rng(cfg.seed)
    net = PolicyNet(types, hidden=cfg.hidden, seed=cfg.seed)
    val = [VAL_SEED_BASE + i for i in range(cfg.val_traces)]
    teacher_jct = evaluate(net, cfg, perf, val, chooser=drf_teacher, setting=setting)
    curve: list[dict] = []
    steps = (("sl", cfg.sl_epochs, _warm_up(net, cfg, perf, rng, val, teacher_jct, setting)),
             ("rl", cfg.rl_iters, _reinforce(net, cfg, perf, rng, val, teacher_jct, setting)))
    for phase, total, rows in steps:
        for step, row in enumerate(rows, start=1):
            curve.append(row)
            if progress:
                progress(phase, step, total, row)
    return net, curve


def _warm_up(net: PolicyNet, cfg: TrainConfig, perf, rng: np.random.Generator,
             val: list[int], teacher_jct: float, setting: Setting) -> Iterator[dict]:
    """Supervised epochs on DRF's decisions; yields one curve row per epoch."""
    sl_seeds = [TRAIN_SEED_BASE + i for i in range(cfg.sl_traces)]
    X, G, jm, am, acts = teacher_dataset(cfg, perf, net.types, sl_seeds, setting).arrays()
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
            row["val_jct_h"] = evaluate(net, cfg, perf, val, setting=setting)
            row["accuracy"] = _accuracy(net, X, G, jm, am, acts)
        yield row


def _accuracy(net: PolicyNet, X, G, jm, am, acts, chunk: int = 4_096) -> float:
    """Share of the teacher's actions the network ranks first, a chunk at a time (the whole
    set at once held gigabytes of activations on a 96-node scenario)."""
    hits = sum(int((net.probs(X[i:i + chunk], G[i:i + chunk], jm[i:i + chunk],
                              am[i:i + chunk])[0].argmax(axis=1) == acts[i:i + chunk]).sum())
               for i in range(0, len(acts), chunk))
    return hits / max(len(acts), 1)


def _reinforce(net: PolicyNet, cfg: TrainConfig, perf, rng: np.random.Generator,
               val: list[int], teacher_jct: float, setting: Setting) -> Iterator[dict]:
    """Policy-gradient iterations, one workload each; yields one curve row per iteration."""
    net.reset_optimizer()  # SL's Adam moments would damp the first RL steps for long
    rl_seeds = [TRAIN_SEED_BASE + 100 + i for i in range(cfg.rl_iters)]
    for it, s in enumerate(rl_seeds):
        env = SlotEnv(setting.workload(s), setting.capacity(), perf, net.types, cfg.slot)
        # Rollouts: the greedy policy (the states it will meet when deployed) and sampled ones
        # (exploration, and the later-slot returns for REINFORCE).
        runs = [env.run(net_chooser(net, rng, greedy=k < cfg.rl_greedy), record=True)
                for k in range(cfg.rl_rollouts)]
        batch, advantages = _rollout_batch(runs, cfg.gamma)
        ent = _actor_passes(net, cfg, rng, batch, advantages)
        row = {"phase": "rl", "step": it + 1, "train_jct_h": float(np.mean(
            [r["avg_jct"] for r in runs])) / 3600.0, "reward": float(np.mean(
                [r["rewards"].sum() for r in runs])), "entropy": ent,
            "teacher_jct_h": teacher_jct}
        if (it + 1) % 10 == 0 or it + 1 == cfg.rl_iters:
            row["val_jct_h"] = evaluate(net, cfg, perf, val, setting=setting)
        yield row


def _rollout_batch(runs: list[dict], gamma: float) -> tuple[Trajectory, np.ndarray]:
    """All rollouts' steps as one batch, and each step's normalised advantage: the later
    slots' discounted return against the mean over the rollouts at that slot."""
    returns = [_discounted(r["rewards"], gamma) for r in runs]
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
            adv += [gamma * (g[k + 1] - baseline[k + 1])] * len(traj)
    A = np.array(adv)
    return batch, A / (A.std() + 1e-8)


def _actor_passes(net: PolicyNet, cfg: TrainConfig, rng: np.random.Generator,
                  batch: Trajectory, A: np.ndarray) -> float:
    """`cfg.rl_passes` shuffled passes of actor updates over the batch; the mean entropy."""
    Xb, Gb, jmb, amb, ab = batch.arrays()
    Qb = np.array(batch.Q)
    ents = []
    for _ in range(cfg.rl_passes):
        order = rng.permutation(len(ab))
        for start in range(0, len(ab), 512):
            i = order[start:start + 512]
            ents.append(net.actor_update(Xb[i], Gb[i], jmb[i], amb[i], Qb[i], ab[i], A[i],
                                         cfg.rl_lr, cfg.entropy, cfg.long_term))
    return float(np.mean(ents)) if ents else 0.0


def _discounted(rewards: np.ndarray, gamma: float) -> np.ndarray:
    out = np.zeros(len(rewards))
    acc = 0.0
    for k in range(len(rewards) - 1, -1, -1):
        acc = rewards[k] + gamma * acc
        out[k] = acc
    return out
