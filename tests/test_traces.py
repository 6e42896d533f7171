"""Trace loaders: real shipped data, determinism, and one clear error per kind of bad input."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from workbench.cli import main
from workbench.errors import ConfigError, InputError
from workbench.model import JobKind
from workbench.perf import default_perf
from workbench.traces import (
    Jobs,
    default_workload,
    load_philly,
    load_pollux_workload,
    load_trace,
    synthetic_workload,
)
from workbench.traces.common import MEASURED_BATCH_SIZES, RateCache, suited_batch_size
from workbench.traces.philly import GPU_TIME_BUCKETS, assign_applications, shipped_philly_path

SHARED_PHILLY = Path(__file__).resolve().parents[2] / "shared" / "data" / "philly" / "philly.csv"
PHILLY_ROWS = 82_247


@pytest.fixture(scope="module")
def perf():
    return default_perf()


@pytest.fixture(scope="module")
def philly(perf):
    return load_philly(perf=perf)


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


# ---- Philly ------------------------------------------------------------------------------


def test_philly_keeps_every_job_of_the_shipped_trace(philly):
    assert isinstance(philly, Jobs) and len(philly) == PHILLY_ROWS
    assert philly.skipped == {}
    gpus = Counter(j.initial_workers for j in philly)
    assert gpus[1] == 76_627 and gpus[8] == 1_643 and gpus[128] == 3
    arrivals = np.array([j.arrival for j in philly])
    assert arrivals[0] == 0.0 and (np.diff(arrivals) >= 0).all()
    assert 100 * 86400 < arrivals[-1] < 110 * 86400  # Sep 4 to Dec 22, 2017
    assert len({j.name for j in philly}) == PHILLY_ROWS
    assert all(j.min_workers == 1 and j.max_workers == max(j.initial_workers,
                                                          min(2 * j.initial_workers, 64))
               for j in philly)


def test_philly_work_reproduces_the_real_duration(philly, perf):
    rates = RateCache(perf)
    first = philly[:200]
    with gzip.open(shipped_philly_path(), "rt") as f:
        rows = [line for line in f if not line.startswith("#")][1:201]
    durations = [float(r.split(",")[1]) for r in rows]
    for job, duration in zip(first, durations):
        rate = rates(job.application, job.batch_size, job.initial_workers)
        assert job.total_work / rate == pytest.approx(duration)
        assert job.batch_size in MEASURED_BATCH_SIZES[job.application]
        assert job.batch_size == suited_batch_size(job.application, job.initial_workers)


def test_philly_applications_follow_gpu_time_buckets(philly, perf):
    rates = RateCache(perf)
    for job in philly[::97]:
        hours = job.total_work / rates(job.application, job.batch_size,
                                       job.initial_workers) * job.initial_workers / 3600
        bucket = next(apps for bound, apps in GPU_TIME_BUCKETS if hours < bound)
        assert job.application in bucket
    mix = Counter(j.application for j in philly)
    assert set(mix) == set(perf.applications)
    assert mix["imagenet"] == 1_703 and mix["yolov3"] == 3_575  # single-app buckets


def test_philly_is_deterministic_per_seed(philly, perf):
    again = load_philly(limit=2000, perf=perf)
    assert again == philly[:2000]  # a prefix does not depend on `limit`
    other = load_philly(seed=1, limit=2000, perf=perf)
    assert [j.application for j in other] != [j.application for j in again]
    draws = np.linspace(0.1, 500, 50)
    a = assign_applications(draws, np.random.default_rng(7))
    b = assign_applications(draws, np.random.default_rng(7))
    assert (a == b).all()


@pytest.mark.skipif(not SHARED_PHILLY.exists(), reason="shared Philly data not present")
def test_philly_original_csv_gives_the_same_jobs(philly, perf):
    original = load_philly(SHARED_PHILLY, perf=perf)
    assert len(original) == PHILLY_ROWS
    assert [(j.arrival, j.total_work, j.user) for j in original[:500]] == \
        [(j.arrival, j.total_work, j.user) for j in philly[:500]]


def test_philly_jobs_belong_to_their_virtual_clusters(philly, tmp_path, perf):
    """Philly's tenants are its virtual clusters (ATC '19): each job's user is its VC, so DRF
    shares the cluster among 15 of them. Every job was one user "default", and DRF on the
    trace was FIFO with backfill."""
    users = Counter(j.user for j in philly)
    assert len(users) == 15 and users["vc-6214e9"] == 41_226 and users["vc-11cb48"] == 16_091
    path = write(tmp_path / "p.csv", "arrival,duration,num_gpus,vc\n0,60,1,103959\n"
                 "5,60,1,\n9,60,2,0e4a51\n")  # ids all digits, none, letters
    assert [j.user for j in load_philly(path, perf=perf)] == \
        ["vc-103959", "default", "vc-0e4a51"]
    bare = write(tmp_path / "q.csv", "arrival,duration,num_gpus\n0,60,1\n")
    assert [j.user for j in load_philly(bare, perf=perf)] == ["default"]


def test_philly_keeps_duplicates_and_ties(tmp_path, perf):
    path = write(tmp_path / "p.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n"
                 "2017-10-09 07:01:55,66.0,1,66.0,a\n2017-10-09 07:01:55,66.0,1,66.0,a\n"
                 "2017-10-09 06:00:00,7200,8,57600,b\n\n")
    jobs = load_philly(path, perf=perf, deadline_factor=2.0)
    assert [j.arrival for j in jobs] == [0.0, 3715.0, 3715.0]
    assert jobs[0].application == "yolov3"  # 16 GPU-hours
    assert jobs[0].deadline == pytest.approx(2 * 7200)


@pytest.mark.parametrize("text", [
    ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n"
     "2017-10-09 08:00:00,7200,8,57600,b\n"),
    "# a comment\nname,time,application,num_replicas,batch_size\ncifar10-0,107,cifar10,2,2048\n",
])
def test_a_trace_saved_with_a_byte_order_mark_reads_as_without(tmp_path, text):
    """Excel's "CSV UTF-8" starts the file with a byte-order mark: a Philly trace saved so
    was refused ("column 'arrival': missing from the header")."""
    plain = tmp_path / "plain.csv"
    plain.write_text(text, encoding="utf-8")
    marked = tmp_path / "marked.csv"
    marked.write_text(text, encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    assert load_trace(str(marked)) == load_trace(str(plain))


# ---- Pollux and the default workload --------------------------------------------------------


def test_default_workload(perf):
    jobs = default_workload()
    assert len(jobs) == 160 and len({j.name for j in jobs}) == 160
    assert [j.arrival for j in jobs] == sorted(j.arrival for j in jobs)
    assert {j.application for j in jobs} <= set(perf.applications)
    first = jobs[0]
    assert (first.name, first.arrival, first.initial_workers, first.batch_size) == \
        ("cifar10-0", 107.0, 6, 2048)
    assert first.max_workers == 12 and first.min_workers == 1 and first.deadline > first.arrival
    assert all(j.deadline is None for j in default_workload(deadlines=False))
    assert first.total_work == pytest.approx(perf.total_iterations("cifar10", 2048))
    assert all(j.max_workers <= 64 and j.worker_demand.gpu == 1 for j in jobs)


def test_pollux_deadline_factor(tmp_path, perf):
    path = write(tmp_path / "w.csv", "name,time,application,num_replicas,batch_size\n"
                 "a,10,ncf,2,512\nb,5,bert,1,12\n")
    jobs = load_pollux_workload(path, deadline_factor=2.0)
    assert [j.name for j in jobs] == ["b", "a"]
    a = jobs[1]
    run = a.total_work / perf.ideal_rate(a, 2)
    assert a.deadline == pytest.approx(10 + 2 * run)


# ---- Synthetic -----------------------------------------------------------------------------


def test_synthetic_deterministic_and_seeded(perf):
    a = synthetic_workload(60, seed=3)
    assert a == synthetic_workload(60, seed=3)
    assert a != synthetic_workload(60, seed=4)
    assert len(a) == 60 and a[0].arrival == 0.0
    assert all(1 <= j.initial_workers <= 8 and j.max_workers == 8 for j in a)
    for j in a:
        run = j.total_work / perf.ideal_rate(j, j.initial_workers)
        assert 1.5 * run - 1e-6 <= j.deadline - j.arrival <= 4.0 * run + 1e-6
    gaps = np.diff([j.arrival for j in synthetic_workload(2000, arrival_rate=0.01)])
    assert gaps.mean() == pytest.approx(100, rel=0.1)


def test_synthetic_mix_and_ps_jobs(perf):
    jobs = synthetic_workload(40, apps={"ncf": 3, "bert": 1}, deadline_factor=None)
    assert {j.application for j in jobs} <= {"ncf", "bert"}
    assert all(j.deadline is None for j in jobs)
    ps = synthetic_workload(40, ps_jobs=True, seed=1)
    assert all(j.kind is JobKind.PS and j.num_ps >= 1 and j.application in perf.ps_models
               for j in ps)
    runs = [j.total_work / perf.ps_speed(j.application, j.initial_workers, j.num_ps)
            for j in ps]
    assert 600 * 0.99 <= min(runs) and max(runs) <= 4 * 3600 * 1.01
    half = synthetic_workload(200, ps_jobs=0.5)
    assert 60 < sum(j.kind is JobKind.PS for j in half) < 140
    with pytest.raises(ConfigError, match="unknown application 'resnet'"):
        synthetic_workload(5, apps=["resnet"])


# ---- load_trace ----------------------------------------------------------------------------


def test_load_trace_forms(tmp_path):
    assert len(load_trace("default")) == 160
    jobs = load_trace("synthetic:n=30,rate=0.01,deadline=2.0,max_workers=4,apps=ncf+cifar10")
    assert len(jobs) == 30 and all(j.deadline is not None for j in jobs)
    assert {j.application for j in jobs} <= {"ncf", "cifar10"}
    assert load_trace("synthetic:n=5", seed=2) == synthetic_workload(5, seed=2)
    pollux = write(tmp_path / "w.csv", "name,time,application,num_replicas,batch_size\n"
                   "a,0,cifar10,1,128\n")
    assert load_trace(pollux)[0].name == "a" and load_trace(f"pollux:{pollux}")[0].name == "a"
    philly = write(tmp_path / "p.csv", "arrival,duration,num_gpus\n5,100,2\n")
    assert load_trace(philly)[0].initial_workers == 2
    assert load_trace(f"philly:{philly}")[0].arrival == 0.0
    with pytest.raises(ConfigError, match="unknown trace 'nonsense'"):
        load_trace("nonsense")
    with pytest.raises(ConfigError, match="synthetic option 'bogus'"):
        load_trace("synthetic:bogus=1")
    # a negative factor is a number out of range, not a range missing its low end
    with pytest.raises(ConfigError, match=r"deadline factor must be > 0 .*got -1\.0$"):
        load_trace("synthetic:n=3,deadline=-1")
    assert {j.deadline is not None for j in load_trace("synthetic:n=3,deadline=1.5-4")} == {True}
    with pytest.raises(InputError, match="no such file"):
        load_trace(str(tmp_path / "gone.csv"))


# ---- Errors: file, line, column and what was expected -----------------------------------------

POLLUX_HEADER = "name,time,application,num_replicas,batch_size\n"


@pytest.mark.parametrize("body, line, column, expected", [
    ("a,0,ncf,1,256\nb,5,ncf,-2,256\n", 3, "num_replicas", "a positive integer, got '-2'"),
    ("a,0,ncf,1,256\nb,5,ncf,two,256\n", 3, "num_replicas", "a positive integer, got 'two'"),
    ("a,0,ncf,1.5,256\n", 2, "num_replicas", "a positive integer, got '1.5'"),
    ("a,0,ncf,1,256\n\nb,x,ncf,1,256\n", 4, "time", "a non-negative number, got 'x'"),
    ("a,-1,ncf,1,256\n", 2, "time", "a non-negative number, got '-1'"),
    # a time this far out has no millisecond left: the job "finished" at its arrival, in 0 h
    ("a,1e300,ncf,1,256\n", 2, "time", ("a non-negative number up to 9,007,199,254,741,"
                                        " got '1e300'")),
    ("a,0,resnet,1,256\n", 2, "application", "one of bert, cifar10"),
    ("a,0,ncf,1,\n", 2, "batch_size", "a positive integer, got ''"),
    (",0,ncf,1,256\n", 2, "name", "a non-empty name, got ''"),
    ("a,0,ncf,1,256\na,1,ncf,1,256\n", 3, "name", "a unique value, got 'a' again (first on line 2)"),
    # two bad cells: the earlier line's, though its column comes later (time before replicas)
    ("a,0,ncf,1,256\nb,5,ncf,-1,256\nc,x,ncf,1,256\n", 3, "num_replicas",
     "a positive integer, got '-1'"),
    # on one line, the first column's
    ("a,0,ncf,1,256\nb,x,ncf,-1,256\n", 3, "time", "a non-negative number, got 'x'"),
])
def test_pollux_bad_cells(tmp_path, body, line, column, expected):
    path = write(tmp_path / "workload.csv", POLLUX_HEADER + body)
    with pytest.raises(InputError) as err:
        load_pollux_workload(path)
    e = err.value
    assert (e.file, e.line, e.column) == (path, line, column)
    assert str(e).startswith(f"{path}:{line}: column '{column}': expected {expected}")


def test_pollux_example_message(tmp_path):
    rows = "".join(f"j{i},{i},ncf,1,256\n" for i in range(15)) + "j15,20,ncf,-2,256\n"
    path = write(tmp_path / "workload.csv", POLLUX_HEADER + rows)
    with pytest.raises(InputError) as err:
        load_pollux_workload(path)
    assert str(err.value) == (f"{path}:17: column 'num_replicas': expected a positive integer,"
                              " got '-2'")


@pytest.mark.parametrize("text, line, column, fragment", [
    ("timestamp,duration\n2017-10-09 07:01:55,66\n", 1, "num_gpus", "missing from the header"),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,66,1\n2017-10-09 07:01:56,66,-4\n",
     3, "num_gpus", "expected a positive integer, got '-4'"),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,0,1\n", 2, "duration",
     "expected a positive number, got '0'"),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,-5,1\n", 2, "duration",
     "expected a positive number, got '-5'"),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,1e20,1\n", 2, "duration",
     "expected a positive number up to 9,007,199,254,741, got '1e20'"),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,5,1\nyesterday,5,1\n", 3, "timestamp",
     "expected a timestamp like 2017-10-09 07:01:55, got 'yesterday'"),
    ("timestamp,duration,num_gpus\n2017-13-09 07:01:55,5,1\n", 2, "timestamp",
     "expected a timestamp"),
    ("timestamp,duration,num_gpus\n2017-10-09 07:01:55,5,1,9\n", 2, None,
     "expected 3 fields (like the header), got 4"),
    ("timestamp,duration,num_gpus\n", 2, None, "no data rows"),
])
def test_philly_bad_input(tmp_path, text, line, column, fragment):
    path = write(tmp_path / "philly.csv", text)
    with pytest.raises(InputError) as err:
        load_philly(path)
    e = err.value
    assert (e.file, e.line, e.column) == (path, line, column)
    assert fragment in str(e) and str(e).startswith(f"{path}:{line}: ")


def test_empty_and_missing_files(tmp_path):
    empty = write(tmp_path / "empty.csv", "")
    for load in (load_philly, load_pollux_workload, load_trace):
        with pytest.raises(InputError, match=r"empty\.csv: empty file"):
            load(empty)
    missing = str(tmp_path / "missing.csv")
    for load in (load_philly, load_pollux_workload, load_trace):
        with pytest.raises(InputError, match=r"missing\.csv: no such file"):
            load(missing)


def test_philly_options_are_not_taken_for_a_path():
    # "limit=100: no such file" left the user guessing that philly: takes a path
    with pytest.raises(InputError, match=r"^limit=100: no such file; philly:PATH takes the"
                                         r" path of a Philly CSV, not options \(the first N"
                                         r" jobs: --limit N\)$"):
        load_trace("philly:limit=100")


def test_unknown_header_format(tmp_path):
    path = write(tmp_path / "x.csv", "name,arrival,gpus\nj,0,1\n")
    # the header as the file has it, not sorted
    with pytest.raises(InputError, match=r"x\.csv:1: unknown trace format.*got name,arrival,gpus$"):
        load_trace(path)
    # after comment lines the header's own line is named
    path = write(tmp_path / "y.csv", "# a note\n# another\nname,arrival,gpus\nj,0,1\n")
    with pytest.raises(InputError, match=r"y\.csv:3: unknown trace format"):
        load_trace(path)


# ---- CLI -----------------------------------------------------------------------------------


def test_cli_trace_show(capsys, tmp_path):
    assert main(["trace", "show", "default", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["jobs"] == 160 and sum(summary["applications"].values()) == 160
    assert main(["trace", "show", "synthetic:n=20"]) == 0
    out = capsys.readouterr().out
    assert "initial workers (GPUs)" in out and "applications" in out
    bad = write(tmp_path / "bad.csv", POLLUX_HEADER + "a,0,ncf,0,256\n")
    assert main(["trace", "show", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [(f"workbench: error: {bad}:2: column 'num_replicas': expected a positive"
                    " integer, got '0'")]


def test_fast_and_text_paths_agree(tmp_path):
    # names that look like numbers stay as written; booleans are not counts
    path = write(tmp_path / "w.csv", POLLUX_HEADER + "01,0,ncf,1,256\n002,1,ncf,2,512\n")
    assert [j.name for j in load_pollux_workload(path)] == ["01", "002"]
    path = write(tmp_path / "b.csv", "arrival,duration,num_gpus\n0,5,True\n")
    with pytest.raises(InputError, match="column 'num_gpus': expected a positive integer,"
                       " got 'True'"):
        load_philly(path)
    path = write(tmp_path / "s.csv", "arrival, duration, num_gpus\n0, 5, 2\n")
    assert load_philly(path)[0].initial_workers == 2


def test_gzip_with_comment_lines_counts_physical_lines(tmp_path):
    path = tmp_path / "p.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("# attribution\n# more\narrival,duration,num_gpus\n0,5,1\n3,-1,1\n")
    with pytest.raises(InputError) as err:
        load_philly(path)
    assert str(err.value) == f"{path}:5: column 'duration': expected a positive number, got '-1'"
    with gzip.open(path, "wt") as f:
        f.write("# attribution\narrival,duration,num_gpus\n0,5,1\n3,1,1\n")
    assert len(load_trace(str(path))) == 2


def test_load_trace_limit():
    assert len(load_trace("philly", limit=100)) == 100
    jobs = load_trace("default", limit=10)
    assert [j.name for j in jobs] == [j.name for j in default_workload()[:10]]
    with pytest.raises(ConfigError):
        load_trace("default", limit=-1)


SHARED_WORKLOADS = sorted((SHARED_PHILLY.parents[1] / "pollux").glob("workloads*/*.csv"))


@pytest.mark.skipif(not SHARED_WORKLOADS, reason="shared Pollux workloads not present")
def test_every_shared_pollux_workload_loads():
    for path in SHARED_WORKLOADS:
        jobs = load_pollux_workload(path, deadline_factor=2.0)
        rows = len(path.read_text().strip().splitlines()) - 1
        assert len(jobs) == rows and rows in (80, 160, 240, 320)
        assert all(j.deadline > j.arrival for j in jobs)
