"""PyTorchJob, TFJob and JobSet as the workbench reads, runs and scales them (`k8s/kinds.py`,
`k8s/manifests.py`): the replica arithmetic without a cluster, then the kinds on the local
control plane with its CRDs and minimal operators (`k8s/local/operator.py`)."""

from __future__ import annotations

import time

import pytest

from workbench.k8s import kinds, labels
from workbench.k8s.cache import job_key, owner_of, role_of, spec_from_pods
from workbench.k8s.manifests import training_jobs
from workbench.model import JobKind, JobSpec, Resources


def _spec(name="bert-1", workers=4, ps=0, lo=None, hi=None, app="bert") -> JobSpec:
    return JobSpec(name=name, application=app, arrival=0.0, total_work=5000.0,
                   batch_size=128, initial_workers=workers,
                   min_workers=lo if lo is not None else workers,
                   max_workers=hi if hi is not None else workers, num_ps=ps,
                   worker_demand=Resources(4, 16, 1), ps_demand=Resources(2, 8, 0),
                   kind=JobKind.PS if ps else JobKind.ALLREDUCE)


def _operator_pods_fake(obj: dict) -> list[dict]:
    """The pods a Kubeflow operator makes of `obj` (names, labels, owner), as plain dicts:
    a fake of the operator for tests that need no cluster."""
    k = kinds.BY_KIND[obj["kind"]]
    out = []
    for rtype, rspec in obj["spec"][k.replica_specs].items():
        for i in range(rspec["replicas"]):
            t = rspec["template"]
            meta = {"name": f"{obj['metadata']['name']}-{rtype.lower()}-{i}",
                    "namespace": "default", "uid": f"u-{rtype}-{i}",
                    "labels": {**t["metadata"].get("labels", {}),
                               kinds.KF_JOB_NAME: obj["metadata"]["name"],
                               kinds.KF_REPLICA_TYPE: rtype.lower(),
                               kinds.KF_REPLICA_INDEX: str(i)},
                    "annotations": dict(t["metadata"].get("annotations", {})),
                    "ownerReferences": [{"apiVersion": k.api_version, "kind": k.kind,
                                         "name": obj["metadata"]["name"], "controller": True}]}
            out.append({"metadata": meta, "spec": dict(t["spec"])})
    return out


def test_replica_counts_ranges_and_scale_patches_follow_each_kind():
    fixed = {"metadata": {"name": "a"}, "spec": {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1}, "Worker": {"replicas": 3}}}}
    assert kinds.PYTORCHJOB.counts(fixed) == {"worker": 4, "ps": 0}
    assert kinds.PYTORCHJOB.worker_range(fixed) is None  # no elastic policy: a fixed gang
    # scaling to 6 workers keeps the Master: 5 Worker replicas
    assert kinds.PYTORCHJOB.scale_patch(fixed, "worker", 6) == \
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 5}}}}
    assert "keeps 1 workers" in kinds.PYTORCHJOB.scale_patch(fixed, "worker", 0)
    assert "no replica type to scale ps" in kinds.PYTORCHJOB.scale_patch(fixed, "ps", 1)

    elastic = {"metadata": {"name": "b"}, "spec": {
        "elasticPolicy": {"minReplicas": 2, "maxReplicas": 8},
        "pytorchReplicaSpecs": {"Worker": {"replicas": 4}}}}
    assert kinds.PYTORCHJOB.worker_range(elastic) == (2, 8)

    tf = {"metadata": {"name": "c"}, "spec": {"tfReplicaSpecs": {
        "Chief": {"replicas": 1}, "Worker": {"replicas": 2}, "PS": {"replicas": 2}}}}
    assert kinds.TFJOB.counts(tf) == {"worker": 3, "ps": 2}
    assert kinds.TFJOB.scale_patch(tf, "ps", 1) == {"spec": {"tfReplicaSpecs": {
        "PS": {"replicas": 1}}}}
    assert kinds.TFJOB.path("ns", "c") == "/apis/kubeflow.org/v1/namespaces/ns/tfjobs/c"

    # an Evaluator runs beside the training: not a worker, not counted, not scaled
    evaluated = {"metadata": {"name": "d"}, "spec": {"elasticPolicy": {"maxReplicas": 4},
                                                      "tfReplicaSpecs": {
        "Worker": {"replicas": 2}, "PS": {"replicas": 1}, "Evaluator": {"replicas": 1}}}}
    assert kinds.TFJOB.counts(evaluated) == {"worker": 2, "ps": 1}
    assert kinds.TFJOB.worker_range(evaluated) == (2, 4)
    assert kinds.TFJOB.outside_types(evaluated) == ["Evaluator"]
    assert kinds.TFJOB.outside_types(tf) == []
    assert kinds.outside_gang({kinds.KF_REPLICA_TYPE: "evaluator"}) == "evaluator"
    assert kinds.outside_gang({kinds.KF_REPLICA_TYPE: "worker"}) is None


@pytest.mark.parametrize("kind,spec", [
    ("pytorchjob", _spec(workers=4)),  # Master + 3 Workers
    ("pytorchjob", _spec(workers=3, lo=1, hi=6)),  # elastic: Workers only
    ("tfjob", _spec(workers=3, ps=2)),
])
def test_a_kubeflow_job_reads_back_as_the_job_it_was_written_from(kind, spec):
    obj, = training_jobs(spec, kind=kind)
    pods = _operator_pods_fake(obj)
    assert {job_key(p) for p in pods} == {("default", "bert-1")}
    assert {owner_of(p) for p in pods} == {(obj["kind"], "bert-1")}
    assert sum(role_of(p) == "ps" for p in pods) == spec.num_ps
    assert kinds.BY_KIND[obj["kind"]].counts(obj) == {"worker": spec.initial_workers,
                                                      "ps": spec.num_ps}
    back = spec_from_pods("bert-1", pods)
    for field in ("application", "total_work", "batch_size", "initial_workers", "num_ps",
                  "min_workers", "max_workers", "worker_demand", "kind"):
        assert getattr(back, field) == getattr(spec, field), field


def test_operator_labels_alone_name_the_job_and_its_roles():
    """A PyTorchJob or TFJob a user wrote by hand (no workbench labels): the operator's
    labels say which job a pod belongs to and which pods are parameter servers; without an
    elastic policy its worker range is its size."""
    template = {"metadata": {}, "spec": {"schedulerName": "workbench", "containers": [
        {"name": "tensorflow", "resources": {"limits": {labels.GPU_RESOURCE: "2"}}}]}}
    tf = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "mnist"},
          "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": template},
                                      "PS": {"replicas": 1, "template": template}}}}
    pods = _operator_pods_fake(tf)
    assert {job_key(p) for p in pods} == {("default", "mnist")}
    assert sorted(role_of(p) for p in pods) == ["ps", "worker", "worker"]
    spec = spec_from_pods("mnist", pods, workers=2, ps=1, worker_range=(2, 2))
    assert (spec.initial_workers, spec.num_ps, spec.min_workers, spec.max_workers) == (2, 1, 2, 2)
    assert spec.worker_demand.gpu == 2
    assert spec.kind is JobKind.PS


def test_the_pods_a_batch_job_owes_follow_its_controllers_count():
    """`pods_job_owes` is the Job controller's `manageJob` count: parallelism, capped by the
    completions left; none after a success without completions, when finished or suspended."""
    def job(status=None, **spec):
        return {"spec": {"parallelism": 4, **spec}, "status": status or {}}

    owes = kinds.pods_job_owes
    assert owes(job()) == 4
    assert owes(job({"succeeded": 1})) == 0
    assert owes(job({"succeeded": 1}, completions=3)) == 2
    assert owes(job({"succeeded": 3}, completions=3)) == 0
    assert owes(job(suspend=True)) == 0
    assert owes(job({"conditions": [{"type": "Failed", "status": "True"}]})) == 0
    assert owes(None) == 0
    made = {"metadata": {"name": "j", "uid": "u1"},
            "spec": {"template": {"metadata": {"labels": {"job-name": "j"}},
                                  "spec": {"containers": [{"name": "c"}]}}}}
    pod = kinds.pod_for_job(made, tracking_finalizer=True)
    assert pod["metadata"]["generateName"] == "j-"
    assert pod["metadata"]["labels"] == {"job-name": "j"}
    assert pod["metadata"]["ownerReferences"][0] == {
        "apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u1", "controller": True,
        "blockOwnerDeletion": True}
    assert pod["metadata"]["finalizers"] == [kinds.JOB_TRACKING_FINALIZER]
    assert "finalizers" not in kinds.pod_for_job(made)["metadata"]
    assert kinds.pods_made_alike(made)
    assert not kinds.pods_made_alike({"spec": {"completionMode": "Indexed"}})
    assert not kinds.tracks_pods_by_finalizer(made, (1, 20))
    assert kinds.tracks_pods_by_finalizer(made, (1, 27))
    made["metadata"]["annotations"] = {kinds.JOB_TRACKING_FINALIZER: ""}  # 1.22 to 1.26
    assert kinds.tracks_pods_by_finalizer(made, (1, 25))
    pod["spec"]["containers"].append({})  # a copy: the Job's template is untouched
    assert len(made["spec"]["template"]["spec"]["containers"]) == 1


def test_a_pytorchjob_cannot_hold_parameter_servers():
    with pytest.raises(ValueError, match="use tfjob"):
        training_jobs(_spec(ps=1), kind="pytorchjob")


def test_a_jobset_names_its_pods_job_and_ps_role():
    obj, = training_jobs(_spec(workers=2, ps=1), kind="jobset")
    names = [r["name"] for r in obj["spec"]["replicatedJobs"]]
    assert names == ["workers", "ps"]
    assert kinds.role_label({kinds.JOBSET_NAME: "x", kinds.JOBSET_REPLICATED_JOB: "ps"}) == "ps"
    assert kinds.group_label({kinds.JOBSET_NAME: "x"}) == "x"


def test_a_kubeflow_job_is_tracked_only_once_every_role_has_its_pods_with_a_fake_cache():
    """A TFJob's operator made its PS pod first: the job owns its Workers too (from its replica
    specs), so it is not tracked at 0 workers; while the TFJob itself is not in the watch cache
    the job waits, unless TFJobs are not watched at all."""
    from types import SimpleNamespace

    from workbench.k8s.reconcile import Reconciler

    obj, = training_jobs(_spec("tf", workers=2, ps=1, app="resnet-50"), "default", kind="tfjob")
    rec = Reconciler.__new__(Reconciler)
    rec.cache = SimpleNamespace(custom={"TFJob": object()})  # the fake: only what is read
    ps_only = {labels.ROLE_PS: (("TFJob", "tf"),)}
    owners = dict(ps_only)
    assert rec._whole_owner(("default", "tf"), owners, {("TFJob", "default", "tf"): obj})
    assert owners == {labels.ROLE_PS: (("TFJob", "tf"),), labels.ROLE_WORKER: (("TFJob", "tf"),)}
    assert not rec._whole_owner(("default", "tf"), dict(ps_only), {})
    rec.cache = SimpleNamespace(custom={})
    assert rec._whole_owner(("default", "tf"), dict(ps_only), {})


def test_a_jobset_is_tracked_only_once_every_child_job_has_pods_with_a_fake_cache():
    """A JobSet of 2 worker replicas: the pods of its first child Job alone are not the job
    (tracked then, it took 1 worker as its minimum; CI saw it once); both are. While the JobSet
    is not in the watch cache the job waits, unless JobSets are not watched at all."""
    from types import SimpleNamespace

    from workbench.k8s.cache import PodGroup
    from workbench.k8s.reconcile import Reconciler

    obj, = training_jobs(_spec("jr", workers=2, lo=1, hi=5), "default", kind="jobset")
    rjob, = obj["spec"]["replicatedJobs"]
    rjob["replicas"], rjob["template"]["spec"]["parallelism"] = 2, 1
    pod = {"metadata": {"labels": {kinds.JOBSET_NAME: "jr"}}}
    group = PodGroup(("default", "jr"), pods=[pod, pod])
    rec = Reconciler.__new__(Reconciler)
    rec.cache = SimpleNamespace(custom={"JobSet": object()})  # the fake: only what is read
    objs = {("JobSet", "default", "jr"): obj}
    first = {labels.ROLE_WORKER: (("Job", "jr-workers-0"),)}
    both = {labels.ROLE_WORKER: (("Job", "jr-workers-0"), ("Job", "jr-workers-1"))}
    assert not rec._every_child_job(("default", "jr"), group, first, objs)
    assert rec._every_child_job(("default", "jr"), group, both, objs)
    assert not rec._every_child_job(("default", "jr"), group, both, {})
    rjob["template"]["spec"]["parallelism"] = 0  # a replicated job that makes no pods
    assert rec._every_child_job(("default", "jr"), group, {}, objs)
    rec.cache = SimpleNamespace(custom={})
    assert rec._every_child_job(("default", "jr"), group, first, {})


# ---- on the local control plane ----------------------------------------------------------------

SPEED = 50.0
WORK_S = 90.0  # emulated seconds of training at the job's first placement


@pytest.fixture(scope="module")
def cluster():
    from k8s_helpers import small_cluster

    with small_cluster(SPEED) as c:
        yield c


@pytest.fixture
def namespace(cluster):
    from k8s_helpers import fresh_namespace

    with fresh_namespace(cluster.rest, "kinds") as ns:
        yield ns
        for k in kinds.CUSTOM_KINDS:  # finished or not, so their operator re-creates nothing
            for obj in cluster.rest.get(k.path(ns))["items"]:
                cluster.rest.request("DELETE", k.path(ns, obj["metadata"]["name"]),
                                     {"kind": "DeleteOptions", "apiVersion": "v1",
                                      "propagationPolicy": "Background"})


from k8s_helpers import auditor, no_overcommit  # noqa: E402, F401 - fixtures


def _timed(spec: JobSpec, t0: float) -> JobSpec:
    from workbench.perf import default_perf

    rate = default_perf().iteration_rate(spec, {"a": spec.initial_workers},
                                         {"a": spec.num_ps} if spec.num_ps else {})
    return spec.with_(arrival=t0, total_work=rate * WORK_S)


def _create(cluster, namespace: str, spec: JobSpec, kind: str, drop=()) -> dict:
    from workbench.k8s.manifests import manifest_path

    obj, = training_jobs(spec, namespace, arrival=spec.arrival, kind=kind)
    for t in obj["spec"][kinds.BY_KIND[obj["kind"]].replica_specs].values():
        for key in drop:  # what a hand-written job would not say
            t["template"]["metadata"]["annotations"].pop(key, None)
    cluster.rest.post(manifest_path(obj), obj)
    return obj


def _backend(cluster, namespace: str):
    from workbench.k8s.backend import K8sBackend

    return K8sBackend(cluster.api_client, namespace=namespace, speed=SPEED)


def _run(backend, policy: str, horizon: float = 4000.0):
    from workbench.control import Controller
    from workbench.policies import make_policy

    controller = Controller(backend, make_policy(policy))
    controller.run(until=backend.now + horizon)
    left = {j.name: (j.state.value, j.reason) for j in backend.active.values()}
    assert backend.done(), f"jobs left after {horizon:.0f} emulated s: {left}"
    return controller


def _succeeded(cluster, namespace: str) -> dict[str, list[str]]:
    pods = cluster.rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    out: dict[str, list[str]] = {}
    for p in pods:
        if p.get("status", {}).get("phase") == "Succeeded":
            out.setdefault(job_key(p)[1], []).append(p["metadata"]["name"])
    return out


def _condition(cluster, kind: kinds.OwnerKind, namespace: str, name: str) -> set[str]:
    obj = cluster.rest.get(kind.path(namespace, name))
    return {c["type"] for c in (obj.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"}


@pytest.mark.integration
def test_a_pytorchjob_and_a_tfjob_run_to_completion_as_gangs(cluster, namespace):
    """A PyTorchJob (Master + 2 Workers) and a TFJob (2 Workers, 1 PS), written without the
    workbench's gang-size annotations, run under fifo (all or nothing) to completion: each is
    one job of its operator's pods, placed whole, and its operator sees it succeed."""
    from k8s_helpers import until

    backend = _backend(cluster, namespace)
    try:
        t0 = backend.now
        drop = (labels.NUM_WORKERS, labels.NUM_PS, labels.MIN_WORKERS, labels.MAX_WORKERS)
        _create(cluster, namespace, _timed(_spec("pt", workers=3), t0), "pytorchjob", drop)
        _create(cluster, namespace, _timed(_spec("tf", workers=2, ps=1, app="resnet-50"), t0), "tfjob", drop)
        until("both jobs' pods", lambda: len(backend.observe().jobs) == 2, timeout=60)
        jobs = backend.observe().jobs
        # the sizes come from the replica specs; no elastic policy: a fixed gang
        assert (jobs["pt"].spec.initial_workers, jobs["pt"].spec.num_ps) == (3, 0)
        assert (jobs["pt"].spec.min_workers, jobs["pt"].spec.max_workers) == (3, 3)
        assert (jobs["tf"].spec.initial_workers, jobs["tf"].spec.num_ps) == (2, 1)
        controller = _run(backend, "fifo")
        assert sorted((j.name, j.state.value) for j in backend.finished) == \
            [("pt", "completed"), ("tf", "completed")]
        places = [d for d in controller.recorder.decisions if d.action == "Place" and d.applied]
        assert sorted(d.job for d in places) == ["pt", "tf"]  # each placed once, whole
        done = until("every pod ended", lambda: (lambda s: s if sum(map(len, s.values())) == 6
                                                  else None)(_succeeded(cluster, namespace)))
        assert sorted(done["pt"]) == ["pt-master-0", "pt-worker-0", "pt-worker-1"]
        assert sorted(done["tf"]) == ["tf-ps-0", "tf-worker-0", "tf-worker-1"]
        until("the PyTorchJob succeeded",
              lambda: "Succeeded" in _condition(cluster, kinds.PYTORCHJOB, namespace, "pt"))
        until("the TFJob succeeded",
              lambda: "Succeeded" in _condition(cluster, kinds.TFJOB, namespace, "tf"))
    finally:
        backend.close()


@pytest.mark.integration
def test_a_tfjob_with_an_evaluator_is_refused_on_its_pods_and_nothing_is_bound(cluster, namespace):
    """An Evaluator is not part of a training gang: a TFJob with one is not scheduled with the
    Evaluator counted as a worker; its pods and the TFJob say why (`workbench.io/rejected`),
    none is bound, and a plain TFJob beside it runs."""
    from k8s_helpers import until

    from workbench.k8s.manifests import manifest_path

    backend = _backend(cluster, namespace)
    try:
        t0 = backend.now
        obj, = training_jobs(_timed(_spec("ev", workers=2, ps=1, app="resnet-50"), t0), namespace,
                             arrival=t0, kind="tfjob")
        specs = obj["spec"]["tfReplicaSpecs"]
        specs["Evaluator"] = {**specs["Worker"], "replicas": 1}
        cluster.rest.post(manifest_path(obj), obj)
        _create(cluster, namespace, _timed(_spec("ok", workers=2, ps=1, app="resnet-50"), t0),
                "tfjob")
        until("the plain TFJob's pods", lambda: "ok" in backend.observe().jobs, timeout=60)
        controller = _run(backend, "fifo")
        assert [(j.name, j.state.value) for j in backend.finished] == [("ok", "completed")]
        assert "ev" not in backend.jobs
        pods = [p for p in cluster.rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
                if p["metadata"]["name"].startswith("ev-")]
        assert sorted(p["metadata"]["name"] for p in pods) == \
            ["ev-evaluator-0", "ev-ps-0", "ev-worker-0", "ev-worker-1"]
        assert not any(p["spec"].get("nodeName") for p in pods)
        why = until("the refusal on the TFJob", lambda: (cluster.rest.get(kinds.TFJOB.path(
            namespace, "ev"))["metadata"].get("annotations") or {}).get(labels.REJECTED))
        assert "Evaluator replicas run outside the training gang" in why
        for p in cluster.rest.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
            if p["metadata"]["name"].startswith("ev-"):
                assert (p["metadata"].get("annotations") or {}).get(labels.REJECTED) == why
        assert not [d for d in controller.recorder.decisions if d.job == "ev"]
    finally:
        backend.close()


@pytest.mark.integration
def test_an_elastic_pytorchjob_is_scaled_through_its_worker_replicas(cluster, namespace):
    """An elastic PyTorchJob (elasticPolicy 1..8 Workers, 2 to start, no workbench range
    annotations) alone on the cluster: optimus gives it more workers by patching its Worker
    replicas, its operator makes the pods, and it runs to completion on them."""
    from k8s_helpers import until

    backend = _backend(cluster, namespace)
    try:
        spec = _timed(_spec("el", workers=2, lo=1, hi=8), backend.now)
        _create(cluster, namespace, spec, "pytorchjob", (labels.MIN_WORKERS, labels.MAX_WORKERS))
        until("the job's pods", lambda: len(backend.observe().jobs) == 1, timeout=60)
        st = backend.observe().jobs["el"]
        assert (st.spec.min_workers, st.spec.max_workers) == (1, 8)  # its elastic policy
        controller = _run(backend, "optimus")
        (job,) = backend.finished
        assert job.state.value == "completed", job.reason
        assert job.target_workers > 2, "optimus did not grow the job"
        grown = [d for d in controller.recorder.decisions if d.applied and d.job == "el"]
        assert grown, "no decision was carried out"
        obj = cluster.rest.get(kinds.PYTORCHJOB.path(namespace, "el"))
        assert obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == job.target_workers
        done = until("every pod ended", lambda: (lambda s: s if len(s.get("el", [])) ==
                                                 job.target_workers else None)(
            _succeeded(cluster, namespace)), timeout=60)
        assert all(n.startswith("el-worker-") for n in done["el"])
    finally:
        backend.close()


@pytest.mark.integration
def test_a_tfjob_with_a_worker_range_is_scaled_through_its_replica_specs(cluster, namespace):
    """A TFJob (2 Workers, 1 PS) whose annotations allow 1..4 workers: optimus resizes it by
    patching its Worker (and PS) replicas, and it runs to completion on what they say."""
    backend = _backend(cluster, namespace)
    try:
        spec = _timed(_spec("tfe", workers=2, ps=1, lo=1, hi=4, app="resnet-50"), backend.now)
        _create(cluster, namespace, spec, "tfjob")
        from k8s_helpers import until

        until("the job's pods", lambda: len(backend.observe().jobs) == 1, timeout=60)
        assert backend.observe().jobs["tfe"].spec.max_workers == 4
        _run(backend, "optimus")
        (job,) = backend.finished
        assert job.state.value == "completed", job.reason
        # optimus sizes a PS job by its fitted speed: here fewer workers than submitted
        assert (job.target_workers, job.target_ps) != (2, 1), "optimus did not resize the job"
        obj = cluster.rest.get(kinds.TFJOB.path(namespace, "tfe"))
        replicas = kinds.TFJOB.replicas(obj)
        assert (replicas["Worker"], replicas["PS"]) == (job.target_workers, job.target_ps)
    finally:
        backend.close()


@pytest.mark.integration
def test_an_elastic_jobset_is_scaled_through_its_child_job_and_completes(cluster, namespace):
    """A JobSet whose one replicated job holds the workers (2 to start, 1..4 allowed): its
    pods are one job with the JobSet's name, optimus grows it by patching the child Job's
    parallelism, and the JobSet completes with its Job."""
    from k8s_helpers import until

    from workbench.k8s.manifests import manifest_path

    backend = _backend(cluster, namespace)
    try:
        spec = _timed(_spec("js", workers=2, lo=1, hi=4), backend.now)
        obj, = training_jobs(spec, namespace, arrival=spec.arrival, kind="jobset")
        cluster.rest.post(manifest_path(obj), obj)
        until("the job's pods", lambda: len(backend.observe().jobs) == 1, timeout=60)
        st = backend.observe().jobs["js"]
        assert (st.spec.min_workers, st.spec.max_workers) == (1, 4)
        controller = _run(backend, "optimus")
        (job,) = backend.finished
        assert job.state.value == "completed", job.reason
        assert job.target_workers > 2, "optimus did not grow the job"
        assert any(d.applied and d.job == "js" for d in controller.recorder.decisions)
        child = cluster.rest.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/js-workers-0")
        assert child["spec"]["parallelism"] == job.target_workers
        until("the JobSet completed",
              lambda: "Completed" in _condition(cluster, kinds.JOBSET, namespace, "js"),
              timeout=60)
    finally:
        backend.close()


@pytest.mark.integration
def test_a_jobset_with_replicas_spreads_its_workers_over_its_child_jobs(cluster, namespace):
    """A JobSet whose workers' replicated job has 2 replicas (2 child Jobs of 1 pod): it is
    one job of at least 2 workers (one per child Job, though it says 1..5), optimus grows it
    by spreading the workers over both children's parallelism, and the JobSet completes."""
    from k8s_helpers import until

    from workbench.k8s.manifests import manifest_path

    backend = _backend(cluster, namespace)
    try:
        spec = _timed(_spec("jr", workers=2, lo=1, hi=5), backend.now)
        obj, = training_jobs(spec, namespace, arrival=spec.arrival, kind="jobset")
        rjob, = obj["spec"]["replicatedJobs"]
        rjob["replicas"], rjob["template"]["spec"]["parallelism"] = 2, 1
        cluster.rest.post(manifest_path(obj), obj)
        until("the job's pods", lambda: len(backend.observe().jobs) == 1, timeout=60)
        st = backend.observe().jobs["jr"]
        assert (st.spec.min_workers, st.spec.initial_workers, st.spec.max_workers) == (2, 2, 5)
        _run(backend, "optimus")
        (job,) = backend.finished
        assert job.state.value == "completed", job.reason
        assert job.target_workers > 2, "optimus did not grow the job"
        children = [cluster.rest.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/jr-workers-{i}")
                    for i in range(2)]
        n = job.target_workers
        assert [c["spec"]["parallelism"] for c in children] == [n - n // 2, n // 2]
        until("the JobSet completed",
              lambda: "Completed" in _condition(cluster, kinds.JOBSET, namespace, "jr"),
              timeout=60)
    finally:
        backend.close()


@pytest.mark.integration
def test_a_crd_that_is_not_installed_is_reported_once_and_refused_in_one_line(
        cluster, namespace, caplog):
    """Without the JobSet CRD the backend reads the other kinds, says once that it does not
    read JobSets, and `workbench k8s submit --kind jobset` stops in one line, creating
    nothing."""
    import logging
    import subprocess
    import sys

    from k8s_helpers import until

    crd = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.{kinds.JOBSET.group}"
    saved = cluster.rest.get(crd)
    cluster.rest.delete(crd)

    def gone():
        from k8s_helpers import exists

        if exists(cluster.rest, crd):
            return False
        try:
            found = cluster.rest.get(f"/apis/{kinds.JOBSET.group}/{kinds.JOBSET.version}")
        except Exception:  # noqa: BLE001 - 404: the group is gone
            return True
        return not any(r["name"] == "jobsets" for r in found.get("resources") or [])
    try:
        until("the JobSet CRD removed", gone, timeout=60)
        with caplog.at_level(logging.INFO, logger="workbench.k8s.cache"):
            backend = _backend(cluster, namespace)
            try:
                for _ in range(5):
                    backend.observe()
                    time.sleep(0.2)
                assert backend.cache.not_installed == ["JobSet"]
                assert set(backend.cache.custom) == {"PyTorchJob", "TFJob"}
            finally:
                backend.close()
        said = [r for r in caplog.records if "JobSet" in r.getMessage()]
        assert len(said) == 1 and "not installed" in said[0].getMessage()
        out = subprocess.run([sys.executable, "-m", "workbench", "k8s", "submit",
                              "synthetic:n=2,max_workers=2", "--kind", "jobset", "--kubeconfig",
                              str(cluster.kubeconfig), "--namespace", namespace],
                             capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 2, out.stderr
        assert "no JobSet CRD" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    finally:
        meta = {k: saved["metadata"][k] for k in ("name", "labels", "annotations")
                if k in saved["metadata"]}
        cluster.rest.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                          {"apiVersion": "apiextensions.k8s.io/v1",
                           "kind": "CustomResourceDefinition", "metadata": meta,
                           "spec": saved["spec"]})
        from workbench.k8s.local.crds import wait_established

        wait_established(cluster.rest, [kinds.JOBSET])  # before the namespace lists JobSets
