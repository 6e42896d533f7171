"""Snapshots (`sim.snapshot`, `sim.restore`): a simulator's present round-trips through JSON
into a simulator that carries on as a fork of the original does; a job of an unknown
application runs at its fitted rate; other pods' resources and cordoned nodes are kept;
previews and what-ifs run on a backend that can only be snapshotted; bad files get one line
naming the field; `workbench simulate --from-snapshot` replays a file."""

from __future__ import annotations

import json

import pytest

from workbench.backend import Forkable, Snapshottable
from workbench.cli import main
from workbench.control import Controller
from workbench.errors import InputError
from workbench.model import JobSpec, JobState, Node, Resources
from workbench.policies import make_policy
from workbench.session import load_jobs, load_nodes, simulate
from workbench.sim.restore import fitted_bands, fitted_perf, from_snapshot
from workbench.sim.snapshot import JobRecord, NodeRecord, Snapshot
from workbench.whatif import prepare_preview, prepare_what_if


@pytest.fixture(scope="module")
def busy():
    """A simulated run two hours in, with jobs running, waiting and finished."""
    jobs = load_jobs("default", limit=80)
    controller = simulate(load_nodes("default", "small"), jobs, "fifo", restart_delay=0.0)
    controller.run(until=jobs[0].arrival + 2 * 3600)
    backend = controller.backend
    states = {j.state for j in backend.jobs.values()}
    assert {JobState.RUNNING, JobState.PENDING, JobState.COMPLETED} <= states
    return controller


def _finishes(backend, engine: str) -> dict[str, float | None]:
    c = Controller(backend, make_policy(engine))
    c.run()
    return {j.name: j.finish_time for j in c.backend.jobs.values()}


def test_round_trip_on_the_simulator(busy, tmp_path):
    backend = busy.backend
    snapshot = backend.snapshot("fifo")
    path = tmp_path / "cluster.json"
    snapshot.save(path)
    loaded = Snapshot.load(path)
    assert loaded.to_json() == json.loads(path.read_text()) == snapshot.to_json()
    restored = from_snapshot(loaded)
    assert restored.now == backend.now
    assert [n.name for n in restored.nodes] == [n.name for n in backend.nodes]
    assert set(restored.jobs) == set(backend.jobs)
    assert restored.pending_arrivals() == backend.pending_arrivals()
    for name, job in backend.jobs.items():
        twin = restored.jobs[name]
        assert (twin.state, twin.workers, twin.ps) == (job.state, job.workers, job.ps), name
        assert twin.progress == pytest.approx(job.progress), name
    assert [j.name for j in restored.observe().iter_waiting()] == \
        [j.name for j in backend.observe().iter_waiting()]
    # carried on under the same engine it does what a fork of the original does
    for engine in ("fifo", "tiresias"):
        assert _finishes(restored.fork(), engine) == pytest.approx(
            _finishes(backend.fork(), engine), abs=1e-6)


def test_unknown_application_runs_at_its_fitted_rate():
    nodes = [Node("n0", 32, 128, 4)]
    spec = JobSpec("mystery-0", "mystery", arrival=0.0, total_work=10_000, batch_size=64,
                   initial_workers=2, max_workers=4)
    snapshot = Snapshot.from_json({
        "format": "workbench-snapshot", "version": 1, "source": "kubernetes",
        "taken_at": 1000.0, "wall_time": 0.0,
        "simulator": {"restart_delay": 0, "checkpoint_interval": 600},
        "nodes": [{"name": "n0", "cpus": 32, "mem": 128, "gpus": 4}],
        "jobs": [{"spec": {"name": "mystery-0", "application": "mystery", "arrival": 0.0,
                           "total_work": 10_000, "batch_size": 64, "initial_workers": 2,
                           "max_workers": 4},
                  "state": "running", "workers": {"n0": 2}, "progress": 5000, "throughput": 10,
                  "history": [[0, 0, None], [300, 2900, None], [600, 6100, None],
                              [900, 9000, None]]}]})
    assert snapshot.jobs[0].spec == spec and snapshot.nodes[0].node == nodes[0]
    sim = from_snapshot(snapshot)
    sim.advance(10_000)
    job = sim.jobs["mystery-0"]
    assert job.state is JobState.COMPLETED and job.finish_time == pytest.approx(1500.0)
    perf = fitted_perf(snapshot, sim.perf.base)
    fit = perf.fits["mystery-0"]
    assert fit.rate_at(4) == pytest.approx(10 * 2 ** 0.8)
    low, high = fit.rate_range(4)
    assert low < 10 * 2 ** 0.5 < 10 * 2 ** 0.8 < 20 < high
    band = fitted_bands(snapshot, perf)[0]
    assert band["low"] < band["finish"] < band["high"]
    assert band["finish"] == pytest.approx(1500.0)
    assert band["rate_sd"] > 0.02  # the history's rates spread (9.7 to 10.7 it/s)


def _two_nodes(**job) -> dict:
    """A snapshot's JSON: nodes n0, n1 (4 GPUs each) and one job of an application the model
    knows, running two workers on n0."""
    spec = load_jobs("default", limit=1)[0]
    snap = Snapshot(100.0, 0.0, "kubernetes",
                    [NodeRecord(Node("n0", 32, 128, 4)), NodeRecord(Node("n1", 32, 128, 4))],
                    [JobRecord(spec.with_(arrival=0.0, initial_workers=2, min_workers=1,
                                          max_workers=2), JobState.RUNNING, {"n0": 2},
                               target_workers=2, progress=10.0, **job)])
    return snap.to_json()


def test_other_pods_and_cordoned_nodes_are_kept():
    data = _two_nodes()
    data["nodes"][1]["other"] = {"cpu": 2.0, "mem": 4.0, "gpu": 1.0}
    data["nodes"][0]["up"] = False  # cordoned: its job carries on
    sim = from_snapshot(Snapshot.from_json(data))
    state = sim.observe()
    assert state.allocated[1].tolist() == [2.0, 4.0, 1.0]
    assert (state.gpu_free[1] == 0).sum() == 1 and (state.gpu_free[0] == 0).sum() == 2
    assert not state.node_up[0] and state.node_up[1]
    assert next(iter(sim.active.values())).state is JobState.RUNNING


def test_measured_throughput_calibrates_a_known_application():
    data = _two_nodes()
    sim = from_snapshot(Snapshot.from_json(data))
    model = next(iter(sim.active.values())).throughput
    data = _two_nodes(throughput=model / 2)
    slow = next(iter(from_snapshot(Snapshot.from_json(data)).active.values()))
    assert slow.throughput == pytest.approx(model / 2)


class SnapshotOnly:
    """A backend that cannot fork, only write its present down (as a live cluster)."""

    def __init__(self, sim) -> None:
        self._sim = sim

    def snapshot(self, engine: str = ""):
        return self._sim.snapshot(engine)

    def __getattr__(self, name):
        if name in ("fork", "gpu_holders", "usage"):
            raise AttributeError(name)
        return getattr(self._sim, name)


def test_preview_and_what_if_on_a_backend_that_only_snapshots(busy):
    live = SnapshotOnly(busy.backend)
    assert isinstance(live, Snapshottable) and not isinstance(live, Forkable)
    preview = prepare_preview(live, busy.policy, make_policy("tiresias"), 3600)()
    assert preview.snapshot_at is not None and "snapshot of the cluster" in preview.summary()
    exact = prepare_preview(busy.backend, busy.policy, make_policy("tiresias"), 3600)()
    assert exact.snapshot_at is None
    pd_cols = ["policy", "completed", "queued_at_end", "unfinished"]
    assert preview.table[pd_cols].to_dict() == exact.table[pd_cols].to_dict()
    result = prepare_what_if(live, ["fifo"], busy.backend.now + 3600, 30.0)()
    assert result.snapshot_at is not None and "snapshot" in result.table.loc[0, "note"]



def _good(busy) -> dict:
    return busy.backend.snapshot("fifo").to_json()


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(format="something-else"), "field format"),
    (lambda d: d.update(version=2), "field version: this workbench reads version 1"),
    (lambda d: d.pop("nodes"), "field nodes: missing"),
    (lambda d: d["nodes"][1].update(gpus="four"), "field nodes[1].gpus: expected an integer"),
    (lambda d: d["nodes"][0].update(cpus=-1), "field nodes[0].cpus: expected a number >= 0"),
    (lambda d: d["jobs"][0].update(state="sleeping"), "field jobs[0].state"),
    (lambda d: d["jobs"][0]["spec"].pop("total_work"), "field jobs[0].spec.total_work: missing"),
    (lambda d: d["jobs"][0]["spec"].update(min_workers=9), "field jobs[0].spec: job"),
    (lambda d: d["jobs"][0].update(colour="red"), "field jobs[0].colour: unknown field"),
    (lambda d: d["jobs"][-1].update(workers={"nowhere": 1}),
     "field jobs[-1].workers: unknown node 'nowhere'"),
    (lambda d: d["simulator"].update(restart_delay=float("inf")),
     "field simulator.restart_delay: expected a finite number"),
    (lambda d: d["simulator"].update(restart_delay=1e300),
     "field simulator.restart_delay: expected at most 86400 s, got 1e+300"),
])
def test_bad_files_get_one_line_naming_the_field(busy, tmp_path, edit, field):
    data = _good(busy)
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    field = field.replace("jobs[-1]", f"jobs[{len(data['jobs']) - 1}]")
    with pytest.raises(InputError) as e:
        Snapshot.load(path)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and field in message


def test_not_json_and_missing_file(tmp_path):
    (tmp_path / "x.json").write_text("{nope")
    with pytest.raises(InputError, match="not JSON"):
        Snapshot.load(tmp_path / "x.json")
    with pytest.raises(InputError, match="cannot read"):
        Snapshot.load(tmp_path / "missing.json")


def test_a_file_not_utf8_is_one_line(tmp_path, capsys):
    # a UnicodeDecodeError traceback from `simulate --from-snapshot`
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00bad\x80")
    assert main(["simulate", "--from-snapshot", str(tmp_path / "binary.csv")]) == 2
    err = capsys.readouterr().err
    assert err == f"workbench: error: {tmp_path / 'binary.csv'}: not UTF-8 text, expected a" \
                  " snapshot's JSON\n"


def test_simulate_from_snapshot_cli(busy, tmp_path, capsys):
    path = tmp_path / "cluster.json"
    busy.backend.snapshot("fifo").save(path)
    assert main(["simulate", "--from-snapshot", str(path), "--policy", "fifo", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    row = out["results"][0]
    assert out["jobs"] == 80 and row["completed"] + row["rejected"] == 80
    assert row["gpu_frag_avg"] is not None  # measured as `simulate --trace` measures it
    busy.run()  # the original run to the end: the replay ends as it does
    assert row["completed"] == sum(1 for j in busy.backend.finished
                                   if j.state is JobState.COMPLETED)
    # bad input: one line, exit 2
    data = json.loads(path.read_text())
    data["version"] = 7
    path.write_text(json.dumps(data))
    assert main(["simulate", "--from-snapshot", str(path), "--policy", "fifo"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "field version" in err
    assert main(["simulate", "--from-snapshot", str(path), "--cluster", "small"]) == 2
    assert "drop --cluster" in capsys.readouterr().err


def test_resources_default():
    assert Snapshot.from_json(
        {"format": "workbench-snapshot", "version": 1, "source": "x", "taken_at": 0,
         "wall_time": 0, "simulator": {"restart_delay": 0, "checkpoint_interval": 0},
         "nodes": [{"name": "a", "cpus": 1, "mem": 1, "gpus": 0}], "jobs": []}
    ).nodes[0].other == Resources()
