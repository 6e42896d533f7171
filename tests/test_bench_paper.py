"""`workbench bench paper`: per claim the mean, spread, direction and ratio over seeds, computed
from real simulator runs; the pool gives the serial rows; bad input is one line.

The tiny scenario here is a fake (`FAKE_TINY_SCENARIO`, not a paper's setting): a few synthetic
jobs on two nodes, so the bench's bookkeeping can be checked against runs made directly."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from workbench.bench.paper import shippable, labels_needed, run_bench
from workbench.cli import main
from workbench.clusters import make_cluster
from workbench.errors import ConfigError
from workbench.scenarios import Claim, Scenario, run_scenario
from workbench.traces.synthetic import synthetic_workload


def fake_nodes() -> list:
    return make_cluster(2, 4)


def fake_jobs(seed: int) -> list:
    return synthetic_workload(10, arrival_rate=1 / 300, max_workers=4, seed=seed)


def completed_difference(ours, theirs) -> float:
    return float(ours.metrics["completed"] - theirs.metrics["completed"])


FAKE_TINY_SCENARIO = Scenario(
    name="fake-tiny", title="a fake setting for the bench's own test", paper="(none: a fake)",
    engine="tiresias",
    engines={"tiresias": ("tiresias", {}), "fifo": ("fifo", {}), "fifo-again": ("fifo", {}),
             "unused": ("drf", {})},
    nodes=fake_nodes, jobs=fake_jobs,
    claims=(
        Claim("avg JCT vs fifo", metric="avg_jct_h", baseline="fifo", paper_gain_pct=20.0,
              source="fake"),
        Claim("fifo vs itself", metric="avg_jct_h", baseline="fifo-again", paper_gain_pct=10.0,
              source="fake", engine="fifo"),
        Claim("completed jobs, no figure", metric="completed", baseline="fifo",
              paper_gain_pct=float("nan"), source="fake", lower_is_better=False,
              measure=completed_difference),
    ),
    seeds=2,
)


def _direct_gains(scenario: Scenario, seeds: int) -> list[list[float]]:
    """Every claim's gain per seed, from runs made here without the bench."""
    out = []
    for claim in scenario.claims:
        row = []
        for seed in range(seeds):
            ours = run_scenario(scenario, scenario.claim_engine(claim), seed)
            theirs = run_scenario(scenario, claim.baseline, seed)
            row.append(claim.gain(ours, theirs))
        out.append(row)
    return out


def test_runs_only_what_the_claims_name():
    assert labels_needed(FAKE_TINY_SCENARIO) == ["tiresias", "fifo", "fifo-again"]


def test_summary_matches_runs_made_directly():
    result = run_bench([FAKE_TINY_SCENARIO], seeds=2, workers=1)
    direct = _direct_gains(FAKE_TINY_SCENARIO, 2)
    assert len(result["claims"]) == 3 and len(result["runs"]) == 6
    for row, gains, claim in zip(result["claims"], direct, FAKE_TINY_SCENARIO.claims):
        mean = float(np.mean(gains))
        assert row["ours_pct"] == pytest.approx(mean)
        assert row["min_pct"] == pytest.approx(min(gains))
        assert row["max_pct"] == pytest.approx(max(gains))
        assert row["seeds"] == 2
        assert row["seeds_with_direction"] == sum(g > 0 for g in gains)
        assert row["direction"] == (mean > 0)
        assert row["ci95_low"] <= mean <= row["ci95_high"]
        if math.isfinite(claim.paper_gain_pct):
            assert row["ratio"] == pytest.approx(mean / claim.paper_gain_pct)
            assert row["half_reached"] == (row["ratio"] >= 0.5)
        else:  # no figure: direction only
            assert row["paper_pct"] is None and row["ratio"] is None
            assert row["half_reached"] is None


def test_the_same_engine_against_itself_gains_nothing():
    result = run_bench([FAKE_TINY_SCENARIO], seeds=2, workers=1)
    same = result["claims"][1]
    assert same["ours_pct"] == 0.0 and same["ratio"] == 0.0
    assert same["direction"] is False and same["half_reached"] is False
    assert same["ours_metric"] == same["baseline_metric"]


def test_pool_gives_the_serial_rows():
    def numbers(result):
        return result["claims"], result["runs"]

    assert shippable(FAKE_TINY_SCENARIO) is FAKE_TINY_SCENARIO  # it does go to the pool
    serial = run_bench([FAKE_TINY_SCENARIO], seeds=2, workers=1)
    pooled = run_bench([FAKE_TINY_SCENARIO], seeds=2, workers=2)
    assert numbers(pooled) == numbers(serial)


def test_a_claim_naming_a_missing_run_is_refused_before_any_work():
    broken = Scenario(name="fake-broken", title="", paper="", engine="fifo",
                      engines={"fifo": ("fifo", {})}, nodes=fake_nodes, jobs=fake_jobs,
                      claims=(Claim("x", "avg_jct_h", "nowhere", 1.0, "fake"),))
    with pytest.raises(ConfigError, match="nowhere"):
        run_bench([broken], seeds=1)


def test_cli_unknown_scenario_is_one_line(capsys):
    assert main(["bench", "paper", "--scenario", "no-such-paper"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("workbench: error: --scenario: unknown scenario") and "\n" not in err


def test_cli_real_scenario_json(capsys):
    assert main(["bench", "paper", "--scenario", "qos-paper", "--seeds", "1", "--workers", "1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["scenario"] for c in out["claims"]] == ["qos-paper"] * 3
    assert [c["paper_pct"] for c in out["claims"]] == [26.0, 100.0, 100.0]
    assert all(c["seeds"] == 1 and isinstance(c["direction"], bool) for c in out["claims"])
    assert {r["bench"] for r in out["realistic_benches"]} >= {"workbench bench qos",
                                                             "workbench bench oasis"}


def fake_jobs_failing_on_odd_seeds(seed: int) -> list:
    if seed % 2:
        raise RuntimeError(f"fake failure on seed {seed}")
    return fake_jobs(seed)


def test_a_failing_seed_is_reported_and_the_rest_measured():
    flaky = Scenario(name="fake-flaky", title="", paper="", engine="tiresias",
                     engines={"tiresias": ("tiresias", {}), "fifo": ("fifo", {})},
                     nodes=fake_nodes, jobs=fake_jobs_failing_on_odd_seeds,
                     claims=(Claim("avg JCT", "avg_jct_h", "fifo", 20.0, "fake"),))
    result = run_bench([flaky, FAKE_TINY_SCENARIO], seeds=2, workers=1)
    row = result["claims"][0]
    assert row["seeds"] == 1 and row["failed_seeds"] == 1
    assert row["error"] == "RuntimeError: fake failure on seed 1"
    # seed 0 is the fake tiny scenario's first claim on seed 0: same jobs, engines and metric
    assert row["ours_pct"] == pytest.approx(_direct_gains(FAKE_TINY_SCENARIO, 1)[0][0])
    assert [r.get("error") for r in result["runs"] if r["scenario"] == "fake-flaky"] == [
        None, "RuntimeError: fake failure on seed 1"]
    assert all(c["failed_seeds"] == 0 for c in result["claims"][1:])  # the others measured
    nothing = run_bench([replace(flaky, jobs=fake_jobs_failing_on_odd_seeds)], seeds=1,
                        workers=1)  # seed 0 only: measured
    assert nothing["claims"][0]["direction"] is not None
    broken = run_bench([replace(flaky, name="fake-always", jobs=fake_jobs_never)], seeds=2,
                       workers=1)["claims"][0]
    assert broken["direction"] is None and broken["seeds"] == 0
    assert broken["ours_pct"] != broken["ours_pct"]  # NaN: nothing was measured


def fake_jobs_never(seed: int) -> list:
    raise ValueError("fake: no jobs")


def test_per_scenario_counts():
    from workbench.bench.paper import scenario_rows

    claims = run_bench([FAKE_TINY_SCENARIO], seeds=2, workers=1)["claims"]
    (row,) = scenario_rows(claims)
    assert row["claims"] == 3 and row["no figure"] == 1 and row["failed"] == 0
    assert row["direction"] == sum(bool(c["direction"]) for c in claims)
    assert row[">= half"] == sum(bool(c["half_reached"]) for c in claims) <= 2


def test_markdown_table_keeps_every_row_and_escapes_bars():
    from workbench.bench.paper import markdown

    text = markdown([{"a": "x|y", "b": 1}, {"a": "z", "b": 2}])
    lines = text.splitlines()
    assert lines[0] == "| a | b |" and lines[1] == "|---|---|"
    assert lines[2] == "| x\\|y | 1 |" and len(lines) == 4
