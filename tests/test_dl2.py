"""DL2: the network's forward/backward pass, action masking, warm-up, determinism, shipped weights."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.clusters import make_cluster
from workbench.experiment import run_policy
from workbench.perf import default_perf
from workbench.policies import make_policy
from workbench.policies.dl2 import (
    GLOBAL_FEATURES,
    JOB_FEATURES,
    STOP,
    WINDOW,
    Dl2Policy,
    JobView,
    PolicyNet,
    SlotAllocator,
    SlotEnv,
    TrainConfig,
    Trajectory,
    drf_teacher,
    load_shipped,
    masked_softmax,
    teacher_dataset,
    train_dl2,
)
from workbench.traces.ps_jobs import philly_ps_workload

TYPES = ("a", "b", "c")
WORKER = np.array([4.0, 16.0, 1.0])
PS = np.array([2.0, 8.0, 0.0])
TINY = {"jobs": 10, "sl_traces": 2, "sl_epochs": 2, "rl_iters": 2, "rl_rollouts": 2,
        "rl_passes": 1, "val_traces": 1}


def view(name: str, kind: int = 0, max_workers: int = 12, remaining: float = 1.0) -> JobView:
    return JobView(name=name, type_index=kind, age=0.0, remaining=remaining,
                   remaining_hours=1.0, worker_demand=WORKER, ps_demand=PS,
                   max_workers=max_workers, min_workers=1, app="x", total=100.0)


def random_batch(net: PolicyNet, rng, batch: int = 5):
    X = rng.normal(size=(batch, WINDOW, net.n_features))
    G = rng.random((batch, GLOBAL_FEATURES))
    jm = np.zeros((batch, WINDOW))
    jm[:, :7] = 1.0
    am = (rng.random((batch, 3 * WINDOW + 1)) < 0.5).astype(float)
    am[:, 3 * 7:3 * WINDOW] = 0.0
    am[:, STOP] = 1.0
    return X, G, jm, am


def test_forward_pass_shapes_and_masked_probabilities():
    net = PolicyNet(TYPES, hidden=8, seed=1)
    X, G, jm, am = random_batch(net, np.random.default_rng(0))
    assert net.n_features == len(TYPES) + JOB_FEATURES
    P, _ = net.probs(X, G, jm, am)
    assert P.shape == (5, 3 * WINDOW + 1)
    assert np.allclose(P.sum(axis=1), 1.0)
    assert (P[am == 0] == 0).all() and (P[am > 0] > 0).all()
    only_stop = np.zeros_like(am)
    only_stop[:, STOP] = 1.0
    assert np.allclose(masked_softmax(np.zeros_like(am), only_stop)[:, STOP], 1.0)


def test_backward_matches_finite_differences():
    net = PolicyNet(TYPES, hidden=6, seed=2)
    rng = np.random.default_rng(3)
    X, G, jm, _am = random_batch(net, rng, batch=3)
    weights = rng.normal(size=(3, 3 * WINDOW + 1))

    def loss() -> float:
        z, _ = net.logits(X, G, jm)
        return float((z * weights).sum())

    _, cache = net.logits(X, G, jm)
    grads = net.backward(cache, weights)
    for name in ("W1", "b1", "W2", "W3", "ws", "bs"):
        param = net.params[name]
        for idx in [tuple(rng.integers(0, s) for s in param.shape) for _ in range(4)]:
            old = param[idx]
            param[idx] = old + 1e-6
            up = loss()
            param[idx] = old - 1e-6
            down = loss()
            param[idx] = old
            assert grads[name][idx] == pytest.approx((up - down) / 2e-6, rel=1e-4, abs=1e-6)


def test_allocator_masks_full_jobs_and_never_overcommits():
    capacity = np.array([[48.0, 192.0, 4.0]])
    alloc = SlotAllocator(capacity, TYPES, 600.0)
    jobs = [view("capped", max_workers=1), view("open")]
    masks = []

    def choose(X, G, jm, am, window):
        masks.append(am.copy())
        for a in (0, 3):  # a worker for job 0, else for job 1
            if am[a]:
                return a
        return STOP

    free = alloc.allocate(jobs, capacity, choose)
    assert masks[0][0] == 1.0 and masks[1][0] == 0.0  # job 0 at its worker limit: masked
    assert all(not m[6:STOP].any() for m in masks)  # empty window positions: masked
    assert len(jobs[0].workers) == 1 and len(jobs[1].workers) == 3  # 4 GPUs, no more
    assert masks[-1][3] == 0.0  # no GPU left: no worker for anyone
    assert (free >= -1e-9).all()


def test_a_gang_gets_its_minimum_before_the_networks_steps_or_is_masked():
    capacity = np.array([[48.0, 192.0, 4.0], [48.0, 192.0, 4.0]])
    alloc = SlotAllocator(capacity, TYPES, 600.0)
    gang = view("gang", max_workers=7)
    gang.min_workers = 6
    too_big = view("too-big", max_workers=9)
    too_big.min_workers = 9  # 9 GPUs on 8: never placeable, so never offered
    elastic = view("elastic", max_workers=4)
    masks, held = [], []

    def choose(X, G, jm, am, window):
        masks.append(am.copy())
        held.append((len(window[0].workers), len(window[0].ps), len(window[2].workers)))
        return 0 if am[0] else STOP  # the gang's worker action while offered

    free = alloc.allocate([gang, too_big, elastic], capacity, choose)
    # DL2's ASSIGN_BUNDLE for gangs: its minimum and one PS before the first step; the
    # elastic job is left to the network; the impossible gang is never offered anything.
    assert held[0] == (6, 1, 0)
    assert masks[0][3] == 0.0 and masks[0][4] == 0.0 and masks[0][5] == 0.0
    assert held == [(6, 1, 0), (7, 1, 0)] and masks[-1][0] == 0.0  # then one at a time
    assert sorted(set(gang.workers)) == [0, 1] and too_big.workers == []
    assert (free >= -1e-9).all() and free[:, 2].sum() == 1.0


def test_rigid_ps_jobs_of_the_soak_workload_all_run_under_dl2():
    """The 1,000-job Kubernetes soak's workload (a fifth parameter-server jobs, some rigid
    with up to 8 workers) in the simulator: DL2 leaves none stalled (136 did before gangs got
    their minimum in one action)."""
    from workbench.bench.k8s_soak import SoakConfig, soak_jobs
    from workbench.session import load_nodes, simulate

    cfg = SoakConfig(jobs=1000, nodes=8)
    specs = [s.with_(arrival=i / cfg.rate * cfg.speed) for i, s in enumerate(soak_jobs(cfg))]
    rigid = [s for s in specs if s.min_workers > 1]
    assert len(rigid) > 100
    controller = simulate(load_nodes("default", "8x8"), specs, "dl2")
    controller.run()
    assert controller.stalled == []
    placed = {d.job for d in controller.recorder.decisions if getattr(d, "job", None)}
    assert {s.name for s in rigid} <= placed


def test_drf_teacher_gives_the_bundle_to_the_smallest_dominant_share():
    capacity = np.array([[48.0, 192.0, 4.0]])
    alloc = SlotAllocator(capacity, TYPES, 600.0)
    jobs = [view("x"), view("y")]
    record = Trajectory()
    alloc.allocate(jobs, capacity, drf_teacher, record)
    assert record.actions[0] == 2 and record.actions[1] == 5  # bundle x, then bundle y
    assert len(jobs[0].workers) == len(jobs[1].workers) == 2  # 4 GPUs shared fairly
    assert record.actions[-1] == STOP or len(record.actions) == 4


def test_supervised_warm_up_reduces_imitation_loss():
    perf = default_perf()
    cfg = TrainConfig(**TINY)
    data = teacher_dataset(cfg, perf, perf.ps_models, [1000, 1001])
    X, G, jm, am, acts = data.arrays()
    net = PolicyNet(perf.ps_models, seed=0)
    before = net.imitation_loss(X, G, jm, am, acts)
    for _ in range(60):
        net.imitation_loss(X, G, jm, am, acts, train_lr=1e-2)
    after = net.imitation_loss(X, G, jm, am, acts)
    assert after < 0.5 * before
    accuracy = (net.probs(X, G, jm, am)[0].argmax(axis=1) == acts).mean()
    assert accuracy > 0.6


def test_same_seed_same_weights():
    a, curve_a = train_dl2(TrainConfig(seed=7, **TINY))
    b, curve_b = train_dl2(TrainConfig(seed=7, **TINY))
    c, _ = train_dl2(TrainConfig(seed=8, **TINY))
    for k in a.params:
        assert np.array_equal(a.params[k], b.params[k])
    assert curve_a == curve_b
    assert any(not np.array_equal(a.params[k], c.params[k]) for k in a.params)
    assert [r["phase"] for r in curve_a] == ["sl", "sl", "rl", "rl"]


def test_save_and_load_round_trip(tmp_path):
    net = PolicyNet(TYPES, hidden=8, seed=4)
    path = tmp_path / "w.npz"
    net.save(str(path), {"seed": 4})
    loaded, meta = PolicyNet.load(str(path))
    assert meta["seed"] == 4 and loaded.types == TYPES
    for k in net.params:
        assert np.allclose(loaded.params[k], net.params[k], atol=1e-6)


def test_shipped_weights_load_and_drive_the_engine():
    net, meta = load_shipped()
    assert not meta.get("untrained"), "package data lacks dl2.npz"
    assert meta["seed"] == 0 and tuple(net.types) == tuple(default_perf().ps_models)
    policy = make_policy("dl2")
    assert isinstance(policy, Dl2Policy)
    nodes = make_cluster(2, 4)
    jobs = philly_ps_workload(12, seed=77, load=1.0, cluster_gpus=8)
    result = run_policy(nodes, jobs, policy)
    assert result.metrics["completed"] == 12 and result.metrics["stalled"] == 0
    view = policy.engine_view()
    assert view["engine"] == "dl2" and view["actions"] == ["worker", "ps", "both", "stop"]
    run_again = run_policy(nodes, jobs, "dl2")
    assert run_again.metrics["avg_jct_h"] == result.metrics["avg_jct_h"]  # deterministic


def test_engine_view_reports_action_probabilities():
    policy = Dl2Policy()
    nodes = make_cluster(2, 4)
    jobs = philly_ps_workload(3, seed=5, load=1.0, cluster_gpus=8)
    from workbench.sim import SimBackend

    backend = SimBackend(nodes, jobs)
    backend.advance(jobs[-1].arrival)
    policy.schedule(backend.observe())
    first = policy.engine_view()["probabilities"]["first_step"]
    total = first["stop"] + sum(sum(p.values()) for p in first["jobs"].values())
    assert total == pytest.approx(1.0)
    assert set(first["jobs"]) == {j.name for j in jobs}


def test_online_learning_updates_the_weights():
    policy = Dl2Policy(learn=True, seed=3)
    before = {k: v.copy() for k, v in policy.net.params.items()}
    nodes = make_cluster(2, 4)
    jobs = philly_ps_workload(8, seed=9, load=1.0, cluster_gpus=8)
    run_policy(nodes, jobs, policy)
    assert policy.updates > 0
    assert any(not np.allclose(before[k], policy.net.params[k]) for k in before)


def test_slot_env_completes_every_job_under_the_teacher():
    perf = default_perf()
    jobs = philly_ps_workload(10, seed=2, load=1.0, cluster_gpus=8)
    capacity = np.array([[n.cpus, n.mem, n.gpus] for n in make_cluster(2, 4)], dtype=float)
    out = SlotEnv(jobs, capacity, perf, perf.ps_models).run(drf_teacher)
    assert out["completed"] == 10
    assert out["rewards"].sum() == pytest.approx(10.0)  # normalised progress sums to one per job
