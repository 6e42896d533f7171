"""The default workload's deadlines (#15 item 4): Pollux workload 1 gets a seeded mix of tight
and loose deadlines from each job's ideal run time, so the default run has deadlines met and
missed and a deadline-aware engine differs from DRF."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import ConfigError
from workbench.experiment import run_policy
from workbench.perf import default_perf
from workbench.session import load_jobs, load_nodes
from workbench.traces import default_workload, load_trace
from workbench.traces.deadline_rule import ALLOWANCE, DeadlineRule
from workbench.traces.ps_jobs import ps_workload


def _factors(jobs) -> np.ndarray:
    perf = default_perf()
    ideal = np.array([j.total_work / perf.ideal_rate(j, j.initial_workers, 4) for j in jobs])
    return np.array([j.deadline - j.arrival - ALLOWANCE for j in jobs]) / ideal


def test_every_default_job_has_a_tight_or_loose_deadline():
    jobs = load_trace("default")
    rule = DeadlineRule()
    f = _factors(jobs)
    tight = (f >= rule.tight[0] - 1e-6) & (f <= rule.tight[1] + 1e-6)
    loose = (f >= rule.loose[0] - 1e-6) & (f <= rule.loose[1] + 1e-6)
    assert (tight | loose).all()
    assert 0.35 < tight.mean() < 0.65  # about half of each
    assert any(rule.describe() == note for note in jobs.notes)


def test_deadlines_are_seeded_and_can_be_left_out():
    same = [j.deadline for j in default_workload(0)]
    assert same == [j.deadline for j in load_jobs("default", seed=0)]
    assert same != [j.deadline for j in default_workload(1)]
    assert all(j.deadline is None for j in load_trace("default:deadlines=none"))
    with pytest.raises(ConfigError, match="deadlines=none"):
        load_trace("default:deadlines=maybe")
    with pytest.raises(ConfigError, match="tight"):
        DeadlineRule(tight=(2.0, 1.0))


def test_parameter_server_jobs_from_pollux_keep_no_deadline():
    # ps_workload rescales the work of the default workload's jobs: their deadlines would not fit
    assert all(j.deadline is None for j in ps_workload(20, 0, 64, 1.0, trace="pollux"))


@pytest.fixture(scope="module")
def default_runs():
    jobs, nodes = load_jobs("default"), load_nodes("default")
    return {p: run_policy(nodes, jobs, p).metrics for p in ("fifo", "drf", "qos")}


def test_the_default_run_meets_some_deadlines_and_misses_others(default_runs):
    for policy, m in default_runs.items():
        assert m["deadline_jobs"] == 160, policy
        assert 0.1 < m["deadline_hit_rate"] < 1.0, policy
    # a deadline-aware engine is no longer DRF under another name
    assert default_runs["qos"]["deadline_hit_rate"] > default_runs["drf"]["deadline_hit_rate"]
    assert default_runs["qos"]["avg_jct_h"] != default_runs["drf"]["avg_jct_h"]
