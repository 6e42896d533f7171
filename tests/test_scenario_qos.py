"""The QoS framework's setting (`qos-paper`): its workload and clusters, the shortfall measure
behind the "to 100 %" claims, and one seeded run per label reproducing each claim's direction."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from workbench.cli import main
from workbench.scenarios import get, run_scenario
from workbench.scenarios import qos_paper as qp


@pytest.fixture(scope="module")
def runs():
    scenario = get("qos-paper")
    labels = {scenario.claim_engine(c) for c in scenario.claims} | {
        c.baseline for c in scenario.claims}
    return {label: run_scenario(scenario, label, seed=0) for label in sorted(labels)}


def fake_run(hit_rate: float, busy: float = 1.0) -> SimpleNamespace:
    """A fake run: only the metrics the measures read."""
    return SimpleNamespace(metrics={"deadline_hit_rate": hit_rate, "cpu_alloc_util": 0.5,
                                    "cpu_effective_util": 0.5 * busy})


def test_workload_is_cpu_deadline_jobs():
    jobs = qp.jobs(0)
    assert len(jobs) > 50
    assert all(j.worker_demand.gpu == 0 and j.worker_demand.cpu == 4 for j in jobs)
    assert all(j.deadline is not None and j.deadline > j.arrival for j in jobs)
    assert [j.name for j in qp.jobs(0)] == [j.name for j in jobs]  # seeded
    assert [j.name for j in qp.jobs(1)] != [j.name for j in jobs]


def test_shortfall_removed_measure():
    assert qp.misses_removed(fake_run(1.0), fake_run(0.8)) == pytest.approx(100.0)
    assert qp.misses_removed(fake_run(0.9), fake_run(0.8)) == pytest.approx(50.0)
    assert qp.misses_removed(fake_run(0.8), fake_run(0.8)) == 0.0
    assert qp.misses_removed(fake_run(0.6), fake_run(0.8)) == pytest.approx(-100.0)
    assert qp.idle_cpu_removed(fake_run(0, busy=0.95), fake_run(0, busy=0.9)) == \
        pytest.approx(50.0)


def test_each_regime_runs_on_its_cluster(runs):
    for label, run in runs.items():
        nodes = run.backend.observe().nodes
        want = qp.SUFFICIENT_NODES if label.endswith(qp.SUFFICIENT) else qp.INSUFFICIENT_NODES
        assert len(nodes) == want and all(n.gpus == 0 for n in nodes)
        assert run.policy == label


def test_short_run_reproduces_every_claims_direction(runs):
    scenario = get("qos-paper")
    for claim in scenario.claims:
        gain = claim.gain(runs[scenario.claim_engine(claim)], runs[claim.baseline])
        assert gain > 0, (claim.label, gain)
    m = runs["qos-scheduling"].metrics
    assert m["completed"] + m["rejected"] == m["jobs"]


def test_simulate_scenario_from_the_cli(capsys):
    assert main(["simulate", "--scenario", "qos-paper", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"] == "qos-paper"
    assert [r["policy"] for r in out["results"]] == ["qos"]
