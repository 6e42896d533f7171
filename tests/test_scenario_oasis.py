"""OASiS's setting (`oasis-paper`): its elastic PS workload at the stated load, the utility
score, and a seeded run reproducing the claim's direction against FIFO and DRF."""

from __future__ import annotations

import math

import pytest

from workbench.model import JobKind, JobState
from workbench.perf import default_perf
from workbench.scenarios import get, run_scenario
from workbench.scenarios import oasis_paper as op


@pytest.fixture(scope="module")
def runs():
    scenario = get("oasis-paper")
    return {label: run_scenario(scenario, label, seed=0) for label in scenario.engines}


def test_workload_is_elastic_ps_jobs_at_the_load():
    jobs = op.jobs(0)
    assert len(jobs) == op.N_JOBS
    assert all(j.kind is JobKind.PS and j.min_workers == 1 and j.max_workers == op.MAX_WORKERS
               and 1 <= j.initial_workers <= op.SUBMITTED_MAX_WORKERS for j in jobs)
    assert all(op.WEIGHTS[0] <= j.priority <= op.WEIGHTS[1] for j in jobs)
    assert all(j.deadline > j.arrival for j in jobs)
    perf = default_perf()
    gpu_seconds = sum(j.initial_workers * j.total_work
                      / perf.ps_speed(j.application, j.initial_workers, j.num_ps) for j in jobs)
    span = max(j.arrival for j in jobs)
    gpus = sum(n.gpus for n in op.nodes())
    assert gpu_seconds / (gpus * span) == pytest.approx(op.LOAD, rel=1e-6)
    assert [j.arrival for j in op.jobs(0)] == [j.arrival for j in jobs]  # seeded


def test_utility_is_bounded_by_the_weights(runs):
    for run in runs.values():
        jobs = list(run.backend.jobs.values())
        assert all(j.state in (JobState.COMPLETED, JobState.REJECTED) for j in jobs)
        total = op.total_utility(run)
        assert 0 <= total <= sum(j.spec.priority for j in jobs)


def test_short_run_reproduces_the_direction_vs_fifo_and_drf(runs):
    scenario = get("oasis-paper")
    for claim in scenario.claims:
        assert math.isnan(claim.paper_gain_pct)  # the paper's ratio is not in our sources
        if claim.baseline in ("fifo", "drf"):
            gain = claim.gain(runs["oasis"], runs[claim.baseline])
            assert gain > 0, (claim.baseline, gain)
