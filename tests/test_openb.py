"""GPU-sharing placement plugins, the fragmentation measure, the openb loader and protocol.

All on small made-up clusters and pod lists: the openb files themselves are not needed.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from workbench.cli import main
from workbench.errors import InputError
from workbench.model import ClusterState, Node, Resources
from workbench.placement import curves, replay
from workbench.placement.fragmentation import (
    MILLI,
    FragmentationIndex,
    node_fragmentation,
    task_classes,
)
from workbench.placement.plugins import PLACEMENT_PLUGINS
from workbench.placement.state import PlacementState, Task
from workbench.traces.openb import NODE_FILE, load_openb_nodes, load_openb_pods

POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")


def small_nodes() -> list[Node]:
    nodes = []
    for i in range(12):
        gpus, model = [(8, "G2"), (2, "T4"), (4, "V100"), (1, "P100")][i % 4]
        nodes.append(Node(f"n{i}", cpus=16.0 * gpus / 2 + 8, mem=64.0 * gpus, gpus=gpus,
                          gpu_model=model))
    return nodes


def random_tasks(rng: np.random.Generator, n: int) -> list[Task]:
    tasks = []
    for _ in range(n):
        kind = rng.integers(5)
        models = [None, None, frozenset({"T4"}), frozenset({"G2", "V100"})][rng.integers(4)]
        cpu, mem = int(rng.integers(0, 12)) * 500, int(rng.integers(0, 40)) * 1024
        if kind == 0:
            tasks.append(Task(cpu, mem))
        elif kind <= 2:
            tasks.append(Task(cpu, mem, 1, int(rng.integers(1, 20)) * 50, models))
        else:
            tasks.append(Task(cpu, mem, int(rng.choice([1, 2, 4, 8])), MILLI, models))
    return tasks


def test_task_kinds_and_validation():
    assert Task(1000, 0, 1, 300).shared and not Task(1000, 0, 1, 1000).shared
    assert Task(0, 0, 2, 1000).gpu_total == 2000 and Task(500).gpu_total == 0
    with pytest.raises(ValueError):
        Task(0, 0, 2, 500)  # only one GPU can be shared
    with pytest.raises(ValueError):
        Task(0, 0, 1, 0)
    t = Task.from_resources(Resources(cpu=2.5, mem=4, gpu=0.25))
    assert (t.cpu_milli, t.mem_mib, t.num_gpu, t.gpu_milli) == (2500, 4096, 1, 250)
    t = Task.from_resources(Resources(cpu=4, mem=16, gpu=2))
    assert (t.num_gpu, t.gpu_milli) == (2, MILLI)


@pytest.mark.parametrize("plugin", list(PLACEMENT_PLUGINS))
def test_plugins_never_over_allocate_and_respect_gpu_spec(plugin):
    nodes = small_nodes()
    tasks = random_tasks(np.random.default_rng(1), 400)
    workload = task_classes([t.cpu_milli for t in tasks], [t.num_gpu for t in tasks],
                            [t.gpu_milli for t in tasks], [t.gpu_models for t in tasks])
    state = PlacementState.from_nodes(nodes, workload)
    rng = np.random.default_rng(2)
    used_cpu = np.zeros(len(nodes), dtype=np.int64)
    used_mem = np.zeros(len(nodes), dtype=np.int64)
    used_gpu = np.zeros_like(state.gpu_free)
    placed = failed = 0
    for task in tasks:
        choice = PLACEMENT_PLUGINS[plugin](state, task, rng)
        feasible = state.feasible(task)
        if choice is None:
            assert not feasible.any()  # a plugin fails only when nothing fits
            failed += 1
            continue
        node, gpus = choice
        assert feasible[node]
        if task.gpu_models is not None:
            assert nodes[node].gpu_model in task.gpu_models
        assert len(gpus) == task.num_gpu
        state.allocate(node, gpus, task)
        placed += 1
        used_cpu[node] += task.cpu_milli
        used_mem[node] += task.mem_mib
        for g in gpus:
            used_gpu[node, g] += task.gpu_milli
    assert placed > 50 and failed > 0  # the cluster filled up
    # Exact accounting: what was handed out plus what is free is the capacity, never more.
    assert (state.cpu_free >= 0).all() and (state.mem_free >= 0).all()
    assert (state.cpu_free + used_cpu == state.cpu_capacity).all()
    assert (state.mem_free + used_mem == state.mem_capacity).all()
    capacity = np.where(np.arange(state.gpu_free.shape[1]) < state.gpu_count[:, None], MILLI, 0)
    assert (state.gpu_free >= 0).all() and (state.gpu_free + used_gpu == capacity).all()
    assert state.allocated_gpu_milli == used_gpu.sum()


def test_fractional_accounting_adds_up_and_overallocation_is_refused():
    state = PlacementState.from_nodes([Node("a", 8, 32, 2, "T4")])
    half = Task(1000, 1024, 1, 500)
    state.allocate(0, (0,), half)
    state.allocate(0, (0,), half)
    assert state.gpu_free[0].tolist() == [0, 1000]
    assert state.allocated_gpu_milli == 1000
    with pytest.raises(ValueError):
        state.allocate(0, (0,), Task(0, 0, 1, 1))  # GPU 0 is full
    with pytest.raises(ValueError):
        state.allocate(0, (1,), Task(7000, 0, 1, 100))  # only 6 cores left
    with pytest.raises(ValueError):
        state.allocate(0, (1,), Task(0, 0, 1, 100, frozenset({"A100"})))  # wrong model
    with pytest.raises(ValueError):
        state.allocate(0, (1, 1), Task(0, 0, 2, MILLI))  # the same GPU twice
    quarter = Task(0, 0, 1, 250)
    for _ in range(4):
        state.allocate(0, (1,), quarter)
    assert state.gpu_free[0].tolist() == [0, 0] and state.allocated_gpu_milli == 2000
    state.release(0, (0,), half)
    assert state.gpu_free[0].tolist() == [500, 0] and state.cpu_free[0] == 7000
    with pytest.raises(ValueError):
        state.release(0, (0,), Task(0, 0, 1, 600))  # would exceed one GPU


def hand_classes():
    # 5 sharing tasks (0.5 GPU, 2 cores), 3 one-GPU tasks (4 cores), 2 CPU-only (1 core)
    cpu = [2000] * 5 + [4000] * 3 + [1000] * 2
    num = [1] * 5 + [1] * 3 + [0] * 2
    milli = [500] * 5 + [1000] * 3 + [0] * 2
    return task_classes(cpu, num, milli)


def test_fragmentation_matches_hand_computed_example():
    classes = hand_classes()
    assert sorted(np.round(classes.weight, 3).tolist()) == [0.2, 0.3, 0.5]
    gpu_free = np.array([[1000, 300], [1000, 300], [0, 0]])
    cpu_free = np.array([10_000, 3_000, 50_000])
    mem_free = np.zeros(3, dtype=np.int64)
    frag = node_fragmentation(gpu_free, cpu_free, mem_free, ["T4"] * 3, classes)
    # node 0: 0.5 x 300 (the 300-milli GPU is too small for 500) + 0.3 x 300 (the whole GPU
    #   is usable by the 1-GPU task) + 0.2 x 1300 (CPU-only tasks use no GPU) = 500
    # node 1: 3 cores cannot host the 4-core task: 0.5 x 300 + 0.3 x 1300 + 0.2 x 1300 = 800
    # node 2: nothing free, nothing fragmented
    assert frag.tolist() == pytest.approx([500.0, 800.0, 0.0])


def test_fgd_price_matches_measure_before_and_after():
    classes = hand_classes()
    state = PlacementState.from_nodes([Node("a", 10, 64, 2, "T4"), Node("b", 3, 64, 4, "T4")],
                                      classes)
    index = state.fragmentation_index()
    for node, gpus, task in [(0, (1,), Task(1000, 0, 1, 700)), (1, (0, 2), Task(500, 0, 2, MILLI)),
                             (0, (), Task(6000, 0))]:
        before = index.node_values().copy()
        nodes = np.array([node])
        if task.shared:
            price = index.delta_shared(nodes, state.gpu_free[node, list(gpus)], task.cpu_milli,
                                       task.mem_mib, task.gpu_milli)[0]
        else:
            price = index.delta_exclusive(nodes, task.cpu_milli, task.mem_mib, task.num_gpu)[0]
        state.allocate(node, gpus, task)
        fresh = FragmentationIndex(classes, state.gpu_models, state.gpu_free, state.cpu_free,
                                   state.mem_free).node_values()
        assert index.node_values() == pytest.approx(fresh)  # kept current by allocate
        assert fresh[node] - before[node] == pytest.approx(price)


def test_fgd_puts_a_small_share_on_the_used_gpu():
    # Node a has one GPU with 600 free: FGD puts a 0.5 task there rather than breaking a
    # whole GPU, which the 1-GPU tasks of the workload need.
    classes = hand_classes()
    state = PlacementState.from_nodes([Node("a", 32, 64, 2, "T4"), Node("b", 32, 64, 2, "T4")],
                                      classes)
    state.allocate(0, (0,), Task(0, 0, 1, 400))
    choice = PLACEMENT_PLUGINS["fgd"](state, Task(2000, 0, 1, 500), np.random.default_rng(0))
    assert choice == (0, (0,))


def test_cluster_state_adapter():
    nodes = [Node("a", 8, 32, 2, "T4"), Node("b", 16, 64, 4, "V100"), Node("c", 4, 8, 0, "")]
    gpu_free = np.array([[1.0, 0.25, np.nan, np.nan], [1, 1, 0, 1], [np.nan] * 4])
    capacity = np.array([[8, 32, 2], [16, 64, 4], [4, 8, 0]], dtype=float)
    allocated = np.array([[3, 8, 0.75], [4, 16, 1], [1, 1, 0]], dtype=float)
    cs = ClusterState(0.0, nodes, capacity, allocated, gpu_free,
                      np.array([True, True, False]), {})
    state = PlacementState.from_cluster_state(cs)
    assert state.gpu_count.tolist() == [2, 4, 0]
    assert state.gpu_free[0, :2].tolist() == [1000, 250] and state.gpu_free[1].tolist() == [
        1000, 1000, 0, 1000]
    assert state.cpu_free.tolist() == [5000, 12000, 0]  # node c is down
    assert state.mem_free.tolist() == [24 * 1024, 48 * 1024, 0]
    task = Task(1000, 1024, 1, 500)
    assert state.feasible(task).tolist() == [True, True, False]
    # best fit: node a is left with less; its GPU 1 (250 free) is too small for 500
    assert PLACEMENT_PLUGINS["best-fit"](state, task, np.random.default_rng(0)) == (0, (0,))


# ---- loader ---------------------------------------------------------------------------------


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loaders_convert_units(tmp_path):
    nodes = load_openb_nodes(write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
                                   "x,96000,393216,8,G2\ny,32000,65536,0,\n"))
    assert nodes[0] == Node("x", 96.0, 384.0, 8, "G2") and nodes[1].gpus == 0
    pods = load_openb_pods(write(tmp_path, "p.csv", POD_HEADER
                                 + "a,6000,12288,1,460,,LS,Running,10,20,10\n"
                                 + "b,12000,16384,2,1000,V100M16|V100M32,BE,Pending,5,,\n"
                                 + "c,4000,1024,0,0,,BE,Running,1,2,1\n"))
    assert pods["gpu_milli"].tolist() == [460, 1000, 0]
    assert pods["gpu_spec"].astype(str).tolist() == ["", "V100M16|V100M32", ""]
    assert np.isnan(pods["scheduled_time"].iloc[1]) and pods["creation_time"].iloc[0] == 10
    short = load_openb_pods(write(tmp_path, "m.csv", "name,cpu_milli,memory_mib,num_gpu,"
                                  "gpu_milli\na,1000,1024,8,1000\n"))
    assert short["gpu_spec"].astype(str).tolist() == [""] and short["num_gpu"].tolist() == [8]


@pytest.mark.parametrize("row, line, column, words", [
    ("b,6000,12288,1,half,,LS,Running,0,1,0", 3, "gpu_milli", "0 to 1000"),
    ("b,6000,12288,1,1200,,LS,Running,0,1,0", 3, "gpu_milli", "0 to 1000"),
    ("b,6000,12288,2,500,,LS,Running,0,1,0", 3, "gpu_milli", "multi-GPU"),
    ("b,-5,12288,1,500,,LS,Running,0,1,0", 3, "cpu_milli", "non-negative"),
    ("b,6000,12288,1,500,,LS,Running,soon,1,0", 3, "creation_time", "seconds"),
    ("b,6000,12288,1,500,T4||G2,LS,Running,0,1,0", 3, "gpu_spec", "separated"),
])
def test_bad_pod_csv_names_file_line_column(tmp_path, row, line, column, words):
    path = write(tmp_path, "bad.csv", POD_HEADER + "a,1000,1024,1,1000,,LS,Running,0,1,0\n"
                 + row + "\n")
    with pytest.raises(InputError) as err:
        load_openb_pods(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line}: column '{column}'") and words in msg
    assert "\n" not in msg


def test_bad_shapes_of_files(tmp_path):
    with pytest.raises(InputError, match=r"bad\.csv:3: expected 11 fields, got 10"):
        load_openb_pods(write(tmp_path, "bad.csv", POD_HEADER
                              + "a,1000,1024,1,1000,,LS,Running,0,1,0\n"
                              + "b,1000,1024,1,1000,,LS,Running,0,1\n"))
    with pytest.raises(InputError, match=r"x\.csv:1: missing column\(s\) gpu_milli"):
        load_openb_pods(write(tmp_path, "x.csv", "name,cpu_milli,memory_mib,num_gpu\na,1,1,0\n"))
    with pytest.raises(InputError, match="no such file"):
        load_openb_nodes(tmp_path / "missing.csv")
    with pytest.raises(InputError, match=r"n\.csv:2: column 'model'"):
        load_openb_nodes(write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\n"
                               "x,1000,1024,2,\n"))


# ---- protocol -------------------------------------------------------------------------------


def synthetic_pods(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    kind = rng.choice(5, n, p=[0.1, 0.45, 0.3, 0.1, 0.05])
    num = np.choose(kind, [0, 1, 1, 2, 8])
    milli = np.where(kind == 1, rng.choice([250, 500, 700], n), np.where(kind == 0, 0, MILLI))
    cpu = rng.choice([2000, 4000, 8000], n)
    return pd.DataFrame({"name": [f"p{i}" for i in range(n)], "cpu_milli": cpu,
                         "memory_mib": np.full(n, 4096), "num_gpu": num, "gpu_milli": milli,
                         "gpu_spec": pd.Categorical([""] * n)})


def small_cluster() -> list[Node]:
    return [Node(f"n{i}", 64.0, 512.0, 8 if i % 3 == 0 else 4, "G2") for i in range(24)]


def test_draw_reaches_the_load_and_stops():
    requested = np.array([0.0, 0.5, 1.0, 2.0])
    order = replay.draw_pods(requested, 100.0, np.random.default_rng(3), 1.3)
    total = requested[order].sum()
    assert total >= 130 and total - requested[order].max() < 130 + 1e-9


def test_replay_is_deterministic_per_seed():
    workload = replay.prepare_workload(synthetic_pods(), "synthetic")
    nodes = small_cluster()
    a = replay.replay(nodes, workload, "fgd", 7)
    b = replay.replay(nodes, workload, "fgd", 7)
    c = replay.replay(nodes, workload, "fgd", 8)
    assert np.array_equal(a.allocated, b.allocated) and np.array_equal(a.placed, b.placed)
    assert np.array_equal(a.frag_ratio, b.frag_ratio)
    assert not np.array_equal(a.requested, c.requested)
    assert a.requested[-1] >= 1.3 and a.failed > 0
    assert 0 < a.allocated_at(1.0) <= a.allocated_at(1.3) <= 1.0
    assert np.all(np.diff(a.allocated) >= 0)  # nothing ever leaves


def test_fgd_beats_random_on_a_small_seeded_instance():
    workload = replay.prepare_workload(synthetic_pods(), "synthetic")
    nodes = small_cluster()
    share = {p: np.mean([replay.replay(nodes, workload, p, s).allocated_at(1.3)
                         for s in range(3)]) for p in ("random", "fgd")}
    # measured (seeds 0-2): random 0.88-0.93, fgd 0.97-0.995
    assert share["fgd"] > share["random"] + 0.05


def test_summaries_and_curves(tmp_path):
    workload = replay.prepare_workload(synthetic_pods(200), "synthetic")
    replays = replay.run(small_cluster(), workload, ["random", "best-fit"], range(2))
    rows = replay.mean_rows(replays)
    assert [r["plugin"] for r in rows] == ["random", "best-fit"] and rows[0]["seeds"] == 2
    assert {"alloc@100%", "alloc@130%", "frag@130%", "alloc@130% sd"} <= set(rows[0])
    data = replay.curves(replays)
    assert data["random"]["alloc"][0] == 0 and data["random"]["alloc"][-1] > 0.5
    assert curves.write_curves(str(tmp_path / "c.svg"), data, "t") == "svg"
    assert "<polyline" in (tmp_path / "c.svg").read_text()
    assert curves.write_curves(str(tmp_path / "c.csv"), data) == "csv"
    assert pd.read_csv(tmp_path / "c.csv").columns.tolist() == [
        "plugin", "requested_load", "allocated_share", "fragmentation_ratio"]


def test_cli_openb(tmp_path, capsys):
    nodes = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},64000,262144,{4 if i % 2 else 8},G2\n" for i in range(10)))
    pods = tmp_path / "pods.csv"
    synthetic_pods(150).to_csv(pods, index=False)
    code = main(["openb", "--pods", str(pods), "--nodes", str(nodes), "--plugins", "random,fgd",
                 "--seeds", "2", "--json", "--quiet", "--plot", str(tmp_path / "c.svg")])
    assert code == 0
    import json

    result = json.loads(capsys.readouterr().out)
    assert len(result["runs"]) == 4 and result["gpus"] == 60
    assert (tmp_path / "c.svg").exists()
    assert main(["openb", "--data", str(tmp_path / "nowhere")]) == 2
    assert main(["openb", "--pods", str(pods), "--nodes", str(nodes), "--plugins", "tetris"]) == 2
    assert main(["openb", "--pods", str(pods), "--nodes", str(nodes), "--plot", "c.pdf"]) == 2
    bad = write(tmp_path, "bad.csv", POD_HEADER + "a,1,1,1,2000,,LS,Running,0,1,0\n")
    assert main(["openb", "--pods", str(bad), "--nodes", str(nodes)]) == 2
    assert f"{bad}:2: column 'gpu_milli'" in capsys.readouterr().err


def test_cluster_fragmentation_of_a_cluster_state():
    from workbench.placement.state import cluster_fragmentation, workload_of

    nodes = [Node("a", 8, 32, 2, "T4"), Node("b", 16, 64, 4, "V100")]
    gpu_free = np.array([[1.0, 0.25, np.nan, np.nan], [1, 1, 0, 1]])
    cs = ClusterState(0.0, nodes, np.array([[8, 32, 2], [16, 64, 4]], float),
                      np.array([[3, 8, 0.75], [4, 16, 1]], float), gpu_free,
                      np.array([True, True]), {})
    workload = workload_of([Task(1000, 0, 1, 500), Task(1000, 0, 1, MILLI), Task(500)])
    got = cluster_fragmentation(cs, workload)
    # a: (250 + 250 + 1250) / 3; b: (0 + 0 + 3000) / 3 -> 1583.3 milli of 4250 free
    assert got["fragmented_gpus"] == pytest.approx(4750 / 3 / 1000)
    assert got["fragmentation_ratio"] == pytest.approx(4750 / 3 / 4250)


def test_the_cli_finds_openb_data_as_a_notebook_does(tmp_path, monkeypatch, capsys):
    """`openb` without --data looks where a notebook looks (`find_data_dir`): $WORKBENCH_OPENB_DATA,
    else ../shared/data/openb from the working directory or one above it; it used to look
    from the working directory only, and said 'not found' one directory down."""
    data = tmp_path / "shared" / "data" / "openb"
    data.mkdir(parents=True)
    (data / NODE_FILE).write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},64000,262144,4,G2\n" for i in range(6)))
    synthetic_pods(40).to_csv(data / "openb_pod_list_default.csv", index=False)
    deep = tmp_path / "repo" / "notebooks"
    deep.mkdir(parents=True)
    monkeypatch.delenv("WORKBENCH_OPENB_DATA", raising=False)
    monkeypatch.chdir(deep)
    assert main(["openb", "--plugins", "best-fit", "--seeds", "1", "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["gpus"] == 24
    monkeypatch.chdir(tmp_path.parent)  # nothing above: not found, saying where it looked
    monkeypatch.setenv("WORKBENCH_OPENB_DATA", str(tmp_path / "nowhere"))
    assert main(["openb", "--plugins", "best-fit", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "openb data not found ($WORKBENCH_OPENB_DATA" in err and err.count("\n") == 1
    monkeypatch.setenv("WORKBENCH_OPENB_DATA", str(data))
    assert main(["openb", "--plugins", "best-fit", "--seeds", "1", "--json", "--quiet"]) == 0


def test_an_openb_trace_without_data_says_what_a_trace_spec_takes(tmp_path, monkeypatch, capsys):
    # simulate --trace openb told the user to "pass --data DIR", an option simulate has not
    monkeypatch.setenv("WORKBENCH_OPENB_DATA", str(tmp_path / "nowhere"))
    assert main(["simulate", "--trace", "openb"]) == 2
    err = capsys.readouterr().err
    assert "openb data not found" in err and err.count("\n") == 1
    assert "openb:pods=PATH" in err and "--data" not in err
