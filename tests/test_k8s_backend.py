"""K8sBackend against a real kube-apiserver (the local control plane) with emulated GPU nodes:
every engine runs real batch/v1 Jobs to completion, makes the same first decisions as in the
simulator, survives a live policy switch, and no job is lost or duplicated by faults (an
apiserver restart, an expired watch, a second bind, a node going NotReady).

One cluster serves the module; each test works in its own namespace. The emulator's clock runs
SPEED times faster than real time, and so does the backend's, so jobs take seconds.
"""

from __future__ import annotations

import contextlib
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
from workbench.k8s import labels
from workbench.model import JobSpec, JobState, Place, Resources
from workbench.perf import default_perf
from workbench.policies import available, make_policy
from workbench.sim import SimBackend
from workbench.traces import synthetic_workload

SPEED = 50.0
WORK_S = 90.0  # emulated seconds of training per job at its initial placement
PERF = default_perf()


@pytest.fixture(scope="module")
def cluster():
    with small_cluster(SPEED) as c:
        yield c


@pytest.fixture
def namespace(cluster):
    """A fresh namespace (with its default service account); emptied afterwards."""
    with fresh_namespace(cluster.rest, "t") as ns:
        yield ns


def _backend(cluster, namespace: str, **kw):
    from workbench.k8s.backend import K8sBackend

    return K8sBackend(cluster.api_client, namespace=namespace, speed=SPEED, **kw)


def _workload(t0: float, n: int = 5, seed: int = 1, ps_share: float = 0.4,
              prefix: str = "job") -> list[JobSpec]:
    """`n` small jobs arriving at `t0`: ~WORK_S emulated seconds of work each, some PS jobs,
    some with deadlines; at most 4 workers (one node's GPUs)."""
    jobs = synthetic_workload(n, arrival_rate=1 / 30, max_workers=4, seed=seed,
                              ps_jobs=ps_share, deadline_factor=(2.0, 4.0), gpus_per_node=4)
    out = []
    for i, j in enumerate(jobs):
        workers = {"a": j.initial_workers}
        ps = {"a": j.num_ps} if j.num_ps else {}
        rate = PERF.iteration_rate(j, workers, ps)
        deadline = None if j.deadline is None else t0 + 6 * WORK_S
        out.append(j.with_(name=f"{prefix}-{i}", arrival=t0, total_work=rate * WORK_S,
                           deadline=deadline))
    return out


def _submit_all(backend, specs: list[JobSpec]) -> None:
    for s in specs:
        backend.submit(s)
    _until("every job's pods", lambda: len(backend.observe().jobs) == len(specs), timeout=60)


def _run(controller: Controller, backend, horizon: float = 4000.0) -> None:
    controller.run(until=backend.now + horizon)
    left = {j.name: (j.state.value, j.reason) for j in backend.active.values()}
    assert backend.done(), f"jobs left after {horizon:.0f} emulated s: {left}"


def _assert_each_finished_once(backend, specs: list[JobSpec]) -> None:
    names = [j.name for j in backend.finished]
    assert sorted(names) == sorted(s.name for s in specs), "a job was lost or duplicated"
    for j in backend.finished:
        assert j.state in (JobState.COMPLETED, JobState.REJECTED), j
        assert j.reason
        if j.state is JobState.COMPLETED:
            assert j.progress == pytest.approx(j.spec.total_work)


def _succeeded_pods(cluster, ns: str) -> dict[str, int]:
    """Succeeded pods per job, once no pod runs any more (the emulator ends a job's pods
    one by one)."""
    def settled():
        pods = cluster.rest.get(f"/api/v1/namespaces/{ns}/pods")["items"]
        return None if any(p.get("status", {}).get("phase") == "Running" for p in pods) \
            else pods or [None]
    pods = [p for p in _until("no pod running", settled) if p is not None]
    out: dict[str, int] = {}
    for p in pods:
        if p.get("status", {}).get("phase") == "Succeeded":
            job = p["metadata"]["labels"][labels.JOB]
            out[job] = out.get(job, 0) + 1
    return out


# ---- without a cluster ---------------------------------------------------------------------


def _pods_from(manifests: list[dict]) -> list[dict]:
    """The pods a Job controller would create from these Jobs' templates."""
    pods = []
    for m in manifests:
        for k in range(m["spec"]["parallelism"]):
            t = m["spec"]["template"]
            pods.append({"metadata": {**t["metadata"], "name": f"{m['metadata']['name']}-{k}",
                                      "namespace": m["metadata"]["namespace"], "uid": f"u{k}"},
                         "spec": dict(t["spec"]), "status": {"phase": "Pending"}})
    return pods


def test_training_job_manifests_round_trip_to_the_same_spec():
    from workbench.k8s.cache import group_pods, spec_from_pods
    from workbench.k8s.manifests import training_jobs
    from workbench.model import JobKind

    spec = JobSpec("train-7", "resnet18", 1234.5, 98765.25, 256, initial_workers=3,
                   min_workers=2, max_workers=6, num_ps=2, worker_demand=Resources(6, 24, 1),
                   ps_demand=Resources(2.5, 7.5, 0), deadline=99999.5, priority=3, user="ana",
                   kind=JobKind.PS, target_metric=0.91, cpu_burst=1.5)
    manifests = training_jobs(spec, "ml", arrival=spec.arrival)
    assert [m["metadata"]["name"] for m in manifests] == ["train-7", "train-7-ps"]
    assert all(m["spec"]["template"]["spec"]["schedulerName"] == labels.SCHEDULER_NAME
               for m in manifests)
    # a pod deleted for a checkpoint-restart (marked DisruptionTarget) is no Job failure
    assert all(m["spec"]["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        for m in manifests)
    pods = _pods_from(manifests)
    (key, group), = group_pods(pods).items()
    assert key == ("ml", "train-7") and len(group.pending["worker"]) == 3
    assert spec_from_pods("train-7", group.live) == spec


def test_a_plan_whose_pods_were_late_waits_longer_the_next_time():
    """Under thousands of pending pods the Job controller took over 30 s to re-create a resized
    job's pods; restarting it then only added to that backlog (dl2's 1,000-job soak stalled)."""
    from workbench.k8s.reconcile import TrackedJob
    from workbench.model import JobStatus

    spec = JobSpec("late", "cifar10", 0.0, 100.0, 128)
    job = TrackedJob(("default", "late"), JobStatus(spec))
    windows = []
    for _ in range(7):
        windows.append(job.plan_window(30.0))
        job.plan_timeouts += 1
    assert windows == [30.0, 60.0, 120.0, 240.0, 480.0, 480.0, 480.0]


def test_k8s_names_and_progress_reports():
    from workbench.k8s.cache import progress_of
    from workbench.k8s.manifests import k8s_name
    from workbench.k8s.progress import progress_annotation

    assert k8s_name("Job_42 (BERT)") == "job-42-bert"
    pod = {"metadata": {"annotations": {labels.PROGRESS: progress_annotation(120, 2.5, 0.7),
                                        labels.CHECKPOINT: "100"}}}
    r = progress_of(pod)
    assert (r.iterations, r.throughput, r.metric) == (120.0, 2.5, 0.7)
    pod["metadata"]["annotations"][labels.CHECKPOINT] = "150"
    assert progress_of(pod).iterations == 150.0  # never behind the checkpoint it resumed from


def test_node_view_counts_bound_pods_of_any_scheduler():
    from workbench.k8s.cache import NodeView, pod_demand
    from workbench.k8s.local.emulator import node_manifest
    from workbench.model import Node

    nodes = [node_manifest(Node(f"n{i}", 32, 128, 4, rack=f"r{i % 2}")) for i in range(3)]
    nodes[2]["spec"]["unschedulable"] = True
    view = NodeView.build(reversed(nodes))
    assert [n.name for n in view.nodes] == ["n0", "n1", "n2"]
    assert view.node_up.tolist() == [True, True, False]

    def pod(node, gpus, phase="Running", scheduler="default-scheduler"):
        return {"metadata": {"uid": f"{node}{gpus}{phase}"}, "status": {"phase": phase},
                "spec": {"nodeName": node, "schedulerName": scheduler, "containers": [
                    {"resources": {"requests": {"cpu": "2", "memory": "4Gi"},
                                   "limits": {labels.GPU_RESOURCE: str(gpus)}}}]}}
    pods = [pod("n0", 3), pod("n1", 1, scheduler="workbench"), pod("n1", 2, "Succeeded")]
    allocated = view.allocation(pods, pod_demand)
    assert allocated[:, 2].tolist() == [3.0, 1.0, 0.0]
    assert allocated[0, 0] == 2.0 and allocated[0, 1] == 4.0
    assert view.gpu_free(allocated)[0].tolist() == [0.0, 0.0, 0.0, 1.0]


# ---- every engine, and the same first decisions as the simulator -----------------------------


@pytest.mark.integration
@pytest.mark.parametrize("engine", available())
def test_engine_runs_real_jobs_to_completion_and_decides_as_in_the_simulator(
        cluster, namespace, engine):
    backend = _backend(cluster, namespace)
    try:
        t0 = backend.now
        specs = _workload(t0, seed=3)
        _submit_all(backend, specs)
        policy = make_policy(engine)
        first: list = []
        schedule = policy.schedule

        def capture(state):
            actions = schedule(state)
            if not first:
                first.append((state.now, actions))
            return actions
        policy.schedule = capture
        controller = Controller(backend, policy)
        _run(controller, backend)
        _assert_each_finished_once(backend, specs)
        assert any(j.state is JobState.COMPLETED for j in backend.finished)
        # no pod left running, none of another job's: Succeeded pods are one gang per job
        done = _succeeded_pods(cluster, namespace)
        for j in backend.finished:
            if j.state is JobState.COMPLETED:
                assert done.get(j.name, 0) == j.target_workers + j.target_ps

        # the simulator, at the same moment after the same arrivals, decides the same places
        at, k8s_actions = first[0]
        sim = SimBackend(cluster.node_specs, [s.with_(arrival=0.0, deadline=None if
                                                      s.deadline is None else s.deadline - t0)
                                              for s in specs])
        sim.advance(at - t0)
        sim_actions = make_policy(engine).schedule(sim.observe())

        def places(actions):
            return sorted((a.job, sorted(a.workers.items()), sorted(a.ps.items()), a.partial)
                          for a in actions if isinstance(a, Place))
        assert places(k8s_actions) == places(sim_actions)
    finally:
        backend.close()


# ---- live switching -----------------------------------------------------------------------------


@pytest.mark.integration
def test_policy_switch_mid_run_loses_nothing(cluster, namespace):
    backend = _backend(cluster, namespace)
    try:
        specs = _workload(backend.now, n=6, seed=5, ps_share=0.0)
        specs = [s.with_(total_work=s.total_work * 4) for s in specs]  # still running at the switch
        _submit_all(backend, specs)
        controller = Controller(backend, make_policy("tiresias"))
        _until("a job running", lambda: (controller.step() or True) and any(
            j.state is JobState.RUNNING for j in backend.active.values()), timeout=60, every=0)
        placed = {j.name: dict(j.workers) for j in backend.active.values() if j.state.placed}
        restarts = {j.name: j.restarts for j in backend.jobs.values()}
        controller.switch(make_policy("optimus"))  # elastic: scales what it now owns
        controller.step()
        assert controller.recorder.switches and controller.recorder.switches[-1][2] == "optimus"
        # the switch itself touched no job: whatever moved, moved by an optimus decision
        moved = {d.job for d in controller.recorder.decisions
                 if d.policy == "optimus" and d.applied and d.action in ("Scale", "Migrate",
                                                                           "Suspend")}
        for name in placed:
            job = backend.jobs[name]
            if name not in moved and not job.state.finished:
                assert job.restarts == restarts[name]
        _run(controller, backend)
        _assert_each_finished_once(backend, specs)
    finally:
        backend.close()


@pytest.mark.integration
def test_switching_among_every_engine_at_random_loses_and_overcommits_nothing(cluster, namespace):
    """The console's live switch, done as an operator might: a random engine every few rounds
    while PS and all-reduce jobs run, each engine taking over what the last one left (gangs
    half-placed, jobs resized, plans it never made). The independent audit (`no_overcommit`)
    and every job finished once are the checks."""
    import random

    rng = random.Random(3)
    engines = available()
    order = rng.sample(engines, len(engines))  # each engine once, in a random order
    backend = _backend(cluster, namespace)
    try:
        specs = _workload(backend.now, n=10, seed=9, ps_share=0.4)
        specs = [s.with_(total_work=s.total_work * 15) for s in specs]  # running across switches
        _submit_all(backend, specs)
        controller = Controller(backend, make_policy("fifo"))
        took_over_live = []  # each engine, if jobs were still running when it took over
        for engine in order:
            for _ in range(rng.randint(1, 3)):
                controller.step()
            controller.switch(make_policy(engine))
            controller.step()  # the switch lands at a round
            if any(j.state.placed for j in backend.active.values()):
                took_over_live.append(engine)
        _run(controller, backend)
        assert took_over_live == order, "an engine took over an idle cluster: make the jobs longer"
        _assert_each_finished_once(backend, specs)
    finally:
        backend.close()


# ---- faults -------------------------------------------------------------------------------------


def _bare_gang(ns: str, job: str, workers: int, work: float) -> list[dict]:
    """Bare pods of one gang (no Job owns them): the backend re-creates them itself."""
    pods = []
    for k in range(workers):
        pods.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{job}-{k}", "namespace": ns,
                         "labels": {labels.JOB: job, labels.ROLE: labels.ROLE_WORKER},
                         "annotations": {labels.APPLICATION: "cifar10",
                                         labels.TOTAL_WORK: repr(work),
                                         labels.BATCH_SIZE: "512",
                                         labels.NUM_WORKERS: str(workers)}},
            "spec": {"schedulerName": labels.SCHEDULER_NAME, "restartPolicy": "Never",
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "train", "image": "emulated", "resources": {
                         "requests": {"cpu": "4", "memory": "16Gi", labels.GPU_RESOURCE: "1"},
                         "limits": {labels.GPU_RESOURCE: "1"}}}]}})
    return pods


def _bind(rest, ns: str, pod: str, node: str) -> None:
    rest.post(f"/api/v1/namespaces/{ns}/pods/{pod}/binding", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod, "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})


def _bound_nodes(rest, ns: str, job: str) -> list[str | None]:
    pods = rest.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"{labels.JOB}={job}")
    return [p["spec"].get("nodeName") for p in pods["items"]
            if not p["metadata"].get("deletionTimestamp")]


@pytest.mark.integration
def test_second_bind_409_is_handled_and_no_partial_gang_stays(cluster, namespace):
    rest = cluster.rest
    rate = PERF.iteration_rate(JobSpec("p", "cifar10", 0, 1, 512, 2, 1, 2), {"n": 2}, {})
    for pod in _bare_gang(namespace, "same", 2, rate * WORK_S) + \
            _bare_gang(namespace, "other", 2, rate * WORK_S):
        rest.post(f"/api/v1/namespaces/{namespace}/pods", pod)
    backend = _backend(cluster, namespace)
    try:
        _until("both jobs", lambda: len(backend.observe().jobs) == 2)
        # a bind that already happened (e.g. a retried request): the 409 names our node
        _bind(rest, namespace, "same-0", "gpu-node-000")
        # a pod another scheduler bound elsewhere: the gang cannot be as planned
        _bind(rest, namespace, "other-0", "gpu-node-003")
        out = backend.apply([Place("same", "test", {"gpu-node-000": 2}),
                             Place("other", "test", {"gpu-node-001": 2})])
        assert out[0].applied, out[0].detail
        assert backend.binder.stats["bind_conflicts"] >= 2
        assert not out[1].applied and "already assigned to gpu-node-003" in out[1].detail
        assert sorted(_bound_nodes(rest, namespace, "same")) == ["gpu-node-000"] * 2
        # rolled back: every pod of "other" is unbound again (deleted, re-created pending)
        def rolled_back():
            nodes = _bound_nodes(rest, namespace, "other")
            return len(nodes) == 2 and not any(nodes)
        _until("the gang rolled back", rolled_back)
        assert backend.observe().jobs["other"].state is JobState.PENDING
        backend.binder.events.flush()
        events = rest.get(f"/api/v1/namespaces/{namespace}/events")["items"]
        assert any(e["reason"] == "FailedBinding" and "rolled back" in e["message"]
                   for e in events)
        controller = Controller(backend, make_policy("fifo"))
        _run(controller, backend)
        assert {j.name: j.state for j in backend.finished} == \
            {"same": JobState.COMPLETED, "other": JobState.COMPLETED}
        assert _succeeded_pods(cluster, namespace) == {"same": 2, "other": 2}
    finally:
        backend.close()


@contextlib.contextmanager
def _pod_events(cluster, namespace: str, seen):
    """An independent watch of the namespace's pods for the block: `seen(kind, pod)` for each
    event (kind ADDED, MODIFIED or DELETED; pod as the official client gives it)."""
    import threading

    from kubernetes import client, config, watch

    api = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    stop = threading.Event()
    w = watch.Watch()

    def follow():
        try:
            for event in w.stream(api.list_namespaced_pod, namespace, timeout_seconds=120):
                seen(event["type"], event["object"])
                if stop.is_set():
                    break
        except Exception:  # noqa: BLE001 - w.stop() at the end may cut the stream mid-read
            if not stop.is_set():
                raise

    threading.Thread(target=follow, daemon=True).start()
    try:
        yield
    finally:
        stop.set()
        w.stop()


@contextlib.contextmanager
def _pods_added(cluster, namespace: str):
    """The names of the namespace's pods an independent watch sees created, in order."""
    added: list[str] = []

    def seen(kind: str, pod) -> None:
        if kind == "ADDED":
            added.append(pod.metadata.name)

    with _pod_events(cluster, namespace, seen):
        yield added


def _running_on_node_000(backend, spec: JobSpec, added: list[str]) -> set[str]:
    """Submit `spec`, place its workers on gpu-node-000 and wait until it runs and the watch
    filling `added` has seen its pods; the pod names seen by then."""
    _submit_all(backend, [spec])
    backend.observe()
    assert all(o.applied for o in backend.apply([Place(
        spec.name, "start", {"gpu-node-000": spec.initial_workers})]))
    _until("running", lambda: backend.observe().jobs[spec.name].state is JobState.RUNNING,
           timeout=60)
    _until("the first pods seen", lambda: len(added) >= spec.initial_workers, timeout=30)
    return set(added)


@pytest.mark.integration
def test_pods_deleted_for_a_restart_are_marked_as_a_disruption_first(cluster, namespace):
    """From Kubernetes 1.26 a Job counts a deleted pod as a failure (towards `backoffLimit`)
    unless its pod failure policy ignores it: every pod the backend deletes for a rescale
    carries the `DisruptionTarget` condition when it goes, as an independent watch sees it."""
    from workbench.model import Scale

    deleted: dict[str, set[str]] = {}

    def seen(kind: str, pod) -> None:
        if kind == "DELETED":
            deleted[pod.metadata.name] = {c.type for c in pod.status.conditions or []
                                          if c.status == "True"}

    with _pod_events(cluster, namespace, seen), \
            contextlib.closing(_backend(cluster, namespace)) as backend:
        t0 = backend.now
        spec = JobSpec("elastic", "cifar10", t0, 1e9, 512, initial_workers=2, min_workers=1,
                       max_workers=4, worker_demand=Resources(4, 16, 1))
        _submit_all(backend, [spec])
        backend.observe()
        assert all(o.applied for o in backend.apply([Place("elastic", "start",
                                                           {"gpu-node-000": 2})]))
        _until("running", lambda: backend.observe().jobs["elastic"].state is JobState.RUNNING,
               timeout=60)
        before = {p["metadata"]["name"] for p in cluster.rest.get(
            f"/api/v1/namespaces/{namespace}/pods")["items"]}
        assert all(o.applied for o in backend.apply([Scale("elastic", "grow",
                                                           {"gpu-node-001": 3})]))
        _until("running at 3", lambda: (lambda j: j.state is JobState.RUNNING
                                        and j.num_workers == 3)(backend.observe().jobs["elastic"]),
               timeout=60)
        _until("the deletions seen", lambda: before <= set(deleted), timeout=30)
        assert all("DisruptionTarget" in deleted[name] for name in before), deleted
        assert backend.binder.stats["disruption marks"] >= len(before)


@pytest.mark.integration
def test_a_shrink_makes_only_the_pods_of_the_new_count(cluster, namespace):
    """A Scale from 3 workers to 1 sets the Job's parallelism before it deletes the pods: the
    Job then re-creates 1 pod, not 3 for the old count that it trims again (under a bind, a
    pod trimmed so failed it with a 404), as an independent watch counts the pods made."""
    from workbench.model import Scale

    with _pods_added(cluster, namespace) as added, \
            contextlib.closing(_backend(cluster, namespace)) as backend:
        spec = JobSpec("shrink", "cifar10", backend.now, 1e9, 512, initial_workers=3,
                       min_workers=1, max_workers=3, worker_demand=Resources(4, 16, 1))
        before = _running_on_node_000(backend, spec, added)
        assert all(o.applied for o in backend.apply([Scale("shrink", "shrink",
                                                           {"gpu-node-001": 1})]))
        _until("running at 1", lambda: (lambda j: j.state is JobState.RUNNING
                                        and j.num_workers == 1)(backend.observe().jobs["shrink"]),
               timeout=60)
        time.sleep(3.0)  # a Job that was to over-create has done so by now
        made = [name for name in added if name not in before]
        assert len(made) == 1, made


@pytest.mark.integration
def test_a_job_that_makes_no_pods_after_a_preemption_gets_them_from_the_scheduler_once(
        cluster, namespace):
    """The Job controller may not create pods (its RBAC binding is deleted) from just before a
    Suspend until the scheduler has made them: the Job makes no pods again, as one whose
    watch missed pods it made waits out its 5-minute expectations (the soak's stuck jobs).
    After twice `plan_timeout` the scheduler makes them, owned by the Job, and the
    controller counts them as its own: an independent watch sees 2 pods made, not 4, and
    the job runs on them."""
    from workbench.model import Suspend

    rest = cluster.rest
    binding = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/" \
              "system:controller:job-controller"
    kept = rest.get(binding)
    kept["metadata"] = {k: v for k, v in kept["metadata"].items()
                        if k in ("name", "labels", "annotations")}
    with _pods_added(cluster, namespace) as added, \
            contextlib.closing(_backend(cluster, namespace, plan_timeout=5.0)) as backend:
        spec = JobSpec("silent", "cifar10", backend.now, 1e9, 512, initial_workers=2,
                       max_workers=2, worker_demand=Resources(4, 16, 1))
        before = _running_on_node_000(backend, spec, added)
        rest.delete(binding)
        try:
            time.sleep(1.0)  # the API server's authorizer has seen the binding go
            assert all(o.applied for o in backend.apply([Suspend("silent", "preempted")]))
            _until("pods made in the controller's stead",
                   lambda: backend.observe() is not None and len(set(added) - before) >= 2,
                   timeout=60)
        finally:
            rest.post("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", kept)
        time.sleep(5.0)  # the controller, allowed again, has made any pods it was to make
        made = [name for name in added if name not in before]
        assert len(made) == 2, made
        pods = rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
        owners = [ref for p in pods if p["metadata"]["name"] in made
                  for ref in p["metadata"]["ownerReferences"] if ref.get("controller")]
        assert [(o["kind"], o["name"]) for o in owners] == [("Job", "silent")] * 2, owners
        backend.observe()
        assert all(o.applied for o in backend.apply([Place("silent", "again",
                                                           {"gpu-node-001": 2})]))
        _until("running again",
               lambda: backend.observe().jobs["silent"].state is JobState.RUNNING, timeout=60)


@pytest.mark.integration
@pytest.mark.parametrize("owner", ["Job", "bare pods"])
def test_a_scheduler_restarted_while_a_job_waits_resumes_it_from_its_checkpoint(
        cluster, namespace, owner):
    """A preempted job's Job re-creates its pods without the checkpoint, which until the job
    ran again lived only in the scheduler's memory: a scheduler restarted in between read 0,
    and the pods it bound next resumed from 0 (the job redid its work), and ranked it as a
    job that had received no service. Both are kept on the Job (on bare pods, on the pods the
    scheduler re-creates): a second backend finds the job at its progress and service, and
    the pods it binds carry the checkpoint, as read from the API server. So is the count of
    restarts: a restarted scheduler counted the job's from 0, and its next start as none."""
    from workbench.model import Suspend

    with contextlib.closing(_backend(cluster, namespace)) as first:
        if owner == "Job":
            _submit_all(first, [JobSpec("kept", "cifar10", first.now, 1e9, 512,
                                        initial_workers=2, max_workers=2,
                                        worker_demand=Resources(4, 16, 1))])
        else:
            for pod in _bare_gang(namespace, "kept", 2, 1e9):
                cluster.rest.post(f"/api/v1/namespaces/{namespace}/pods", pod)
            _until("the pods found", lambda: "kept" in first.observe().jobs, timeout=60)
        first.observe()
        saved = 0.0
        for node in ("gpu-node-000", "gpu-node-002"):  # run and stop, twice
            _until(f"placed on {node}",  # (the second time, once its pods are re-created)
                   lambda node=node: first.observe() is not None and
                   all(o.applied for o in first.apply([Place("kept", "start", {node: 2})])),
                   timeout=60)
            _until("a progress report",
                   lambda saved=saved: first.observe().jobs["kept"].state is JobState.RUNNING
                   and first.observe().jobs["kept"].progress > saved, timeout=60)
            assert all(o.applied for o in first.apply([Suspend("kept", "preempted")]))
            stopped = first.observe().jobs["kept"]
            saved, service = stopped.progress, stopped.attained_service
            assert saved > 0 and service > 0
        assert stopped.restarts == 1  # resumed once
    with contextlib.closing(_backend(cluster, namespace)) as second:
        _until("the job found again", lambda: "kept" in second.observe().jobs, timeout=60)
        found = second.observe().jobs["kept"]
        assert found.state is JobState.PENDING and found.progress == pytest.approx(saved)
        assert found.attained_service == pytest.approx(service)  # Tiresias ranks by it
        assert found.restarts == 1  # kept too: it read 0
        assert found.reason.startswith("waiting: found with a checkpoint at"), found.reason
        assert all(o.applied for o in second.apply([Place("kept", "again",
                                                          {"gpu-node-001": 2})]))
        assert second.observe().jobs["kept"].restarts == 2  # a resumption, though new here
        _until("running again",
               lambda: second.observe().jobs["kept"].state is JobState.RUNNING, timeout=60)
        pods = cluster.rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
        resumed = [float((p["metadata"].get("annotations") or {}).get(labels.CHECKPOINT, 0.0))
                   for p in pods if p["spec"].get("nodeName") == "gpu-node-001"]
        assert resumed == pytest.approx([saved, saved]), resumed


@pytest.mark.integration
def test_a_scheduler_restarted_while_a_job_runs_credits_the_time_it_has_run(cluster, namespace):
    """The service kept on a job's pods is as of their binding. A scheduler restarted (or a
    new leader) while the job trains found it at that figure, 0 for a job never stopped: it
    had trained for hours and Tiresias ranked it as new. The time since its pods started
    running (their containers' `startedAt`, whole seconds) is credited when it is found."""
    gpus = 2
    with contextlib.closing(_backend(cluster, namespace)) as first:
        _submit_all(first, [JobSpec("ran", "cifar10", first.now, 1e9, 512, initial_workers=gpus,
                                    max_workers=gpus, worker_demand=Resources(4, 16, 1))])
        first.observe()
        assert all(o.applied for o in first.apply([Place("ran", "start",
                                                         {"gpu-node-000": gpus})]))
        _until("running", lambda: first.observe().jobs["ran"].state is JobState.RUNNING,
               timeout=60)
        seen_running = time.time()  # Unix: each backend's sped-up clock has its own origin
        time.sleep(4.0)  # 4 x SPEED emulated seconds of training
        service = first.observe().jobs["ran"].attained_service
        assert service > 0
    with contextlib.closing(_backend(cluster, namespace)) as second:
        _until("the job found running",
               lambda: (j := second.observe().jobs.get("ran")) is not None
               and j.state is JobState.RUNNING, timeout=60)
        found = second.observe().jobs["ran"]
        started = second.clock.from_unix(seen_running)
        ran = second.now - started  # at least: the pods started a little before `first` saw
        # them, and `startedAt`'s whole second is up to SPEED emulated seconds earlier still
        assert ran * gpus <= found.attained_service <= (ran + 2 * SPEED) * gpus, \
            (found.attained_service, ran, service)
        assert found.attained_service > service
        assert started - 2 * SPEED <= found.last_start <= started
        assert found.first_start == found.last_start
        assert found.reason.startswith("running: found running"), found.reason
        assert ran <= found.executed_time <= ran + 2 * SPEED


@pytest.mark.integration
def test_a_backend_not_told_a_speed_runs_at_the_emulated_nodes_clock(cluster, namespace):
    """The emulated nodes say their emulator's clock speed; a scheduler not told one (as
    `workbench serve --kubernetes` never was) takes it: at real time beside a SPEED-times
    emulator it credited a job 1/SPEED of the service its training had, and forecast it
    SPEED times too late. A node that says another speed is set right by the emulator."""
    from workbench.k8s.backend import K8sBackend, cluster_clock_speed

    nodes = cluster.rest.get("/api/v1/nodes")["items"]
    assert {n["metadata"]["annotations"][labels.CLOCK_SPEED] for n in nodes} == {f"{SPEED:g}"}
    with contextlib.closing(K8sBackend(cluster.api_client, namespace=namespace)) as backend:
        assert backend.clock.speed == SPEED
    # a node registered by someone else, saying another speed: nodes that disagree give
    # real time, until the emulator, seeing the node, marks it with its own speed
    from workbench.k8s.local.emulator import node_manifest
    from workbench.model import Node

    extra = node_manifest(Node("gpu-node-speed", cpus=8, mem=32, gpus=1), speed=7)
    extra["spec"]["taints"] = [{"key": "test", "effect": "NoSchedule"}]  # other tests: not here
    try:
        cluster.rest.post("/api/v1/nodes", extra)
        assert cluster_clock_speed(cluster.rest) in (1.0, SPEED)  # 1 until the emulator saw it
        _until("the emulator marks the node", lambda: cluster_clock_speed(cluster.rest) == SPEED
               and cluster.rest.get("/api/v1/nodes/gpu-node-speed")["metadata"]["annotations"]
               [labels.CLOCK_SPEED] == f"{SPEED:g}", timeout=60)
    finally:
        cluster.rest.delete("/api/v1/nodes/gpu-node-speed")


@pytest.mark.integration
def test_a_running_jobs_progress_is_estimated_from_when_its_report_came(cluster, namespace):
    """Progress reports come every few seconds and the backend reads them when it syncs: a
    report is dated when the watch brought it (not when read, up to a round later), and
    between two the estimate a snapshot takes carries the last forward at the job's
    throughput, while the record checkpoints rest on stays the reported figure."""
    backend = _backend(cluster, namespace)
    try:
        spec = JobSpec("now", "cifar10", backend.now, 1e9, 512, initial_workers=1,
                       worker_demand=Resources(4, 16, 1))
        _submit_all(backend, [spec])
        backend.observe()
        assert all(o.applied for o in backend.apply([Place("now", "start",
                                                           {"gpu-node-000": 1})]))
        _until("a progress report",
               lambda: backend.observe() and backend.book.by_name["now"].reported > 0,
               timeout=60)
        ahead, lags = 0, []
        for _ in range(40):
            last = backend._progress_seen["now"]
            job = backend.observe().jobs["now"]
            assert job.state is JobState.RUNNING
            assert job.progress == backend.book.by_name["now"].reported  # the report
            estimate = backend.estimated_progress(job, backend.now)
            assert estimate >= job.progress
            ahead += estimate > job.progress
            seen = backend._progress_seen["now"]
            if seen != last:  # a new report: dated when the watch brought it, not now
                lags.append(backend.now - seen[1])
            time.sleep(0.25)
        assert ahead >= 20, f"the estimate was ahead of the report {ahead} times in 40"
        assert lags and all(lag >= 0 for lag in lags) and max(lags) > 1.0, lags
    finally:
        backend.close()


@pytest.mark.integration
def test_events_explain_decisions_on_the_pods(cluster, namespace):
    backend = _backend(cluster, namespace)
    try:
        t0 = backend.now
        # one job needs more GPUs than any node has free after the first takes a whole node
        big = JobSpec("big", "cifar10", t0, 1e9, 512, initial_workers=4, min_workers=4,
                      max_workers=4, worker_demand=Resources(4, 16, 1))
        huge = JobSpec("huge", "cifar10", t0, 1e3, 512, initial_workers=20, min_workers=20,
                       max_workers=20, worker_demand=Resources(4, 16, 1))
        _submit_all(backend, [big, huge])
        controller = Controller(backend, make_policy("fifo"))
        controller.round()
        backend.binder.events.flush()
        rest = cluster.rest
        events = rest.get(f"/api/v1/namespaces/{namespace}/events")["items"]
        by_pod: dict[str, list[tuple[str, str]]] = {}
        for e in events:
            by_pod.setdefault(e["involvedObject"]["name"], []).append((e["reason"], e["message"]))
        big_pods = [n for n in by_pod if n.startswith("big-")]
        assert big_pods and all(any(r == "Scheduled" and "gpu-node-" in m for r, m in by_pod[n])
                                for n in big_pods)
        huge_reason = backend.jobs["huge"].reason
        assert huge_reason
        huge_pods = [n for n in by_pod if n.startswith("huge-")]
        assert huge_pods and all(any(m == huge_reason for _, m in by_pod[n]) for n in huge_pods)
    finally:
        backend.close()


@pytest.mark.integration
def test_node_going_not_ready_sends_its_jobs_back_without_loss(cluster, namespace):
    rest = cluster.rest
    backend = _backend(cluster, namespace)
    node = None
    try:
        specs = _workload(backend.now, n=4, seed=7, ps_share=0.0)
        specs = [s.with_(total_work=s.total_work * 3) for s in specs]  # long enough to fail
        _submit_all(backend, specs)
        controller = Controller(backend, make_policy("fifo"))
        _until("a job running", lambda: (controller.step() or True) and any(
            j.state is JobState.RUNNING for j in backend.active.values()), timeout=60, every=0)
        victim = next(j for j in backend.active.values() if j.state is JobState.RUNNING)
        node = min(victim.nodes)
        rest.patch(f"/api/v1/nodes/{node}", {"metadata": {"annotations": {
            labels.NODE_DOWN: "true"}}})
        _until("the job sent back", lambda: (controller.step() or True) and any(
            n == node for _, n, _ in backend.node_failures), timeout=60, every=0)
        assert not backend.observe().node_up[backend.observe().node_index[node]]
        _run(controller, backend)
        _assert_each_finished_once(backend, specs)
        assert all(j.state is JobState.COMPLETED for j in backend.finished)
        assert backend.jobs[victim.name].restarts >= 1 or victim.name in \
            {j for _, _, j in backend.node_failures}
        # nothing ran on the failed node after it failed
        for p in rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
            if p["spec"].get("nodeName") == node:
                assert p["status"].get("phase") != "Running"
    finally:
        if node is not None:
            rest.patch(f"/api/v1/nodes/{node}", {"metadata": {"annotations": {
                labels.NODE_DOWN: None}}})
            _until("node Ready again", lambda: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in rest.get(f"/api/v1/nodes/{node}")["status"]["conditions"]))
        backend.close()


@pytest.mark.integration
def test_apiserver_restart_and_expired_watch_lose_no_job(cluster, namespace):
    backend = _backend(cluster, namespace)
    try:
        specs = _workload(backend.now, n=5, seed=11, ps_share=0.4)
        specs = [s.with_(total_work=s.total_work * 2) for s in specs]
        _submit_all(backend, specs)
        controller = Controller(backend, make_policy("tiresias"))
        thread, errors = run_in_background(controller, backend.now + 6000)
        _until("a job running", lambda: any(j.state is JobState.RUNNING
                                            for j in list(backend.active.values())), timeout=60)
        pods = backend.cache.pods
        seen = pods.lists + pods.reconnects
        cluster.restart("kube-apiserver")
        # the watches break; each resumes from its version, or relists if that expired (410)
        _until("the pod watch back", lambda: pods.lists + pods.reconnects > seen, timeout=60)
        # and an explicitly expired version: 410 Gone, then a fresh list
        expired_before, lists_before = pods.expired, pods.lists
        pods.restart_watch("1")  # older than anything the restarted apiserver keeps
        _until("410 and relist", lambda: pods.expired > expired_before and
               pods.lists > lists_before, timeout=30)
        thread.join(timeout=120)
        assert not thread.is_alive() and not errors, errors
        assert backend.done(), {j.name: j.reason for j in backend.active.values()}
        _assert_each_finished_once(backend, specs)
        done = _succeeded_pods(cluster, namespace)
        for j in backend.finished:
            if j.state is JobState.COMPLETED:
                assert done[j.name] == j.target_workers + j.target_ps
    finally:
        backend.close()


@pytest.mark.integration
def test_cache_cluster_state_matches_the_backend(cluster, namespace):
    from workbench.k8s.cache import ClusterCache

    backend = _backend(cluster, namespace)
    cache = ClusterCache(cluster.api_client, namespace).start()
    try:
        specs = _workload(backend.now, n=3, seed=2, ps_share=0.0)
        _submit_all(backend, specs)
        controller = Controller(backend, make_policy("fifo"))
        controller.round()
        _until("all placed", lambda: (backend.advance(backend.now + 1) or True) and all(
            j.state is JobState.RUNNING for j in backend.observe().jobs.values()), timeout=30)
        time.sleep(0.5)
        a, b = cache.cluster_state(), backend.observe()
        assert [n.name for n in a.nodes] == [n.name for n in b.nodes]
        assert (a.capacity == b.capacity).all() and (a.allocated == b.allocated).all()
        assert {n: (j.workers, j.ps) for n, j in a.jobs.items()} == \
            {n: (j.workers, j.ps) for n, j in b.jobs.items()}
        assert all(a.jobs[n].spec == b.jobs[n].spec for n in a.jobs)
    finally:
        cache.stop()
        backend.close()


# ---- the commands: schedule (with /metrics), k8s submit, k8s manifests -----------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_schedule_command_runs_submitted_jobs_and_serves_metrics(cluster, namespace):
    import subprocess
    import sys
    import urllib.request

    from workbench.k8s.manifests import training_jobs

    rest = cluster.rest
    for spec in _workload(time.time(), n=3, seed=4, ps_share=0.0, prefix="cli"):
        for manifest in training_jobs(spec, namespace):
            rest.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", manifest)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "schedule", "--kubeconfig", str(cluster.kubeconfig),
         "--namespace", namespace, "--policy", "fifo", "--speed", str(SPEED),
         "--metrics-port", str(port), "--metrics-address", "127.0.0.1", "--until-done",
         "--log-level", "WARNING"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def scrape():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
            except OSError:
                return None
            return body if "workbench_binds_total" in body and \
                "workbench_binds_total 0" not in body else None
        body = _until("metrics with binds", scrape, timeout=60, every=0.2)
        assert 'workbench_info{policy="fifo"} 1' in body
        assert "# TYPE workbench_rounds_total counter" in body
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "3 jobs completed" in out
    assert set(_succeeded_pods(cluster, namespace)) == {"cli-0", "cli-1", "cli-2"}


@pytest.mark.integration
def test_submit_command_creates_jobs_the_backend_reads(cluster, namespace):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "workbench", "k8s", "submit",
                          "synthetic:n=3,max_workers=2,ps=0.5", "--kubeconfig",
                          str(cluster.kubeconfig), "--namespace", namespace, "--json"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    backend = _backend(cluster, namespace)
    try:
        _until("3 jobs", lambda: len(backend.observe().jobs) == 3, timeout=60)
        jobs = backend.observe().jobs
        assert all(j.state is JobState.PENDING and j.spec.total_work > 0 for j in jobs.values())
        assert any(j.spec.num_ps for j in jobs.values())
    finally:
        backend.close()
    bad = subprocess.run([sys.executable, "-m", "workbench", "k8s", "submit", "nope.csv",
                          "--kubeconfig", str(cluster.kubeconfig)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


@pytest.mark.integration
def test_manifests_grant_the_scheduler_enough_and_no_more(cluster, namespace):
    """Apply `workbench k8s manifests`, then schedule with the service account's own token."""
    import base64
    import json

    from workbench.k8s.manifests import scheduler_manifests, training_jobs
    from workbench.k8s.rest import Rest, client_from_kubeconfig

    rest = cluster.rest
    system_ns = f"{namespace}-sys"
    paths = {"Namespace": "/api/v1/namespaces",
             "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
             "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
             "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
             "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
             "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
             "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments"}
    objects = scheduler_manifests(system_ns, training_namespace=namespace,
                                  name=f"wb-{namespace}")
    try:
        for obj in objects:
            if obj["kind"] == "Deployment":
                obj["spec"]["replicas"] = 0  # validated by the apiserver, not run
            ns = obj["metadata"].get("namespace", "")
            rest.post(paths[obj["kind"]].format(ns=ns), obj)
        sa = f"wb-{namespace}"

        def token():
            secrets = rest.get(f"/api/v1/namespaces/{system_ns}/secrets")["items"]
            for s in secrets:
                if s["type"] == "kubernetes.io/service-account-token" and \
                        s["metadata"]["annotations"].get("kubernetes.io/service-account.name") == sa:
                    return base64.b64decode(s["data"]["token"]).decode()
            return None
        tok = _until("the service account's token", token)
        config = json.loads(cluster.kubeconfig.read_text())
        config["users"][0]["user"] = {"token": tok}
        path = cluster.directory / f"{namespace}.kubeconfig"
        path.write_text(json.dumps(config))
        api = client_from_kubeconfig(path)
        # no more: it may not touch nodes or secrets
        with pytest.raises(Exception) as denied:
            Rest(api).delete("/api/v1/nodes/gpu-node-000")
        assert getattr(denied.value, "status", None) == 403
        with pytest.raises(Exception) as denied:
            Rest(api).get(f"/api/v1/namespaces/{system_ns}/secrets")
        assert getattr(denied.value, "status", None) == 403
        # enough: watch, bind, delete and re-create (a Suspend), scale a Job, post Events
        backend = _backend_with(api, namespace)
        try:
            specs = _workload(backend.now, n=2, seed=6, ps_share=0.0, prefix="rbac")
            for spec in specs:
                for manifest in training_jobs(spec, namespace):
                    rest.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", manifest)
            _until("jobs", lambda: len(backend.observe().jobs) == 2, timeout=60)
            controller = Controller(backend, make_policy("optimus"))
            _run(controller, backend)
            _assert_each_finished_once(backend, specs)
            assert backend.binder.stats["binds"] >= 2
            backend.binder.events.flush()
            assert backend.binder.events.failed == 0
        finally:
            backend.close()
    finally:
        for obj in reversed(objects):
            ns = obj["metadata"].get("namespace", "")
            with contextlib.suppress(Exception):
                rest.request("DELETE", paths[obj["kind"]].format(ns=ns) + "/" +
                             obj["metadata"]["name"])


def _backend_with(api_client, namespace: str):
    from workbench.k8s.backend import K8sBackend

    return K8sBackend(api_client, namespace=namespace, speed=SPEED)


@pytest.mark.integration
def test_report_patches_the_progress_the_cache_reads(cluster, namespace):
    import workbench
    from workbench.k8s.cache import ClusterCache

    rest = cluster.rest
    rest.post(f"/api/v1/namespaces/{namespace}/pods", _bare_gang(namespace, "rep", 1, 1e6)[0])
    cache = ClusterCache(cluster.api_client, namespace).start()
    try:
        assert workbench.report(iterations=1234, throughput=5.5, metric=0.42, pod="rep-0",
                                namespace=namespace, kubeconfig=str(cluster.kubeconfig),
                                raise_errors=True, force=True)

        def reported():
            job = cache.cluster_state().jobs.get("rep")
            return job if job is not None and job.progress else None
        job = _until("the report in the cache", reported)
        assert (job.progress, job.throughput, job.metric) == (1234, 5.5, 0.42)
        assert not workbench.report(iterations=1300, pod="rep-0", namespace=namespace,
                                    kubeconfig=str(cluster.kubeconfig))  # too soon: skipped
    finally:
        cache.stop()
