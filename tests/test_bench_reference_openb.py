"""`workbench bench reference --suite openb`: the placement plugins on openb pod lists beside the
FGD artifact's published allocation figures.

Hand-made pod and node lists in a temporary folder laid out as the openb data (so no data
files are needed); one list is named `default` and so gets the artifact's reference figures,
the other has none and prints '-'.
"""

from __future__ import annotations

import json

import pytest

from test_openb import synthetic_pods
from workbench.bench.reference import (
    ARTIFACT_POLICY,
    OPENB_REFERENCE,
    OPENB_TRACES,
    openb_summary,
    run_openb,
)
from workbench.cli import main
from workbench.placement.plugins import PLACEMENT_PLUGINS


@pytest.fixture
def openb_dir(tmp_path):
    (tmp_path / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n"
        + "".join(f"n{i},64000,262144,{4 if i % 2 else 8},G2\n" for i in range(10)))
    synthetic_pods(150).to_csv(tmp_path / "openb_pod_list_default.csv", index=False)
    synthetic_pods(120, seed=1).to_csv(tmp_path / "openb_pod_list_mine.csv", index=False)
    return tmp_path


def test_reference_table_covers_the_traces_and_plugins():
    assert set(OPENB_REFERENCE) == set(OPENB_TRACES)
    assert set(ARTIFACT_POLICY) == set(PLACEMENT_PLUGINS)
    for trace, per_plugin in OPENB_REFERENCE.items():
        assert set(per_plugin) == set(PLACEMENT_PLUGINS)
        for (m100, sd100), (m130, sd130) in per_plugin.values():
            assert 50 < m100 <= m130 < 100 and 0 < sd100 < 2 and 0 < sd130 < 2
    # a spot check against the published file (default trace, FGD, seeds 42-51, column 130)
    assert OPENB_REFERENCE["default"]["fgd"][1][0] == 95.391


def test_rows_carry_reference_and_diff(openb_dir):
    pods = [(t, openb_dir / f"openb_pod_list_{t}.csv") for t in ("default", "mine")]
    rows = run_openb(openb_dir / "openb_node_list_gpu_node.csv", pods, ["random", "fgd"],
                     ["default", "artifact"], range(2))
    assert len(rows) == 2 * 2 * 2 * 2  # traces x loads x protocols x plugins
    for r in rows:
        assert r["seeds"] == 2 and r["load"] in ("100%", "130%") and r["s_per_run"] > 0
        assert 0 < r["ours_pct"] <= 100
        if r["trace"] == "default":
            i = 0 if r["load"] == "100%" else 1
            assert r["reference_pct"] == OPENB_REFERENCE["default"][r["plugin"]][i][0]
            assert r["diff_pts"] == pytest.approx(r["ours_pct"] - r["reference_pct"])
        else:
            assert r["reference_pct"] is None and r["diff_pts"] is None
    assert [r["protocol"] for r in rows[:4]] == ["default", "default", "artifact", "artifact"]
    summary = openb_summary(rows)
    assert len(summary) == 2 * 2 * 2
    mine = [s for s in summary if s["trace"] == "mine"]
    assert all(s["order_reference"] is None and s["mean_abs_diff_pts"] is None for s in mine)
    assert all(set(s["order_ours"].split(" > ")) == {"R", "F"} for s in summary)


def test_cli_json_shape_and_text(openb_dir, capsys):
    args = ["bench", "reference", "--suite", "openb", "--openb-data", str(openb_dir),
            "--traces", "default,mine", "--plugins", "random,best-fit", "--seeds", "1",
            "--protocols", "artifact", "--quiet"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"openb"}  # the pollux part's keys appear only when it runs
    part = out["openb"]
    assert part["seeds"] == [0] and part["no_reference"] == ["mine"]
    assert len(part["results"]) == 2 * 2 * 1 * 2 and len(part["summary"]) == 4
    assert set(part["results"][0]) == {
        "trace", "load", "protocol", "plugin", "seeds", "ours_pct", "ours_sd", "reference_pct",
        "reference_sd", "diff_pts", "s_per_run"}
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "ours beside the FGD artifact's" in text and "reference_pct" in text
    assert "no reference figure in the bench for mine" in text
    mine = [line for line in text.splitlines() if line.startswith("mine ")]
    assert mine and all(" - " in line for line in mine)


@pytest.mark.parametrize("extra, words", [
    (["--suite", "openb,yarn"], "--suite: unknown yarn; known: pollux, openb"),
    (["--suite", ","], "--suite: unknown (none given)"),
    (["--suite", "openb", "--seeds", "0"], "--seeds must be at least 1"),
    (["--suite", "openb", "--plugins", "tetris"], "--plugins: unknown tetris"),
    (["--suite", "openb", "--protocols", "paper"], "--protocol: unknown 'paper'"),
    (["--suite", "openb", "--traces", "nosuch"], "no pod list 'nosuch'"),
])
def test_bad_options_are_one_line_errors(openb_dir, capsys, extra, words):
    assert main(["bench", "reference", "--openb-data", str(openb_dir), *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_missing_openb_data_is_one_line(tmp_path, capsys):
    assert main(["bench", "reference", "--suite", "openb", "--openb-data",
                 str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "openb data not found" in err and err.count("\n") == 1
