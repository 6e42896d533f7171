"""The local control plane against a real kube-apiserver: emulated GPU nodes become Ready, pods
bound by name or by the real kube-scheduler run and succeed, training pods report progress,
and `down` leaves no process behind.

Needs the binaries of `workbench cluster build` (.ci/k8s-setup); without them these tests are
skipped (a failure in CI, where WORKBENCH_REQUIRE_ALL=1), or fail at once with
WORKBENCH_REQUIRE_K8S=1.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from k8s_helpers import auditor, no_overcommit  # noqa: F401 - fixtures: no test over-commits
from k8s_helpers import need_binaries as _need_binaries
from k8s_helpers import until as _until

from workbench.k8s import labels
from workbench.k8s.cache import node_from_k8s, running_since, spec_from_pods
from workbench.k8s.local.cluster import LocalCluster, _proc_start, down, up
from workbench.k8s.local.emulator import _gang_size, node_manifest
from workbench.k8s.quantity import parse_quantity
from workbench.model import JobKind, Node

SPEED = 50.0


@pytest.fixture(scope="module")
def cluster():
    _need_binaries()
    with LocalCluster(nodes=3, gpus_per_node=4, cpus=32, mem=128, racks=3, speed=SPEED) as c:
        yield c


def _pod(name: str, *, node: str | None = None, gpus: int = 0, annotations=None, labels_=None,
         restart: str = "Never") -> dict:
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {}}
    if gpus:
        resources["requests"][labels.GPU_RESOURCE] = str(gpus)
        resources["limits"][labels.GPU_RESOURCE] = str(gpus)
    spec = {"containers": [{"name": "main", "image": "emulated", "resources": resources}],
            "restartPolicy": restart, "automountServiceAccountToken": False}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": annotations or {},
                         "labels": labels_ or {}},
            "spec": spec}


def _phase(rest, name: str, ns: str = "default") -> str | None:
    try:
        return rest.get(f"/api/v1/namespaces/{ns}/pods/{name}").get("status", {}).get("phase")
    except Exception as e:
        if getattr(e, "status", None) == 404:
            return None
        raise


# ---- without a cluster ---------------------------------------------------------------------


def test_quantities():
    assert parse_quantity("500m") == 0.5
    assert parse_quantity("16Gi") == 16 * 2**30
    assert parse_quantity("2") == 2.0
    assert parse_quantity("1k") == 1000.0


def test_node_manifest_round_trips_to_model_node():
    node = Node("gpu-node-007", cpus=32, mem=128, gpus=4, gpu_model="A100", rack="rack-2")
    manifest = node_manifest(node)
    assert manifest["status"]["capacity"][labels.GPU_RESOURCE] == "4"
    assert manifest["metadata"]["labels"][labels.RACK] == "rack-2"
    assert node_from_k8s(manifest) == node


def test_job_spec_from_pod_annotations():
    def pod(role):
        return {"metadata": {"labels": {labels.JOB: "j", labels.ROLE: role}, "annotations": {
            labels.APPLICATION: "resnet-50", labels.TOTAL_WORK: "1000",
            labels.BATCH_SIZE: "64", labels.NUM_WORKERS: "2", labels.NUM_PS: "1"}},
            "spec": {"containers": [{"name": "m", "resources": {
                "requests": {"cpu": "2", "memory": "4Gi", labels.GPU_RESOURCE: "1"}}}]}}
    pods = [pod("worker"), pod("ps")]
    spec = spec_from_pods("ns/j", pods, arrival=0.0)
    assert spec.kind == JobKind.PS and spec.num_ps == 1 and spec.initial_workers == 2
    assert spec.total_work == 1000 and spec.batch_size == 64
    assert spec.worker_demand.gpu == 1 and spec.worker_demand.mem == 4
    assert _gang_size(pods) == (2, 1)


def test_a_gang_runs_since_its_last_container_started():
    def pod(phase, *started):
        return {"status": {"phase": phase, "containerStatuses": [
            {"state": {"running": {"startedAt": t}} if t else {"waiting": {}}} for t in started]}}

    assert running_since([pod("Running", "2026-11-27T10:00:00Z"),
                          pod("Running", "2026-11-27T10:00:00Z", "2026-11-27T10:00:07Z")]) == \
        running_since([pod("Running", "2026-11-27T10:00:00Z")]) + 7
    assert running_since([pod("Running", "2026-11-27T10:00:00Z"), pod("Pending")]) is None
    assert running_since([pod("Running", "2026-11-27T10:00:00Z", None)]) is None
    assert running_since([{"status": {"phase": "Running"}}]) is None  # no container status yet


def test_cluster_clock_speed_from_a_fake_api_server_s_node_lists():
    from workbench.k8s.backend import cluster_clock_speed

    class FakeRest:  # a stand-in for the API server's node list
        def __init__(self, *said):
            self.said = said

        def get(self, path, **query):
            assert path == "/api/v1/nodes" and query == {"labelSelector": f"{labels.EMULATED}=true"}
            return {"items": [{"metadata": {"annotations": {} if v is None else
                                            {labels.CLOCK_SPEED: v}}} for v in self.said]}

    assert cluster_clock_speed(FakeRest("60", "60")) == 60.0
    assert cluster_clock_speed(FakeRest("60", None)) == 60.0  # one not marked yet
    assert cluster_clock_speed(FakeRest()) == 1.0  # no emulated node: real time
    assert cluster_clock_speed(FakeRest("60", "7")) == 1.0  # they disagree
    assert cluster_clock_speed(FakeRest("fast")) == 1.0
    assert cluster_clock_speed(FakeRest("0")) == 1.0


# ---- against the real control plane ----------------------------------------------------------


@pytest.mark.integration
def test_emulated_nodes_are_ready_with_gpus_and_leases(cluster):
    rest = cluster.rest
    nodes = rest.get("/api/v1/nodes", labelSelector=f"{labels.EMULATED}=true")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == \
        ["gpu-node-000", "gpu-node-001", "gpu-node-002"]
    assert {n["metadata"]["labels"][labels.RACK] for n in nodes} == {"rack-0", "rack-1", "rack-2"}
    for n in nodes:
        assert n["status"]["allocatable"][labels.GPU_RESOURCE] == "4"
        ready = {c["type"]: c["status"] for c in n["status"]["conditions"]}["Ready"]
        assert ready == "True"
        assert labels.NOT_READY_TAINT not in {t["key"] for t in n["spec"].get("taints", [])}

    def leases():
        items = rest.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")
        return len(items["items"]) == 3
    _until("node leases", leases)


@pytest.mark.integration
def test_pod_bound_by_node_name_runs_then_succeeds(cluster):
    rest = cluster.rest
    rest.post("/api/v1/namespaces/default/pods", _pod(
        "bound", node="gpu-node-001", gpus=1, annotations={labels.DURATION: str(2 * SPEED)}))
    _until("pod Running", lambda: _phase(rest, "bound") in ("Running", "Succeeded"))
    _until("pod Succeeded", lambda: _phase(rest, "bound") == "Succeeded")
    pod = rest.get("/api/v1/namespaces/default/pods/bound")
    state = pod["status"]["containerStatuses"][0]["state"]
    assert state["terminated"]["exitCode"] == 0


@pytest.mark.integration
def test_kube_scheduler_places_gpu_pod_on_emulated_node(cluster):
    rest = cluster.rest
    rest.post("/api/v1/namespaces/default/pods", _pod(
        "scheduled", gpus=3, annotations={labels.DURATION: "60"}))
    _until("pod Running", lambda: _phase(rest, "scheduled") in ("Running", "Succeeded"))
    pod = rest.get("/api/v1/namespaces/default/pods/scheduled")
    assert pod["spec"]["nodeName"].startswith("gpu-node-")
    _until("pod Succeeded", lambda: _phase(rest, "scheduled") == "Succeeded")
    # a pod needing more GPUs than any node has stays Pending, with the scheduler's reason
    rest.post("/api/v1/namespaces/default/pods", _pod("too-big", gpus=5))

    def unschedulable():
        conds = rest.get("/api/v1/namespaces/default/pods/too-big") \
            .get("status", {}).get("conditions", [])
        return any(c.get("reason") == "Unschedulable" for c in conds)
    _until("Unschedulable condition", unschedulable)
    rest.delete("/api/v1/namespaces/default/pods/too-big", grace_period_seconds=0)


@pytest.mark.integration
def test_deleting_a_running_pod_completes_without_kubelet(cluster):
    rest = cluster.rest
    rest.post("/api/v1/namespaces/default/pods", _pod("forever", node="gpu-node-002"))
    _until("pod Running", lambda: _phase(rest, "forever") == "Running")
    rest.delete("/api/v1/namespaces/default/pods/forever")  # default grace period
    _until("pod gone", lambda: _phase(rest, "forever") is None)


@pytest.mark.integration
def test_training_job_reports_progress_and_the_job_controller_sees_it_finish(cluster):
    from workbench.k8s.local.emulator import iteration_rate
    from workbench.model import JobSpec

    rest = cluster.rest
    app, batch = "cifar10", 256
    rate = iteration_rate(JobSpec("probe", app, 0.0, 1.0, batch, 2, 2, 2), {"n": 2}, {})
    assert rate > 0
    total = round(rate * 4 * SPEED)  # about 4 s of real time at this speed, on one node
    template = {
        "metadata": {"labels": {labels.JOB: "train-1", labels.ROLE: labels.ROLE_WORKER},
                     "annotations": {labels.APPLICATION: app, labels.TOTAL_WORK: str(total),
                                     labels.BATCH_SIZE: str(batch),
                                     labels.NUM_WORKERS: "2"}},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                 "containers": [{"name": "train", "image": "emulated", "resources": {
                     "requests": {"cpu": "4", "memory": "8Gi", labels.GPU_RESOURCE: "1"},
                     "limits": {labels.GPU_RESOURCE: "1"}}}]}}
    rest.post("/apis/batch/v1/namespaces/default/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train-1"},
        "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0, "template": template}})

    def progress():
        pods = rest.get("/api/v1/namespaces/default/pods",
                        labelSelector=f"{labels.JOB}=train-1")["items"]
        reports = [json.loads(p["metadata"].get("annotations", {}).get(labels.PROGRESS, "null")
                              or "null") for p in pods]
        return [r for r in reports if r and r["iterations"] > 0] if len(pods) == 2 else None
    reports = _until("progress annotations", progress)
    report = reports[0]
    assert report["throughput"] > 0 and report["metric"] is not None
    assert report["time"] > time.time()  # the emulated clock runs ahead

    def succeeded():
        job = rest.get("/apis/batch/v1/namespaces/default/jobs/train-1")
        return job.get("status", {}).get("succeeded", 0) == 2
    _until("Job succeeded=2", succeeded, timeout=60)
    pods = rest.get("/api/v1/namespaces/default/pods",
                    labelSelector=f"{labels.JOB}=train-1")["items"]
    final = [json.loads(p["metadata"]["annotations"][labels.PROGRESS]) for p in pods]
    assert all(abs(r["iterations"] - total) < 1e-6 for r in final)


@pytest.mark.integration
def test_up_and_down_leave_no_process(tmp_path):
    _need_binaries()
    cluster = up(tmp_path / "c", nodes=1, gpus_per_node=2)
    entries = dict(cluster.state["components"])
    assert set(entries) == {"etcd", "kube-apiserver", "kube-controller-manager",
                            "kube-scheduler", "node-emulator", "training-operator"}
    assert all(_proc_start(e["pid"]) == e["start"] for e in entries.values())
    # a second `up` on the same directory refuses instead of starting twice
    with pytest.raises(Exception, match="already running"):
        up(tmp_path / "c", nodes=1)
    stopped = down(tmp_path / "c")
    assert sorted(stopped) == sorted(entries)
    for proc in cluster._popen.values():
        proc.wait(timeout=10)  # reap: they are our children here
    assert all(_proc_start(e["pid"]) is None for e in entries.values())
    assert not (tmp_path / "c" / "pids.json").exists()


_OWNER = """
from workbench.k8s.local.cluster import LocalCluster
import time
c = LocalCluster(nodes=0, scheduler=False, controller_manager=False, emulator=False,
                 operators=False).start()
print(c.directory, flush=True)
time.sleep(600)
"""


def test_a_temporary_cluster_whose_process_died_is_stopped_by_the_next():
    """A process SIGKILLed while its temporary cluster runs (an OOM kill, a killed kernel, a
    timeout) cannot stop it: etcd and the apiserver ran on for good. The next temporary
    cluster's start stops them (`reap_orphans`); `cluster up`'s clusters have no owner."""
    from pathlib import Path

    from workbench.k8s.local.cluster import reap_orphans

    _need_binaries()
    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE, text=True)
    directory = Path(owner.stdout.readline().strip())
    entries = json.loads((directory / "pids.json").read_text())["components"]
    assert {"etcd", "kube-apiserver"} <= set(entries)
    owner.kill()
    owner.wait(timeout=10)
    assert all(_proc_start(e["pid"]) == e["start"] for e in entries.values())  # outlived it
    assert str(directory) in reap_orphans()
    assert all(_proc_start(e["pid"]) is None for e in entries.values())
    assert not directory.exists()


@pytest.mark.integration
def test_cli_up_status_down(tmp_path):
    _need_binaries()
    d = str(tmp_path / "cli")
    run = [sys.executable, "-m", "workbench"]
    out = subprocess.run([*run, "cluster", "up", "--nodes", "2", "--gpus-per-node", "4",
                          "--dir", d], capture_output=True, text=True, check=False, timeout=120)
    try:
        assert out.returncode == 0, out.stderr
        assert f"export KUBECONFIG={d}/kubeconfig" in out.stdout
        status = subprocess.run([*run, "cluster", "status", "--dir", d, "--json"],
                                capture_output=True, text=True, check=False, timeout=30)
        info = json.loads(status.stdout)
        assert all(c["running"] for c in info["components"].values())
        pids = [c["pid"] for c in info["components"].values()]
    finally:
        down_out = subprocess.run([*run, "cluster", "down", "--dir", d],
                                  capture_output=True, text=True, check=False, timeout=60)
    assert down_out.returncode == 0 and "stopped" in down_out.stdout
    # `cluster up` exited, so its children were re-parented and reaped by init
    _until("processes gone", lambda: all(_proc_start(p) is None for p in pids), timeout=10)


@pytest.mark.integration
def test_node_marked_down_goes_not_ready_and_comes_back(cluster):
    from workbench.k8s.local.emulator import NODE_DOWN

    rest = cluster.rest

    def ready(name: str) -> str:
        node = rest.get(f"/api/v1/nodes/{name}")
        return {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]

    rest.patch("/api/v1/nodes/gpu-node-002", {"metadata": {"annotations": {NODE_DOWN: "true"}}})
    _until("node NotReady", lambda: ready("gpu-node-002") != "True")
    rest.patch("/api/v1/nodes/gpu-node-002", {"metadata": {"annotations": {NODE_DOWN: None}}})
    _until("node Ready again", lambda: ready("gpu-node-002") == "True")


@pytest.mark.integration
def test_apiserver_restart_keeps_nodes_and_pods_working(cluster):
    rest = cluster.rest
    cluster.restart("kube-apiserver")
    # the emulator's watches reconnect: a pod created after the restart still runs
    _until("apiserver answers", lambda: _try(lambda: rest.get("/api/v1/nodes")))
    _until("pod created", lambda: _try(lambda: rest.post(
        "/api/v1/namespaces/default/pods", _pod("after-restart", node="gpu-node-000",
                                                 annotations={labels.DURATION: "1"}))))
    _until("pod Succeeded", lambda: _phase(rest, "after-restart") == "Succeeded")


def _try(call) -> bool:
    try:
        call()
        return True
    except Exception:  # noqa: BLE001 - apiserver not back yet
        return False
