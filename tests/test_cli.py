"""The `workbench` command: results tables and JSON, compare, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from workbench.cli import main


def run_json(capsys, *argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_prints_json_with_every_metric(capsys):
    out = run_json(capsys, "simulate", "--policy", "fifo", "--limit", "30", "--cluster", "small")
    (row,) = out["results"]
    assert out["jobs"] == 30 and row["policy"] == "fifo"
    assert row["completed"] + row["rejected"] == 30
    for key in ("avg_jct_h", "median_jct_h", "p95_jct_h", "makespan_h", "avg_queue_h",
                "deadline_hit_rate", "gpu_alloc_util", "gpu_effective_util", "cpu_alloc_util"):
        assert key in row
    assert 0 < row["gpu_alloc_util"] <= 1


def test_compare_runs_engines_on_the_same_workload(capsys, tmp_path):
    csv_path = tmp_path / "r.csv"
    decisions = tmp_path / "d.csv"
    out = run_json(capsys, "compare", "--policies", "fifo,tiresias", "--limit", "25",
                   "--csv", str(csv_path), "--decisions", str(decisions))
    assert [r["policy"] for r in out["results"]] == ["fifo", "tiresias"]
    assert csv_path.read_text().startswith("policy,")
    assert "started" in decisions.read_text()


def test_table_output_for_people(capsys):
    assert main(["simulate", "--policy", "drf", "--limit", "10"]) == 0
    text = capsys.readouterr().out
    assert "avg_jct_h" in text and "drf" in text


def test_faults_change_the_outcome(capsys):
    base = run_json(capsys, "simulate", "--policy", "fifo", "--limit", "40", "--cluster", "small")
    hit = run_json(capsys, "simulate", "--policy", "fifo", "--limit", "40", "--cluster", "small",
                   "--fault", "node-00@600+7200", "--fault", "node-01@600+7200")
    assert hit["results"][0]["completed"] == base["results"][0]["completed"]
    assert hit["results"][0]["avg_jct_h"] > base["results"][0]["avg_jct_h"]


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--trace", "missing.csv"], "missing.csv"),
    (["simulate", "--policy", "nope"], "--policy: unknown engine 'nope'"),
    (["simulate", "--cluster", "huge"], "--cluster"),
    (["simulate", "--fault", "node-99@10"], "no node 'node-99'"),
    (["simulate", "--limit", "0"], "--limit"),
    # a Deployment running an engine that does not exist, exit 0
    (["k8s", "manifests", "--policy", "nosuch"], "--policy: unknown engine 'nosuch'"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("workbench: error:") and message in err and "\n" not in err


def test_bad_trace_row_names_file_line_and_column_without_traceback(tmp_path):
    bad = tmp_path / "w.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\n"
                   "a,0,cifar10,2,512\nb,10,cifar10,-2,512\n")
    proc = subprocess.run([sys.executable, "-m", "workbench", "simulate", "--trace", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "w.csv:3" in proc.stderr and "num_replicas" in proc.stderr


def test_policies_lists_every_engine(capsys):
    out = run_json(capsys, "policies")
    names = {p["engine"] for p in out["policies"]}
    assert {"kube-default", "fifo", "drf", "tiresias", "optimus"} <= names
    # each described in words, from its class or its module (it listed module names)
    about = {p["engine"]: p["about"] for p in out["policies"]}
    assert about["tiresias"].startswith("Tiresias (NSDI'19)")
    assert not any(a.startswith("workbench.") for a in about.values()), about


@pytest.mark.parametrize("argv", [[], ["bench"], ["cluster"], ["openb"], ["serve"], ["schedule"],
                                  ["simulate"], ["compare"], ["trace"], ["train"], ["k8s"]])
def test_help_works_everywhere(argv):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0


@pytest.mark.parametrize("argv, message", [
    (["--rl-iters", "-5"], "--rl-iters: expected >= 0, got -5"),
    # NumPy's warnings, then a validation JCT of "nan h"
    (["--sl-traces", "0"], "--sl-traces: expected >= 1, got 0"),
])
def test_train_refuses_bad_numbers_in_one_line(argv, message, capsys):
    assert main(["train", "dl2", "--quick", *argv]) == 2
    assert capsys.readouterr().err.strip() == f"workbench: error: {message}"


def test_a_value_starting_with_a_dash_is_the_options_value():
    # "--cluster -1x4" was argparse's "expected one argument"; a plain negative number and a
    # value after "=" pass as they are
    from workbench.cli import attach_dashed_values

    assert attach_dashed_values(["sweep", "--clusters", "-1x4", "--seeds", "-1", "--loads",
                                 "-1e3", "--", "-2x4"]) == [
        "sweep", "--clusters=-1x4", "--seeds", "-1", "--loads=-1e3", "--", "-2x4"]
    assert attach_dashed_values(["simulate", "--cluster=-1x4"]) == ["simulate", "--cluster=-1x4"]


@pytest.mark.parametrize("argv, option, expected", [
    # each was a traceback (numpy's seed check, a division by zero) or a run on the value
    (["bench", "perf", "--seed", "-1"], "--seed", "a non-negative integer, got '-1'"),
    (["bench", "perf", "--calls", "0"], "--calls", "a positive integer, got '0'"),
    (["bench", "oasis", "--slot", "0"], "--slot", "a positive number, got '0'"),
    (["bench", "specon", "--alpha", "nan"], "--alpha", "a positive number, got 'nan'"),
    (["bench", "dragon", "--jobs", "-1"], "--jobs", "a positive integer, got '-1'"),
    (["bench", "sweep", "--workers", "-1"], "--workers", "a positive integer, got '-1'"),
    (["bench", "forecast", "--model-error", "nan"], "--model-error", "a finite number >= 0"),
    (["trace", "show", "--seed", "-1"], "--seed", "a non-negative integer, got '-1'"),
    (["train", "dl2", "--quick", "--seed", "-1"], "--seed", "a non-negative integer, got '-1'"),
    (["bench", "sim", "--seed", "-1"], "--seed", "a non-negative integer, got '-1'"),
    (["bench", "sim", "--limit", "0"], "--limit", "a positive integer, got '0'"),  # ran it all
    (["openb", "--first-seed", "-1"], "--first-seed", "a non-negative integer, got '-1'"),
    (["openb", "--seeds", "0"], "--seeds", "a positive integer, got '0'"),
    (["k8s", "submit", "default", "--dry-run", "--time-scale", "nan"], "--time-scale",
     "a positive number, got 'nan'"),  # 0 and -1 were refused, NaN taken
])
def test_a_bad_number_is_refused_by_the_parser_in_one_line(argv, option, expected, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "\n" not in err
    assert f"argument {option}: expected {expected}" in err


@pytest.mark.parametrize("argv, message", [
    # logging's ValueError traceback
    (["schedule", "--log-level", "nosuch"], "argument --log-level: invalid choice: 'NOSUCH'"),
    # the rest were taken, then a dead API server retried for good
    (["schedule", "--metrics-port", "-1"], "--metrics-port: expected 0 (none) to 65535, got -1"),
    (["schedule", "--metrics-port", "99999"], "--metrics-port: expected 0 (none) to 65535"),
    (["schedule", "--speed", "nan"], "argument --speed: expected a positive number, got 'nan'"),
    (["schedule", "--round-interval", "nan"], "argument --round-interval: expected a positive"),
    (["snapshot", "-o", "{tmp}/s.json", "--engine", "nosuch"], "--engine: unknown engine"),
])
def test_cluster_commands_check_options_before_connecting(argv, message, tmp_path, capsys):
    # no kubeconfig: an option checked only once connected is reported as that instead
    argv = [a.format(tmp=tmp_path) for a in argv] + ["--kubeconfig", str(tmp_path / "none")]
    try:
        code = main(argv)
    except SystemExit as e:  # refused by the parser
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and message in err, err
    assert os.listdir(tmp_path) == []


def test_a_reader_that_leaves_early_gets_no_traceback():
    # `workbench policies | head -1`: the pipe closes before the table is written
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "policies"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert err == ""


def test_the_progress_line_never_says_done_while_jobs_still_run():
    import io

    from workbench.commands.simulate import progress_printer

    stream = io.StringIO()
    show = progress_printer(True, horizon=7200.0, stream=stream)
    show(3600.0)
    assert "50.0% of arrivals" in stream.getvalue()
    show(7200.0 + 3600.0)  # every job arrived, some still run: this was a bar at 100.0%
    last = stream.getvalue().rsplit("\r", 1)[1]
    assert "100.0%" not in last and last.startswith("all jobs arrived, finishing the rest")
    assert "sim      3.0 h" in last
    assert len(last) == len(stream.getvalue().split("\r")[1])  # it covers the longer bar line


def test_ctrl_c_during_the_progress_line_says_so_on_a_line_of_its_own():
    import os
    import pty
    import select
    import signal
    import time

    # the progress line is drawn on a terminal only, so the run gets one
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "simulate", "--trace", "philly",
                             "--limit", "20000"], stdin=follower, stdout=follower,
                            stderr=follower, start_new_session=True)
    os.close(follower)
    seen, deadline = b"", time.monotonic() + 120
    try:
        while b"of arrivals" not in seen and time.monotonic() < deadline:
            if select.select([leader], [], [], 1.0)[0]:
                seen += os.read(leader, 65536)
        os.killpg(proc.pid, signal.SIGINT)
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the run ended and closed its side
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    assert b"of arrivals" in seen
    # it was "... wall 4.2 s   workbench: interrupted", the message glued to the bar
    assert seen.replace(b"\r\n", b"\n").rstrip().endswith(b"\nworkbench: interrupted"), seen[-300:]


def test_bench_sim_times_each_replay_without_the_engines_imports(capsys):
    """The first policy's row carried the import of every engine module (scipy's among them,
    ~0.4 s): now done before any replay is timed, and printed on its own."""
    import json

    assert main(["bench", "sim", "--limit", "200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["engine_import_cpu_s"] >= 0
    assert [r["policy"] for r in out["results"]] == ["fifo", "tiresias"]
    assert all(r["completed"] == 200 and r["cpu_s"] > 0 for r in out["results"])


def test_bench_sim_refuses_an_unknown_engine_before_replaying_any(capsys, monkeypatch):
    import workbench.experiment

    replays = []  # a counting wrapper around the real run_policy
    real = workbench.experiment.run_policy
    monkeypatch.setattr(workbench.experiment, "run_policy",
                        lambda *a, **k: replays.append(a[2]) or real(*a, **k))
    assert main(["bench", "sim", "--policies", "fifo,nosuch", "--limit", "50"]) == 2
    captured = capsys.readouterr()
    assert replays == []  # fifo's replay was wasted before the unknown name was found
    assert "unknown engine 'nosuch'" in captured.err and "\n" not in captured.err.strip()
