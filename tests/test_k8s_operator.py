"""The local control plane's CRDs and minimal training operator (`k8s/local/crds.py`,
`k8s/local/operator.py`): its reconcile rules without a cluster, then PyTorchJobs, TFJobs and
JobSets on one local cluster for the module (pods bound by kube-scheduler, run and ended by the
node emulator through `workbench.io/duration` and `workbench.io/exit-code`)."""

from __future__ import annotations

import time

import pytest

from workbench.k8s import kinds, labels
from workbench.k8s.local.operator import (
    kubeflow_pod,
    merge_patched,
    reconcile_jobset,
    reconcile_kubeflow,
)
from workbench.k8s.rest import MERGE

NOW = "2026-01-01T00:00:00Z"


def _template(duration: float | None = None, exit_code: int | None = None,
              container: str = "pytorch") -> dict:
    ann = {"example.com/kept": "yes"}
    if duration is not None:
        ann[labels.DURATION] = f"{duration:g}"
    if exit_code is not None:
        ann[labels.EXIT_CODE] = str(exit_code)
    return {"metadata": {"labels": {"app": "train"}, "annotations": ann},
            "spec": {"containers": [{"name": container, "image": "busybox", "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def _kubeflow(kind: kinds.OwnerKind, name: str, replicas: dict[str, tuple[int, dict]],
              policy: str = "Never", clean: str | None = None, ns: str = "default") -> dict:
    spec: dict = {kind.replica_specs: {
        t: {"replicas": n, "restartPolicy": policy, "template": tpl}
        for t, (n, tpl) in replicas.items()}}
    if clean:
        spec["runPolicy"] = {"cleanPodPolicy": clean}
    return {"apiVersion": kind.api_version, "kind": kind.kind,
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def _jobset(name: str, rjobs: dict[str, tuple[int, dict]], ns: str = "default") -> dict:
    return {"apiVersion": kinds.JOBSET.api_version, "kind": kinds.JOBSET.kind,
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicatedJobs": [
                {"name": r, "replicas": n, "template": {"spec": {
                    "parallelism": 1, "backoffLimit": 0,
                    "template": {**tpl, "spec": {**tpl["spec"], "restartPolicy": "Never"}}}}}
                for r, (n, tpl) in rjobs.items()]}}


# ---- the reconcile rules, without a cluster ----------------------------------------------------


def _stored(obj: dict, uid: str = "uid-1") -> dict:
    return {**obj, "metadata": {**obj["metadata"], "uid": uid}}


def _pod(kind, obj, rtype: str, i: int, phase: str = "Running", exit_code: int = 0) -> dict:
    pod = kubeflow_pod(kind, obj, rtype, i, obj["spec"][kind.replica_specs][rtype])
    pod["metadata"]["uid"] = f"pod-{rtype}-{i}"
    pod["status"] = {"phase": phase, "containerStatuses": [
        {"name": "pytorch", "state": {"terminated": {"exitCode": exit_code}}}]}
    return pod


def _apply_status(obj: dict, actions) -> dict:
    """`obj` as the API server stores it after the actions' status patches."""
    for a in actions:
        if a.verb == "status":
            obj = merge_patched(obj, a.body)
    return obj


def test_a_kubeflow_job_gets_each_replica_once_and_loses_the_ones_scaled_away():
    k = kinds.PYTORCHJOB
    job = _stored(_kubeflow(k, "pt", {"Master": (1, _template()), "Worker": (2, _template())}))
    acts = reconcile_kubeflow(k, job, [], set(), NOW)
    created = {a.body["metadata"]["name"]: a.body for a in acts if a.verb == "create"}
    assert sorted(created) == ["pt-master-0", "pt-worker-0", "pt-worker-1"]
    master = created["pt-master-0"]["metadata"]
    assert master["labels"][kinds.KF_JOB_ROLE] == "master"
    assert kinds.KF_JOB_ROLE not in created["pt-worker-1"]["metadata"]["labels"]
    assert master["ownerReferences"][0]["uid"] == "uid-1"
    # the pods there are, and a name another owner still holds, are not created again
    pods = [_pod(k, job, "Master", 0), _pod(k, job, "Worker", 0)]
    acts = reconcile_kubeflow(k, job, pods, {("default", "pt-worker-1")}, NOW)
    assert [a for a in acts if a.verb != "status"] == []
    # a scale-down to one Worker deletes pt-worker-1 and nothing else
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 1
    pods.append(_pod(k, job, "Worker", 1))
    acts = reconcile_kubeflow(k, job, pods, set(), NOW)
    assert [(a.verb, a.path.rsplit("/", 1)[1]) for a in acts if a.verb != "status"] == \
        [("delete", "pt-worker-1")]


@pytest.mark.parametrize("policy,code,expect", [
    ("Never", 1, "Failed"), ("ExitCode", 1, "Failed"),  # a permanent error
    ("ExitCode", 137, "delete"), ("OnFailure", 1, "delete"),  # retried: re-created
])
def test_a_failed_pod_fails_its_job_or_is_re_created_by_restart_policy(policy, code, expect):
    k = kinds.TFJOB
    job = _stored(_kubeflow(k, "tf", {"Worker": (2, _template()), "PS": (1, _template())},
                            policy=policy))
    pods = [_pod(k, job, "Worker", 0, "Failed", code), _pod(k, job, "Worker", 1),
            _pod(k, job, "PS", 0)]
    acts = reconcile_kubeflow(k, job, pods, set(), NOW)
    writes = [a.verb for a in acts if a.verb != "status"]
    conds = {c["type"] for c in _apply_status(job, acts)["status"]["conditions"]
             if c["status"] == "True"}
    if expect == "Failed":
        assert writes == [] and "Failed" in conds
    else:
        assert writes == ["delete"] and "Failed" not in conds


def test_a_finished_job_re_creates_nothing_and_its_status_settles():
    """The Master succeeding ends a PyTorchJob: its status is written once (a second round
    on the stored object writes nothing) and a pod deleted afterwards stays deleted."""
    k = kinds.PYTORCHJOB
    job = _stored(_kubeflow(k, "pt", {"Master": (1, _template()), "Worker": (1, _template())}))
    pods = [_pod(k, job, "Master", 0, "Succeeded"), _pod(k, job, "Worker", 0)]
    acts = reconcile_kubeflow(k, job, pods, set(), NOW)
    job = _apply_status(job, acts)
    status = job["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]} == \
        {"Created": "True", "Succeeded": "True"}
    assert status["replicaStatuses"] == {"Master": {"active": 0, "succeeded": 1, "failed": 0},
                                         "Worker": {"active": 1, "succeeded": 0, "failed": 0}}
    assert reconcile_kubeflow(k, job, pods, set(), "2026-01-01T00:01:00Z") == []
    assert reconcile_kubeflow(k, job, [], set(), NOW) == []  # every pod gone: none back


def test_a_jobset_makes_one_labelled_job_per_replica_and_completes_with_them():
    js = _stored(_jobset("js", {"workers": (2, _template()), "ps": (1, _template())}))
    acts = reconcile_jobset(js, [], set(), NOW)
    jobs = [a.body for a in acts if a.verb == "create"]
    assert [j["metadata"]["name"] for j in jobs] == ["js-workers-0", "js-workers-1", "js-ps-0"]
    for j in jobs:
        for meta in (j["metadata"], j["spec"]["template"]["metadata"]):
            assert meta["labels"][kinds.JOBSET_NAME] == "js"
        assert j["spec"]["template"]["metadata"]["labels"]["app"] == "train"
    for j in jobs:
        j["metadata"]["ownerReferences"][0]["uid"] = "uid-1"
        j["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    js = _apply_status(js, reconcile_jobset(js, jobs, set(), NOW))
    assert [c["type"] for c in js["status"]["conditions"]] == ["Completed"]
    assert reconcile_jobset(js, jobs, set(), NOW) == []


# ---- on the local control plane ----------------------------------------------------------------

SPEED = 20.0  # emulated seconds per real second: a 10 s pod ends in half a second


@pytest.fixture(scope="module")
def cluster():
    from k8s_helpers import small_cluster

    with small_cluster(SPEED) as c:
        yield c


from k8s_helpers import auditor, no_overcommit  # noqa: E402, F401 - fixtures


@pytest.fixture
def namespace(cluster):
    from k8s_helpers import fresh_namespace

    with fresh_namespace(cluster.rest, "operator") as ns:
        yield ns
        for k in kinds.CUSTOM_KINDS:  # before the pods go, so nothing re-creates them
            for obj in cluster.rest.get(k.path(ns))["items"]:
                cluster.rest.request("DELETE", k.path(ns, obj["metadata"]["name"]),
                                     {"kind": "DeleteOptions", "apiVersion": "v1",
                                      "propagationPolicy": "Background"})


def _create(cluster, obj: dict, ns: str) -> dict:
    obj["metadata"]["namespace"] = ns
    k = kinds.BY_KIND[obj["kind"]]
    return cluster.rest.post(k.path(ns), obj)


def _pods(cluster, ns: str, selector: str) -> dict[str, dict]:
    """The pods matching `selector` that are not being deleted, by name."""
    items = cluster.rest.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=selector)["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def _running(cluster, ns: str, selector: str, names: list[str]):
    """The pods by name once exactly `names` exist and all run (else None)."""
    pods = _pods(cluster, ns, selector)
    ok = sorted(pods) == sorted(names) and all(
        p.get("status", {}).get("phase") == "Running" for p in pods.values())
    return pods if ok else None


def _conditions(cluster, k: kinds.OwnerKind, ns: str, name: str) -> dict[str, str]:
    obj = cluster.rest.get(k.path(ns, name))
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


@pytest.mark.integration
def test_the_cluster_runs_the_operator_and_serves_the_crds(cluster):
    from workbench.k8s.local.crds import install_crds

    assert cluster.processes()["training-operator"]["running"]
    assert install_crds(cluster.rest, timeout=10) == []  # there already: nothing created
    bad = _kubeflow(kinds.PYTORCHJOB, "bad", {"Worker": (1, _template())})
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(Exception) as e:
        cluster.rest.post(kinds.PYTORCHJOB.path("default"), bad)
    assert getattr(e.value, "status", None) == 422  # the typed field refuses it


@pytest.mark.integration
def test_a_pytorchjob_gets_its_pods_named_labelled_and_owned(cluster, namespace):
    from k8s_helpers import until

    job = _create(cluster, _kubeflow(kinds.PYTORCHJOB, "pt", {
        "Master": (1, _template()), "Worker": (2, _template())}), namespace)
    names = ["pt-master-0", "pt-worker-0", "pt-worker-1"]
    pods = until("3 Running pods", lambda: _running(
        cluster, namespace, f"{kinds.KF_JOB_NAME}=pt", names))
    for name, pod in pods.items():
        meta = pod["metadata"]
        rtype, index = name.split("-")[1:]
        assert meta["labels"][kinds.KF_REPLICA_TYPE] == rtype
        assert meta["labels"][kinds.KF_REPLICA_INDEX] == index
        assert meta["labels"][kinds.KF_OPERATOR_NAME] == "pytorchjob-controller"
        assert meta["labels"].get(kinds.KF_JOB_ROLE) == ("master" if rtype == "master" else None)
        assert meta["labels"]["app"] == "train" and meta["annotations"]["example.com/kept"] == "yes"
        ref, = meta["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"],
                ref["blockOwnerDeletion"]) == ("PyTorchJob", "pt", job["metadata"]["uid"],
                                               True, True)
        assert pod["spec"]["nodeName"].startswith("gpu-node-")  # kube-scheduler bound it
    until("Created and Running", lambda: _conditions(
        cluster, kinds.PYTORCHJOB, namespace, "pt") == {"Created": "True", "Running": "True"})
    status = cluster.rest.get(kinds.PYTORCHJOB.path(namespace, "pt"))["status"]
    assert status["replicaStatuses"]["Worker"] == {"active": 2, "succeeded": 0, "failed": 0}


@pytest.mark.integration
def test_a_deleted_pod_is_re_created_and_a_scale_down_deletes_the_last_worker(
        cluster, namespace):
    from k8s_helpers import until

    _create(cluster, _kubeflow(kinds.PYTORCHJOB, "pt", {
        "Master": (1, _template()), "Worker": (2, _template())}), namespace)
    sel = f"{kinds.KF_JOB_NAME}=pt"
    names = ["pt-master-0", "pt-worker-0", "pt-worker-1"]
    before = until("3 Running pods", lambda: _running(cluster, namespace, sel, names))
    # the scheduler's checkpoint-restart: it deletes a pod and the owner makes it again
    cluster.rest.delete(f"/api/v1/namespaces/{namespace}/pods/pt-worker-0")
    after = until("pt-worker-0 re-created and Running", lambda: (
        lambda p: p if p and p["pt-worker-0"]["metadata"]["uid"] !=
        before["pt-worker-0"]["metadata"]["uid"] else None)(
            _running(cluster, namespace, sel, names)))
    assert after["pt-master-0"]["metadata"]["uid"] == before["pt-master-0"]["metadata"]["uid"]
    # the scheduler scales the job down: Worker replicas 2 -> 1
    cluster.rest.patch(kinds.PYTORCHJOB.path(namespace, "pt"),
                       {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}}}, MERGE)
    left = until("pt-worker-1 gone", lambda: _running(cluster, namespace, sel, names[:2]))
    assert {n: p["metadata"]["uid"] for n, p in left.items()} == \
        {n: after[n]["metadata"]["uid"] for n in names[:2]}
    cluster.rest.patch(kinds.PYTORCHJOB.path(namespace, "pt"),
                       {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}}, MERGE)
    until("3 Workers", lambda: _running(
        cluster, namespace, sel, [*names, "pt-worker-2"]))


@pytest.mark.integration
def test_a_pytorchjob_whose_pods_succeed_succeeds_and_nothing_comes_back(cluster, namespace):
    from k8s_helpers import until

    _create(cluster, _kubeflow(kinds.PYTORCHJOB, "done", {
        "Master": (1, _template(duration=10)), "Worker": (2, _template(duration=10))}),
        namespace)
    until("the PyTorchJob Succeeded", lambda: _conditions(
        cluster, kinds.PYTORCHJOB, namespace, "done").get("Succeeded") == "True")
    status = cluster.rest.get(kinds.PYTORCHJOB.path(namespace, "done"))["status"]
    conds = {c["type"]: c["status"] for c in status["conditions"]}
    assert conds["Running"] == "False" and "Failed" not in conds
    assert status["replicaStatuses"]["Master"]["succeeded"] == 1 and status["completionTime"]
    sel = f"{kinds.KF_JOB_NAME}=done"
    until("every pod Succeeded", lambda: (lambda p: len(p) == 3 and all(
        x["status"]["phase"] == "Succeeded" for x in p.values()))(
            _pods(cluster, namespace, sel)))
    cluster.rest.delete(f"/api/v1/namespaces/{namespace}/pods/done-worker-1")
    until("done-worker-1 gone", lambda: "done-worker-1" not in _pods(cluster, namespace, sel))
    time.sleep(2.0)  # a re-creation would follow the DELETED event within a round
    assert sorted(_pods(cluster, namespace, sel)) == ["done-master-0", "done-worker-0"]


@pytest.mark.integration
def test_a_failed_worker_fails_a_never_job_and_is_re_created_under_on_failure(
        cluster, namespace):
    from k8s_helpers import until

    for name, policy in (("never", "Never"), ("retry", "OnFailure")):
        _create(cluster, _kubeflow(kinds.PYTORCHJOB, name, {
            "Master": (1, _template()), "Worker": (1, _template(duration=10, exit_code=1))},
            policy=policy), namespace)
    until("the Never job Failed", lambda: _conditions(
        cluster, kinds.PYTORCHJOB, namespace, "never").get("Failed") == "True")
    sel = f"{kinds.KF_JOB_NAME}=retry"
    first = until("retry-worker-0", lambda: _pods(cluster, namespace, sel).get("retry-worker-0"))
    until("retry-worker-0 re-created", lambda: (lambda p: p and p["metadata"]["uid"] !=
                                                first["metadata"]["uid"])(
        _pods(cluster, namespace, sel).get("retry-worker-0")))
    assert "Failed" not in _conditions(cluster, kinds.PYTORCHJOB, namespace, "retry")


@pytest.mark.integration
def test_a_tfjob_with_parameter_servers_ends_with_its_chief(cluster, namespace):
    """Chief, Workers and a PS that never ends by itself: the Chief succeeding ends the TFJob,
    and cleanPodPolicy Running deletes the PS still running."""
    from k8s_helpers import until

    _create(cluster, _kubeflow(kinds.TFJOB, "tf", {
        "Chief": (1, _template(duration=30, container="tensorflow")),
        "Worker": (2, _template(duration=30, container="tensorflow")),
        "PS": (1, _template(container="tensorflow"))}, clean="Running"), namespace)
    sel = f"{kinds.KF_JOB_NAME}=tf"
    pods = until("4 pods", lambda: (lambda p: p if len(p) == 4 else None)(
        _pods(cluster, namespace, sel)))
    assert sorted(pods) == ["tf-chief-0", "tf-ps-0", "tf-worker-0", "tf-worker-1"]
    ps = pods["tf-ps-0"]["metadata"]["labels"]
    assert ps[kinds.KF_REPLICA_TYPE] == "ps" and kinds.role_label(ps) == labels.ROLE_PS
    assert ps[kinds.KF_OPERATOR_NAME] == "tfjob-controller"
    assert pods["tf-chief-0"]["metadata"]["labels"][kinds.KF_JOB_ROLE] == "master"
    until("the TFJob Succeeded", lambda: _conditions(
        cluster, kinds.TFJOB, namespace, "tf").get("Succeeded") == "True")
    until("the PS deleted", lambda: "tf-ps-0" not in _pods(cluster, namespace, sel))


@pytest.mark.integration
def test_a_jobset_runs_child_jobs_whose_pods_carry_its_labels_and_completes(
        cluster, namespace):
    from k8s_helpers import until

    js = _create(cluster, _jobset("js", {"workers": (2, _template(duration=10)),
                                         "ps": (1, _template(duration=10))}), namespace)
    until("the JobSet Completed", lambda: _conditions(
        cluster, kinds.JOBSET, namespace, "js").get("Completed") == "True", timeout=60)
    jobs = cluster.rest.get(f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    assert sorted(j["metadata"]["name"] for j in jobs) == ["js-ps-0", "js-workers-0",
                                                           "js-workers-1"]
    for j in jobs:
        ref, = j["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("JobSet", js["metadata"]["uid"],
                                                                True)
    pods = _pods(cluster, namespace, f"{kinds.JOBSET_NAME}=js")
    assert len(pods) == 3
    for p in pods.values():
        lab = p["metadata"]["labels"]
        assert kinds.group_label(lab) == "js" and lab["app"] == "train"
        assert lab[kinds.JOBSET_JOB_INDEX] in ("0", "1")
        assert kinds.role_label(lab) == (labels.ROLE_PS if lab[kinds.JOBSET_REPLICATED_JOB] ==
                                         "ps" else labels.ROLE_WORKER)
    status = cluster.rest.get(kinds.JOBSET.path(namespace, "js"))["status"]
    assert {r["name"]: r["succeeded"] for r in status["replicatedJobsStatus"]} == \
        {"workers": 2, "ps": 1}


@pytest.mark.integration
def test_a_cluster_without_operators_has_none_of_the_crds():
    from k8s_helpers import need_binaries

    from workbench.k8s.local.cluster import LocalCluster
    from workbench.k8s.local.crds import served

    need_binaries()
    with LocalCluster(nodes=0, scheduler=False, controller_manager=False, emulator=False,
                      operators=False) as bare:
        assert "training-operator" not in bare.processes()
        assert not any(served(bare.rest, k) for k in kinds.CUSTOM_KINDS)
