"""`workbench openb --protocol artifact`: the FGD artifact's workload tuning, its integer
plugin scores and its bucketed allocation reading, beside our default protocol.

Hand-made workloads and clusters; the one test on the real openb files skips without them.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from workbench.cli import main
from workbench.errors import ConfigError
from workbench.model import Node
from workbench.placement import replay
from workbench.placement.fragmentation import MILLI, task_classes
from workbench.placement.plugins import (
    ARTIFACT_PLUGINS,
    PLACEMENT_PLUGINS,
    artifact_best_fit,
    artifact_fgd,
    artifact_gpu_clustering,
    artifact_gpu_packing,
    choose_fgd,
    choose_gpu_packing,
    fgd_score,
    get_plugin,
)
from workbench.placement.state import PlacementState, Task

# ---- the workload tuning ------------------------------------------------------------------


def test_artifact_tuning_keeps_every_pod_once_then_appends_draws():
    requested = np.array([1.0, 0.5, 0.0, 2.0])
    per_gpu = np.array([1.0, 0.5, 0.0, 1.0])
    for seed in range(20):
        order = replay.draw_pods_artifact(requested, per_gpu, 10.0, np.random.default_rng(seed),
                                          1.3)
        assert sorted(order[:4].tolist()) == [0, 1, 2, 3]  # the list itself, shuffled
        total = requested[order].sum()
        last = order[-1]
        # the last pod passed the artifact's test (running total + its per-GPU share) ...
        assert total - requested[last] + per_gpu[last] <= 13 + 1e-9
        # ... and the draw after it did not, so the total is within one GPU of the target
        assert total > 13 - 1 - 1e-9
    again = replay.draw_pods_artifact(requested, per_gpu, 10.0, np.random.default_rng(3), 1.3)
    assert np.array_equal(again, replay.draw_pods_artifact(requested, per_gpu, 10.0,
                                                           np.random.default_rng(3), 1.3))


def test_artifact_tuning_test_uses_the_per_gpu_share():
    # target 4 GPUs, the list asks 2.5: a 2-GPU pod passes the test at 2.5 + 1 <= 4 (or at
    # 3.0 + 1 after a 0.5) and carries the total past the target (the artifact's rule, kept)
    requested, per_gpu = np.array([0.5, 2.0]), np.array([0.5, 1.0])
    totals = [requested[replay.draw_pods_artifact(requested, per_gpu, 4.0,
                                                  np.random.default_rng(s), 1.0)].sum()
              for s in range(40)]
    assert max(totals) > 4.0 and max(totals) <= 5.0 and min(totals) >= 3.5 - 1e-9


def test_artifact_tuning_removes_pods_from_a_list_that_asks_too_much():
    requested = np.ones(20)
    order = replay.draw_pods_artifact(requested, requested, 10.0, np.random.default_rng(1), 1.3)
    assert len(order) == 13 and len(set(order.tolist())) == 13  # 7 removed, none repeated


def test_default_draw_is_unchanged():
    requested = np.array([0.0, 0.5, 1.0, 2.0])
    order = replay.draw_pods(requested, 100.0, np.random.default_rng(3), 1.3)
    assert requested[order].sum() >= 130


def test_bucket_mean_reads_the_curve_as_the_artifact_does():
    requested = np.array([0.98, 0.996, 1.004, 1.006, 1.02])
    allocated = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    assert replay.bucket_mean(requested, allocated, 1.0) == pytest.approx(0.25)  # 100, 100
    assert replay.bucket_mean(requested, allocated, 0.99) == pytest.approx(0.2)  # 98..100
    assert replay.bucket_mean(requested, allocated, 0.5) is None


def test_protocol_names_are_checked():
    assert replay.check_protocol("artifact") == "artifact"
    with pytest.raises(ConfigError, match="--protocol: unknown 'paper'; known: default, artifact"):
        replay.check_protocol("paper")
    assert set(ARTIFACT_PLUGINS) == set(PLACEMENT_PLUGINS)
    assert get_plugin("fgd", "artifact") is artifact_fgd and get_plugin("fgd") is choose_fgd


# ---- the artifact's scores, by hand ----------------------------------------------------------


def one_class_state(gpu_free: list[list[int]], cpu: int = 64000) -> PlacementState:
    """Nodes of G GPUs with the given free milli per GPU; target workload: one sharing shape
    (500 milli, no CPU)."""
    n, width = len(gpu_free), len(gpu_free[0])
    classes = task_classes([0], [1], [500], [None], coverage=1.0)
    state = PlacementState([f"n{i}" for i in range(n)], [cpu] * n, [1 << 20] * n, [width] * n,
                           ["G"] * n, classes)
    for node, row in enumerate(gpu_free):
        state.set_free(node, cpu, 1 << 20, np.array(row))
    return state


def test_fgd_score_by_hand():
    # 100 x sigmoid(-delta / 1000), truncated: 50 for no change, 47 for +100 milli of fragment
    # (sigmoid(-0.1) = 0.4750), 52 for -100, 49 for +30 (0.4925)
    assert fgd_score(np.array([0.0, 100.0, -100.0, 30.0])).tolist() == [50, 47, 52, 49]


def test_artifact_fgd_ties_within_a_score_point():
    # one node, GPUs with 530 and 520 free; a 500-milli pod leaves 30 or 20 milli of fragment
    # against the 500-milli target shape: deltas +30 and +20, both score 49 (49.25, 49.50).
    # Exact FGD takes GPU 1 (less fragment); the artifact's first GPU with the top score, GPU 0.
    state = one_class_state([[530, 520]])
    task = Task(0, 0, 1, 500)
    rng = np.random.default_rng(0)
    assert choose_fgd(state, task, rng) == (0, (1,))
    assert artifact_fgd(state, task, rng) == (0, (0,))
    # a GPU that keeps the node usable scores higher: 1000 free -> 500 left, no fragment (50)
    state = one_class_state([[530, 1000]])
    assert artifact_fgd(state, task, rng) == (0, (1,))


def test_artifact_fgd_gives_a_tie_to_the_top_ranked_node():
    state = one_class_state([[530, 0], [520, 0], [1000, 0]])
    task = Task(0, 0, 1, 500)
    # node 2: 1000 -> 500, no fragment: score 50; nodes 0 and 1: 49
    picks = {artifact_fgd(state, task, np.random.default_rng(s))[0] for s in range(10)}
    assert picks == {2}
    state = one_class_state([[530, 0], [520, 0]])
    # 49 and 49: a tie. The artifact's scheduler keeps the node whose name sorts first, and its
    # names start with a rank drawn once per run: the same node every time, never a draw.
    picks = {artifact_fgd(state, task, np.random.default_rng(s))[0] for s in range(30)}
    assert picks == {0}  # no rank set: node order
    state.tie_rank = np.array([1, 0])
    picks = {artifact_fgd(state, task, np.random.default_rng(s))[0] for s in range(30)}
    assert picks == {1}


def test_artifact_best_fit_by_hand():
    # leftover (CPU 56 of 128 cores, 3 of 8 GPUs): 0.5 x 0.4375 + 0.5 x 0.375 = 0.40625 ->
    # score trunc(59.375) = 59; the other node leaves 0.5 more cores: 0.408203 -> 59 as well,
    state = one_class_state([[1000, 1000, 1000, 1000]] * 2)
    state.set_free(1, 64500, 1 << 20, np.full(4, MILLI))
    task = Task(8000, 0, 1, MILLI)
    # so the tie goes to the node ranked first, whichever it is ...
    state.tie_rank = np.array([1, 0])
    picks = {artifact_best_fit(state, task, np.random.default_rng(s))[0] for s in range(30)}
    assert picks == {1}
    # ... where best-fit proper always takes the tighter one
    assert {get_plugin("best-fit")(state, task, np.random.default_rng(s))[0]
            for s in range(30)} == {0}


def test_artifact_packing_buckets_free_milli_by_100():
    # partly used GPUs with 450 and 420 free: both score 100 - 4 = 96 for a 300-milli pod
    state = one_class_state([[450, 0], [420, 0], [1000, 1000]])
    task = Task(0, 0, 1, 300)
    picks = {artifact_gpu_packing(state, task, np.random.default_rng(s))[0] for s in range(30)}
    assert picks == {0}  # the tie to the first-ranked node (node order: no rank set)
    state.tie_rank = np.array([2, 1, 0])
    assert artifact_gpu_packing(state, task, np.random.default_rng(0))[0] == 1
    assert {choose_gpu_packing(state, task, np.random.default_rng(s))[0]
            for s in range(30)} == {1}


def test_artifact_packing_and_clustering_put_a_cpu_only_pod_on_the_top_ranked_node():
    # A CPU-only pod scores 0 on every node under both (the artifact's Score returns
    # MinNodeScore when the pod asks no GPU), so the scheduler's tie rule decides: the
    # feasible node ranked first. Ranks 3, 0, 1, 2: node 1 first, but it has 4 cores free and
    # the pod asks 6; next is node 2. Our own packing and clustering draw a feasible node.
    state = one_class_state([[1000, 1000]] * 4)
    state.set_free(1, 4000, 1 << 20, np.full(2, MILLI))
    state.tie_rank = np.array([3, 0, 1, 2])
    task = Task(6000, 1024, 0, 0)
    for plugin in (artifact_gpu_packing, artifact_gpu_clustering):
        picks = {plugin(state, task, np.random.default_rng(s)) for s in range(20)}
        assert picks == {(2, ())}
    ours = {choose_gpu_packing(state, task, np.random.default_rng(s))[0] for s in range(40)}
    assert ours == {0, 2, 3}


def test_artifact_replay_fixes_one_node_order_per_seed(monkeypatch):
    nodes = [Node(f"n{i}", 64.0, 512.0, 8, "G2") for i in range(6)]
    workload = replay.prepare_workload(synthetic_pods(60), "synthetic", coverage=0.95)
    seen = []
    real = PlacementState.allocate

    def spy(state, node, gpus, task):
        seen.append(None if state.tie_rank is None else tuple(state.tie_rank.tolist()))
        real(state, node, gpus, task)

    monkeypatch.setattr(PlacementState, "allocate", spy)
    replay.replay(nodes, workload, "gpu-packing", 3, protocol="artifact")
    # one random order of the nodes for the whole run, from its own stream of the seed
    assert set(seen) == {tuple(np.random.default_rng([3, 2]).permutation(6).tolist())}
    seen.clear()
    replay.replay(nodes, workload, "gpu-packing", 3)
    assert set(seen) == {None}  # our protocol draws ties at random: no order


# ---- both protocols end to end --------------------------------------------------------------


def synthetic_pods(n: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    kind = rng.choice(5, n, p=[0.1, 0.45, 0.3, 0.1, 0.05])
    num = np.choose(kind, [0, 1, 1, 2, 8])
    milli = np.where(kind == 1, rng.choice([250, 500, 700], n), np.where(kind == 0, 0, MILLI))
    return pd.DataFrame({"name": [f"p{i}" for i in range(n)],
                         "cpu_milli": rng.choice([2000, 4000, 8000], n),
                         "memory_mib": np.full(n, 4096), "num_gpu": num, "gpu_milli": milli,
                         "gpu_spec": pd.Categorical([""] * n)})


def test_both_protocols_replay_every_plugin():
    nodes = [Node(f"n{i}", 64.0, 512.0, 8 if i % 3 == 0 else 4, "G2") for i in range(12)]
    workload = replay.prepare_workload(synthetic_pods(), "synthetic", coverage=0.95)
    for protocol in replay.PROTOCOLS:
        for plugin in PLACEMENT_PLUGINS:
            r = replay.replay(nodes, workload, plugin, 0, protocol=protocol)
            assert r.protocol == protocol
            assert 0.5 < r.allocated_at(1.0) <= r.allocated_at(1.3) + 0.02 <= 1.02
            assert np.all(np.diff(r.allocated) >= 0)
    art = replay.replay(nodes, workload, "fgd", 0, protocol="artifact")
    # the list asks more than 130% of these 48 GPUs: the artifact removes pods until it fits
    assert workload.requested.sum() > 1.3 * 48
    assert len(art.placed) < len(workload) and art.requested[-1] <= 1.3 + 1e-9


def test_cli_both_protocols(tmp_path, capsys):
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},64000,262144,{4 if i % 2 else 8},G2\n" for i in range(10)))
    pods = tmp_path / "pods.csv"
    synthetic_pods(100).to_csv(pods, index=False)
    base = ["openb", "--pods", str(pods), "--nodes", str(nodes), "--plugins",
            "best-fit,fgd,gpu-packing", "--json", "--quiet"]
    for protocol, coverage in (("default", 1.0), ("artifact", 0.95)):
        assert main(base + ["--protocol", protocol]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["protocol"] == protocol and result["coverage"] == coverage
        assert len(result["runs"]) == 3
    assert main(base + ["--protocol", "paper"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--protocol: unknown 'paper'; known: default, artifact" in err[0]


def test_real_openb_subset_both_protocols():
    from workbench.traces.openb import NODE_FILE, find_data_dir, load_openb_nodes, load_openb_pods

    data = find_data_dir()
    if data is None or not (data / "openb_pod_list_default.csv").exists():
        pytest.skip("openb data not present")
    all_nodes = load_openb_nodes(data / NODE_FILE)
    nodes = [all_nodes[i] for i in np.linspace(0, len(all_nodes) - 1, 40).round().astype(int)]
    pods = load_openb_pods(data / "openb_pod_list_default.csv").iloc[:300]
    workload = replay.prepare_workload(pods, "default[:300]", coverage=0.95)
    for protocol in replay.PROTOCOLS:
        for plugin in ("best-fit", "fgd"):
            r = replay.replay(nodes, workload, plugin, 0, protocol=protocol)
            assert 0.5 < r.allocated_at(1.3) <= 1.0
