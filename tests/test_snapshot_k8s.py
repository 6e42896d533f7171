"""Snapshots of a live cluster (the local control plane with emulated GPU nodes): a snapshot
round-trips (saved, loaded, simulated) with every job, node and placement present; a switch
preview and a what-if run on the Kubernetes backend, from the store as from Python, over the
same jobs the cluster has; and the accuracy check of issue #19: at several moments of a run
the simulator restored from a snapshot predicts each running job's finish and the next hour
of decisions, compared with what then happens on the cluster; and that check's ceiling, the
cluster's agreement with itself when the same workload runs twice.

The accuracy check prints one line of figures (`-s` shows it; `docs/live-whatif.md` has a
run). Its asserts are looser than the issue's goal so that a loaded 2-core machine does not
fail it; the goal itself is reported, not asserted.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import os
import statistics
import time

import pytest
from k8s_helpers import (  # noqa: F401 - auditor, no_overcommit: fixtures
    auditor,
    fresh_namespace,
    no_overcommit,
    run_in_background,
    small_cluster,
)
from k8s_helpers import until as _until

from workbench.control import Controller
from workbench.model import Action, JobSpec, JobState, Wait
from workbench.perf import default_perf
from workbench.policies import make_policy
from workbench.sim.restore import from_snapshot
from workbench.sim.snapshot import Snapshot
from workbench.traces import synthetic_workload
from workbench.whatif import look_ahead_base

# emulated seconds per real second (WORKBENCH_ACCURACY_SPEED: slower is closer to a real cluster)
SPEED = float(os.environ.get("WORKBENCH_ACCURACY_SPEED", "40"))
PERF = default_perf()
HOUR = 3600.0


@pytest.fixture(scope="module")
def cluster():
    with small_cluster(SPEED) as c:
        yield c


@pytest.fixture
def namespace(cluster):
    with fresh_namespace(cluster.rest, "snap") as ns:
        yield ns


def _backend(cluster, namespace: str):
    from workbench.k8s.backend import K8sBackend

    # a replay charges restarts what they were measured to cost here (`k8s.restarts`)
    return K8sBackend(cluster.api_client, namespace=namespace, speed=SPEED)


def _workload(t0: float, n: int, work_s: tuple[float, float], gap: float, seed: int,
              prefix: str, elastic: bool = False) -> list[JobSpec]:
    """`n` all-reduce jobs of at most 4 workers arriving every `gap` s from `t0`, each with
    `work_s` (low, high) emulated seconds of training at its initial size; `elastic`: each
    may run on 1 to 4 workers (else only on its initial size)."""
    jobs = synthetic_workload(n, max_workers=4, seed=seed, deadline_factor=None,
                              gpus_per_node=4)
    out = []
    for i, j in enumerate(jobs):
        rate = PERF.iteration_rate(j, {"a": j.initial_workers}, {})
        seconds = work_s[0] + (work_s[1] - work_s[0]) * ((i * 7) % n) / max(n - 1, 1)
        out.append(j.with_(name=f"{prefix}-{i}", arrival=t0 + i * gap,
                           total_work=rate * seconds, min_workers=1,
                           max_workers=4 if elastic else j.initial_workers))
    return out


# ---- round trip and preview ---------------------------------------------------------------


@pytest.mark.integration
def test_snapshot_round_trips_and_previews_list_the_clusters_jobs(cluster, namespace, tmp_path):
    from workbench.ui.state import WorkbenchState

    backend = _backend(cluster, namespace)
    try:
        specs = _workload(backend.now, 12, (600.0, 900.0), 0.0, seed=3, prefix="rt")
        for s in specs:
            backend.submit(s)
        _until("every job's pods", lambda: len(backend.observe().jobs) == len(specs), 60)
        controller = Controller(backend, make_policy("fifo"))
        thread, errors = run_in_background(controller, backend.now + 4 * HOUR)
        _until("a job running", lambda: JobState.RUNNING in {
            j.state for j in list(backend.active.values())}, 60)
        time.sleep(1.0)  # a progress report or two
        snapshot = backend.snapshot("fifo")
        path = tmp_path / "cluster.json"
        snapshot.save(path)
        loaded = Snapshot.load(path)
        assert loaded.to_json() == snapshot.to_json()
        assert [(r.node.name, r.node.rack, r.node.gpus) for r in loaded.nodes] == \
            [(n.name, n.rack, n.gpus) for n in cluster.node_specs]
        assert all(r.up for r in loaded.nodes)
        assert {j.name for j in loaded.jobs} == {s.name for s in specs}
        sim = from_snapshot(loaded)
        for record in loaded.jobs:
            twin = sim.jobs[record.name]
            assert (twin.state, twin.workers, twin.ps) == (record.state, record.workers,
                                                           record.ps), record.name
            assert twin.progress == pytest.approx(record.progress)
            assert twin.spec.max_workers == record.spec.max_workers
        Controller(sim, make_policy("fifo")).run()
        assert sim.done() and all(j.state is JobState.COMPLETED for j in sim.jobs.values())

        # a preview through the store, on the Kubernetes backend: the cluster's jobs
        store = WorkbenchState(backend, "fifo")
        assert store.can_look_ahead and not store.simulated
        base, taken = look_ahead_base(store.backend)
        assert taken is not None and set(base.jobs) == set(backend.jobs)
        preview = store.preview_switch("tiresias", horizon=HOUR)
        assert preview.snapshot_at is not None and "snapshot" in preview.summary()
        assert 1 <= int(preview.table.set_index("policy").loc["fifo", "jobs_seen"]) <= len(specs)
        assert set(preview.decisions.job) <= {s.name for s in specs}
        result = store.what_if(["fifo", "tiresias"], budget_s=30.0)
        assert list(result.table.policy) == ["fifo", "tiresias"]
        assert (result.table.completed + result.table.rejected + result.table.unfinished
                == len(specs)).all()
        controller.backend.interrupt()
        thread.join(timeout=60)
        assert not errors, errors
    finally:
        backend.close()


# ---- the accuracy check -------------------------------------------------------------------

PLACING = ("Place", "Scale", "Migrate", "Suspend")


def _recorded(engine):
    """`engine` with every action it returns logged as (time, kind, job, workers, ps)."""
    log: list[tuple] = []
    schedule = engine.schedule

    def logged(state):
        actions: list[Action] = schedule(state)
        for a in actions:
            if type(a).__name__ in PLACING:
                log.append((state.now, type(a).__name__, a.job,
                            tuple(sorted(getattr(a, "workers", {}).items())),
                            tuple(sorted(getattr(a, "ps", {}).items()))))
            elif not isinstance(a, Wait):
                log.append((state.now, type(a).__name__, a.job, (), ()))
        return actions

    engine.schedule = logged
    return engine, log


def _same_decisions(real: list[tuple], predicted: list[tuple]) -> tuple[int, int, list]:
    """(identical, total, differing): the cluster's decisions that the prediction also took
    (same kind, job and placement), as a multiset match; total counts the larger of the two
    lists, so a decision only one side took counts against; differing names them."""
    left = [d[1:] for d in predicted]
    same, only_real = 0, []
    for d in real:
        if d[1:] in left:
            left.remove(d[1:])
            same += 1
        else:
            only_real.append(("cluster",) + d[1:3])
    return same, max(len(real), len(predicted)), only_real + [("sim",) + d[:2] for d in left]


def _copy_of(engine):
    """A copy of the live `engine` with its learning state and without `_recorded`'s log
    (taken while its scheduler thread runs: tried again if a round changed it meanwhile)."""
    for _ in range(20):
        try:
            twin = copy.deepcopy(engine)
            break
        except RuntimeError:  # a dict changed size during the copy
            time.sleep(0.01)
    twin.__dict__.pop("schedule", None)
    return twin


def measure_accuracy(cluster, namespace: str, engine: str = "fifo", moments: int = 3,
                     n_jobs: int = 12, elastic: bool = False) -> dict:
    """Run `n_jobs` on the cluster under `engine`; at `moments` moments take a snapshot and
    predict, in the simulator under a copy of the live engine (as a switch preview does),
    each running job's finish and the next hour of decisions;
    then compare with what the cluster did. Finish errors are relative to the time left:
    |predicted - actual| / (actual - snapshot time)."""
    backend = _backend(cluster, namespace)
    try:
        t0 = backend.now
        specs = _workload(t0, n_jobs, (900.0, 2400.0), 240.0, seed=7, prefix=engine[:4],
                          elastic=elastic)
        for s in specs:
            backend.submit(s)
        live, real_log = _recorded(make_policy(engine))
        controller = Controller(backend, live)
        thread, errors = run_in_background(controller, t0 + 6 * HOUR)
        predictions = []
        for k in range(moments):
            at = t0 + 600.0 + k * 900.0
            _until(f"moment {k}", lambda at=at: backend.now >= at, timeout=HOUR / SPEED * 2)
            snapshot = backend.snapshot(engine)
            sim = from_snapshot(snapshot)
            twin, sim_log = _recorded(_copy_of(live))  # as a preview copies the live engine
            replay = Controller(sim, twin)
            replay.carry_on(controller.last_round)  # its next round where the live one's falls
            replay.run()
            running = [j.name for j in snapshot.jobs if j.state is JobState.RUNNING]
            predictions.append((snapshot.taken_at, {n: sim.jobs[n].finish_time for n in running},
                                sim_log))
        _until("every job finished", lambda: backend.done(), timeout=6 * HOUR / SPEED)
        controller.backend.interrupt()
        thread.join(timeout=60)
        assert not errors, errors
    finally:
        backend.close()
    errors_rel, same, total, differing = [], 0, 0, []
    for taken, finishes, sim_log in predictions:
        for name, predicted in finishes.items():
            actual = backend.jobs[name].finish_time
            if predicted is not None and actual is not None and actual > taken:
                errors_rel.append(abs(predicted - actual) / (actual - taken))
        window = [d for d in real_log if taken <= d[0] < taken + HOUR]
        s, t, diff = _same_decisions(window, [d for d in sim_log if d[0] < taken + HOUR])
        same, total, differing = same + s, total + t, differing + diff
    errors_rel.sort()
    return {"engine": engine, "elastic": elastic, "moments": moments, "jobs": n_jobs,
            "finish_predictions": len(errors_rel),
            "median_finish_error": statistics.median(errors_rel) if errors_rel else None,
            "p90_finish_error": errors_rel[int(0.9 * (len(errors_rel) - 1))]
            if errors_rel else None,
            "identical_decisions": same / total if total else None, "decisions": total,
            "differing": differing}


@pytest.mark.integration
def test_snapshot_predicts_the_cluster(cluster, namespace):
    t = time.monotonic()
    figures = measure_accuracy(cluster, namespace,
                               os.environ.get("WORKBENCH_ACCURACY_ENGINE", "fifo"),
                               int(os.environ.get("WORKBENCH_ACCURACY_MOMENTS", "3")),
                               elastic=os.environ.get("WORKBENCH_ACCURACY_ELASTIC") == "1")
    figures["wall_s"] = round(time.monotonic() - t, 1)
    print("\nlive what-if accuracy:", json.dumps(figures))
    if os.environ.get("WORKBENCH_ACCURACY_OUT"):
        with open(os.environ["WORKBENCH_ACCURACY_OUT"], "a") as f:
            f.write(json.dumps(figures) + "\n")
    assert figures["finish_predictions"] >= 4
    assert figures["median_finish_error"] <= 0.10
    assert figures["p90_finish_error"] <= 0.30
    assert figures["identical_decisions"] >= 0.8


def measure_repeatability(cluster, engine: str = "fifo", runs: int = 2, moments: int = 4,
                          n_jobs: int = 12, elastic: bool = False) -> dict:
    """The ceiling of the accuracy check: the same workload run `runs` times on the cluster
    (each in a fresh namespace), and for each pair of runs the share of identical decisions
    in the same windows the accuracy check compares (an hour from 600 s + k × 900 s after
    the first arrival), matched as there. No prediction can agree with the cluster more
    than the cluster agrees with itself."""
    logs = []
    for r in range(runs):
        with contextlib.ExitStack() as stack:
            namespace = stack.enter_context(fresh_namespace(cluster.rest, f"rep{r}"))
            backend = _backend(cluster, namespace)
            stack.callback(backend.close)
            t0 = backend.now
            for s in _workload(t0, n_jobs, (900.0, 2400.0), 240.0, seed=7, prefix=engine[:4],
                               elastic=elastic):
                backend.submit(s)
            live, log = _recorded(make_policy(engine))
            controller = Controller(backend, live)
            thread, errors = run_in_background(controller, t0 + 6 * HOUR)
            _until("every job finished", lambda: backend.done(), timeout=6 * HOUR / SPEED)
            backend.interrupt()
            thread.join(timeout=60)
            assert not errors, errors
            logs.append([(d[0] - t0,) + d[1:] for d in log])
    pairs = []
    for a, b in itertools.combinations(range(runs), 2):
        same = total = 0
        for k in range(moments):
            at = 600.0 + k * 900.0
            s, t, _ = _same_decisions([d for d in logs[a] if at <= d[0] < at + HOUR],
                                      [d for d in logs[b] if at <= d[0] < at + HOUR])
            same, total = same + s, total + t
        pairs.append(same / total if total else None)
    return {"engine": engine, "elastic": elastic, "runs": runs, "moments": moments,
            "identical_between_runs": pairs, "decisions": [len(x) for x in logs]}


@pytest.mark.integration
def test_the_cluster_repeats_its_own_decisions(cluster):
    # fifo's placements are fixed by arrival order and sizes, so two runs agree; an elastic
    # engine's need not (WORKBENCH_ACCURACY_ENGINE/_ELASTIC measure it: docs/live-whatif.md)
    figures = measure_repeatability(cluster, os.environ.get("WORKBENCH_ACCURACY_ENGINE", "fifo"),
                                    int(os.environ.get("WORKBENCH_REPEAT_RUNS", "2")),
                                    elastic=os.environ.get("WORKBENCH_ACCURACY_ELASTIC") == "1")
    print("\nlive repeatability:", json.dumps(figures))
    if os.environ.get("WORKBENCH_ACCURACY_OUT"):
        with open(os.environ["WORKBENCH_ACCURACY_OUT"], "a") as f:
            f.write(json.dumps(figures) + "\n")
    assert all(x is not None and x >= 0.8 for x in figures["identical_between_runs"])
