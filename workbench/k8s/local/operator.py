"""A minimal training operator for the local control plane: Kubeflow's PyTorchJob and TFJob,
and JobSet, with the upstream semantics the workbench's scheduling depends on.

The local cluster has neither the Kubeflow training operator nor the JobSet controller, and
the workbench reads these kinds only through the pods and Jobs their controllers make
(`kinds`). This process makes them the way upstream does:

- PyTorchJob / TFJob: one pod per replica type and index below `replicas`, named
  `JOB-TYPE-INDEX` (type lower-cased), from the replica's template, labelled
  `training.kubeflow.org/{job-name,replica-type,replica-index,operator-name}` (and `job-role:
  master` on the Master, or a TFJob's Chief), owned by the job. A missing pod is created again
  while the job runs: the scheduler deletes pods to migrate, scale or preempt a job and
  expects its owner to re-create them. Pods at an index at or beyond `replicas` (after a
  scale-down) are deleted. A Failed pod fails the job under restartPolicy Never, and under
  ExitCode with an exit code below 128 (a permanent error); otherwise it is deleted and
  re-created (there is no kubelet to restart it in place). The job Succeeded when its Master
  (a TFJob's Chief or Master) did, or, without one, when every Worker did. Once it has
  finished nothing is created again, and `runPolicy.cleanPodPolicy` (Running, All; default
  None) says which pods are deleted. Default restartPolicy: OnFailure (PyTorchJob), Never
  (TFJob). Status: `conditions` Created, Running, Succeeded, Failed and `replicaStatuses`.
- JobSet: one batch/v1 Job `JOBSET-RJOB-INDEX` per replicated job and index below its
  `replicas`, from its template, with `jobset.sigs.k8s.io/{jobset-name,replicatedjob-name,
  job-index}` on the Job and its pod template; the kube Job controller makes the pods. The
  JobSet is Completed when every child Job is Complete, Failed (and its unfinished Jobs
  deleted) when one has Failed. An existing child Job is never changed: the scheduler scales
  it through its parallelism.

Left out: the Services and env (MASTER_ADDR, WORLD_SIZE, TF_CONFIG) a real training process
needs, `runPolicy` backoffLimit / activeDeadlineSeconds / ttlSecondsAfterFinished / suspend /
schedulingPolicy (gang PodGroups), the Restarting condition, TFJob's successPolicy and
JobSet's failure, success and startup policies beyond their defaults.

It is level-triggered: every change to a job, its pods or Jobs (and a resync every few
seconds) marks the job dirty, and a round recomputes what each dirty job should have against
what the watch cache holds, then carries out the difference in a thread pool. Names are fixed,
so a create the cache had not yet caught up with is answered 409 AlreadyExists, which is
fine; deleting the owner is left to the garbage collector (owner references).

    python -m workbench.k8s.local.operator --kubeconfig DIR/operator.kubeconfig
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import logging
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ... import argtypes
from ..cache import Informer
from ..kinds import (
    BY_KIND,
    CUSTOM_KINDS,
    JOBSET,
    JOBSET_JOB_INDEX,
    JOBSET_NAME,
    JOBSET_REPLICATED_JOB,
    KF_JOB_NAME,
    KF_JOB_ROLE,
    KF_OPERATOR_NAME,
    KF_REPLICA_INDEX,
    KF_REPLICA_TYPE,
    OwnerKind,
)
from ..outage import OUTAGES, no_answer
from ..rest import MERGE, Rest
from .daemon import run_daemon

log = logging.getLogger("workbench.k8s.local.operator")

OPERATOR_NAME = {"PyTorchJob": "pytorchjob-controller", "TFJob": "tfjob-controller"}
LEADER_TYPES = {"PyTorchJob": ("master",), "TFJob": ("chief", "master")}  # lower case
DEFAULT_RESTART = {"PyTorchJob": "OnFailure", "TFJob": "Never"}
JOBSET_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
# a Job deleted without it would orphan its pods (the API's default for batch/v1 Jobs)
BACKGROUND = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
DONE = {"create": "created", "delete": "deleted", "status": "updated the status of"}


@dataclass(frozen=True)
class Action:
    """One API write a reconcile asks for: `verb` create (POST), delete or status (a merge
    patch of the status subresource), and what it is about, for the log line."""

    verb: str
    path: str
    body: dict | None
    what: str


# ---- small helpers ---------------------------------------------------------------------------


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ids(obj: dict) -> tuple[str, str, str]:
    m = obj["metadata"]
    return m.get("namespace", "default"), m["name"], m.get("uid", "")


def _phase(obj: dict | None) -> str | None:
    return None if obj is None else (obj.get("status") or {}).get("phase", "Pending")


def _deleting(obj: dict) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _true(conditions: list[dict], *types: str) -> str | None:
    """The first of `types` whose condition is True."""
    found = {c.get("type") for c in conditions if c.get("status") == "True"}
    return next((t for t in types if t in found), None)


def _set_condition(conditions: list[dict], ctype: str, status: str, reason: str,
                   message: str, now: str) -> list[dict]:
    """`conditions` with `ctype` at `status`; unchanged (timestamps too) if it already is."""
    if any(c.get("type") == ctype and c.get("status") == status for c in conditions):
        return conditions
    new = {"type": ctype, "status": status, "reason": reason, "message": message,
           "lastUpdateTime": now, "lastTransitionTime": now}
    return [c for c in conditions if c.get("type") != ctype] + [new]


def owner_reference(kind: OwnerKind, obj: dict) -> dict:
    _, name, uid = _ids(obj)
    return {"apiVersion": kind.api_version, "kind": kind.kind, "name": name, "uid": uid,
            "controller": True, "blockOwnerDeletion": True}


def controller_of(obj: dict) -> dict | None:
    """The ownerReference of `obj` with `controller: true`, if any."""
    return next((r for r in obj["metadata"].get("ownerReferences") or []
                 if r.get("controller")), None)


def merge_patched(target, patch):
    """`target` after a JSON merge patch (RFC 7386): a None in `patch` removes the key."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patched(out.get(k), v)
    return out


def _status_action(kind: OwnerKind, obj: dict, status: dict) -> list[Action]:
    """A merge patch of the status subresource, if `status` changes it (comparing the patched
    result, not the patch: a write that changes nothing would wake this job again at once)."""
    old = obj.get("status") or {}
    if merge_patched(old, status) == old:
        return []
    ns, name, _ = _ids(obj)
    true = [c["type"] for c in status.get("conditions", []) if c.get("status") == "True"]
    return [Action("status", kind.path(ns, name) + "/status", {"status": status},
                   f"{kind.kind} {ns}/{name} ({', '.join(true) or 'no condition'})")]


# ---- PyTorchJob and TFJob --------------------------------------------------------------------


def _replica_specs(kind: OwnerKind, obj: dict) -> dict[str, dict]:
    return {t: (s or {}) for t, s in ((obj.get("spec") or {}).get(kind.replica_specs)
                                      or {}).items()}


def _replicas(rspec: dict) -> int:
    return int(rspec.get("replicas", 1))


def _slot(pod: dict) -> tuple[str, int] | None:
    """(replica type lower-cased, index) of an operator's pod, from its labels."""
    pod_labels = pod["metadata"].get("labels") or {}
    try:
        return pod_labels[KF_REPLICA_TYPE].lower(), int(pod_labels[KF_REPLICA_INDEX])
    except (KeyError, ValueError):
        return None


def _restart_policy(kind: OwnerKind, rspec: dict) -> str:
    return rspec.get("restartPolicy") or DEFAULT_RESTART[kind.kind]


def _exit_code(pod: dict) -> int:
    codes = [(s.get("state") or {}).get("terminated", {}).get("exitCode", 0)
             for s in (pod.get("status") or {}).get("containerStatuses") or []]
    return max(codes, default=0)


def _retried(policy: str, pod: dict) -> bool:
    """Whether a Failed pod is run again (else it fails its job)."""
    if policy == "Never":
        return False
    if policy == "ExitCode":  # 128+n: killed by signal n (preempted, OOM): retryable
        return _exit_code(pod) >= 128
    return True  # OnFailure, Always: a kubelet would restart it in place


def kubeflow_pod(kind: OwnerKind, obj: dict, rtype: str, index: int, rspec: dict) -> dict:
    """The pod of replica `rtype` #`index` of a PyTorchJob or TFJob, from its template."""
    ns, name, _ = _ids(obj)
    template = rspec.get("template") or {}
    tmeta = template.get("metadata") or {}
    pod_labels = {**(tmeta.get("labels") or {}), KF_JOB_NAME: name,
                  KF_REPLICA_TYPE: rtype.lower(), KF_REPLICA_INDEX: str(index),
                  KF_OPERATOR_NAME: OPERATOR_NAME[kind.kind]}
    if rtype.lower() in LEADER_TYPES[kind.kind]:
        pod_labels[KF_JOB_ROLE] = "master"
    spec = copy.deepcopy(template.get("spec") or {})
    policy = _restart_policy(kind, rspec)
    spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{rtype.lower()}-{index}", "namespace": ns,
                         "labels": pod_labels,
                         "annotations": dict(tmeta.get("annotations") or {}),
                         "ownerReferences": [owner_reference(kind, obj)]},
            "spec": spec}


def _kubeflow_outcome(kind: OwnerKind, obj: dict, slots: dict) -> tuple[str, str] | None:
    """('Succeeded' or 'Failed', message) once the job's pods say it has ended."""
    specs = _replica_specs(kind, obj)
    name = obj["metadata"]["name"]
    leaders = [t for t in specs if t.lower() in LEADER_TYPES[kind.kind]]
    deciding = leaders or [t for t in specs if t.lower() == "worker"]
    wanted = [(t.lower(), i) for t in deciding for i in range(_replicas(specs[t]))]
    if wanted and all(_phase(slots.get(s)) == "Succeeded" for s in wanted):
        return "Succeeded", f"{kind.kind} {name} is successfully completed."
    for rtype, rspec in specs.items():
        for i in range(_replicas(rspec)):
            pod = slots.get((rtype.lower(), i))
            if _phase(pod) == "Failed" and not _retried(_restart_policy(kind, rspec), pod):
                return "Failed", (f"{kind.kind} {name} is failed because {rtype} replica {i}"
                                  f" failed (exit code {_exit_code(pod)}).")
    return None


def _kubeflow_pods(kind: OwnerKind, obj: dict, slots: dict, taken: set) -> list[Action]:
    """Create each missing replica's pod, delete Failed ones to be retried and those beyond
    the replica counts."""
    ns, name, _ = _ids(obj)
    specs = _replica_specs(kind, obj)
    actions = []
    for rtype, rspec in specs.items():
        for i in range(_replicas(rspec)):
            pod = slots.get((rtype.lower(), i))
            pod_name = f"{name}-{rtype.lower()}-{i}"
            path = f"/api/v1/namespaces/{ns}/pods/{pod_name}"
            if pod is None and (ns, pod_name) not in taken:  # taken: another owner's, going
                actions.append(Action("create", f"/api/v1/namespaces/{ns}/pods",
                                      kubeflow_pod(kind, obj, rtype, i, rspec),
                                      f"pod {ns}/{pod_name} of {kind.kind} {name}"))
            elif pod is not None and _phase(pod) == "Failed" and not _deleting(pod):
                actions.append(Action("delete", path, None, f"pod {ns}/{pod_name} (Failed,"
                                      f" exit code {_exit_code(pod)}: to be re-created)"))
    counts = {t.lower(): _replicas(s) for t, s in specs.items()}
    for (rtype, i), pod in slots.items():
        if i >= counts.get(rtype, 0) and not _deleting(pod):
            pod_name = pod["metadata"]["name"]
            actions.append(Action("delete", f"/api/v1/namespaces/{ns}/pods/{pod_name}", None,
                                  f"pod {ns}/{pod_name} ({kind.kind} {name} has"
                                  f" {counts.get(rtype, 0)} {rtype} replicas)"))
    return actions


def _cleanup(kind: OwnerKind, obj: dict, pods: list[dict]) -> list[Action]:
    """The deletions `runPolicy.cleanPodPolicy` asks for once the job has finished."""
    policy = ((obj.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy") or "None"
    phases = {"All": ("Pending", "Running", "Succeeded", "Failed"),
              "Running": ("Pending", "Running")}.get(policy, ())
    ns, name, _ = _ids(obj)
    return [Action("delete", f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}", None,
                   f"pod {ns}/{p['metadata']['name']} ({kind.kind} {name} finished,"
                   f" cleanPodPolicy {policy})")
            for p in pods if _phase(p) in phases and not _deleting(p)]


def _kubeflow_status(kind: OwnerKind, obj: dict, pods: list[dict],
                     outcome: tuple[str, str] | None, now: str) -> dict:
    old = obj.get("status") or {}
    name = obj["metadata"]["name"]
    k = kind.kind
    conds = _set_condition(list(old.get("conditions") or []), "Created", "True",
                           f"{k}Created", f"{k} {name} is created.", now)
    if outcome:
        ctype, message = outcome
        if any(c.get("type") == "Running" for c in conds):
            conds = _set_condition(conds, "Running", "False", f"{k}{ctype}", message, now)
        conds = _set_condition(conds, ctype, "True", f"{k}{ctype}", message, now)
    elif any(_phase(p) == "Running" for p in pods):
        conds = _set_condition(conds, "Running", "True", f"{k}Running",
                               f"{k} {name} is running.", now)
    counts: dict[str, Counter] = {t: Counter() for t in _replica_specs(kind, obj)}
    types = {t.lower(): t for t in counts}
    for p in pods:
        slot = _slot(p)
        phase = {"Running": "active", "Succeeded": "succeeded", "Failed": "failed"}.get(
            _phase(p) or "")
        if slot and phase and slot[0] in types:
            counts[types[slot[0]]][phase] += 1
    replica_statuses: dict = {t: None for t in old.get("replicaStatuses") or {}}  # gone types
    replica_statuses.update({t: {"active": c["active"], "succeeded": c["succeeded"],
                                 "failed": c["failed"]} for t, c in counts.items()})
    status = {"conditions": conds, "startTime": old.get("startTime") or now,
              "replicaStatuses": replica_statuses}
    if _true(conds, "Succeeded", "Failed"):
        status["completionTime"] = old.get("completionTime") or now
    return status


def reconcile_kubeflow(kind: OwnerKind, obj: dict, pods: list[dict], taken: set,
                       now: str) -> list[Action]:
    """What a PyTorchJob or TFJob needs done, given the pods it controls and the names of
    every operator pod there is ((namespace, name) in `taken`)."""
    if _deleting(obj):
        return []
    slots = {s: p for p in pods if (s := _slot(p)) is not None}
    ended = _true((obj.get("status") or {}).get("conditions") or [], "Succeeded", "Failed")
    outcome = None if ended else _kubeflow_outcome(kind, obj, slots)
    if ended:  # its status stays as it was when it finished
        return _cleanup(kind, obj, pods)
    actions = _cleanup(kind, obj, pods) if outcome else _kubeflow_pods(kind, obj, slots, taken)
    return actions + _status_action(kind, obj, _kubeflow_status(kind, obj, pods, outcome, now))


# ---- JobSet ---------------------------------------------------------------------------------


def _job_end(job: dict) -> str | None:
    return _true((job.get("status") or {}).get("conditions") or [], "Complete", "Failed")


def jobset_job(obj: dict, rjob: dict, index: int) -> dict:
    """Child Job #`index` of replicated job `rjob`, its labels on it and on its pods."""
    ns, name, _ = _ids(obj)
    template = rjob.get("template") or {}
    tmeta = template.get("metadata") or {}
    ours = {JOBSET_NAME: name, JOBSET_REPLICATED_JOB: rjob["name"],
            JOBSET_REPLICAS: str(_replicas(rjob)), JOBSET_JOB_INDEX: str(index)}
    spec = copy.deepcopy(template.get("spec") or {})
    pod_meta = spec.setdefault("template", {}).setdefault("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **ours}
    pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **ours}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{name}-{rjob['name']}-{index}", "namespace": ns,
                         "labels": {**(tmeta.get("labels") or {}), **ours},
                         "annotations": {**(tmeta.get("annotations") or {}), **ours},
                         "ownerReferences": [owner_reference(JOBSET, obj)]},
            "spec": spec}


def _jobset_status(obj: dict, rjobs: list[dict], jobs: list[dict],
                   outcome: tuple[str, str, str] | None, now: str) -> dict:
    old = obj.get("status") or {}
    conds = list(old.get("conditions") or [])
    if outcome:
        conds = _set_condition(conds, *outcome, now)
    per_rjob = []
    for rjob in rjobs:
        mine = [j for j in jobs if (j["metadata"].get("labels") or {}).get(
            JOBSET_REPLICATED_JOB) == rjob["name"]]
        ends = Counter(_job_end(j) for j in mine)
        running = [(j.get("status") or {}, j.get("spec") or {}) for j in mine
                   if _job_end(j) is None]
        per_rjob.append({
            "name": rjob["name"], "succeeded": ends["Complete"], "failed": ends["Failed"],
            "active": sum(1 for s, _ in running if s.get("active")),
            # ready: every pod it runs at once is ready (or done), as upstream counts it
            "ready": sum(1 for s, sp in running if s.get("ready", 0) + s.get("succeeded", 0)
                         >= sp.get("parallelism", 1)),
            "suspended": sum(1 for _, sp in running if sp.get("suspend"))})
    return {"conditions": conds, "replicatedJobsStatus": per_rjob}


def reconcile_jobset(obj: dict, jobs: list[dict], taken: set, now: str) -> list[Action]:
    """What a JobSet needs done, given the Jobs it controls and the names of every JobSet
    child Job there is ((namespace, name) in `taken`)."""
    if _deleting(obj):
        return []
    ns, name, _ = _ids(obj)
    rjobs = [r for r in (obj.get("spec") or {}).get("replicatedJobs") or [] if r.get("name")]
    wanted = {f"{name}-{r['name']}-{i}": (r, i) for r in rjobs for i in range(_replicas(r))}
    by_name = {j["metadata"]["name"]: j for j in jobs}
    ended = _true((obj.get("status") or {}).get("conditions") or [], "Completed", "Failed")
    outcome = None
    if not ended and any(_job_end(j) == "Failed" for j in jobs):
        outcome = ("Failed", "True", "FailedJobs", "jobset failed due to one or more job failures")
    elif not ended and wanted and all(_job_end(by_name.get(n, {})) == "Complete"
                                      for n in wanted):
        outcome = ("Completed", "True", "AllJobsCompleted", "jobset completed successfully")
    actions = []
    if ended or outcome:  # upstream deletes a finished JobSet's unfinished Jobs
        actions = [Action("delete", f"/apis/batch/v1/namespaces/{ns}/jobs/{n}", BACKGROUND,
                          f"Job {ns}/{n} (JobSet {name} finished)")
                   for n, j in by_name.items() if _job_end(j) is None and not _deleting(j)]
    else:
        actions = [Action("create", f"/apis/batch/v1/namespaces/{ns}/jobs",
                          jobset_job(obj, r, i), f"Job {ns}/{n} of JobSet {name}")
                   for n, (r, i) in wanted.items() if n not in by_name and (ns, n) not in taken]
    if ended:  # its status stays as it was when it finished
        return actions
    return actions + _status_action(JOBSET, obj, _jobset_status(obj, rjobs, jobs, outcome, now))


# ---- the operator ---------------------------------------------------------------------------


@dataclass
class _Children:
    """Pods (or Jobs) by the uid of the object controlling them, and every (namespace, name)."""

    owned: dict[str, list[dict]]
    taken: set[tuple[str, str]]


def _children(objs: list[dict]) -> _Children:
    out = _Children({}, set())
    for o in objs:
        ns, name, _ = _ids(o)
        out.taken.add((ns, name))
        ref = controller_of(o)
        if ref is not None:
            out.owned.setdefault(ref.get("uid", ""), []).append(o)
    return out


class Operator:
    """Watches PyTorchJobs, TFJobs, JobSets and the pods and Jobs they own; each round
    reconciles the jobs marked dirty since the last (see the module docstring)."""

    def __init__(self, api_client, resync: float = 5.0, threads: int = 4,
                 ready_file: str | Path | None = None) -> None:
        self.rest = Rest(api_client)
        self.resync = resync
        self.ready_file = Path(ready_file) if ready_file else None
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="operator")
        self.owners = {k.kind: Informer(self.rest, k.path(), self.stop_event,
                                        self._owner_event(k.kind), timeout_seconds=120)
                       for k in CUSTOM_KINDS}
        # only the pods and Jobs an operator labels: other workloads cost nothing here
        self.pods = Informer(self.rest, "/api/v1/pods", self.stop_event, self._child_event,
                             timeout_seconds=120, labelSelector=KF_JOB_NAME)
        self.jobs = Informer(self.rest, "/apis/batch/v1/jobs", self.stop_event,
                             self._child_event, timeout_seconds=120, labelSelector=JOBSET_NAME)
        self._lock = threading.Lock()
        self._dirty: set[tuple[str, str]] = set()  # (kind, namespace/name)
        self._ready = False
        self.stats: Counter = Counter()

    @property
    def informers(self) -> list[Informer]:
        return [*self.owners.values(), self.pods, self.jobs]

    # -- marking jobs dirty (informer threads) --
    def _mark(self, keys) -> None:
        with self._lock:
            self._dirty.update(keys)
        self.wake.set()

    def _mark_all(self, kind: str) -> None:
        self._mark((kind, Informer.key(o)) for o in self.owners[kind].snapshot())

    def _owner_event(self, kind: str):
        def on_event(event: str, new: dict | None, old: dict | None) -> None:
            if event == "RESYNC":
                self._mark_all(kind)
            else:
                self._mark([(kind, Informer.key(new or old))])
        return on_event

    def _child_event(self, event: str, new: dict | None, old: dict | None) -> None:
        if event == "RESYNC":
            for kind in self.owners:
                self._mark_all(kind)
            return
        marks = []
        for obj in (new, old):
            ref = controller_of(obj) if obj is not None else None
            if ref is not None and ref.get("kind") in self.owners:
                marks.append((ref["kind"], f"{obj['metadata']['namespace']}/{ref['name']}"))
        self._mark(marks)

    # -- the loop --
    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()

    def run(self) -> None:
        for informer in self.informers:
            informer.start()
        # know the pods and Jobs there are before creating any
        while not (self.pods.synced.is_set() and self.jobs.synced.is_set()):
            if self.stop_event.wait(0.05):
                return
        log.info("reconciling %s", ", ".join(self.owners))
        next_resync = 0.0
        while not self.stop_event.is_set():
            self.wake.wait(max(0.0, next_resync - time.monotonic()))
            self.stop_event.wait(0.05)  # batch a burst of watch events into one round
            self.wake.clear()
            if time.monotonic() >= next_resync:
                next_resync = time.monotonic() + self.resync
                for kind in self.owners:
                    self._mark_all(kind)
            self._signal_ready()
            with self._lock:
                dirty, self._dirty = self._dirty, set()
            try:
                self.sync(dirty)
            except Exception:
                log.exception("operator round failed")
                self._mark(dirty)
                self.stop_event.wait(1.0)
        self.pool.shutdown(wait=True, cancel_futures=True)

    def _signal_ready(self) -> None:
        """Once every informer has listed, say so (the ready file `LocalCluster` waits for)."""
        if self._ready or not all(i.synced.is_set() for i in self.informers):
            return
        self._ready = True
        log.info("ready: watching %s", ", ".join(i.path for i in self.informers))
        if self.ready_file is not None:
            self.ready_file.write_text(f"{time.time():.3f}\n")

    def sync(self, dirty: set[tuple[str, str]]) -> list[Action]:
        """Reconcile the `dirty` jobs against the caches and carry out what they need."""
        pods, jobs = _children(self.pods.snapshot()), _children(self.jobs.snapshot())
        now = _now()
        actions: list[Action] = []
        for kind, key in sorted(dirty):
            obj = self.owners[kind].get(key)
            if obj is None:
                continue
            uid = obj["metadata"].get("uid", "")
            if kind == JOBSET.kind:
                actions += reconcile_jobset(obj, jobs.owned.get(uid, []), jobs.taken, now)
            else:
                actions += reconcile_kubeflow(BY_KIND[kind], obj, pods.owned.get(uid, []),
                                              pods.taken, now)
        for _ in self.pool.map(self._apply, actions):
            pass
        return actions

    def _apply(self, action: Action) -> None:
        try:
            if action.verb == "create":
                self.rest.post(action.path, action.body)
            elif action.verb == "delete":
                self.rest.request("DELETE", action.path, action.body)
            else:
                self.rest.patch(action.path, action.body, MERGE)
        except Exception as e:  # noqa: BLE001 - logged; the next round or resync retries
            status = getattr(e, "status", None)
            if status == 404 or (status == 409 and action.verb == "create"):
                return  # already gone, already there: what the cache had not seen yet
            line = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            self.stats["errors"] += 1
            if no_answer(e):  # the apiserver is down: one line for the outage
                OUTAGES.failed(line)
            else:
                log.warning("could not %s %s: %s", action.verb, action.what, line)
            return
        self.stats[action.verb] += 1
        log.info("%s %s", DONE[action.verb], action.what)


# ---- command line --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workbench.k8s.local.operator",
        description="A minimal Kubeflow training operator (PyTorchJob, TFJob) and JobSet"
                    " controller for the local control plane.")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--resync", type=float, default=5.0,
                        help="seconds between reconciling every job (default 5)")
    parser.add_argument("--threads", type=argtypes.count, default=4)
    parser.add_argument("--ready-file", help="written once every watch has listed")
    argtypes.add_log_level(parser)
    args = parser.parse_args(argv)
    if args.resync <= 0:
        print("operator: --resync must be > 0", file=sys.stderr)
        return 2
    return run_daemon("operator", args.kubeconfig, args.threads + 8, args.log_level,
                      lambda api_client: Operator(api_client, resync=args.resync,
                                                  threads=args.threads,
                                                  ready_file=args.ready_file), log)


if __name__ == "__main__":
    sys.exit(main())
