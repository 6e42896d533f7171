"""Carrying out a policy's actions on Kubernetes, and binding gangs all or nothing.

- Place: binds every pod of the gang through the Binding API at once, or none: when one bind
  fails the pods already bound are deleted (their Job re-creates them, pending) so no partial
  gang stays. A 409 for the node asked for (a second bind) counts as bound. A bind that got no
  answer is rolled back too, and its pod holds the node's resources (`JobBook.uncertain`) until
  the watch or a read shows where it is; pods rolled back hold theirs until their delete is seen.
- Scale / Migrate: checkpoint-restart. The job's progress goes into the `checkpoint`
  annotation, its pods are deleted (`gracePeriodSeconds=0`) and re-created by their Job
  (bare pods by the backend). When the count changes, the owner's (a Job's `parallelism`, a
  Kubeflow job's replicas) is set before the delete, so that no pods are made for the old
  count and trimmed; the new pods are bound to the new placement as they appear
  (`advance_plan`; the placement is reserved meanwhile).
- Suspend: the same delete, then the job waits. Reject: annotates the job's pods and Job and
  leaves them pending. Wait: an Event with the reason on the job's pending pods.

Every decision is also an Event on the pods, so `kubectl describe pod` shows why. Whether an
action may be carried out at all is `backend.refusal`'s rule book, shared with the simulator;
whether it fits now is checked here against the resources bound and reserved.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..backend import Outcome, refusal
from ..model import (
    Action,
    Admit,
    JobState,
    Migrate,
    Place,
    Placement,
    Reject,
    Scale,
    Suspend,
    Wait,
    describe_placement,
    placement_need,
    total,
)
from . import kinds, labels
from .binder import Binder, BindResult, pod_path
from .cache import Clock, ClusterCache, PodGroup, bound_placement, owner_of, role_of
from .reconcile import JobBook, TrackedJob

STAND_IN = "the scheduler makes them"  # logged when it makes a silent Job's pods (soak counts)
log = logging.getLogger("workbench.k8s.actions")

W, PS = labels.ROLE_WORKER, labels.ROLE_PS


class Refused(Exception):
    """An action that cannot be carried out; the message is the reason the policy sees."""


@dataclass
class Gang:
    """Binds one action needs, carried out together with the other actions of the batch."""

    job: TrackedJob
    action: Action
    tasks: list[tuple[dict, str, dict | None]]
    need: np.ndarray
    detail: str
    results: list[BindResult] = field(default_factory=list)


class Actuator:
    """Carries out actions on the jobs of a `JobBook` through a `Binder` (see the module
    docstring). `plan_timeout`: seconds a planned placement waits for its re-created pods."""

    def __init__(self, book: JobBook, binder: Binder, cache: ClusterCache, clock: Clock, *,
                 plan_timeout: float) -> None:
        self.book = book
        self.binder = binder
        self.cache = cache
        self.clock = clock
        self.plan_timeout = plan_timeout
        self._server: tuple[int, int] | None = None

    def apply(self, actions: Sequence[Action]) -> list[Outcome]:
        """Carry out a round's actions: the others one by one, then every gang's binds at once."""
        outcomes: list[Outcome | None] = [None] * len(actions)
        gangs: list[tuple[int, Gang]] = []
        used = self.book.allocated + self.book.reserved
        for i, action in enumerate(actions):
            try:
                result = self._apply_one(action, used)
            except Refused as r:
                log.info("refused %s %s: %s", type(action).__name__, action.job, r)
                outcomes[i] = Outcome(action, False, str(r))
                continue
            except Exception as e:  # noqa: BLE001 - an API error refuses this action only
                log.warning("%s %s: %s", type(action).__name__, action.job, e)
                outcomes[i] = Outcome(action, False, f"{action.job}: API error: {e}")
                continue
            if isinstance(result, Gang):
                gangs.append((i, result))
            else:
                outcomes[i] = Outcome(action, True, result)
        if gangs:
            self.bind_gangs([g for _, g in gangs])
            for i, gang in gangs:
                ok = all(r.ok for r in gang.results)
                if ok:
                    outcomes[i] = Outcome(gang.action, True, gang.detail)
                else:
                    bad = next(r for r in gang.results if not r.ok)
                    outcomes[i] = Outcome(gang.action, False,
                                          f"{gang.job.name}: bind of {bad.pod['metadata']['name']}"
                                          f" to {bad.node} failed ({bad.error}); gang rolled back")
        return outcomes  # type: ignore[return-value]

    def _apply_one(self, action: Action, used: np.ndarray) -> str | Gang:
        job = self._tracked_by_name(action.job)
        st = job.status
        if (why := refusal(st, action, binding=job.plan is not None)) is not None:
            raise Refused(why)
        if isinstance(action, Wait):
            st.reason = action.reason
            self.explain(job, "Waiting", action.reason, pending_only=True, warning=True)
            return ""
        if isinstance(action, Admit):
            st.admitted = True
            st.reason = action.reason
            return ""
        if isinstance(action, Reject):
            self._reject(job, action.reason, used)
            return ""
        if isinstance(action, Suspend):
            self._refuse_if_finishing(job, action)
            self._release(job, used)
            self.restart(job, action.reason, "Preempted")
            return ""
        if isinstance(action, Place):
            return self._place(job, action, used)
        return self._reshape(job, action, used)  # Scale or Migrate: refusal() let no other through

    def _tracked_by_name(self, name: str) -> TrackedJob:
        job = self.book.by_name.get(name)
        if job is None or job.status.state.finished:
            raise Refused(f"{name}: no such active job")
        return job

    # ---- resources ----------------------------------------------------------------------------

    def _need(self, job: TrackedJob, workers: Placement, ps: Placement,
              used: np.ndarray) -> np.ndarray:
        """The resources a placement takes per node; refused if it does not fit now."""
        view = self.book.view
        try:
            per_node, _ = placement_need(job.status.spec, workers, ps, view.nodes, view.node_index,
                                         view.node_up, view.capacity, used)
        except ValueError as e:
            raise Refused(str(e)) from None
        need = np.zeros_like(used)
        for i, add in per_node.items():
            need[i] = add
        return need

    def _held(self, job: TrackedJob) -> np.ndarray:
        held = np.zeros_like(self.book.allocated)
        view = self.book.view
        for pod in job.bound_pods:
            i = view.node_index.get(pod["spec"]["nodeName"])
            if i is not None:
                held[i] += self.cache.demand(pod).as_array()
        return held

    def _release(self, job: TrackedJob, used: np.ndarray) -> None:
        used -= self._held(job) + self.book.job_reserved(job)

    # ---- the actions --------------------------------------------------------------------------

    def _place(self, job: TrackedJob, a: Place, used: np.ndarray) -> str | Gang:
        st = job.status
        if a.partial:
            need = self._need(job, a.workers, a.ps, used)
            tasks = self._tasks(job, a.workers, a.ps)
            used += need
            job.partial = True
            st.target_workers, st.target_ps = st.spec.initial_workers, st.spec.num_ps
            st.reason = a.reason
            return Gang(job, a, tasks, need, "")
        need = self._need(job, a.workers, a.ps, used)
        used += need
        job.partial = False
        st.target_workers, st.target_ps = total(a.workers), total(a.ps)
        st.reason = a.reason
        st.admitted = True
        if st.has_run:
            st.restarts += 1  # resumed after a preemption or failure
        detail = describe_placement(a.workers, a.ps)
        counts = {W: total(a.workers), PS: total(a.ps)}
        if all(len(job.pending_pods.get(r, [])) == n for r, n in counts.items()) and \
                all(job.desired.get(r, 0) == n for r, n in counts.items()):
            return Gang(job, a, self._tasks(job, a.workers, a.ps), need, detail)
        # another worker count than its pods: resize, then bind the pods as they appear
        self._check_creatable(job, counts)
        for role, n in counts.items():
            self._owner_patches(job, role, n)  # refused here, before anything has changed
        for role, n in counts.items():
            self._resize(job, role, n)
        job.plan = (dict(a.workers), dict(a.ps))
        job.plan_since = time.monotonic()
        st.workers, st.ps = dict(a.workers), dict(a.ps)
        st.state = JobState.RESTARTING
        return detail

    def _tasks(self, job: TrackedJob, workers: Placement, ps: Placement) -> list:
        """(pod, node, annotations to patch first) for each pod the placement binds."""
        st = job.status
        patch = self._pod_patch(job)
        tasks = []
        for role, placement in ((W, workers), (PS, ps)):
            pods = iter(sorted(job.pending_pods.get(role, []),
                               key=lambda p: p["metadata"]["name"]))
            for node, count in sorted(placement.items()):
                for _ in range(count):
                    pod = next(pods, None)
                    if pod is None:
                        raise Refused(f"{st.name}: fewer pending {role} pods than the placement")
                    tasks.append((pod, node, patch if _needs_patch(pod, patch) else None))
        return tasks

    def _pod_patch(self, job: TrackedJob) -> dict[str, str]:
        """Annotations new pods need before they run: the gang size when it is not the one
        their template says, the checkpoint to resume from, and the service received."""
        st = job.status
        patch = {}
        if (st.target_workers, st.target_ps) != (st.spec.initial_workers, st.spec.num_ps):
            patch = {labels.NUM_WORKERS: str(st.target_workers), labels.NUM_PS: str(st.target_ps)}
        # the service too: for a scheduler that restarts while they run
        patch.update(_kept(job, max(job.checkpoint, st.progress)))
        return patch

    @staticmethod
    def _refuse_if_finishing(job: TrackedJob, a: Action) -> None:
        """A job at its end is not stopped: deleting its pods would race their Succeeded."""
        st = job.status
        if st.progress >= st.spec.total_work * 0.999 or any(
                p.get("status", {}).get("phase") == "Succeeded" for p in job.bound_pods):
            verb = type(a).__name__.lower()  # suspend, scale, migrate
            raise Refused(f"{st.name}: finishing; not {verb}{'d' if verb.endswith('e') else 'ed'}")

    def _reshape(self, job: TrackedJob, a: Scale | Migrate, used: np.ndarray) -> str:
        st = job.status
        self._refuse_if_finishing(job, a)
        held = self._held(job) + self.book.job_reserved(job)
        need = self._need(job, a.workers, a.ps, used - held)
        counts = ((W, total(a.workers)), (PS, total(a.ps)))
        self._check_creatable(job, dict(counts))
        for role, n in counts:
            self._owner_patches(job, role, n)  # refused here, before anything has changed
        for role, n in counts:  # the owner's count before the delete, or its controller
            if job.owners.get(role):  # re-creates pods for the old count, then trims them
                self._resize(job, role, n)  # (an API error here refuses with the pods kept)
        used -= held
        used += need
        job.checkpoint = max(job.checkpoint, st.progress)
        self.keep_checkpoint(job)
        reason_kind = "Migrating" if isinstance(a, Migrate) else "Scaling"
        self.explain(job, reason_kind, f"{a.reason} (checkpoint at {job.checkpoint:,.0f}"
                                       " iterations; pods re-created)", bound_only=True)
        self.delete_pods(job, job.bound_pods)
        job.bound_pods = []  # being deleted: nothing of the new placement is bound yet
        st.target_workers, st.target_ps = counts[0][1], counts[1][1]
        for role, n in counts:  # bare pods: counted after their re-creation
            self._resize(job, role, n)
        job.plan = (dict(a.workers), dict(a.ps))
        job.plan_since = time.monotonic()
        job.partial = False
        st.workers, st.ps = dict(a.workers), dict(a.ps)  # reserved, as the simulator shows it
        st.state = JobState.RESTARTING
        st.throughput = 0.0
        st.restarts += 1
        st.reason = a.reason
        return describe_placement(a.workers, a.ps)

    def _check_creatable(self, job: TrackedJob, counts: dict[str, int]) -> None:
        """Refused, before anything is changed, when a role's pod count cannot be made: no
        Job and no pod template to create its pods from (e.g. parameter servers for an
        all-reduce job; planned anyway, it waited for pods that never came, over and over)."""
        for role, n in counts.items():
            if n and job.desired.get(role, 0) != n and not job.owners.get(role) and \
                    role not in job.templates:
                raise Refused(f"{job.name}: no Job or pod template to create {role} pods from")

    def _owner_patches(self, job: TrackedJob, role: str, n: int) -> list[tuple[str, dict]]:
        """(path, merge patch) for each object to change so the job has `n` pods of `role`
        (a Job's parallelism, a PyTorchJob's or TFJob's replicas), none when no object owns
        them or the count is already `n`; Refused when it cannot be done."""
        refs = job.owners.get(role, ())
        if not refs or job.desired.get(role, 0) == n:
            return []
        if len(refs) > 1:
            return self._split_patches(job, role, refs, n)
        kind, name = refs[0]
        k = kinds.BY_KIND[kind]
        obj = self.cache.owner_object(kind, job.key[0], name)
        if obj is None:
            raise Refused(f"{job.name}: {kind} {name} is not in the cache; not resized")
        if k is kinds.BATCH_JOB:
            return [self._parallelism_patch(job, name, obj, n)]
        body = k.scale_patch(obj, role, n)
        if isinstance(body, str):
            raise Refused(f"{job.name}: {body}")
        return [(k.path(job.key[0], name), body)]

    def _parallelism_patch(self, job: TrackedJob, name: str, obj: dict,
                           n: int) -> tuple[str, dict]:
        completions = obj["spec"].get("completions")
        if completions is not None and n > int(completions):
            raise Refused(f"{job.name}: Job {name} has fixed completions; cannot run {n}")
        return kinds.BATCH_JOB.path(job.key[0], name), {"spec": {"parallelism": n}}

    def _split_patches(self, job: TrackedJob, role: str, refs, n: int) -> list[tuple[str, dict]]:
        """`n` pods over the several Jobs of a JobSet's replicated job (one per replica), as
        even as can be, the lower job indexes taking the remainder. Each keeps at least one:
        a Job left with none never completes, and nor would its JobSet."""
        objs = []
        for kind, name in refs:
            obj = self.cache.owner_object(kind, job.key[0], name)
            if kind != kinds.BATCH_JOB.kind or obj is None:
                raise Refused(f"{job.name}: its {role}s belong to {len(refs)} objects, {kind}"
                              f" {name} not a Job in the cache; not resized")
            objs.append((kinds.child_index(obj), name, obj))
        if n < len(objs):
            raise Refused(f"{job.name}: its {role}s belong to {len(objs)} Jobs (a JobSet's"
                          f" replicas), each of which needs one; cannot run {n}")
        base, extra = divmod(n, len(objs))
        return [self._parallelism_patch(job, name, obj, base + (i < extra))
                for i, (_, name, obj) in enumerate(sorted(objs, key=lambda o: o[:2]))
                if obj["spec"].get("parallelism") != base + (i < extra)]

    def _reject(self, job: TrackedJob, reason: str, used: np.ndarray) -> None:
        if job.bound_pods:
            self._release(job, used)
            self.delete_pods(job, job.bound_pods, recreate=True)
        self.explain(job, "Rejected", reason, warning=True)
        self.mark_rejected(job.key[0], [p for ps in job.pending_pods.values() for p in ps],
                           {ref for refs in job.owners.values() for ref in refs}, reason)
        self.book.finish(job, self.clock.now(), JobState.REJECTED, reason)
        self.book.queue = [j for j in self.book.queue if j is not job.status]

    def mark_rejected(self, namespace: str, pods: list[dict], owners: set[tuple[str, str]],
                      reason: str) -> None:
        """Annotate `pods` and the `owners` ((kind, name)) with why the job was refused
        (`workbench.io/rejected`: `kubectl describe` shows it, and a restarted scheduler
        leaves the job alone), on the pool."""
        mark = {"metadata": {"annotations": {labels.REJECTED: reason[:256]}}}
        for pod in pods:
            self.binder.run(self.binder.patch, pod_path(pod), mark)
        for kind, name in owners:
            self.binder.run(self.binder.patch, kinds.BY_KIND[kind].path(namespace, name), mark)

    # ---- restarts and pods --------------------------------------------------------------------

    def restart(self, job: TrackedJob, reason: str, event: str, warning: bool = False) -> None:
        """Checkpoint, delete the job's bound pods (their Job re-creates them), wait."""
        st = job.status
        log.info("%s: %s (%s)", st.name, event, reason)
        job.checkpoint = max(job.checkpoint, st.progress)
        self.keep_checkpoint(job)
        self.explain(job, event, reason, bound_only=True, warning=warning)
        self.delete_pods(job, job.bound_pods, recreate=True)
        job.plan = None
        job.partial = False
        st.workers, st.ps = {}, {}
        st.state = JobState.PENDING
        st.throughput = 0.0
        st.target_workers, st.target_ps = st.spec.initial_workers, st.spec.num_ps
        st.reason = reason
        job.bound_pods = []

    def keep_checkpoint(self, job: TrackedJob) -> None:
        """Write the job's checkpoint, and the GPU-seconds it has received, where a restarted
        scheduler finds them (`Reconciler._discover`): on the objects owning its pods, whose
        controllers re-create deleted pods without them (bare pods get them from
        `_create_bare`), on the pool. Until then they lived only in this process: a scheduler
        restarted while the job waited resumed it from 0, and ranked it as new."""
        mark = {"metadata": {"annotations": _kept(job)}}
        if not mark["metadata"]["annotations"]:
            return
        for kind, name in sorted({ref for refs in job.owners.values() for ref in refs}):
            self.binder.run(self.binder.patch, kinds.BY_KIND[kind].path(job.key[0], name), mark)

    def delete_pods(self, job: TrackedJob, pods: list[dict], recreate: bool = True) -> None:
        """Delete now (grace 0) on the pool; bare pods are re-created from their template."""
        if not pods:
            return
        mono = time.monotonic()
        deleting = self.book.deleting
        for p in pods:
            deleting[p["metadata"]["uid"]] = mono
        errors = self.binder.delete_all(pods)
        for p, err in zip(pods, errors):
            if err:
                log.warning("delete %s: %s", p["metadata"]["name"], err)
                deleting.pop(p["metadata"]["uid"], None)
        if recreate:
            for p in pods:
                if not _owned(p):
                    self._create_bare(job, role_of(p))

    def end_pods(self, job: TrackedJob, pods: list[dict], group: PodGroup) -> None:
        """Delete `pods`, left of a completed job, after scaling to 0 each Job of it that
        would re-create pods forever: one none of whose pods succeeded (a PS Job whose pods a
        restart deleted as the workers finished), that still asks for pods, and none of whose
        pods still runs apart from `pods` (a running one may yet succeed). Called at the
        completion too when `pods` is empty: the Job may re-create its deleted pods later."""
        ending = {p["metadata"]["uid"] for p in pods}
        spared = {owner_of(p) for p in group.live if p["metadata"]["uid"] not in ending} | \
            {owner_of(p) for p in group.pods if p.get("status", {}).get("phase") == "Succeeded"}
        refs = {owner_of(p) for p in pods} | {r for rs in job.owners.values() for r in rs}
        for kind, name in refs - spared - {None}:
            obj = self.cache.owner_object(kind, job.key[0], name)
            if kind != kinds.BATCH_JOB.kind or obj is None or \
                    kinds.has_condition(obj, "Complete", "Failed") or \
                    (obj.get("status") or {}).get("succeeded") or not obj["spec"].get("parallelism"):
                continue  # its controller ends it (a Kubeflow job's operator cleans its pods)
            log.info("%s: Job %s scaled to 0: the job completed", job.name, name)
            self.binder.patch(kinds.BATCH_JOB.path(job.key[0], name), {"spec": {"parallelism": 0}})
        if pods:
            self.delete_pods(job, pods, recreate=False)

    def make_pods_for_silent_job(self, obj: dict, n: int, silent_for: float) -> bool:
        """Create the `n` pods a batch/v1 Job owes, as its controller would (`Reconciler.
        _stand_in_for_silent_jobs` says when); False if the API server could not be asked
        its version (whether the pods need the Job's tracking finalizer)."""
        server = self._server_version()
        if server is None:
            return False
        meta = obj["metadata"]
        log.warning("Job %s/%s owes %d pod(s) and has had none for %.0f s; %s",
                    meta.get("namespace"), meta["name"], n, silent_for, STAND_IN)
        pod = kinds.pod_for_job(obj, kinds.tracks_pods_by_finalizer(obj, server))
        for _ in range(n):
            self.binder.create_pod(meta.get("namespace", "default"), pod)
        return True

    def _server_version(self) -> tuple[int, int] | None:
        """(major, minor) of the API server, asked once; None while it does not answer."""
        if self._server is None:
            try:
                v = self.binder.rest.get("/version")
                self._server = (int(v["major"]), int("".join(c for c in v["minor"]
                                                            if c.isdigit())))
            except Exception as e:  # noqa: BLE001 - asked again next time
                log.warning("API server version: %s", e)
        return self._server

    def _create_bare(self, job: TrackedJob, role: str) -> None:
        template = job.templates.get(role)
        if template is not None:
            if (kept := _kept(job)):  # resumed from, and read by a restarted scheduler
                meta = template["metadata"]
                template = {**template, "metadata": {
                    **meta, "annotations": {**(meta.get("annotations") or {}), **kept}}}
            self.binder.create_pod(job.key[0], template)

    def _resize(self, job: TrackedJob, role: str, n: int) -> None:
        """Make the job have `n` pods of `role`: through the object that owns them (a Job's
        parallelism, a Kubeflow job's replicas), or bare pods."""
        if job.desired.get(role, 0) == n:
            return
        if job.owners.get(role):
            for path, body in self._owner_patches(job, role, n):
                err = self.binder.patch(path, body)
                if err:
                    raise Refused(f"{job.name}: cannot set the {role} count at {path}: {err}")
        elif role in job.templates:
            # pending pods, and bound ones (when just deleted, they were re-created)
            have = len(job.pending_pods.get(role, [])) + \
                sum(1 for p in job.bound_pods if role_of(p) == role)
            for _ in range(n - have):
                self._create_bare(job, role)
            if n < have:
                extra = job.pending_pods.get(role, [])[: have - n]
                self.delete_pods(job, extra, recreate=False)
        elif n:
            raise Refused(f"{job.name}: no Job or pod template to create {role} pods from")
        job.desired[role] = n

    # ---- binding ------------------------------------------------------------------------------

    def advance_plan(self, job: TrackedJob, group: PodGroup, mono: float) -> None:
        """Bind the pods a planned placement still needs, all together once they exist."""
        st = job.status
        workers, ps = job.plan
        bw, bp = bound_placement(job.bound_pods)
        left_w = {n: c - bw.get(n, 0) for n, c in workers.items() if c > bw.get(n, 0)}
        left_p = {n: c - bp.get(n, 0) for n, c in ps.items() if c > bp.get(n, 0)}
        extra = any(bw.get(n, 0) > workers.get(n, 0) for n in bw) or \
            any(bp.get(n, 0) > ps.get(n, 0) for n in bp)
        if extra:  # someone else bound pods of this job elsewhere: start over
            self.restart(job, "waiting: its pods were bound outside the planned placement",
                         "GangBroken", warning=True)
            return
        if not left_w and not left_p:
            job.plan = None
            job.plan_timeouts = 0
            return
        window = job.plan_window(self.plan_timeout)
        if mono - job.plan_since > window:
            job.plan_timeouts += 1
            self.restart(job, f"waiting: its pods did not appear within {window:.0f} s of the"
                              " restart", "RestartTimeout", warning=True)
            return
        if len(group.pending.get(W, [])) != total(left_w) or \
                len(group.pending.get(PS, [])) != total(left_p):
            return  # its Job is still creating them (or deleting extra ones)
        try:
            tasks = self._tasks(job, left_w, left_p)
        except Refused:
            return
        gang = Gang(job, Place(st.name, st.reason), tasks, np.zeros(0), "")
        self.bind_gangs([gang])

    def bind_gangs(self, gangs: list[Gang]) -> None:
        """Bind every task of every gang at once; roll back each gang that did not fully bind."""
        flat = [t for g in gangs for t in g.tasks]
        results = self.binder.bind_all(flat) if flat else []
        k = 0
        for g in gangs:
            g.results = results[k:k + len(g.tasks)]
            k += len(g.tasks)
            if all(r.ok for r in g.results):
                self._bound(g)
            else:
                self._bind_failed(g)

    def _bound(self, g: Gang) -> None:
        """Every pod of the gang bound: the job holds them (assumed until the watch agrees)."""
        job, st = g.job, g.job.status
        for r in g.results:
            pod = r.pod
            self.book.assumed[pod["metadata"]["uid"]] = (r.node, time.monotonic())
            pend = job.pending_pods.get(role_of(pod), [])
            if pod in pend:
                pend.remove(pod)
            job.bound_pods.append({**pod, "spec": {**pod["spec"], "nodeName": r.node}})
            self.binder.event(pod, "Scheduled",
                              f"Successfully assigned {job.key[0]}/{pod['metadata']['name']}"
                              f" to {r.node}: {st.reason}")
        bound_now = bound_placement(job.bound_pods)
        log.info("%s: bound %d pod(s), now on %s", st.name, len(g.results),
                 describe_placement(*bound_now))  # where a stuck job was last put
        if job.plan is not None and _covers(bound_now, job.plan):
            job.plan = None
            job.plan_timeouts = 0
        if job.plan is None:
            st.workers, st.ps = bound_now
            partial = st.num_workers < st.target_workers or st.num_ps < st.target_ps
            st.state = JobState.HOLDING if job.partial and partial else JobState.RESTARTING

    def _bind_failed(self, g: Gang) -> None:
        """A bind of the gang failed: roll the gang back (a pod-by-pod job keeps what bound)."""
        job, st = g.job, g.job.status
        bound = [r for r in g.results if r.ok]
        bad = next(r for r in g.results if not r.ok)
        if job.plan is not None and all(r.ok or r.status == 404 for r in g.results):
            # a planned placement's pod was deleted under the bind (its Job trimming pods it
            # made before it saw the new count): not a failure of the placement, whose other
            # pods stay bound; `advance_plan` binds the rest as they are re-created
            self._keep_bound(job, bound)
            log.info("%s: %s was deleted as it was bound; the planned placement waits for"
                     " its pods", st.name, bad.pod["metadata"]["name"])
            return
        why = (f"waiting: binding {bad.pod['metadata']['name']} to {bad.node} failed"
               f" ({bad.error}); the gang was rolled back")
        for r in g.results:
            self.binder.event(r.pod, "FailedBinding", why, warning=True)
        for r in g.results:
            if r.unknown or r.unanswered:  # may be bound, or still land: hold its node's
                # resources until known (reconcile)
                self.book.uncertain[r.pod["metadata"]["uid"]] = (r.pod, r.node, time.monotonic())
        if job.partial and job.plan is None:
            # pod by pod: the pods that did bind stay, as kube-scheduler's would
            self._keep_bound(job, bound)
            st.workers, st.ps = bound_placement(job.bound_pods)
            st.reason = why
            return
        self.binder.stats["rollbacks"] += 1
        log.info("%s: rolled back (%s)", st.name, why)
        for r in g.results:  # they hold their node until their delete is seen (or fails)
            if r.ok:
                self.book.assumed[r.pod["metadata"]["uid"]] = (r.node, time.monotonic())
        # bound by us, bound before us (a 409 for another node), perhaps bound (no answer),
        # and bound earlier
        rollback = [r.pod for r in g.results if r.ok or r.unknown or r.status == 409] + \
            list(job.bound_pods)
        self.delete_pods(job, rollback, recreate=True)
        job.plan = None
        job.bound_pods = []
        st.workers, st.ps = {}, {}
        st.state = JobState.PENDING
        st.reason = why
        if st.has_run and isinstance(g.action, Place) and g.detail:
            st.restarts = max(st.restarts - 1, 0)

    def _keep_bound(self, job: TrackedJob, bound: list) -> None:
        """The pods of a gang's bind that did bind stay bound (assumed until the watch agrees)."""
        for r in bound:
            self.book.assumed[r.pod["metadata"]["uid"]] = (r.node, time.monotonic())
            job.bound_pods.append({**r.pod, "spec": {**r.pod["spec"], "nodeName": r.node}})

    # ---- events -------------------------------------------------------------------------------

    def explain(self, job: TrackedJob, reason: str, message: str, *, pending_only: bool = False,
                bound_only: bool = False, warning: bool = False) -> None:
        """An Event with the decision's reason on the job's pods (once per distinct reason)."""
        if self.binder.events is None:
            return
        if pending_only:
            if job.evented_reason == message:
                return
            job.evented_reason = message
            pods = [p for ps in job.pending_pods.values() for p in ps]
        elif bound_only:
            pods = job.bound_pods
        else:
            pods = [p for ps in job.pending_pods.values() for p in ps] + job.bound_pods
        for p in pods:
            self.binder.event(p, reason, message, warning)


def _covers(bound: tuple[Placement, Placement], plan: tuple[Placement, Placement]) -> bool:
    return all(bound[0].get(n, 0) >= c for n, c in plan[0].items()) and \
        all(bound[1].get(n, 0) >= c for n, c in plan[1].items())


def _owned(pod: dict) -> bool:
    return any(r.get("controller") for r in pod["metadata"].get("ownerReferences") or [])


def _needs_patch(pod: dict, patch: dict[str, str]) -> bool:
    ann = pod["metadata"].get("annotations") or {}
    return any(ann.get(k) != v for k, v in patch.items())


def _kept(job: TrackedJob, checkpoint: float | None = None) -> dict[str, str]:
    """The annotations `keep_checkpoint` writes: the checkpoint (iterations; `checkpoint`, or
    the job's), the attained service (GPU-seconds) and the restarts so far, those above 0."""
    values = {labels.CHECKPOINT: job.checkpoint if checkpoint is None else checkpoint,
              labels.SERVICE: job.status.attained_service}
    kept = {k: repr(float(v)) for k, v in values.items() if v > 0}
    if job.status.restarts > 0:
        kept[labels.RESTARTS] = str(job.status.restarts)
    return kept


__all__ = ["Actuator", "Gang", "Refused"]
