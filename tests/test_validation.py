"""Bad input to the CLI, strict JSON and whole output files (issues #14 and #15).

Every bad value is one line on stderr naming the option, file, line or column, exit 2, no
traceback, run as a user runs it (`python -m workbench ...` in a subprocess). Every JSON output
parses with a strict parser (NaN and Infinity are not JSON). An interrupted write leaves the
previous file whole. A job that can never run is rejected the same way in the CLI and the app's
store (`session.refusals`, one function).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.output import atomic_open, emit, to_json, write_json

HEADER = "name,time,application,num_replicas,batch_size\n"
GOOD_ROW = "cifar10-0,107,cifar10,2,2048\n"


def run(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd, check=False)


def strict_loads(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity, as JavaScript's JSON.parse does."""
    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def assert_one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    line = lines[0]
    assert line.startswith("workbench: error: "), line
    for word in words:
        assert word in line, (word, line)
    return line


def workload(tmp_path: Path, rows: str, name: str = "w.csv") -> str:
    path = tmp_path / name
    path.write_text(HEADER + rows)
    return str(path)


# ---- bad values: one line, exit 2 ------------------------------------------------------------

@pytest.mark.parametrize("args, words", [
    (["--nodes", "0"], ["--nodes", "0"]),
    (["--gpus-per-node", "0"], ["--gpus-per-node"]),
    (["--cluster", "16x0"], ["--cluster 16x0", "1 GPU"]),
    # a numpy _ArrayMemoryError traceback or the OOM killer; the option typed is named
    (["--cluster", "16x99999999"], ["--cluster 16x99999999: expected 0 to 1,024 GPUs per"]),
    (["--cluster", "99999999x8"], ["--cluster 99999999x8: expected 1 to 100,000 nodes"]),
    (["--cluster", "2000x1000"], ["--cluster 2000x1000", "at most 1,000,000 GPUs in all"]),
    (["--cluster", "16x" + "9" * 5000], ["--cluster 16x999", "too large"]),  # int()'s limit
    (["--gpus-per-node", "5000"], ["--gpus-per-node: expected 0 to 1,024", "5000"]),
    # argparse took -1x4 for an option: "argument --cluster: expected one argument"
    (["--cluster", "-1x4"], ["--cluster -1x4: expected NxG with at least 1 node and 1 GPU"]),
    (["--cluster=-1x4"], ["--cluster -1x4: expected NxG with at least 1 node and 1 GPU"]),
    (["--restart-delay", "-1e3"], ["--restart-delay: expected a finite number from 0"]),
    (["--restart-delay", "-1"], ["--restart-delay", "-1"]),
    (["--restart-delay", "nan"], ["--restart-delay", "nan"]),
    (["--restart-delay", "inf"], ["--restart-delay", "inf"]),
    (["--policy", ""], ["--policy", "''"]),
    (["--policy", " , "], ["--policy"]),
    (["--seed", "-1"], ["--seed"]),
    (["--limit", "0"], ["--limit"]),
    (["--fault", "node-01@nan"], ["--fault"]),
    (["--out-json", "/nonexistent/dir/x.json"], ["--out-json", "/nonexistent/dir/x.json"]),
    (["--csv", "/nonexistent/dir/x.csv"], ["--csv"]),
    (["--decisions", "/nonexistent/dir/d.csv"], ["--decisions"]),
    (["--restart-delay", "abc"], ["--restart-delay", "abc"]),
    # 1e300 s "ran" to a mean JCT of 2.8e296 h
    (["--restart-delay", "1e300"], ["--restart-delay", "from 0 to 86400", "1e+300"]),
    (["--trace", "synthetic:n=100000000"], ["synthetic", "1,000,000", "100,000,000"]),
    (["--trace", "synthetic:n=3,rate=1e-300"], ["synthetic", "1e-300 jobs/s", "raise the rate"]),
    # numpy's refusal of a negative seed was a traceback
    (["--trace", "synthetic:n=5,seed=-1"], ["synthetic option seed='-1'", "non-negative"]),
    # every job got a deadline and all were reported missed (deadline_hit_rate 0.0)
    (["--trace", "synthetic:n=5,deadline=inf"], [("synthetic option deadline='inf': expected a"
                                                   " finite number")]),
    (["--trace", "synthetic:n=5,deadline=1-inf"], ["synthetic option deadline='1-inf'", "finite"]),
    (["--trace", "synthetic:n=2.5"], ["synthetic option n='2.5': expected a whole number"]),
    # the last of the two was kept without a word
    (["--trace", "synthetic:n=20,rate=0.1,n=30"], ["synthetic option 'n' is given twice"]),
])
def test_bad_option_is_one_line(args, words):
    assert_one_line_error(run("simulate", "--limit", "5", *args), *words)


@pytest.mark.parametrize("option, words", [
    ("seed=-1", ["seed=-1"]),  # a traceback from numpy
    ("interval=nan", ["interval=nan"]),  # NaN arrivals: the simulation never ended
    ("interval=inf", ["interval=inf"]),  # every arrival at infinity: a run of 0 jobs
    ("interval=1e300", ["lower the interval"]),
    ("n=2000000", ["n from 1 to 1,000,000", "n=2000000"]),  # allocated until killed
])
def test_a_bad_openb_option_is_one_line(tmp_path, option, words):
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1024,1,500\n")
    proc = run("simulate", "--trace", f"openb:pods={pods},{option}", "--limit", "5",
               timeout=60)
    assert_one_line_error(proc, "openb", *words)


def test_bad_compare_policies_name_the_option():
    assert_one_line_error(run("compare", "--policies", ""), "--policies")
    # an engine listed twice ran twice, in two rows of one table
    assert_one_line_error(run("compare", "--policies", "fifo,drf,fifo", "--limit", "5"),
                          "--policies: 'fifo' is listed twice")


@pytest.mark.parametrize("row, column, words", [
    ("b,107,cifar10,1e20,2048\n", "num_replicas", ["up to"]),
    ("b,107,cifar10,2,99999999\n", "batch_size", ["128 to 4,096", "99999999"]),
    ("b,107,cifar10,2,64\n", "batch_size", ["128 to 4,096"]),
    ("cif\x00ar10-0,107,cifar10,2,2048\n", "name", ["printable"]),
    ("cifar10\t0,107,cifar10,2,2048\n", "name", ["printable"]),
    ("x" * 300 + ",107,cifar10,2,2048\n", "name", ["at most 253", "300 characters"]),
])
def test_bad_cell_is_one_line_naming_file_line_and_column(tmp_path, row, column, words):
    path = workload(tmp_path, GOOD_ROW + row)
    line = assert_one_line_error(run("simulate", "--trace", path),
                                 f"{path}:3: column '{column}'", *words)
    assert len(line) < 400  # a long cell is quoted only in part


def test_a_huge_cell_is_refused_without_reading_it_whole(tmp_path):
    """A 20 MB job name (the issue's was 1 GB): refused by the line-length check, quickly."""
    path = tmp_path / "huge.csv"
    with open(path, "w") as f:
        f.write(HEADER + GOOD_ROW)
        f.write("n" * (20 << 20) + ",200,cifar10,1,2048\n")
    started = time.monotonic()
    line = assert_one_line_error(run("simulate", "--trace", str(path)), f"{path}:3", "longer")
    assert len(line) < 300
    assert time.monotonic() - started < 60


def test_missing_and_malformed_traces(tmp_path):
    assert_one_line_error(run("simulate", "--trace", str(tmp_path / "none.csv")),
                          "none.csv", "no such file")
    bad = workload(tmp_path, "a,b\n", "bad.csv")
    assert_one_line_error(run("simulate", "--trace", bad), "bad.csv")


def test_serve_checks_every_option_before_serving():
    """Each of these used to start a server; each now exits 2 with one line, at once."""
    for args, words in ((["--policy", "fifo+nosuch"], ["--policy", "nosuch"]),
                        (["--speed", "-5"], ["--speed", "-5"]),
                        (["--speed", "nan"], ["--speed"]),
                        (["--cluster", "16x0"], ["--cluster 16x0"]),
                        (["--cluster", "16x99999999"], ["--cluster 16x99999999"]),
                        (["--seed", "-2"], ["--seed"]),
                        (["--trace", "/nonexistent/w.csv"], ["/nonexistent/w.csv"])):
        proc = run("serve", "--no-browser", "--port", "1", *args, timeout=60)
        assert_one_line_error(proc, *words)
        assert "Launching server" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("args, words", [
    (["--trace", "{w}", "--csv", "{w}"], ["--csv {w}: the same file as --trace {w}"]),
    (["--trace", "pollux:{w}", "--out-json", "{d}/./w.csv"], ["--out-json", "--trace {w}"]),
    (["--csv", "{d}/same.csv", "--decisions", "{d}/same.csv"], ["--decisions", "--csv"]),
    (["--csv", "{d}/x", "--out-json", "{d}/x"], ["--out-json {d}/x: the same file as --csv"]),
])
def test_an_output_naming_the_trace_or_another_output_writes_nothing(tmp_path, args, words):
    """Each wrote over the other (or over the trace it read), exit 0."""
    w = workload(tmp_path, GOOD_ROW)
    fill = [a.format(w=w, d=tmp_path) for a in args]
    assert_one_line_error(run("simulate", *fill), *(x.format(w=w, d=tmp_path) for x in words))
    assert os.listdir(tmp_path) == ["w.csv"] and Path(w).read_text() == HEADER + GOOD_ROW


def test_serve_refuses_a_port_in_use_or_an_address_not_here():
    """The URLs were printed (leading to whatever held the port), then a tornado traceback."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        for args, words in ((["--port", str(port)], [f"--port {port}: already in use"]),
                            (["--address", "999.1.1.1"], ["--address 999.1.1.1: not a"]),
                            (["--address", "nosuchhost.invalid"], ["--address nosuchhost."]),
                            (["--address", ""], ["--address: expected an interface"])):
            proc = run("serve", "--no-browser", "--port", str(port), *args, timeout=60)
            assert_one_line_error(proc, *words)
            assert "token=" not in proc.stdout


# ---- strict JSON -----------------------------------------------------------------------------

def test_to_json_writes_null_for_nan_and_infinity():
    import numpy as np

    text = to_json({"a": float("nan"), "b": [np.float64("inf"), -math_inf()], "c": np.int64(3),
                    "d": np.array([1.0, np.nan]), "e": (1.5, None)})
    assert strict_loads(text) == {"a": None, "b": [None, None], "c": 3, "d": [1.0, None],
                                  "e": [1.5, None]}


def math_inf() -> float:
    return float("inf")


def test_emit_json_is_strict(capsys):
    emit({"deadline_hit_rate": float("nan"), "jct": float("inf")}, as_json=True)
    assert strict_loads(capsys.readouterr().out) == {"deadline_hit_rate": None, "jct": None}


@pytest.mark.parametrize("args", [
    ["simulate", "--limit", "20", "--json"],
    ["simulate", "--limit", "20", "--json", "--cluster", "small", "--restart-delay", "0"],
    ["compare", "--limit", "20", "--policies", "fifo,drf,optimus", "--json"],
    ["policies", "--json"],
    ["trace", "show", "default", "--json"],
    ["trace", "show", "synthetic:n=20", "--json"],
    ["openb", "--seeds", "1", "--plugins", "random", "--json"],
    ["bench", "sim", "--limit", "200", "--policies", "fifo", "--json"],
])
def test_every_json_output_parses_strictly(args):
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    strict_loads(proc.stdout)


def test_out_json_is_strict_and_nan_became_null(tmp_path):
    out = tmp_path / "r.json"
    proc = run("simulate", "--trace", "synthetic:n=10,deadline=none", "--out-json", str(out))
    assert proc.returncode == 0, proc.stderr
    result = strict_loads(out.read_text())
    assert result["results"][0]["deadline_hit_rate"] is None  # no deadlines: NaN before


def test_every_json_writer_goes_through_output():
    """No command or benchmark dumps JSON itself (only `output` makes it strict)."""
    root = Path(__file__).resolve().parents[1] / "workbench"
    # cluster.py and k8s.py print manifests and cluster facts (no floats that can be NaN)
    exempt = {"commands/cluster.py", "commands/k8s.py"}
    offenders = []
    for folder in ("commands", "bench"):
        for path in sorted((root / folder).glob("*.py")):
            rel = f"{folder}/{path.name}"
            text = path.read_text()
            if rel not in exempt and ("json.dump(" in text or "json.dumps(" in text):
                offenders.append(rel)
    assert offenders == []


# ---- whole output files ----------------------------------------------------------------------

def test_atomic_writer_interrupted_leaves_the_old_file(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("old and whole\n")

    class Interrupted(Exception):
        pass

    with pytest.raises(Interrupted), atomic_open(str(path), "--decisions") as f:
        f.write("new, half written\n" * 1000)
        raise Interrupted
    assert path.read_text() == "old and whole\n"
    assert os.listdir(tmp_path) == ["d.csv"]  # no temporary file left behind

    with pytest.raises(KeyboardInterrupt), atomic_open(str(path), "--decisions") as f:
        f.write("partial")
        raise KeyboardInterrupt
    assert path.read_text() == "old and whole\n"

    write_json(str(path), "--out-json", {"x": float("nan")})
    assert strict_loads(path.read_text()) == {"x": None}
    assert os.listdir(tmp_path) == ["d.csv"]


def test_atomic_writer_keeps_the_file_mode(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("x")
    os.chmod(path, 0o640)
    with atomic_open(str(path), "--csv") as f:
        f.write("y")
    assert path.read_text() == "y" and (path.stat().st_mode & 0o777) == 0o640


def test_atomic_writer_errors_are_one_line(tmp_path):
    with pytest.raises(WorkbenchError, match=r"^--csv .*: cannot write"), \
            atomic_open(str(tmp_path / "no" / "x.csv"), "--csv") as f:
        f.write("x")
    with pytest.raises(WorkbenchError, match="is a directory"), \
            atomic_open(str(tmp_path), "--csv") as f:
        f.write("x")


def test_sigint_while_writing_decisions_leaves_every_previous_file_whole(tmp_path):
    """A long run writing a large decisions CSV, interrupted (SIGINT) at random moments once
    the writing has begun: each output is either the previous one, whole, or the new one."""
    outputs = {"--decisions": tmp_path / "d.csv", "--csv": tmp_path / "r.csv",
               "--out-json": tmp_path / "r.json"}
    args = ["simulate", "--trace", "philly", "--limit", "4000", "--policy", "fifo"]
    for flag, path in outputs.items():
        args += [flag, str(path)]
    first = run(*args, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    before = {flag: path.read_bytes() for flag, path in outputs.items()}
    assert len(before["--decisions"]) > 100_000
    interrupted = 0
    # At the temporary file's birth and into its writing; on a loaded machine the poll may
    # miss a short write, so a few more tries until one run was stopped mid-write.
    for attempt, delay in enumerate((0.0, 0.01, 0.03, 0.0, 0.005, 0.01, 0.02, 0.0)):
        if attempt >= 3 and interrupted:
            break
        proc = subprocess.Popen([sys.executable, "-m", "workbench", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if any(p.name.startswith(".d.csv.") for p in tmp_path.iterdir()):
                time.sleep(delay)  # the decisions are being written: interrupt now
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.002)
        _, err = proc.communicate(timeout=120)
        assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
        if proc.returncode == 130:
            interrupted += 1
            assert err.strip() == "workbench: interrupted", err
        else:  # the signal came after the last write (exit 0) or in the interpreter's own
            # start or shutdown (killed by it, -2)
            assert proc.returncode in (0, -signal.SIGINT), err[-2000:]
        # each file is whole: the earlier one or this run's (a same run; only wall time differs)
        assert outputs["--decisions"].read_bytes() == before["--decisions"]
        json.loads(outputs["--out-json"].read_text())
        assert len(outputs["--csv"].read_bytes().splitlines()) == len(before["--csv"].splitlines())
    assert interrupted  # at least one run was stopped mid-write


# ---- an impossible job: one check, rejected with its reason ----------------------------------

RIGID = "synthetic:n=6,ps=1"  # parameter-server jobs of 4 to 7 workers, min = max = initial


def test_an_impossible_job_is_rejected_with_its_reason_in_the_cli(tmp_path):
    """Rigid jobs bigger than a 4-GPU cluster: every engine gets the same rejections, each
    with its reason, made as the job arrives."""
    decisions = tmp_path / "d.csv"
    for policy in ("fifo", "tiresias", "optimus"):
        proc = run("simulate", "--trace", RIGID, "--cluster", "1x4", "--policy", policy,
                   "--json", "--decisions", str(decisions))
        assert proc.returncode == 0, proc.stderr
        row = strict_loads(proc.stdout)["results"][0]
        assert (row["completed"], row["rejected"]) == (2, 4), policy
        rejects = [line for line in decisions.read_text().splitlines() if ",Reject," in line]
        assert len(rejects) == 4
        assert all('"rejected: needs ' in r and ' GPUs, the cluster has 4"' in r for r in rejects)


def test_a_99999_gpu_row_is_handled_alike_and_quickly_by_the_cli_and_the_store(tmp_path):
    """The issue's row: a Pollux job of 99,999 replicas (elastic: its minimum is 1 worker).
    The CLI and the app's store reach the same outcome, in seconds, under every kind of
    engine: an elastic one runs it smaller, a rigid one keeps it waiting and ends the run."""
    from workbench.ui.state import WorkbenchState

    path = workload(tmp_path, GOOD_ROW + "big,200,cifar10,99999,2048\n")
    for policy in ("fifo", "tiresias", "optimus"):
        started = time.monotonic()
        proc = run("simulate", "--trace", path, "--policy", policy, "--json")
        assert proc.returncode == 0, proc.stderr
        row = strict_loads(proc.stdout)["results"][0]
        state = WorkbenchState.from_workload(path, "default", policy)
        state.run_to_end()
        summary = state.summary
        assert (summary["completed"], summary["rejected"]) == (row["completed"], row["rejected"])
        assert time.monotonic() - started < 60


def test_the_app_store_and_the_cli_share_the_check():
    from workbench.clusters import parse_cluster
    from workbench.model import JobSpec
    from workbench.session import refusals
    from workbench.ui.state import WorkbenchState

    nodes = parse_cluster("default")
    jobs = [JobSpec("ok", "cifar10", 0.0, 1000.0, 128, initial_workers=2, max_workers=2),
            JobSpec("big", "cifar10", 60.0, 1000.0, 128, initial_workers=99_999,
                    min_workers=99_999, max_workers=99_999)]
    reason = "rejected: needs 99,999 GPUs, the cluster has 64"
    assert refusals(jobs, nodes) == {"big": reason}
    state = WorkbenchState.from_workload("notebook", "default", "tiresias", jobs=jobs,
                                         nodes=nodes)
    state.advance(600)
    jobs_table = state.jobs.set_index("job")
    assert jobs_table.loc["big", "state"] == "rejected"
    assert jobs_table.loc["big", "reason"] == reason
    decisions = state.decisions_frame()
    assert ((decisions.job == "big") & (decisions.action == "Reject")
            & (decisions.policy == "admission")).any()
    assert "big" not in state.forecasts


def test_refusals_name_the_resource_and_the_task():
    from workbench.clusters import make_cluster
    from workbench.model import JobSpec, Resources
    from workbench.session import refusals

    nodes = make_cluster(2, 4)
    jobs = [JobSpec("fits", "cifar10", 0, 1, 128, initial_workers=8, max_workers=8),
            JobSpec("elastic", "cifar10", 0, 1, 128, initial_workers=9, max_workers=9),
            JobSpec("wide", "cifar10", 0, 1, 128, initial_workers=9, min_workers=9,
                    max_workers=9),
            JobSpec("fat", "cifar10", 0, 1, 128, worker_demand=Resources(4, 16, 8)),
            JobSpec("ps", "cifar10", 0, 1, 128, num_ps=1, ps_demand=Resources(60, 8, 0))]
    assert refusals(jobs, nodes) == {
        "wide": "rejected: needs 9 GPUs, the cluster has 8",
        "fat": "rejected: one worker needs 8 GPUs, the largest node has 4",
        "ps": "rejected: one parameter server needs 60 CPUs, the largest node has 48"}


def test_the_notebook_api_refuses_what_the_cli_refuses():
    """`Workbench(...)` in a notebook reaches no CLI flag: the simulator and the workload
    loader check these themselves (a restart of 1e300 s was taken, and ran)."""
    from workbench.errors import ConfigError
    from workbench.ui.state import WorkbenchState

    with pytest.raises(ConfigError, match="restart_delay: expected a finite number from 0 to"
                                          " 86400, got 1e"):
        WorkbenchState.from_workload("default", "default", "fifo", restart_delay=1e300)
    with pytest.raises(ConfigError, match="^seed: expected a non-negative integer, got -1"):
        WorkbenchState.from_workload("default", "default", "fifo", seed=-1)


@pytest.mark.parametrize("daemon", ["emulator", "operator"])
@pytest.mark.parametrize("option", [["--log-level", "nosuch"], ["--threads", "0"]])
def test_the_local_clusters_daemons_refuse_a_bad_option_in_one_line(daemon, option, capsys):
    """`--log-level nosuch` reached logging.basicConfig and ended in its traceback."""
    import importlib

    main = importlib.import_module(f"workbench.k8s.local.{daemon}").main
    with pytest.raises(SystemExit) as e:
        main(["--kubeconfig", "/nonexistent", *option])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and f"argument {option[0]}" in err[-1]
    assert "Traceback" not in "\n".join(err)


@pytest.mark.parametrize("call, words", [
    (lambda: __import__("workbench.session").session.load_jobs(limit="5"),
     "--limit: expected a positive integer, got '5'"),
    (lambda: __import__("workbench.session").session.load_jobs(limit=2.5),
     "--limit: expected a positive integer, got 2.5"),
    (lambda: __import__("workbench.session").session.load_jobs(limit=True),
     "--limit: expected a positive integer, got True"),
    (lambda: __import__("workbench.session").session.load_nodes("default", 5),
     ("--cluster: expected a preset (default, small, philly, large), NxG like 16x4 or openb:N,"
      " got 5")),
    (lambda: __import__("workbench.session").session.load_nodes("default", nodes=2.5),
     "--nodes: expected a positive integer, got 2.5"),
    (lambda: __import__("workbench.session").session.load_nodes("default", gpus_per_node="4"),
     "--gpus-per-node: expected a positive integer, got '4'"),
])
def test_the_session_refuses_a_count_or_cluster_of_the_wrong_type_in_one_line(call, words):
    """A notebook's `load_jobs(limit="5")` was a TypeError of a comparison, `limit=2.5` one of
    a slice, `load_nodes(cluster=5)` an AttributeError of `partition`; `limit=True` ran 1 job."""
    from workbench.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        call()
    assert str(e.value) == words


@pytest.mark.parametrize("options, words", [
    ({"policy": None}, "expected an engine name, got None; available: "),
    ({"policy": 5}, "expected an engine name, got 5; available: "),
    ({"limit": "5"}, "limit: expected a positive integer, got '5'"),
    ({"cluster": 5}, "cluster: expected a preset"),
    ({"faults": "bogus"}, "faults: expected a list of Fault(time, node, duration), got 'bogus'"),
    ({"faults": [("node-00", 10)]}, "faults[0]: expected a Fault(time, node, duration)"),
    ({"faults": "F(nosuch)"}, "faults[0]: unknown node 'nosuch'"),
    ({"faults": "F(nan)"}, "faults[0].time: expected a finite number >= 0, got nan"),
    ({"checkpoint_interval": float("nan")},
     "checkpoint_interval: expected a finite number >= 0, got nan"),
    ({"checkpoint_interval": -1}, "checkpoint_interval: expected a finite number >= 0, got -1"),
    ({"speed": 10**400}, "speed: expected a finite number from 1 to 1e+07, got 1000000000"),
])
def test_the_notebook_store_refuses_bad_engines_faults_and_numbers_in_one_line(options, words):
    """`Workbench(policy=None)` was an AttributeError ('NoneType' has no 'name') in the store,
    `faults="bogus"` one of the simulator's engine, a NaN checkpoint interval meant no
    checkpoint, silently, and a number past the largest float `check_number`'s OverflowError."""
    from workbench.errors import ConfigError
    from workbench.sim.engine import Fault
    from workbench.ui.state import WorkbenchState

    if options.get("faults") == "F(nosuch)":
        options = {"faults": [Fault(10.0, "nosuch")]}
    elif options.get("faults") == "F(nan)":
        options = {"faults": [Fault(float("nan"), "node-00")]}
    options = {"trace": "synthetic:n=5", "cluster": "small", "policy": "fifo", **options}
    with pytest.raises(ConfigError) as e:
        WorkbenchState.from_workload(**options)
    assert str(e.value).startswith(words)
    assert "\n" not in str(e.value) and len(str(e.value)) < 300


@pytest.mark.parametrize("call, words", [
    (lambda s: s.preview_switch("fifo", horizon=-1), "horizon: expected a finite number >= 60, got -1"),
    (lambda s: s.preview_switch("fifo", horizon=float("nan")), "horizon: expected a finite number"),
    (lambda s: s.preview_switch("fifo", horizon=0), "horizon: expected a finite number >= 60, got 0"),
    (lambda s: s.preview_switch("fifo", horizon="x"), "horizon: expected a finite number"),
    (lambda s: s.what_if(["fifo"], budget_s=-1), "budget_s: expected a finite number >= 0, got -1"),
    (lambda s: s.what_if(["fifo"], budget_s=float("nan")), "budget_s: expected a finite number"),
    (lambda s: s.what_if(["fifo"], until=float("nan")), "until: expected a finite number, got nan"),
    (lambda s: s.what_if(["fifo"], until="x"), "until: expected a finite number, got 'x'"),
    (lambda s: s.decisions_frame(-1), "last: expected a count of decisions (0 or more), got -1"),
    (lambda s: s.decisions_frame(2.5), "last: expected a count of decisions (0 or more), got 2.5"),
    (lambda s: s.advance(3600, max_rounds=-1), "max_rounds: expected a finite number >= 1, got -1"),
    (lambda s: s.advance(3600, max_rounds=2.5), "max_rounds: expected a whole number >= 1, got 2.5"),
])
def test_the_stores_methods_refuse_bad_numbers_in_one_line(call, words):
    """A notebook's `preview_switch(name, horizon=-1)` or NaN ran a preview (and 0 was the
    default 4 h), `what_if(budget_s=-1)` and `until=NaN` ran, `until='x'` was a TypeError from
    the pool, `decisions_frame(2.5)` a slice's TypeError, `advance(max_rounds=-1)` ran on."""
    from workbench.errors import ConfigError
    from workbench.ui.state import WorkbenchState

    state = WorkbenchState.from_workload("synthetic:n=5", "small", "fifo", parallel_forks=False)
    state.advance(1800)
    with pytest.raises(ConfigError) as e:
        call(state)
    assert str(e.value).startswith(words)


def test_the_stores_what_if_takes_one_name_and_decisions_frame_zero_rows():
    """`what_if("fifo")` ran engines 'f', 'i', ... ("unknown engine 'f'"); `decisions_frame(0)`
    returned every decision (`ds[-0:]`)."""
    from workbench.ui.state import WorkbenchState

    state = WorkbenchState.from_workload("synthetic:n=5", "small", "fifo", parallel_forks=False)
    state.advance(1800)
    assert list(state.what_if("fifo", budget_s=10).table.policy) == ["fifo"]
    assert list(state.what_if("fifo, drf", budget_s=10).table.policy) == ["fifo", "drf"]
    assert len(state.decisions_frame(0)) == 0 and len(state.decisions_frame(1)) == 1


def test_the_session_and_controller_refuse_bad_runs_in_one_line():
    """From a notebook: `Controller.run(until=NaN)` ran the workload to its end, `until='x'`
    and `max_rounds='x'` were a comparison's TypeError; `simulate(..., policy_options=
    {"bogus": 1})`, `policy_options="x"` and `bogus=1` the constructors' TypeErrors,
    `simulate([], ...)` and two jobs of one name the simulator's ValueErrors."""
    from workbench.errors import ConfigError
    from workbench.session import load_jobs, load_nodes, simulate

    nodes, jobs = load_nodes("default", "small"), load_jobs("synthetic:n=5")
    for options, words in [
        ({"policy_options": {"bogus": 1}},
         "policy_options: engine 'fifo' has no option 'bogus'; it takes backfill, round_interval"),
        ({"policy_options": "x"}, "policy_options: expected a dict of an engine's options, got 'x'"),
        ({"bogus": 1}, "bogus: not an option of the simulator; it takes perf, restart_delay,"),
    ]:
        with pytest.raises(ConfigError) as e:
            simulate(nodes, jobs, "fifo", **options)
        assert str(e.value).startswith(words)
    with pytest.raises(ConfigError, match="^nodes: the cluster has no nodes$"):
        simulate([], jobs, "fifo")
    with pytest.raises(ConfigError, match=f"^jobs: two jobs are named '{jobs[0].name}'"):
        simulate(nodes, [*jobs, jobs[0]], "fifo")
    controller = simulate(nodes, jobs, "fifo")
    for kwargs, words in [({"until": float("nan")}, "until: expected a time in seconds"),
                          ({"until": "x"}, "until: expected a time in seconds"),
                          ({"max_rounds": "x"}, "max_rounds: expected a whole number >= 1"),
                          ({"max_rounds": -1}, "max_rounds: expected a whole number >= 1")]:
        with pytest.raises(ConfigError, match=f"^{words}"):
            controller.run(**kwargs)
    assert controller.backend.now == min(j.arrival for j in jobs)  # nothing ran
    controller.run(until=3600.0, max_rounds=5)
    assert 0 < controller.backend.now <= 3600.0
