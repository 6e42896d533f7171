"""DQoES's setting (`dqoes-paper`): its QoE-target CPU containers, the satisfied-models claim
on a short seeded run, and the simulator's invariants with contention and resizing on."""

from __future__ import annotations

import pytest
from test_scenario_specon import run_checked

from workbench.experiment import run_policy
from workbench.policies import make_policy
from workbench.scenarios import dqoes_paper as dp
from workbench.scenarios import get

SHORT = 40  # the first jobs of seed 0's workload: a run of a few seconds


@pytest.fixture(scope="module")
def runs():
    scenario = get("dqoes-paper")
    jobs = dp.jobs(0)[:SHORT]
    out = {}
    for label, (engine, options) in scenario.engines.items():
        out[label] = run_policy(dp.nodes(), jobs, engine, policy_options=dict(options),
                                **scenario.sim_options)
        out[label].policy = label
    return out


def test_jobs_are_seeded_qoe_targets_in_cpu_containers_without_limits():
    jobs = dp.jobs(0)
    assert len(jobs) > 50
    assert all(j.worker_demand.gpu == 0 and j.worker_demand.cpu == 4 for j in jobs)
    assert all(j.cpu_burst == dp.BURST > 1 for j in jobs)
    assert all(j.target_metric is not None and j.deadline > j.arrival for j in jobs)
    assert [j.name for j in dp.jobs(0)] == [j.name for j in jobs]
    assert [j.name for j in dp.jobs(1)] != [j.name for j in jobs]


def test_satisfied_counts_jobs_done_by_their_deadline(runs):
    for run in runs.values():
        hits = run.metrics["deadline_hit_rate"] * SHORT
        assert dp.satisfied(run) == pytest.approx(hits)
        assert run.backend.contention


def test_short_run_reproduces_the_claims_direction(runs):
    scenario = get("dqoes-paper")
    for claim in scenario.claims:
        gain = claim.gain(runs[scenario.claim_engine(claim)], runs[claim.baseline])
        assert gain > 0, (claim.label, gain)
    assert dp.satisfied(runs["dqoes"]) > 2 * dp.satisfied(runs["kube-default"])


@pytest.mark.parametrize("label", ["dqoes", "kube-default"])
def test_invariants_hold_with_contention_and_resizing(label):
    engine, options = get("dqoes-paper").engines[label]
    jobs = dp.jobs(1)[:25]
    run_checked(dp.nodes(), jobs, make_policy(engine, **options))
