"""Placement plugins inside the engines (`fifo+fgd`, `--placement`), and GPU fragmentation in
the run metrics and the timeline. Made-up GPU-sharing workloads: no openb files needed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workbench.cli import main
from workbench.errors import ConfigError
from workbench.experiment import run_policy
from workbench.metrics import FragmentationMeter
from workbench.model import Node
from workbench.placement.plugins import PLACEMENT_PLUGINS
from workbench.placement.state import cluster_fragmentation, workload_of_jobs
from workbench.policies import make_policy
from workbench.sim import SimBackend
from workbench.traces.openb_jobs import openb_jobs

ENGINES = ("fifo", "drf", "tiresias", "kube-default")


def sharing_pods(seed: int = 0, n: int = 300) -> pd.DataFrame:
    """An openb-like pod list: mostly GPU-sharing pods, some whole-GPU and CPU-only ones."""
    rng = np.random.default_rng(seed)
    shapes = [(1000, 1, 500), (1000, 1, 300), (2000, 1, 700), (1000, 1, 250), (2000, 1, 1000),
              (4000, 2, 1000), (4000, 0, 0)]
    pick = rng.choice(len(shapes), n, p=[.22, .2, .18, .12, .14, .06, .08])
    start = rng.uniform(0, 1e5, n)
    return pd.DataFrame({
        "name": [f"pod-{i}" for i in range(n)],
        "cpu_milli": [shapes[k][0] for k in pick], "memory_mib": 8192,
        "num_gpu": [shapes[k][1] for k in pick], "gpu_milli": [shapes[k][2] for k in pick],
        "creation_time": start, "deletion_time": start + rng.lognormal(7.5, 1.0, n)})


def small_cluster(nodes: int = 6) -> list[Node]:
    return [Node(f"n{i}", cpus=[32, 24, 64][i % 3], mem=256, gpus=[4, 2, 8][i % 3],
                 gpu_model="T4") for i in range(nodes)]


class Checked:
    """Wraps an engine: every round the state it sees must have no node over-allocated."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.rounds = 0

    def __getattr__(self, name):
        return getattr(self.policy, name)

    def schedule(self, state):
        cap, alloc = state.capacity, state.allocated
        assert (alloc <= cap + 1e-6).all(), "a node holds more than it has"
        gpu = state.gpu_free[~np.isnan(state.gpu_free)]
        assert ((gpu >= -1e-9) & (gpu <= 1 + 1e-9)).all(), "a GPU is over-shared"
        used = cap[:, 2] - np.nansum(state.gpu_free, axis=1)
        assert np.allclose(used, alloc[:, 2]), "per-GPU accounting disagrees with the node's"
        self.rounds += 1
        return self.policy.schedule(state)


@pytest.mark.parametrize("plugin", list(PLACEMENT_PLUGINS))
@pytest.mark.parametrize("engine", ENGINES)
def test_every_plugin_in_every_engine_keeps_nodes_within_capacity(engine, plugin):
    jobs = openb_jobs(sharing_pods(), n=120, interval=20.0, max_duration=3600)
    policy = Checked(make_policy(engine, placement=plugin))
    run = run_policy(small_cluster(), jobs, policy)
    assert policy.rounds > 10
    assert run.metrics["completed"] == len(jobs)  # every job ends, none stuck
    refused = [d for d in run.controller.recorder.decisions if not d.applied]
    assert not refused, refused[:3]  # the plugin's choices fit the backend's accounting
    places = [d for d in run.controller.recorder.decisions if d.action == "Place"]
    assert len(places) >= len(jobs)


def test_fgd_fragments_less_than_random_in_the_simulator():
    # GPU-bound (the pods ask for little CPU) and loaded enough that FIFO queues: the time the
    # queue waits is when fragments cost something.
    frag = {"fgd": [], "random": []}
    for seed in range(2):
        jobs = openb_jobs(sharing_pods(seed, 400), n=400, interval=4.0, max_duration=2 * 3600,
                          seed=seed)
        for plugin, values in frag.items():
            run = run_policy(small_cluster(12), jobs, f"fifo+{plugin}")
            assert run.metrics["completed"] == len(jobs)
            values.append(run.metrics["gpus_fragmented_avg"])
    assert all(np.isfinite(v) and v >= 0 for vs in frag.values() for v in vs)
    assert np.mean(frag["fgd"]) < 0.95 * np.mean(frag["random"]), frag


def test_a_workloads_task_sizes_are_counted_not_listed_task_by_task():
    """The fragmentation workload weighs each task shape by its count: the same classes as
    listing every task, and a job of 10^8 replicas costs one entry (it took a minute and
    gigabytes, listed)."""
    import dataclasses

    from workbench.placement.fragmentation import task_classes

    jobs = openb_jobs(sharing_pods(2), n=60, interval=30.0, max_duration=3600)
    counted = workload_of_jobs(jobs)
    tasks = [(t.cpu_milli, t.num_gpu, t.gpu_milli, t.gpu_models) for t, n in
             zip(*_shapes_and_counts(jobs)) for _ in range(n)]
    listed = task_classes(*zip(*tasks), coverage=1.0)
    for field in ("cpu_milli", "num_gpu", "gpu_milli", "weight"):
        assert np.array_equal(getattr(counted, field), getattr(listed, field)), field
    huge = dataclasses.replace(jobs[0], name="huge", initial_workers=10**8, max_workers=10**8)
    assert workload_of_jobs([huge]).weight.tolist() == [1.0]


def _shapes_and_counts(jobs):
    from workbench.placement.state import Task

    counts: dict = {}
    for spec in jobs:
        task = Task.from_resources(spec.worker_demand)
        counts[task] = counts.get(task, 0) + spec.initial_workers
        if spec.num_ps:
            ps = Task.from_resources(spec.ps_demand)
            counts[ps] = counts.get(ps, 0) + spec.num_ps
    return list(counts), list(counts.values())


def test_fragmentation_meter_matches_a_fresh_measure_as_the_cluster_changes():
    jobs = openb_jobs(sharing_pods(1), n=80, interval=30.0, max_duration=3600)
    backend = SimBackend(small_cluster(), jobs)
    meter = FragmentationMeter(workload_of_jobs(jobs))
    from workbench.control import Controller

    controller = Controller(backend, make_policy("fifo+random"))
    seen = []
    for _ in range(40):
        if controller.step() is None:
            break
        state = backend.observe()
        fresh = cluster_fragmentation(state, meter.workload)["fragmented_gpus"]
        assert meter(state) == pytest.approx(fresh, abs=1e-9)
        seen.append(fresh)
    assert max(seen) > 0  # sharing pods did leave fragments behind


def test_run_metrics_and_timeline_report_fragmentation():
    jobs = openb_jobs(sharing_pods(2), n=100, interval=15.0, max_duration=3600)
    run = run_policy(small_cluster(), jobs, "fifo")
    m = run.metrics
    assert 0 <= m["gpu_frag_avg"] <= 1 and 0 <= m["gpu_frag_queued"] <= 1
    samples = run.controller.recorder.timeline
    frag = np.array([s.gpus_fragmented for s in samples])
    free = np.array([s.gpus_total - s.gpus_allocated for s in samples])
    assert np.isfinite(frag).all() and (frag <= free + 1e-9).all() and frag.max() > 0
    assert m["gpus_fragmented_avg"] <= frag.max()
    off = run_policy(small_cluster(), jobs, "fifo", fragmentation=False).metrics
    assert np.isnan(off["gpu_frag_avg"]) and off["avg_jct_h"] == m["avg_jct_h"]


def test_make_policy_names_and_engine_view():
    pol = make_policy("fifo+fgd")
    assert pol.name == "fifo+fgd" and pol.placer.name == "fgd"
    assert make_policy("drf", placement="best-fit").name == "drf+best-fit"
    assert make_policy("fifo").placer is None and "fragmentation" not in make_policy("fifo").engine_view()
    with pytest.raises(ConfigError, match="unknown placement plugin 'nope'"):
        make_policy("fifo", placement="nope")
    with pytest.raises(ConfigError, match="places by its own rules"):
        make_policy("dragon+fgd")
    jobs = openb_jobs(sharing_pods(3), n=60, interval=10.0, max_duration=3600)
    run = run_policy(small_cluster(), jobs, pol, fragmentation=False)
    assert run.metrics["completed"] == len(jobs)
    view = pol.engine_view()
    assert view["placement"] == "fgd"
    per_node = view["fragmentation"]
    assert set(per_node) <= {n.name for n in small_cluster()}
    assert sum(per_node.values()) == pytest.approx(view["fragmented_gpus"])
    assert list(per_node.values()) == sorted(per_node.values(), reverse=True)


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--placement", "nope"], "--placement: unknown placement plugin 'nope'"),
    (["simulate", "--policy", "fifo+nope"], "--policy fifo+nope: unknown placement plugin"),
    (["simulate", "--policy", "dragon", "--placement", "fgd"], "places by its own rules"),
    (["compare", "--policies", "fifo,nope+fgd"], "unknown engine 'nope+fgd'"),
])
def test_cli_rejects_bad_placement_in_one_line(capsys, argv, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_cli_compares_engines_with_plugins(capsys):
    assert main(["compare", "--policies", "fifo,fifo+best-fit", "--placement", "fgd",
                 "--limit", "20", "--json"]) == 0
    import json

    rows = json.loads(capsys.readouterr().out)["results"]
    assert [r["policy"] for r in rows] == ["fifo+fgd", "fifo+best-fit"]
    assert all("gpu_frag_avg" in r for r in rows)
