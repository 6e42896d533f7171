"""Kubernetes objects the workbench writes or asks users to apply.

- `training_jobs(spec, kind=...)`: a workbench `JobSpec` as batch/v1 Jobs (one for the workers,
  one for the parameter servers of a PS job), or as a PyTorchJob, TFJob or JobSet (`kinds`),
  whose pods ask for `schedulerName: workbench` and carry the job, role and training
  annotations of `labels`.
- `scheduler_manifests()`: what runs `workbench schedule` inside a cluster with the least
  privilege it needs: a ServiceAccount, a ClusterRole and its ClusterRoleBinding, a
  Deployment (two replicas with `--leader-elect`: one schedules, the other stands by), a Role
  on its Lease, and a namespaced Role that lets training pods patch their own progress
  annotation (`workbench.report`).
"""

from __future__ import annotations

import re

from ..model import JobSpec
from . import kinds, labels
from .quantity import cpu_quantity, mem_quantity

DEFAULT_IMAGE = "workbench-emulated"  # emulated nodes run no containers; any name will do
_NAME = re.compile(r"[^a-z0-9-]+")


def k8s_name(name: str, limit: int = 60) -> str:
    """A DNS-1123 name for a job (lower case, digits and '-', at most `limit` characters)."""
    out = _NAME.sub("-", name.lower()).strip("-")[:limit].strip("-")
    return out or "job"


def _resources(cpu: float, mem: float, gpu: float) -> dict:
    requests = {"cpu": cpu_quantity(cpu), "memory": mem_quantity(mem)}
    limits = {}
    if gpu:
        # extended resources are whole numbers, with equal request and limit
        requests[labels.GPU_RESOURCE] = limits[labels.GPU_RESOURCE] = str(round(gpu))
    return {"requests": requests, "limits": limits}


def _fmt(x: float) -> str:
    return repr(float(x)) if x != int(x) else str(int(x))


def job_annotations(spec: JobSpec, arrival: float | None = None) -> dict[str, str]:
    ann = {labels.APPLICATION: spec.application, labels.TOTAL_WORK: repr(float(spec.total_work)),
           labels.BATCH_SIZE: str(spec.batch_size),
           labels.NUM_WORKERS: str(spec.initial_workers), labels.NUM_PS: str(spec.num_ps),
           labels.MIN_WORKERS: str(spec.min_workers), labels.MAX_WORKERS: str(spec.max_workers)}
    if arrival is not None:
        ann[labels.ARRIVAL] = repr(float(arrival))
    if spec.deadline is not None:
        ann[labels.DEADLINE] = repr(float(spec.deadline))
    if spec.priority:
        ann[labels.PRIORITY] = str(spec.priority)
    if spec.user != "default":
        ann[labels.USER] = spec.user
    if spec.target_metric is not None:
        ann[labels.TARGET_METRIC] = repr(float(spec.target_metric))
    if spec.cpu_burst != 1.0:
        ann[labels.CPU_BURST] = _fmt(spec.cpu_burst)
    return ann


def _pod_template(name: str, role: str, demand, ann: dict[str, str], image: str,
                  command: list[str] | None, service_account: str | None,
                  container: str | None = None) -> dict:
    """The pod template of one role: `schedulerName: workbench`, the job's labels and
    training annotations, POD_NAME/POD_NAMESPACE from the downward API (for
    `workbench.report`)."""
    container = {
        "name": container or ("train" if role == labels.ROLE_WORKER else "ps"), "image": image,
        "resources": _resources(demand.cpu, demand.mem, demand.gpu),
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE",
                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]}
    if command:
        container["command"] = list(command)
    pod_spec = {"schedulerName": labels.SCHEDULER_NAME, "restartPolicy": "Never",
                "containers": [container]}
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    else:
        pod_spec["automountServiceAccountToken"] = False
    return {"metadata": {"labels": {labels.JOB: name, labels.ROLE: role},
                         "annotations": dict(ann)},
            "spec": pod_spec}


def _roles(spec: JobSpec) -> list[tuple[str, int, object]]:
    roles = [(labels.ROLE_WORKER, spec.initial_workers, spec.worker_demand)]
    if spec.num_ps:
        roles.append((labels.ROLE_PS, spec.num_ps, spec.ps_demand))
    return roles


KINDS = ("job", "pytorchjob", "tfjob", "jobset")  # what `training_jobs(kind=...)` writes

# A Job's pod failure policy: a pod the workbench deleted for a checkpoint-restart (marked
# `DisruptionTarget` first, `Binder.mark_disrupted`) is not a failure. From Kubernetes 1.26 a
# deleted pod otherwise counts towards `backoffLimit`, and an elastic engine rescaling every few
# minutes would fail the Job after six restarts. From 1.28 an ignored failure still lengthens
# the Job's re-creation back-off (10 s doubling to 6 min; kubernetes#119434, #130881).
# Clusters before 1.25 ignore the field.
IGNORE_DISRUPTIONS = {"rules": [{"action": "Ignore",
                                 "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def training_jobs(spec: JobSpec, namespace: str = "default", *, arrival: float | None = None,
                  image: str = DEFAULT_IMAGE, command: list[str] | None = None,
                  service_account: str | None = None, backoff_limit: int = 6,
                  kind: str = "job") -> list[dict]:
    """The objects that run `spec` as `kind` (one of `KINDS`):

    - `job`: batch/v1 Jobs, workers (named like the job) and, for a PS job, `NAME-ps`.
      `completions` is left unset (work-queue semantics): `parallelism` alone sets the pod
      count, so scaling is a patch of it, and the Job is complete once its pods have all
      succeeded.
    - `pytorchjob`: a Kubeflow PyTorchJob (all-reduce jobs only): Worker replicas with an
      `elasticPolicy` over the job's worker range when it has one, else Master + Workers.
    - `tfjob`: a Kubeflow TFJob: Worker replicas, and PS replicas for a PS job.
    - `jobset`: a JobSet with a `workers` and, for a PS job, a `ps` replicated Job.

    Every pod template asks for `schedulerName: workbench` and carries the job's labels and
    training annotations (`labels`); a training container reports progress with
    `workbench.report(...)`.
    """
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    name = k8s_name(spec.name)
    ann = job_annotations(spec, arrival)
    # the Kubeflow operators find the training container by these names
    container = {"pytorchjob": "pytorch", "tfjob": "tensorflow"}.get(kind)
    templates = [(role, count, _pod_template(name, role, demand, ann, image, command,
                                             service_account, container))
                 for role, count, demand in _roles(spec)]
    meta = {"name": name, "namespace": namespace, "labels": {labels.JOB: name},
            "annotations": dict(ann)}
    if kind == "pytorchjob":
        return [_pytorchjob(spec, meta, templates)]
    if kind == "tfjob":
        return [_kubeflow(kinds.TFJOB, meta, {
            "Worker" if role == labels.ROLE_WORKER else "PS": _replica(count, t)
            for role, count, t in templates})]
    if kind == "jobset":
        return [_jobset(meta, templates, backoff_limit)]
    out = []
    for role, count, template in templates:
        out.append({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {**meta, "name": name if role == labels.ROLE_WORKER else f"{name}-ps",
                         "labels": dict(template["metadata"]["labels"])},
            "spec": {"parallelism": count, "backoffLimit": backoff_limit,
                     "podFailurePolicy": IGNORE_DISRUPTIONS, "template": template}})
    return out


def _replica(count: int, template: dict) -> dict:
    return {"replicas": count, "restartPolicy": "Never", "template": template}


def _kubeflow(kind: kinds.OwnerKind, meta: dict, replica_specs: dict, **spec) -> dict:
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta,
            "spec": {**spec, "runPolicy": {"cleanPodPolicy": "None"},
                     kind.replica_specs: replica_specs}}


def _pytorchjob(spec: JobSpec, meta: dict, templates: list) -> dict:
    if spec.num_ps:
        raise ValueError(f"{spec.name}: a PyTorchJob has no parameter servers; use tfjob")
    (_, count, template), = templates
    if spec.min_workers < spec.max_workers:  # torchrun's elastic rendezvous: workers only
        return _kubeflow(kinds.PYTORCHJOB, meta, {"Worker": _replica(count, template)},
                         elasticPolicy={"minReplicas": spec.min_workers,
                                        "maxReplicas": spec.max_workers, "rdzvBackend": "c10d"})
    specs = {"Master": _replica(1, template)}
    if count > 1:
        specs["Worker"] = _replica(count - 1, template)
    return _kubeflow(kinds.PYTORCHJOB, meta, specs)


def _jobset(meta: dict, templates: list, backoff_limit: int) -> dict:
    return {"apiVersion": kinds.JOBSET.api_version, "kind": kinds.JOBSET.kind, "metadata": meta,
            "spec": {"replicatedJobs": [
                {"name": "workers" if role == labels.ROLE_WORKER else "ps", "replicas": 1,
                 "template": {"spec": {"parallelism": count, "backoffLimit": backoff_limit,
                                       "podFailurePolicy": IGNORE_DISRUPTIONS,
                                       "template": template}}}
                for role, count, template in templates]}}


def manifest_path(obj: dict) -> str:
    """Where `obj` (a batch/v1 Job or a custom kind `training_jobs` writes) is created."""
    k = kinds.BY_KIND[obj["kind"]]
    return k.path(obj["metadata"].get("namespace", "default"))


# ---- running the scheduler in a cluster --------------------------------------------------------

SCHEDULER_RULES = [
    # the watch cache: nodes, pods, batch Jobs
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    # delete: checkpoint-restart (migrate, scale, preempt, roll back a gang); create: re-create
    # bare pods that no controller owns, and the pods of a Job that has made none for long
    # (`Reconciler._stand_in_for_silent_jobs`); patch: checkpoint and gang-size annotations
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["get", "list", "watch", "create", "delete", "patch"]},
    {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    # the DisruptionTarget condition on a pod deleted for a checkpoint-restart
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    # scaling is a change of parallelism; refusals and checkpoints annotate the Job
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch", "patch"]},
    # a pod made for a Job blocks the Job's deletion, as its controller's do: where the
    # OwnerReferencesPermissionEnforcement admission plugin is on, that takes this
    {"apiGroups": ["batch"], "resources": ["jobs/finalizers"], "verbs": ["update"]},
    # the same for Kubeflow jobs (their replicas) and JobSets, where their CRDs are installed
    {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs", "tfjobs"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"],
     "verbs": ["get", "list", "watch", "patch"]},
]

LEASE_RULES = [
    # leader election (`--leader-elect`): read, create and renew the Lease
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
     "verbs": ["get", "create", "update"]},
]

PROGRESS_RULES = [
    # `workbench.report()` patches its own pod's progress annotation
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]},
]


def scheduler_manifests(namespace: str = "workbench-system", *, image: str = "workbench:latest",
                        policy: str = "tiresias", metrics_port: int = 9090,
                        training_namespace: str = "default", name: str = "workbench-scheduler",
                        extra_args: list[str] | None = None) -> list[dict]:
    """The objects to run `workbench schedule` in-cluster, least privilege (see the rules)."""
    meta_labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "workbench"}
    args = ["workbench", "schedule", "--policy", policy, "--metrics-port", str(metrics_port),
            "--leader-elect", "--leader-elect-namespace", namespace,
            "--leader-elect-lease-name", name, *(extra_args or [])]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": name, "namespace": namespace, "labels": meta_labels}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": name, "labels": meta_labels}, "rules": SCHEDULER_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": name, "labels": meta_labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": f"{name}-leader", "namespace": namespace, "labels": meta_labels},
         "rules": LEASE_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": f"{name}-leader", "namespace": namespace, "labels": meta_labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": f"{name}-leader"},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]},
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": name, "namespace": namespace, "labels": meta_labels},
         "spec": {
             # the Lease lets one replica schedule at a time, so a rolling update is safe
             "replicas": 2, "strategy": {"type": "RollingUpdate"},
             "selector": {"matchLabels": meta_labels},
             "template": {
                 "metadata": {"labels": meta_labels, "annotations": {
                     "prometheus.io/scrape": "true", "prometheus.io/port": str(metrics_port),
                     "prometheus.io/path": "/metrics"}},
                 "spec": {
                     "serviceAccountName": name,
                     "containers": [{
                         "name": "scheduler", "image": image, "args": args,
                         "ports": [{"name": "metrics", "containerPort": metrics_port}],
                         "readinessProbe": {"httpGet": {"path": "/healthz",
                                                        "port": metrics_port}},
                         "livenessProbe": {"httpGet": {"path": "/healthz", "port": metrics_port},
                                           "initialDelaySeconds": 30},
                         "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                                       "limits": {"memory": "2Gi"}},
                         "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                             "allowPrivilegeEscalation": False,
                                             "readOnlyRootFilesystem": True,
                                             "capabilities": {"drop": ["ALL"]}}}]}}}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": "workbench-trainer", "namespace": training_namespace,
                      "labels": meta_labels}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "workbench-progress", "namespace": training_namespace,
                      "labels": meta_labels}, "rules": PROGRESS_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "workbench-progress", "namespace": training_namespace,
                      "labels": meta_labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": "workbench-progress"},
         "subjects": [{"kind": "ServiceAccount", "name": "workbench-trainer",
                       "namespace": training_namespace}]},
    ]


def to_yaml(objects: list[dict]) -> str:
    """A multi-document YAML stream (PyYAML when present, else JSON, which is YAML too)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML ships with kubernetes
        import json
        return "\n---\n".join(json.dumps(o, indent=2) for o in objects) + "\n"
    return "---\n" + "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects)
