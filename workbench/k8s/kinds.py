"""The job kinds people submit besides batch/v1 Jobs: Kubeflow's PyTorchJob and TFJob, and
JobSet, where their CRDs are installed.

A Kubeflow job has replica specs (`spec.pytorchReplicaSpecs` / `spec.tfReplicaSpecs`: a
`replicas` count and a pod template per replica type); the training operator creates one pod
per replica, named `JOB-TYPE-INDEX`, owned by the job and labelled with the job's name and the
replica's type and index (`training.kubeflow.org/...`, the keys below). The workbench reads such
a job as one training job: Master, Chief and Worker replicas are its workers, PS replicas its
parameter servers. An Evaluator replica (a TFJob's) runs beside the training, not in its gang,
and the workbench does not schedule it: such a job is refused, its pods marked with the reason
(`workbench.io/rejected`), rather than counting the Evaluator as a worker. Its worker
range is the `elasticPolicy`'s `minReplicas`..`maxReplicas` (Worker replicas, plus the
Master/Chief), a fixed size without one; scaling is a patch of the Worker (or PS) replica
count, after which the operator creates or deletes pods.

A JobSet (`jobset.x-k8s.io`) runs one batch/v1 Job per replicated job and replica; its pods
carry `jobset.sigs.k8s.io/jobset-name` and `.../replicatedjob-name`. The workbench reads the
pods of one JobSet as one job (a replicated job named `ps` holds parameter servers, unless the
pod template's `workbench.io/role` says otherwise) and scales through the child Job's
parallelism, as for a plain batch/v1 Job; a replicated job with several replicas (one child Job
each) spreads a role's pods over them as evenly as can be, at least one each.

`workbench.io/...` labels and annotations on the pod templates (see `labels`) still say what
the job trains; without them the workbench knows the gang and its demand, not its speed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from . import labels

# Labels the Kubeflow training operator puts on the pods it creates
KF_JOB_NAME = "training.kubeflow.org/job-name"
KF_REPLICA_TYPE = "training.kubeflow.org/replica-type"  # lower case: master, worker, ps, ...
KF_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KF_OPERATOR_NAME = "training.kubeflow.org/operator-name"
KF_JOB_ROLE = "training.kubeflow.org/job-role"  # "master" on the Master/Chief replica

# Labels the JobSet controller puts on its child Jobs and their pods
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"

# Kubeflow replica types that run beside the training, not in its gang (lower case)
NOT_IN_GANG = frozenset({"evaluator"})


@dataclass(frozen=True)
class OwnerKind:
    """A kind of object that owns training pods and whose replica counts scale them."""

    kind: str
    group: str
    version: str
    plural: str
    replica_specs: str = ""  # the spec field holding replica specs (Kubeflow kinds)
    ps_types: tuple[str, ...] = ()  # replica types that are parameter servers
    scaled: tuple[tuple[str, str], ...] = ()  # (role, the replica type its scaling changes)
    done: str = "Succeeded"  # the condition its controller sets True when the job succeeded

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        ns = f"/namespaces/{namespace}" if namespace else ""
        return f"{base}{ns}/{self.plural}" + (f"/{name}" if name else "")

    def succeeded(self, obj: dict | None) -> bool:
        """Whether the object's controller says the job succeeded (its `done` condition)."""
        return has_condition(obj, self.done)

    def role_of_type(self, replica_type: str) -> str | None:
        """`worker` or `ps`; None for a type outside the gang (an Evaluator)."""
        if replica_type.lower() in NOT_IN_GANG:
            return None
        ps = {t.lower() for t in self.ps_types}
        return labels.ROLE_PS if replica_type.lower() in ps else labels.ROLE_WORKER

    def replicas(self, obj: dict) -> dict[str, int]:
        """Replicas per replica type, as the object's spec asks."""
        specs = (obj.get("spec") or {}).get(self.replica_specs) or {}
        return {t: int((s or {}).get("replicas", 1)) for t, s in specs.items()}

    def outside_types(self, obj: dict) -> list[str]:
        """Replica types of the object that run outside the training gang (an Evaluator)."""
        return sorted(t for t, n in self.replicas(obj).items() if n and t.lower() in NOT_IN_GANG)

    def counts(self, obj: dict) -> dict[str, int]:
        """Pods per workbench role (worker, ps) the object asks for."""
        out = {labels.ROLE_WORKER: 0, labels.ROLE_PS: 0}
        for t, n in self.replicas(obj).items():
            if (role := self.role_of_type(t)) is not None:
                out[role] += n
        return out

    def worker_range(self, obj: dict) -> tuple[int, int] | None:
        """(min, max) workers its elastic policy allows, or None: a fixed gang."""
        elastic = (obj.get("spec") or {}).get("elasticPolicy")
        if not elastic:
            return None
        scaled = dict(self.scaled).get(labels.ROLE_WORKER)
        fixed = sum(n for t, n in self.replicas(obj).items()
                    if t != scaled and self.role_of_type(t) == labels.ROLE_WORKER)
        now = self.replicas(obj).get(scaled, 0)
        lo = int(elastic.get("minReplicas", now))
        hi = int(elastic.get("maxReplicas", now))
        return fixed + max(lo, 0), fixed + max(hi, lo, 0)

    def scale_patch(self, obj: dict, role: str, n: int) -> dict | str:
        """The merge patch that gives the object `n` pods of `role`, or why it cannot."""
        scaled = dict(self.scaled).get(role)
        replicas = self.replicas(obj)
        if scaled is None or scaled not in replicas:
            return f"{self.kind} {obj['metadata']['name']} has no replica type to scale {role}s"
        fixed = sum(c for t, c in replicas.items() if t != scaled and self.role_of_type(t) == role)
        if n < fixed:
            return (f"{self.kind} {obj['metadata']['name']} keeps {fixed} {role}s besides its"
                    f" {scaled} replicas; cannot run {n}")
        return {"spec": {self.replica_specs: {scaled: {"replicas": n - fixed}}}}


JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"


def pods_job_owes(obj: dict | None) -> int:
    """How many active pods a batch/v1 Job's controller keeps, as its `manageJob` counts
    them: none once the Job has finished or is suspended; otherwise `parallelism`, capped by
    the completions left; with completions unset, none more once one pod has succeeded."""
    if obj is None or has_condition(obj, "Complete", "Failed"):
        return 0
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if spec.get("suspend"):
        return 0
    parallelism = int(spec.get("parallelism", 1))
    succeeded = int(status.get("succeeded") or 0)
    completions = spec.get("completions")
    if completions is None:
        return 0 if succeeded else parallelism
    return max(0, min(parallelism, int(completions) - succeeded))


def pods_made_alike(obj: dict) -> bool:
    """Whether every pod of a batch/v1 Job is made alike from its template: not for an
    Indexed Job, whose controller gives each pod its completion index (and deletes a pod
    without a valid one)."""
    return (obj.get("spec") or {}).get("completionMode", "NonIndexed") != "Indexed"


def tracks_pods_by_finalizer(obj: dict, server: tuple[int, int]) -> bool:
    """Whether a Job's controller puts its tracking finalizer on the pods it makes: on Jobs
    it marked with an annotation of that name (1.22 to 1.26), on every Job from 1.27."""
    return server >= (1, 27) or \
        JOB_TRACKING_FINALIZER in ((obj.get("metadata") or {}).get("annotations") or {})


def pod_for_job(obj: dict, tracking_finalizer: bool = False) -> dict:
    """A pod made from a batch/v1 Job's template and owned by the Job, as its controller
    makes one (`GetPodFromTemplate`): the template's labels, annotations, finalizers and
    spec, the Job as controlling owner, and the job-tracking finalizer where its pods
    carried it."""
    template = obj["spec"]["template"]
    meta = template.get("metadata") or {}
    name = obj["metadata"]["name"]
    finalizers = list(meta.get("finalizers") or [])
    if tracking_finalizer and JOB_TRACKING_FINALIZER not in finalizers:
        finalizers.append(JOB_TRACKING_FINALIZER)
    pod_meta = {"generateName": f"{name}-", "labels": dict(meta.get("labels") or {}),
                "annotations": dict(meta.get("annotations") or {}),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                     "uid": obj["metadata"]["uid"], "controller": True,
                                     "blockOwnerDeletion": True}]}
    if finalizers:
        pod_meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta,
            "spec": copy.deepcopy(template["spec"])}


def has_condition(obj: dict | None, *types: str) -> bool:
    """Whether a condition of one of `types` is True in the object's status."""
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") in types and c.get("status") == "True" for c in conds)


PYTORCHJOB = OwnerKind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs", "pytorchReplicaSpecs",
                       scaled=((labels.ROLE_WORKER, "Worker"),))
TFJOB = OwnerKind("TFJob", "kubeflow.org", "v1", "tfjobs", "tfReplicaSpecs", ps_types=("PS",),
                  scaled=((labels.ROLE_WORKER, "Worker"), (labels.ROLE_PS, "PS")))
JOBSET = OwnerKind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", done="Completed")
BATCH_JOB = OwnerKind("Job", "batch", "v1", "jobs", done="Complete")

KUBEFLOW_KINDS = (PYTORCHJOB, TFJOB)
CUSTOM_KINDS = (PYTORCHJOB, TFJOB, JOBSET)
BY_KIND = {k.kind: k for k in (*CUSTOM_KINDS, BATCH_JOB)}


def child_index(job: dict) -> int:
    """A JobSet child Job's index among its replicated job's replicas (0 when unlabelled)."""
    value = ((job.get("metadata") or {}).get("labels") or {}).get(JOBSET_JOB_INDEX, "0")
    return int(value) if value.isdigit() else 0


def group_label(pod_labels: dict[str, str]) -> str | None:
    """The job a pod belongs to by its operator's labels (None: no operator's)."""
    return pod_labels.get(KF_JOB_NAME) or pod_labels.get(JOBSET_NAME)


def outside_gang(pod_labels: dict[str, str]) -> str | None:
    """The pod's Kubeflow replica type when it is one outside the training gang (a TFJob's
    Evaluator), else None."""
    t = pod_labels.get(KF_REPLICA_TYPE)
    return t if t is not None and t.lower() in NOT_IN_GANG else None


def role_label(pod_labels: dict[str, str]) -> str | None:
    """A pod's role by its operator's labels: a Kubeflow PS replica, a JobSet's `ps` job."""
    t = pod_labels.get(KF_REPLICA_TYPE)
    if t is not None:
        return labels.ROLE_PS if t.lower() == "ps" else labels.ROLE_WORKER
    rj = pod_labels.get(JOBSET_REPLICATED_JOB)
    if rj is not None:
        return labels.ROLE_PS if rj.lower() == "ps" else labels.ROLE_WORKER
    return None


__all__ = [
    "BATCH_JOB",
    "BY_KIND",
    "CUSTOM_KINDS",
    "JOBSET",
    "KUBEFLOW_KINDS",
    "NOT_IN_GANG",
    "PYTORCHJOB",
    "TFJOB",
    "OwnerKind",
    "group_label",
    "has_condition",
    "outside_gang",
    "role_label",
]
