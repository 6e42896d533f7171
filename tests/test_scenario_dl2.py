"""DL2's setting (`dl2-paper`): the workload as DL2's simulator makes it, the engine carrying out
its slot plan in the full simulator as its training environment assumes, and a seeded run
reproducing the claim's direction against DL2's elastic DRF."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from workbench.model import JobKind, JobState
from workbench.perf import default_perf
from workbench.policies.dl2 import SlotEnv, drf_teacher, load_shipped
from workbench.scenarios import dl2_paper as dp
from workbench.scenarios import get, run_scenario


@pytest.fixture(scope="module")
def runs():
    scenario = get("dl2-paper")
    return {label: run_scenario(scenario, label, seed=0) for label in ("dl2", "drf")}


def test_workload_follows_dl2s_trace_generator():
    jobs = dp.jobs(0)
    assert len(jobs) == dp.N_JOBS == 60
    per_slot = Counter(j.arrival / dp.SLOT_S for j in jobs)
    assert all(t == int(t) for t in per_slot) and max(per_slot.values()) <= dp.MAX_ARRIVALS
    for j in jobs:
        fraction, batches, gpu = dp.MODELS[j.application]
        assert j.kind is JobKind.PS and (j.min_workers, j.max_workers) == (1, dp.MAX_WORKERS)
        assert j.total_work == pytest.approx(fraction * dp.MAX_EPOCHS * batches)
        assert (j.worker_demand.cpu, j.worker_demand.gpu) == (2, 1 if gpu else 0)
        assert (j.ps_demand.cpu, j.ps_demand.gpu) == (2, 0)
    nodes = dp.nodes()
    assert len(nodes) == 96 and {(n.cpus, n.gpus) for n in nodes} == {(8.0, 2)}
    assert [j.application for j in dp.jobs(0)] == [j.application for j in jobs]  # seeded
    assert [j.application for j in dp.jobs(1)] != [j.application for j in jobs]


def test_the_simulator_carries_out_the_slot_plan_its_training_environment_assumes(runs):
    """On a full cluster the engine once kept unchanged jobs where they were, and the jobs the
    plan put around them found no room for slot after slot (average JCT 41 h in the simulator
    against 17 h in the slot environment DL2 is trained in). Same decisions, same result."""
    perf = default_perf()
    net, _ = load_shipped(perf)
    capacity = np.array([[n.cpus, n.mem, n.gpus] for n in dp.nodes()], dtype=float)
    env = SlotEnv(dp.jobs(0), capacity, perf, net.types, dp.SLOT_S).run(drf_teacher)
    sim = runs["drf"].metrics
    assert sim["completed"] == env["completed"] == dp.N_JOBS
    assert sim["avg_jct_h"] == pytest.approx(env["avg_jct"] / 3600, rel=0.03)


def test_short_run_reproduces_the_direction_vs_drf(runs):
    for run in runs.values():
        assert all(j.state is JobState.COMPLETED for j in run.backend.jobs.values())
    claim = next(c for c in get("dl2-paper").claims if c.baseline == "drf")
    assert claim.gain(runs["dl2"], runs["drf"]) > 0


def test_training_on_the_scenario_uses_its_cluster_workloads_and_slot():
    from workbench.errors import ConfigError
    from workbench.policies.dl2.training import SCENARIO_BUDGET
    from workbench.scenarios import dl2_training

    cfg, setting = dl2_training("dl2-paper", seed=3)
    assert cfg.slot == dp.SLOT_S and cfg.seed == 3 and cfg.scenario == "dl2-paper"
    assert {k: getattr(cfg, k) for k in SCENARIO_BUDGET} == SCENARIO_BUDGET
    assert [(n.cpus, n.gpus) for n in setting.nodes] == [(n.cpus, n.gpus) for n in dp.nodes()]
    assert [j.name for j in setting.workload(1_001)] == [j.name for j in dp.jobs(1_001)]
    with pytest.raises(ConfigError, match="not a DL2 setting"):
        dl2_training("specon-paper")


def test_the_scenario_runs_the_weights_trained_on_it():
    from workbench.policies.dl2 import PolicyNet, shipped_weights_path
    from workbench.policies.dl2.training import SCENARIO_BUDGET

    engine, options = get("dl2-paper").engines["dl2"]
    assert engine == "dl2" and options["weights"] == str(shipped_weights_path("dl2-paper"))
    _, meta = PolicyNet.load(options["weights"])
    assert meta["scenario"] == "dl2-paper" and meta["seed"] == 0
    assert {k: meta[k] for k in SCENARIO_BUDGET} == SCENARIO_BUDGET
