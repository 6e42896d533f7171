"""From what the watch shows to each job's `JobStatus`: the Kubernetes backend's bookkeeping.

`JobBook` is what the backend knows across rounds: every job it tracks (its pods, its batch/v1
Jobs, the placement being bound), the `JobStatus`es the policies see, and the resources that
bound pods hold and planned placements reserve. `Reconciler.sync()` brings the book up to what
the cache shows: it discovers jobs once all their pods exist, follows their progress and
service, ends them when their pods succeed, fail for good or vanish (and deletes what is left of
a completed gang), sends them back to waiting when a node fails or is deleted or a gang is
broken, and (through `actions.Actuator`) binds the re-created pods of planned placements. The
resources it reports held are taken after those binds, and include binds of unknown outcome.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..model import JobSpec, JobState, JobStatus, Placement
from . import kinds, labels
from .cache import (
    Clock,
    ClusterCache,
    NodeView,
    PodGroup,
    attained_service_of,
    bound_placement,
    checkpoint_of,
    group_pods,
    job_name,
    owner_of,
    restarts_of,
    role_of,
    running_since,
    spec_from_pods,
)

if TYPE_CHECKING:
    from .actions import Actuator

log = logging.getLogger("workbench.k8s.reconcile")

W, PS = labels.ROLE_WORKER, labels.ROLE_PS
UNANSWERED_HOLD = 5.0  # seconds a bind that got no answer holds its node even if not seen bound
SILENCE_CHECK_S = 5.0  # seconds between two looks for Jobs that make no pods


@dataclass
class TrackedJob:
    """One training job as the backend follows it across rounds."""

    key: tuple[str, str]
    status: JobStatus
    # role -> (kind, name) of the objects that own its pods: a batch/v1 Job (several for a
    # JobSet with replicas), a PyTorchJob, a TFJob
    owners: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    templates: dict[str, dict] = field(default_factory=dict)  # role -> bare pod to re-create
    desired: dict[str, int] = field(default_factory=dict)  # pods per role it should have
    plan: tuple[Placement, Placement] | None = None  # placement being bound (reserved)
    plan_since: float = 0.0  # monotonic
    plan_timeouts: int = 0  # plans in a row whose pods did not appear in time
    checkpoint: float = 0.0
    # iterations its current pods last reported: below `status.progress` (the most ever seen)
    # after a restart, until the new pods have redone the work lost since the last report
    reported: float = 0.0
    reported_at: float | None = None  # monotonic: when that report reached the watch
    partial: bool = False  # placed pod by pod (kube-default): a partial gang is allowed
    missing_since: float | None = None  # monotonic: when its pods were last seen
    last_sync: float = 0.0
    evented_reason: str = ""
    pending_pods: dict[str, list[dict]] = field(default_factory=dict)
    bound_pods: list[dict] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.status.name

    def plan_window(self, timeout: float) -> float:
        """How long this job's plan waits for its pods: `timeout`, doubled for each plan in a
        row that timed out (up to 16x), so a cluster whose Job controller is slow (thousands of
        pending pods) gets the time it needs instead of a restart that adds to its backlog."""
        return timeout * 2 ** min(self.plan_timeouts, 4)


@dataclass
class JobBook:
    """What the backend knows across rounds; `Reconciler` and `Actuator` both work on it."""

    jobs: dict[str, JobStatus] = field(default_factory=dict)  # every job seen, finished too
    active: dict[str, JobStatus] = field(default_factory=dict)
    finished: list[JobStatus] = field(default_factory=list)
    queue: list[JobStatus] = field(default_factory=list)  # waiting, in arrival order
    tracked: dict[tuple[str, str], TrackedJob] = field(default_factory=dict)
    by_name: dict[str, TrackedJob] = field(default_factory=dict)
    ignored: set[tuple[str, str]] = field(default_factory=set)  # ended/refused before seen
    submitted: dict[tuple[str, str], float] = field(default_factory=dict)  # created, no pods
    deleting: dict[str, float] = field(default_factory=dict)  # pod uid -> monotonic delete time
    # pods we bound that the watch has not shown bound yet: uid -> (node, monotonic time)
    assumed: dict[str, tuple[str, float]] = field(default_factory=dict)
    # binds that got no answer: uid -> (pod, node, monotonic time); held until resolved
    uncertain: dict[str, tuple[dict, str, float]] = field(default_factory=dict)
    future_arrivals: list[float] = field(default_factory=list)  # announced, not yet due
    node_failures: list[tuple[float, str, str]] = field(default_factory=list)  # (t, node, job)
    # batch/v1 Jobs we schedule that owe pods and have none: (namespace, name) ->
    # (monotonic time since when, monotonic time the backend last made their pods)
    silent: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    # completed jobs with pods still live: key -> monotonic time of completion, or of the
    # first live pod seen after all had ended
    lingering: dict[tuple[str, str], float] = field(default_factory=dict)
    seen_nodes: set[str] = field(default_factory=set)  # every node name the view has shown
    view: NodeView | None = None
    allocated: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))  # bound pods
    reserved: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))  # planned, unbound

    def has_plans(self) -> bool:
        return any(j.plan is not None for j in self.tracked.values())

    def job_reserved(self, job: TrackedJob) -> np.ndarray:
        """What `job`'s planned placement still needs per node (pods not bound yet)."""
        view = self.view
        reserved = np.zeros_like(self.allocated)
        if job.plan is None:
            return reserved
        bound = bound_placement(job.bound_pods)
        for k, role in enumerate((W, PS)):
            demand = job.status.spec.worker_demand if role == W else job.status.spec.ps_demand
            for node, count in job.plan[k].items():
                left = count - bound[k].get(node, 0)
                if left > 0 and node in view.node_index:
                    reserved[view.node_index[node]] += demand.as_array() * left
        return reserved

    def reservations(self) -> np.ndarray:
        """Resources promised to planned placements whose pods are not bound yet."""
        reserved = np.zeros_like(self.allocated)
        for job in self.tracked.values():
            if job.plan is not None:
                reserved += self.job_reserved(job)
        return reserved

    def finish(self, job: TrackedJob, now: float, state: JobState, reason: str) -> None:
        """End `job` (completed or rejected): it holds nothing and leaves the active set."""
        st = job.status
        st.state = state
        st.finish_time = now
        st.throughput = 0.0
        st.reason = reason
        st.workers, st.ps = {}, {}
        job.plan = None
        self.active.pop(st.name, None)
        self.finished.append(st)


class Reconciler:
    """Keeps a `JobBook` in step with a `ClusterCache` (see the module docstring)."""

    def __init__(self, book: JobBook, cache: ClusterCache, clock: Clock, actuator: Actuator, *,
                 namespace: str | None, scheduler_name: str, plan_timeout: float,
                 history_interval: float | None, linger_timeout: float = 30.0) -> None:
        self.book = book
        self.cache = cache
        self.clock = clock
        self.actuator = actuator
        self.namespace = namespace
        self.scheduler_name = scheduler_name
        self.plan_timeout = plan_timeout
        self.history_interval = history_interval
        self.linger_timeout = linger_timeout
        self.synced_version = -1
        self.synced_at = 0.0
        self.kinds_checked_at = time.monotonic()
        self.silence_checked_at = float("-inf")

    def due(self) -> bool:
        """Whether a sync can change anything: the cache changed, an announced arrival is
        due, a restart is under way, or it has been a while (service accounting)."""
        now = self.clock.now()
        return self.cache.version != self.synced_version or self.book.has_plans() or \
            any(t <= now for t in self.book.future_arrivals) or \
            time.monotonic() - self.synced_at > 10.0

    def sync(self) -> None:
        """Bring every job's status up to what the cache shows; bind re-created pods of
        planned placements; send jobs on failed nodes back to waiting."""
        book = self.book
        self.synced_version = self.cache.version
        self.synced_at = time.monotonic()
        now = self.clock.now()
        mono = time.monotonic()
        if mono - self.kinds_checked_at > 30.0:  # custom kinds unknown at start (no answer)
            self.kinds_checked_at = mono
            self.cache.start_new_kinds()
        node_objs, pods, owner_objs = self.cache.snapshot()
        book.view = view = NodeView.build(node_objs)
        book.seen_nodes.update(view.node_index)
        live_uids = {p["metadata"]["uid"] for p in pods}
        for uid in [u for u in book.deleting if u not in live_uids]:
            del book.deleting[uid]
        if book.assumed:
            pods = self._assume(pods, mono)
        skip = set(book.deleting)
        # sized for this view now (the actuator's arrays follow it); the real figure is taken
        # after the jobs are updated, below
        book.allocated = np.zeros_like(view.capacity)
        groups = group_pods(pods, self.scheduler_name, skip)
        book.future_arrivals = []
        discovered = False
        for key, group in groups.items():
            job = book.tracked.get(key)
            if job is None:
                if key in book.ignored:
                    continue
                job = self._discover(key, group, owner_objs, now)
                if job is None:
                    continue
                discovered = True
            self._update(job, group, owner_objs, now, mono)
        if discovered:  # jobs in arrival order, as the simulator lists them
            book.active = dict(sorted(book.active.items(),
                                      key=lambda kv: (kv[1].spec.arrival, kv[0])))
        for key, job in book.tracked.items():
            if key not in groups and not job.status.state.finished:
                self._missing(job, owner_objs, now, mono)
        for key in [k for k in book.lingering if k not in groups]:
            del book.lingering[key]
        if mono - self.silence_checked_at >= SILENCE_CHECK_S:
            self.silence_checked_at = mono
            self._stand_in_for_silent_jobs(pods, owner_objs, mono)
        for key in [k for k, t in book.submitted.items() if mono - t > self.plan_timeout]:
            log.warning("job %s/%s: no pods %.0f s after it was created", *key, self.plan_timeout)
            del book.submitted[key]
        # Bound and reserved are both taken after `_update`, which may bind a planned
        # placement's pods and clear its plan: taken before, those pods counted as neither
        # and their GPUs were offered again (issue #14, item 1).
        book.allocated = view.allocation(self._with_assumed(pods), self.cache.demand, skip) \
            + self._uncertain_holds(pods)
        book.reserved = book.reservations()
        waiting = [j for j in book.active.values()
                   if j.state in (JobState.PENDING, JobState.HOLDING)]
        waiting.sort(key=lambda j: (j.spec.arrival, j.name))
        book.queue = waiting

    def _assume(self, pods: list[dict], mono: float) -> list[dict]:
        """Pods as bound where our bind succeeded but the watch has not caught up (the
        scheduler's 'assumed pods'), so a gang never looks broken by the cache's lag."""
        assumed = self.book.assumed
        live = {p["metadata"]["uid"]: p for p in pods}
        for uid, (_, since) in list(assumed.items()):
            pod = live.get(uid)
            if pod is None or pod["spec"].get("nodeName") or mono - since > 60.0:
                del assumed[uid]
        return self._with_assumed(pods)

    def _with_assumed(self, pods: list[dict]) -> list[dict]:
        """`pods`, those we bound (`book.assumed`) shown on their node."""
        assumed = self.book.assumed
        if not assumed:
            return pods
        out = []
        for pod in pods:
            hit = assumed.get(pod["metadata"]["uid"])
            if hit is not None and not pod["spec"].get("nodeName"):
                pod = {**pod, "spec": {**pod["spec"], "nodeName": hit[0]}}
            out.append(pod)
        return out

    def _uncertain_holds(self, pods: list[dict]) -> np.ndarray:
        """What binds of unknown outcome hold: each pod's requests on the node it was sent to,
        until the cache shows it bound or gone or the API server says it is unbound (issue
        #14, item 2: its GPUs were handed out again while it was in fact bound)."""
        book, view = self.book, self.book.view
        held = np.zeros_like(view.capacity)
        if not book.uncertain:
            return held
        cached = {p["metadata"]["uid"]: p for p in pods}
        mono = time.monotonic()
        for uid, (pod, node, since) in list(book.uncertain.items()):
            now = cached.get(uid)
            if now is None or uid in book.deleting or now["spec"].get("nodeName"):
                del book.uncertain[uid]  # gone, or counted from the cache from now on
                continue
            # a request the server took may still be carried out after its connection broke:
            # 'unbound' is believed once it has had UNANSWERED_HOLD seconds to land
            answered, on = self.actuator.binder.read_node(pod)
            if answered and not on and mono - since > UNANSWERED_HOLD:
                del book.uncertain[uid]  # the API server says: not bound
                continue
            if node in view.node_index:
                held[view.node_index[node]] += self.cache.demand(pod).as_array()
        return held

    def _desired(self, group: PodGroup, owner_objs: dict,
                 owners: dict[str, tuple[tuple[str, str], ...]]) -> dict[str, int]:
        ann = group.annotations()
        out = {}
        for role, key in ((W, labels.NUM_WORKERS), (PS, labels.NUM_PS)):
            counts = [_owner_count(owner_objs.get((kind, group.key[0], name)), kind, role)
                      for kind, name in owners.get(role, ())]
            if counts and None not in counts:
                out[role] = sum(counts)
            elif ann.get(key) not in (None, ""):
                out[role] = int(float(ann[key])) if role == PS or float(ann[key]) > 0 else 1
            else:
                out[role] = group.count(role)
        if out[W] == 0 and out[PS] == 0:
            out[W] = max(group.count(W), 1)
        return out

    def _whole_owner(self, key, owners: dict[str, tuple[tuple[str, str], ...]],
                     owner_objs: dict) -> bool:
        """A Kubeflow job owns every role its replica specs name, also those whose pods its
        operator has not made yet (a TFJob's Workers after its PS): `owners` gets them, so the
        job is tracked only once all of them exist. False: the job object is watched but not
        in the cache yet (wait for it)."""
        kubeflow = {o for refs in owners.values() for o in refs
                    if kinds.BY_KIND[o[0]].replica_specs}
        if len(kubeflow) != 1:
            return True
        (kind, name), = kubeflow
        obj = owner_objs.get((kind, key[0], name))
        if obj is None:
            return kind not in self.cache.custom
        for role, n in kinds.BY_KIND[kind].counts(obj).items():
            if n and role not in owners:
                owners[role] = ((kind, name),)
        return True

    def _every_child_job(self, key, group: PodGroup, owners: dict, owner_objs: dict) -> bool:
        """A JobSet's pods are one job once each child Job it runs (each replica of each
        replicated job with pods to make) owns some: its controller makes them one by one, and
        a job tracked from the first child's pods took its minimum and its size from them
        alone (1 worker of 2, in CI). False: wait (also while the JobSet is not in the watch
        cache yet)."""
        names = {(p["metadata"].get("labels") or {}).get(kinds.JOBSET_NAME) for p in group.pods}
        if len(names) != 1 or None in names:
            return True
        (name,) = names
        obj = owner_objs.get((kinds.JOBSET.kind, key[0], name))
        if obj is None:
            return kinds.JOBSET.kind not in self.cache.custom
        children = {o for refs in owners.values() for o in refs
                    if o[0] == kinds.BATCH_JOB.kind}
        return len(children) >= _child_jobs_making_pods(obj)

    @staticmethod
    def _outside_gang(key, group: PodGroup, owners: dict, owner_objs: dict) -> list[str]:
        """Replica types outside the training gang (a TFJob's Evaluator) among the job's pods
        or in its Kubeflow job's replica specs (whose operator may not have made the pod yet)."""
        found = {t for p in group.pods
                 if (t := kinds.outside_gang(p["metadata"].get("labels") or {}))}
        for kind, name in {o for refs in owners.values() for o in refs}:
            if (obj := owner_objs.get((kind, key[0], name))) is not None:
                found.update(t.lower() for t in kinds.BY_KIND[kind].outside_types(obj))
        return sorted(t.capitalize() for t in found)

    def _refuse(self, key, group: PodGroup, reason: str) -> None:
        """A job the workbench cannot schedule: not tracked, and its pods and their owners
        marked with the reason (`kubectl describe` shows it; it is said once)."""
        log.warning("job %s refused: %s", job_name(key, self.namespace), reason)
        self.book.ignored.add(key)
        self.actuator.mark_rejected(key[0], group.pods,
                                    {o for p in group.pods if (o := owner_of(p))}, reason)

    def _discover(self, key, group: PodGroup, owner_objs: dict, now: float) -> TrackedJob | None:
        """A job seen for the first time: tracked once all its pods exist."""
        book = self.book
        if any(labels.REJECTED in (p["metadata"].get("annotations") or {}) for p in group.pods) \
                or (group.succeeded and not group.live):
            book.ignored.add(key)
            return None
        found: dict[str, set[tuple[str, str]]] = {}
        for p in group.pods:
            o = owner_of(p)
            if o:
                found.setdefault(role_of(p), set()).add(o)
        owners = {role: tuple(sorted(refs)) for role, refs in found.items()}
        if (outside := self._outside_gang(key, group, owners, owner_objs)):
            self._refuse(key, group, f"its {'/'.join(outside)} replicas run outside the training"
                                     " gang and the workbench does not schedule them; remove"
                                     " them or give their pods another scheduler")
            return None
        if not self._whole_owner(key, owners, owner_objs):
            return None  # its Kubeflow job is not in the watch cache yet
        if not self._every_child_job(key, group, owners, owner_objs):
            return None  # its JobSet's other child Jobs have no pods yet
        desired = self._desired(group, owner_objs, owners)
        if any(group.count(r) < n for r, n in desired.items()):
            return None  # its Job is still creating pods
        name = job_name(key, self.namespace)
        created = self.clock.from_unix(group.created) if group.created else now
        try:
            spec = spec_from_pods(name, group.live, arrival=created, workers=desired[W] or None,
                                  ps=desired[PS],
                                  worker_range=_worker_range(owners, owner_objs, key[0]))
            spec = _one_worker_per_child_job(spec, owners)
        except ValueError as e:
            log.warning("job %s: %s; ignored", name, e)
            book.ignored.add(key)
            return None
        if spec.arrival > now:
            book.future_arrivals.append(spec.arrival)
            return None
        book.submitted.pop(key, None)
        status = JobStatus(spec=spec, target_workers=spec.initial_workers,
                           target_ps=spec.num_ps, reason="waiting: arrived, not yet scheduled")
        job = TrackedJob(key, status, owners=owners, desired=desired, last_sync=now)
        # the pods' own, or the one kept on their owners: a Job re-creates preempted pods
        # without it, and a scheduler that restarted before they ran again finds it there
        kept = [obj for refs in owners.values() for kind, owner in refs
                if (obj := owner_objs.get((kind, key[0], owner))) is not None] + group.pods
        job.checkpoint = max(map(checkpoint_of, kept), default=0.0)
        status.progress = min(job.checkpoint, spec.total_work)
        status.attained_service = max(map(attained_service_of, kept), default=0.0)
        status.restarts = max(map(restarts_of, kept), default=0)
        if job.checkpoint > 0:  # stopped before (by this scheduler before a restart, or another)
            status.reason = (f"waiting: found with a checkpoint at {job.checkpoint:,.0f}"
                             " iterations, not yet scheduled")
        self._credit_running_time(job, group, now)
        for p in group.pods:
            if not owner_of(p):
                job.templates.setdefault(role_of(p), _bare_template(p))
        book.tracked[key] = job
        book.by_name[name] = job
        book.jobs[name] = status
        book.active[name] = status
        return job

    def _credit_running_time(self, job: TrackedJob, group: PodGroup, now: float) -> None:
        """A job found with its whole gang running (a restarted scheduler, a new leader) has
        trained since its pods started, and the service kept on them is as of their binding:
        add that time, as `_update` adds it between syncs (Tiresias ranks by the service; a
        job credited nothing looked new, and kept GPUs it had used for hours)."""
        if not group.live or any(not p["spec"].get("nodeName") for p in group.live):
            return
        started = running_since(group.live)
        if started is None:
            return
        since = min(self.clock.from_unix(started), now)
        st, ran = job.status, now - since
        st.executed_time += ran
        st.attained_service += ran * st.spec.worker_demand.gpu * st.target_workers
        st.reason = "running: found running, placed before this scheduler started"
        # running since then: `_follow_placement` keeps the start of a job already running
        st.state, st.first_start, st.last_start = JobState.RUNNING, since, since

    def _update(self, job: TrackedJob, group: PodGroup, owner_objs: dict, now: float,
                mono: float) -> None:
        """Follow a tracked job's pods: progress, service, completion, failures, its state."""
        st = job.status
        job.missing_since = None
        if st.state.finished:
            self._reap(job, group, mono)
            return
        dt = now - job.last_sync
        if st.state is JobState.RUNNING and dt > 0:
            st.executed_time += dt
            st.attained_service += dt * st.spec.worker_demand.gpu * st.target_workers
        job.last_sync = now
        report = group.progress()
        job.reported = min(report.iterations, st.spec.total_work)
        job.reported_at = self.cache.report_arrivals.get(report.uid)
        st.progress = max(st.progress, job.reported)
        if report.metric is not None:
            st.metric = report.metric
        job.pending_pods = group.pending
        job.bound_pods = [p for p in group.live if p["spec"].get("nodeName")]
        if group.succeeded or self._owner_succeeded(job, owner_objs):
            # a training job's pods end together when its work is done; a Job with
            # completions unset creates no pod after one has succeeded, so pods still
            # pending (re-created by a restart that raced the end) would wait forever. The
            # succeeded pod may itself be gone (deleted by that restart as it succeeded),
            # its Job Complete while another role's Job (the PS) re-creates pods: the
            # owner's condition says the work is done.
            extra = [p for ps in group.pending.values() for p in ps]
            self.actuator.end_pods(job, extra, group)
            self._complete(job, now)
            self.book.lingering[job.key] = mono  # its other pods should end soon (`_reap`)
            return
        if group.failed and not group.live and self._gave_up(job, owner_objs):
            self.book.finish(job, now, JobState.REJECTED,
                             f"failed: {group.failed} pod(s) failed and none will be re-created")
            return
        if self._on_failed_node(job, now):
            return
        st.workers, st.ps = bound_placement(job.bound_pods)
        if job.plan is not None:
            self.actuator.advance_plan(job, group, mono)
            if job.plan is not None:
                # the placement is reserved: policies see it as the simulator shows a restart
                st.workers, st.ps = dict(job.plan[0]), dict(job.plan[1])
                st.state = JobState.RESTARTING
                st.throughput = 0.0
                return
        if self._follow_placement(job, report.throughput, now):
            self._record_history(st, now)

    def _on_failed_node(self, job: TrackedJob, now: float) -> bool:
        """Send the job back to waiting if a pod of it is bound to a NotReady node, or to a
        node that was deleted (issue #14, item 5: such pods sat 'Running' without progress
        until the garbage collector removed them, and nothing said why)."""
        view, st = self.book.view, job.status
        for pod in job.bound_pods:
            node = pod["spec"]["nodeName"]
            i = view.node_index.get(node)
            if i is not None and not view.ready[i]:
                what, event = "failed", "NodeFailed"
            elif i is None and node in self.book.seen_nodes:
                what, event = "was deleted", "NodeDeleted"
            else:
                continue
            self.book.node_failures.append((now, node, job.name))
            self.actuator.restart(job, f"waiting: node {node} {what}; resumes from checkpoint at"
                                       f" {st.progress:,.0f} iterations", event, warning=True)
            return True
        return False

    def _follow_placement(self, job: TrackedJob, throughput: float, now: float) -> bool:
        """The job's state from its bound pods; False when a broken gang sent it back."""
        st = job.status
        n_w, n_p = st.num_workers, st.num_ps
        if n_w == 0 and n_p == 0:
            if st.state.placed:
                st.progress = max(st.progress, job.checkpoint)
                job.checkpoint = st.progress
                st.reason = "waiting: its pods were deleted; resumes from checkpoint at" \
                            f" {st.progress:,.0f} iterations"
            st.state = JobState.PENDING
            st.throughput = 0.0
        elif n_w >= st.target_workers and n_p >= st.target_ps:
            running = all(p.get("status", {}).get("phase") == "Running" for p in job.bound_pods)
            if running and st.state is not JobState.RUNNING:
                st.last_start = now
                if st.first_start is None:
                    st.first_start = now
            st.state = JobState.RUNNING if running else JobState.RESTARTING
            st.throughput = throughput if running else 0.0
        elif job.partial:
            st.state = JobState.HOLDING
            st.throughput = 0.0
        else:
            self.actuator.restart(job, f"waiting: {st.target_workers + st.target_ps - n_w - n_p}"
                                       " pods of the gang were lost; resumes from checkpoint at"
                                       f" {st.progress:,.0f} iterations", "GangBroken",
                                  warning=True)
            return False
        return True

    def _reap(self, job: TrackedJob, group: PodGroup, mono: float) -> None:
        """A completed job's pods still live `linger_timeout` s after the first succeeded are
        deleted: a gang missing members never ends by itself (issue #14, item 3: two of four
        pods ran on at throughput 0 for 800 s after the job was reported complete). A pod
        that appears after they have all ended (made again by a Job whose controller had
        not yet seen the end, or a stand-in) starts the clock when it is seen; a rejected
        job's pods are left pending on purpose, marked with why."""
        since = self.book.lingering.get(job.key)
        if since is None:
            if group.live and job.status.state is JobState.COMPLETED:
                self.book.lingering[job.key] = mono
            return
        if not group.live:
            del self.book.lingering[job.key]
            return
        if mono - since < self.linger_timeout:
            return
        del self.book.lingering[job.key]
        why = (f"completed {self.linger_timeout:.0f} s ago, but {len(group.live)} of its pods"
               " had not ended: deleted")
        log.warning("job %s: %s", job.name, why)
        for pod in group.live:
            self.actuator.binder.event(pod, "GangEnded", why, warning=True)
        self.actuator.end_pods(job, group.live, group)

    def _record_history(self, st: JobStatus, now: float) -> None:
        if self.history_interval is not None and st.state is JobState.RUNNING and \
                (not st.history or now - st.history[-1][0] >= self.history_interval):
            st.history.append((now, st.progress, st.metric if st.metric is not None else np.nan))

    def _missing(self, job: TrackedJob, owner_objs: dict, now: float, mono: float) -> None:
        """A tracked job none of whose pods are left: re-created soon, or deleted for good."""
        st = job.status
        if self._owner_succeeded(job, owner_objs):
            # A restart's delete can race the pods' own success (more so when an API server
            # outage delays what the watch shows): the pods are gone, but their Job is
            # Complete and will create none again. Waiting for them would wait forever.
            self._complete(job, now)
            return
        owners_alive = any((kind, job.key[0], name) in owner_objs
                           for refs in job.owners.values() for kind, name in refs)
        # none of its pods is left: a planned placement's reservation must not count pods
        # that were bound before (they are gone), nor may a Scale release them again
        job.bound_pods, job.pending_pods = [], {}
        if job.missing_since is None:
            job.missing_since = mono
        if st.state.placed and job.plan is None:
            st.workers, st.ps = {}, {}
            st.state = JobState.PENDING
            st.throughput = 0.0
        elif job.plan is not None:
            st.workers, st.ps = dict(job.plan[0]), dict(job.plan[1])
        window = job.plan_window(self.plan_timeout)
        if job.plan is not None and mono - job.plan_since > window:
            job.plan = None
            job.plan_timeouts += 1
            st.workers, st.ps = {}, {}
            st.state = JobState.PENDING
            st.reason = f"waiting: its pods did not appear within {window:.0f} s"
        if owners_alive or job.plan is not None or mono - job.missing_since < 10.0:
            return
        self.book.finish(job, now, JobState.REJECTED, "deleted: its pods and Job are gone")

    def _stand_in_for_silent_jobs(self, pods: list[dict], owner_objs: dict,
                                  mono: float) -> None:
        """Make the pods of each batch/v1 Job we schedule that has owed pods and had none
        for twice `plan_timeout` (again each time that passes with still none). A Job
        controller whose watch missed pods it made (made and deleted while it was cut off,
        as around an API server restart) makes none again until its expectations expire,
        5 minutes later (kube-controller-manager's `ControllerExpectations`): the soak's
        stuck jobs. It counts pods it sees created with itself as owner as its own, so these
        end the wait and no more are made. Judged per Job, not per tracked job, so that a
        scheduler that took over from one that was killed meanwhile, and never saw the
        job's pods, still finds it."""
        job_kind = kinds.BATCH_JOB.kind
        owed = {(ns, name): (obj, n) for (kind, ns, name), obj in owner_objs.items()
                if kind == job_kind and self.cache.is_ours(obj["spec"]["template"])
                and kinds.pods_made_alike(obj) and (n := kinds.pods_job_owes(obj))}
        silent = self.book.silent
        if not owed:
            silent.clear()
            return
        with_pods = {(p["metadata"].get("namespace", ""), o[1]) for p in pods
                     if (o := owner_of(p)) and o[0] == job_kind}
        for key in [k for k in silent if k not in owed or k in with_pods]:
            del silent[key]
        wait = 2 * self.plan_timeout
        for key, (obj, n) in owed.items():
            if key in with_pods:
                continue
            since, made = silent.setdefault(key, (mono, float("-inf")))
            if mono - since >= wait and mono - made >= wait and \
                    self.actuator.make_pods_for_silent_job(obj, n, mono - since):
                silent[key] = (since, mono)

    def _owner_succeeded(self, job: TrackedJob, owner_objs: dict) -> bool:
        """Whether an object owning the job's pods says the job succeeded (a Job Complete,
        a PyTorchJob or TFJob Succeeded, a JobSet Completed)."""
        return any(kinds.BY_KIND[kind].succeeded(owner_objs.get((kind, job.key[0], name)))
                   for refs in job.owners.values() for kind, name in refs)

    def _gave_up(self, job: TrackedJob, owner_objs: dict) -> bool:
        """Failed pods nobody re-creates: bare pods, or owners that failed or are gone."""
        if not job.owners:
            return True
        for kind, name in {ref for refs in job.owners.values() for ref in refs}:
            obj = owner_objs.get((kind, job.key[0], name))
            if obj is None:
                continue
            if not kinds.has_condition(obj, "Failed"):
                return False
        return True

    def _complete(self, job: TrackedJob, now: float) -> None:
        st = job.status
        st.progress = st.spec.total_work if np.isfinite(st.spec.total_work) else st.progress
        self.book.finish(job, now, JobState.COMPLETED, "completed")
        st.history.append((now, st.progress, st.metric if st.metric is not None else np.nan))


def _owner_count(obj: dict | None, kind: str, role: str) -> int | None:
    """Pods of `role` the owning object asks for: a Job's parallelism, a Kubeflow job's
    replicas of the types that are `role` (None: not known)."""
    if obj is None:
        return None
    if kind == kinds.BATCH_JOB.kind:
        n = obj["spec"].get("parallelism")
        return None if n is None else int(n)
    k = kinds.BY_KIND[kind]
    return k.counts(obj)[role] if k.replica_specs else None


def _child_jobs_making_pods(jobset: dict) -> int:
    """Child Jobs a JobSet runs that make pods: each replica of a replicated job whose Job
    template's parallelism is not 0."""
    count = 0
    for rjob in jobset["spec"].get("replicatedJobs") or []:
        parallelism = ((rjob.get("template") or {}).get("spec") or {}).get("parallelism")
        if parallelism is None or int(parallelism) > 0:
            count += int(rjob.get("replicas", 1) or 0)
    return count


def _one_worker_per_child_job(spec: JobSpec, owners: dict) -> JobSpec:
    """Workers spread over several child Jobs (a JobSet's replicas) keep one in each
    (`Actuator._split_patches`): the job's minimum is at least their number."""
    refs = owners.get(W, ())
    if len(refs) < 2 or spec.min_workers >= len(refs) or \
            any(kind != kinds.BATCH_JOB.kind for kind, _ in refs):
        return spec
    floor = min(len(refs), spec.initial_workers)
    return spec.with_(min_workers=floor) if floor > spec.min_workers else spec


def _worker_range(owners: dict, owner_objs: dict, namespace: str) -> tuple[int, int] | None:
    """A Kubeflow job's worker range: its elastic policy's, else its size (a fixed gang)."""
    refs = owners.get(W, ())
    if len(refs) != 1 or not kinds.BY_KIND[refs[0][0]].replica_specs:
        return None
    kind = kinds.BY_KIND[refs[0][0]]
    obj = owner_objs.get((kind.kind, namespace, refs[0][1]))
    if obj is None:
        return None
    n = kind.counts(obj)[W]
    return kind.worker_range(obj) or (n, n)


def _bare_template(pod: dict) -> dict:
    """A bare pod's manifest to create it again (new name; nothing the server set)."""
    meta = pod["metadata"]
    job, role = (meta.get("labels") or {}).get(labels.JOB, meta["name"]), role_of(pod)
    ann = {k: v for k, v in (meta.get("annotations") or {}).items()
           if k not in (labels.PROGRESS, labels.CHECKPOINT, labels.SERVICE)}
    spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{job}-{role}-", "labels": dict(meta.get("labels") or {}),
                         "annotations": ann},
            "spec": spec}


__all__ = ["JobBook", "Reconciler", "TrackedJob"]
