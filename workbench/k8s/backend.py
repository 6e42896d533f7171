"""`K8sBackend`: the Backend protocol on a real Kubernetes API server.

Jobs are what users already write: batch/v1 Jobs (or bare pods) whose pods set
`schedulerName: workbench` and carry the `workbench.io/job` and `workbench.io/role` labels and
the training annotations of `labels`. The backend watches nodes, pods and Jobs (`cache`) and
reports them as the simulator's `ClusterState`; it carries out actions:

- Place: binds every pod of the gang through the Binding API at once, or none: when one bind
  fails the pods already bound are deleted (their Job re-creates them, pending) so no partial
  gang stays. A 409 for the node asked for (a second bind) counts as bound.
- Scale / Migrate: checkpoint-restart. The job's progress goes into the `checkpoint`
  annotation, its pods are deleted (`gracePeriodSeconds=0`) and re-created by their Job
  (bare pods by the backend), with `parallelism` changed when the worker count changes; the new
  pods are bound to the new placement as they appear (the placement is reserved meanwhile).
- Suspend: the same delete, then the job waits. Reject: annotates the job's pods and Job and
  leaves them pending. Wait: an Event with the reason on the job's pending pods.

Every decision is also an Event on the pods, so `kubectl describe pod` shows why. A node that
goes NotReady sends its jobs back to waiting from their checkpoint, as the simulator's faults do.

The clock is the wall clock, optionally sped up (`speed`, to match the node emulator's fast
clock): `advance(until)` sleeps until that time, or until the watch sees a change a decision
may depend on (a pod to place, a pod ended, a node changed).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import numpy as np
from kubernetes.client.exceptions import ApiException

from ..backend import Outcome, refusal
from ..errors import ConfigError
from ..model import (
    GPU,
    Action,
    Admit,
    ClusterState,
    JobSpec,
    JobState,
    JobStatus,
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
from . import labels
from .binder import Binder, BindResult
from .cache import (
    ClusterCache,
    NodeView,
    PodGroup,
    group_pods,
    job_name,
    owner_job,
    role_of,
    spec_from_pods,
)
from .rest import Rest

log = logging.getLogger("workbench.k8s.backend")

W, PS = labels.ROLE_WORKER, labels.ROLE_PS
_EPS = 1e-6


class Clock:
    """Seconds on the backend's clock: Unix time, running `speed` times faster from start."""

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ConfigError(f"speed must be > 0, got {speed}")
        self.speed = speed
        self.origin = time.time()
        self.mono0 = time.monotonic()

    def now(self) -> float:
        return self.origin + (time.monotonic() - self.mono0) * self.speed

    def from_unix(self, t: float) -> float:
        return self.origin + (t - self.origin) * self.speed

    def real(self, seconds: float) -> float:
        return seconds / self.speed


@dataclass
class _Job:
    key: tuple[str, str]
    status: JobStatus
    owners: dict[str, str] = field(default_factory=dict)  # role -> batch/v1 Job name
    templates: dict[str, dict] = field(default_factory=dict)  # role -> bare pod to re-create
    desired: dict[str, int] = field(default_factory=dict)  # pods per role it should have
    plan: tuple[Placement, Placement] | None = None  # placement being bound (reserved)
    plan_since: float = 0.0  # monotonic
    checkpoint: float = 0.0
    partial: bool = False  # placed pod by pod (kube-default): a partial gang is allowed
    missing_since: float | None = None  # monotonic: when its pods were last seen
    last_sync: float = 0.0
    evented_reason: str = ""
    pending_pods: dict[str, list[dict]] = field(default_factory=dict)
    bound_pods: list[dict] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.status.name


class _Refused(Exception):
    pass


@dataclass
class _Gang:
    """Binds one action needs, carried out together with the other actions of the batch."""

    job: _Job
    action: Action
    tasks: list[tuple[dict, str, dict | None]]
    need: np.ndarray
    detail: str
    results: list[BindResult] = field(default_factory=list)


class K8sBackend:
    """The Backend protocol on a Kubernetes API server (see the module docstring).

    `namespace`: where `submit` creates Jobs and which pods are watched (None: every
    namespace). `speed`: the clock's speed-up. `serve`: never `done()` (a scheduler that runs
    until stopped). `threads`: concurrent API writes.
    """

    def __init__(self, api_client=None, *, kubeconfig: str | Path | None = None,
                 namespace: str | None = "default", speed: float = 1.0, threads: int = 16,
                 events: bool = True, serve: bool = False,
                 scheduler_name: str = labels.SCHEDULER_NAME, image: str | None = None,
                 plan_timeout: float = 30.0, idle_wait: float = 60.0,
                 history_interval: float = 300.0, debounce: float = 0.05,
                 sync_interval: float = 0.5, start: bool = True,
                 context: str | None = None) -> None:
        if api_client is None:
            api_client = load_api_client(kubeconfig, pool_size=threads + 8, context=context)
        self.api_client = api_client
        self.rest = Rest(api_client)
        self.namespace = namespace
        self.submit_namespace = namespace or "default"
        self.clock = Clock(speed)
        self.serve = serve
        self.scheduler_name = scheduler_name
        self.image = image
        self.plan_timeout = plan_timeout
        self.idle_wait = idle_wait
        self.history_interval = history_interval
        self.debounce = debounce
        self.sync_interval = sync_interval
        self.cache = ClusterCache(api_client, namespace, scheduler_name)
        self.binder = Binder(self.rest, threads=threads, events=events)
        self.jobs: dict[str, JobStatus] = {}  # every job seen, finished ones included
        self.active: dict[str, JobStatus] = {}
        self.finished: list[JobStatus] = []
        self._tracked: dict[tuple[str, str], _Job] = {}
        self._by_name: dict[str, _Job] = {}
        self._ignored: set[tuple[str, str]] = set()  # ended or refused before we saw them
        self._deferred: list[tuple[float, int, JobSpec]] = []  # submissions not yet due
        self._submitted: dict[tuple[str, str], float] = {}  # created, pods not yet seen
        self._deleting: dict[str, float] = {}  # pod uid -> monotonic time of the delete
        # pods we bound that the watch has not shown bound yet: uid -> (node, monotonic time)
        self._assumed: dict[str, tuple[str, float]] = {}
        self._lock = threading.RLock()
        self._seq = 0
        self._view: NodeView | None = None
        self._allocated = np.zeros((0, 3))
        self._reserved = np.zeros((0, 3))
        self._observed = -1
        self._fresh_round = True
        self._synced_version = -1
        self._synced_at = 0.0
        self._future_arrivals: list[float] = []
        self._queue: list[JobStatus] = []
        self.rounds_observed = 0
        self.node_failures: list[tuple[float, str, str]] = []  # (time, node, job)
        self._closed = False
        self._interrupted = False
        if start:
            self.start()

    # ---- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> K8sBackend:
        try:
            self.cache.start(timeout)
        except TimeoutError as e:
            self.cache.stop()
            raise ConfigError(f"cannot reach the API server: {e}") from None
        self._sync()
        return self

    def interrupt(self) -> None:
        """Make `advance` return at once, now and from now on (a scheduler shutting down)."""
        self._interrupted = True
        with self.cache.changed:
            self.cache.changed.notify_all()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._interrupted = True
        self.cache.stop()
        self.binder.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- Backend protocol -------------------------------------------------------------------

    @property
    def now(self) -> float:
        return self.clock.now()

    def submit(self, spec: JobSpec) -> None:
        """Create the job's batch/v1 Job(s) now, or when `spec.arrival` (backend clock) comes."""
        from .manifests import k8s_name

        key = (self.submit_namespace, k8s_name(spec.name))
        if key in self._tracked or key in self._submitted or \
                any(k8s_name(s.name) == key[1] for _, _, s in self._deferred):
            raise ValueError(f"duplicate job name {spec.name!r}")
        if spec.arrival > self.now:
            self._seq += 1
            heapq.heappush(self._deferred, (spec.arrival, self._seq, spec))
            return
        self._create(spec)

    def _create(self, spec: JobSpec) -> None:
        from .manifests import DEFAULT_IMAGE, k8s_name, training_jobs

        ns = self.submit_namespace
        for manifest in training_jobs(spec, ns, arrival=spec.arrival,
                                      image=self.image or DEFAULT_IMAGE):
            try:
                self.rest.post(f"/apis/batch/v1/namespaces/{ns}/jobs", manifest)
            except ApiException as e:
                if e.status == 409:
                    raise ValueError(f"job {spec.name!r}: a Job {manifest['metadata']['name']}"
                                     f" already exists in namespace {ns}") from None
                raise
        self._submitted[(ns, k8s_name(spec.name))] = time.monotonic()

    def observe(self) -> ClusterState:
        with self._lock:
            if self._fresh_round:
                # what the policy sees; a second look in the same round (the Controller's
                # timeline sample after applying) must not hide a change it has not seen
                self._observed = self.cache.decisive
                self._fresh_round = False
            self._sync()
            self.rounds_observed += 1
            view = self._view
            return view.state(self.now, self._allocated + self._reserved, self.active,
                              queue=self._queue)

    def apply(self, actions: Sequence[Action]) -> list[Outcome]:
        with self._lock:
            outcomes: list[Outcome | None] = [None] * len(actions)
            gangs: list[tuple[int, _Gang]] = []
            used = self._allocated + self._reserved
            for i, action in enumerate(actions):
                try:
                    result = self._apply_one(action, used)
                except _Refused as r:
                    outcomes[i] = Outcome(action, False, str(r))
                    continue
                except Exception as e:  # noqa: BLE001 - an API error refuses this action only
                    log.warning("%s %s: %s", type(action).__name__, action.job, e)
                    outcomes[i] = Outcome(action, False, f"{action.job}: API error: {e}")
                    continue
                if isinstance(result, _Gang):
                    gangs.append((i, result))
                else:
                    outcomes[i] = Outcome(action, True, result)
            if gangs:
                self._bind_gangs([g for _, g in gangs])
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

    def advance(self, until: float) -> None:
        """Wait until `until` on the backend clock, or until a decisive change is seen."""
        self._fresh_round = True
        while True:
            self._release_arrivals()
            since = self.cache.decisive
            if self._sync_due():
                with self._lock:
                    self._sync()
            now = self.now
            if now >= until or self.cache.decisive != self._observed or self._interrupted:
                return
            wait = until - now
            if self._deferred:
                wait = min(wait, self._deferred[0][0] - now)
            if self._future_arrivals:
                wait = min(wait, min(self._future_arrivals) - now)
            # wake now and then to follow what no decision waits for (pods starting, progress)
            real = min(self.clock.real(max(wait, 0.0)), self.sync_interval)
            if self.cache.wait(since, real):
                time.sleep(self.debounce)  # let a burst of changes arrive together

    def next_event_time(self) -> float | None:
        now = self.now
        times = [now + self.idle_wait]  # on a live cluster something may always happen
        if self._deferred:
            times.append(self._deferred[0][0])
        if self._future_arrivals:
            times.append(min(self._future_arrivals))
        if self.cache.decisive != self._observed:
            times.append(now)
        return max(min(times), now)

    def next_decision_time(self) -> float | None:
        """Every change on a live cluster may matter to a decision."""
        return self.next_event_time()

    def pending_arrivals(self) -> int:
        return len(self._deferred)

    def done(self) -> bool:
        if self.serve or self._deferred or self._submitted or self._future_arrivals:
            return False
        return not self.active

    # ---- reading the cache --------------------------------------------------------------------

    def _release_arrivals(self) -> None:
        while self._deferred and self._deferred[0][0] <= self.now:
            _, _, spec = heapq.heappop(self._deferred)
            try:
                self._create(spec)
            except ValueError as e:  # its name is taken: not retried
                log.warning("submit: %s", e)
            except Exception as e:  # noqa: BLE001 - retried next time
                log.warning("submit %s: %s; retrying", spec.name, e)
                self._seq += 1
                heapq.heappush(self._deferred, (self.now + 5.0, self._seq, spec))
                return

    def _has_plans(self) -> bool:
        return any(j.plan is not None for j in self._tracked.values())

    def _sync_due(self) -> bool:
        """Whether a sync can change anything: the cache changed, an announced arrival is
        due, a restart is under way, or it has been a while (service accounting)."""
        now = self.now
        return self.cache.version != self._synced_version or self._has_plans() or \
            any(t <= now for t in self._future_arrivals) or \
            time.monotonic() - self._synced_at > 10.0

    def _sync(self) -> None:
        """Bring every job's status up to what the cache shows; bind re-created pods of
        planned placements; send jobs on failed nodes back to waiting."""
        self._synced_version = self.cache.version
        self._synced_at = time.monotonic()
        now = self.now
        mono = time.monotonic()
        node_objs, pods, job_objs = self.cache.snapshot()
        self._view = view = NodeView.build(node_objs)
        live_uids = {p["metadata"]["uid"] for p in pods}
        for uid in [u for u in self._deleting if u not in live_uids]:
            del self._deleting[uid]
        if self._assumed:
            pods = self._assume(pods, mono)
        skip = set(self._deleting)
        self._allocated = view.allocation(pods, self.cache.demand, skip)
        groups = group_pods(pods, self.scheduler_name, skip)
        batch_jobs = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in job_objs}
        self._future_arrivals = []
        discovered = False
        for key, group in groups.items():
            job = self._tracked.get(key)
            if job is None:
                if key in self._ignored:
                    continue
                job = self._discover(key, group, batch_jobs, now)
                if job is None:
                    continue
                discovered = True
            self._update(job, group, batch_jobs, now, mono)
        if discovered:  # jobs in arrival order, as the simulator lists them
            self.active = dict(sorted(self.active.items(),
                                      key=lambda kv: (kv[1].spec.arrival, kv[0])))
        for key, job in self._tracked.items():
            if key not in groups and not job.status.state.finished:
                self._missing(job, batch_jobs, now, mono)
        for key in [k for k, t in self._submitted.items() if mono - t > self.plan_timeout]:
            log.warning("job %s/%s: no pods %.0f s after it was created", *key, self.plan_timeout)
            del self._submitted[key]
        self._reserved = self._reservations()
        waiting = [j for j in self.active.values()
                   if j.state in (JobState.PENDING, JobState.HOLDING)]
        waiting.sort(key=lambda j: (j.spec.arrival, j.name))
        self._queue = waiting

    def _assume(self, pods: list[dict], mono: float) -> list[dict]:
        """Pods as bound where our bind succeeded but the watch has not caught up (the
        scheduler's 'assumed pods'), so a gang never looks broken by the cache's lag."""
        out = []
        for pod in pods:
            uid = pod["metadata"]["uid"]
            hit = self._assumed.get(uid)
            if hit is not None:
                if pod["spec"].get("nodeName") or mono - hit[1] > 60.0:
                    del self._assumed[uid]
                else:
                    pod = {**pod, "spec": {**pod["spec"], "nodeName": hit[0]}}
            out.append(pod)
        live = {p["metadata"]["uid"] for p in pods}
        for uid in [u for u in self._assumed if u not in live]:
            del self._assumed[uid]
        return out

    def _desired(self, group: PodGroup, batch_jobs: dict, owners: dict[str, str]) -> dict[str, int]:
        ann = group.annotations()
        out = {}
        for role, key in ((W, labels.NUM_WORKERS), (PS, labels.NUM_PS)):
            owner = owners.get(role)
            obj = batch_jobs.get((group.key[0], owner)) if owner else None
            if obj is not None and obj["spec"].get("parallelism") is not None:
                out[role] = int(obj["spec"]["parallelism"])
            elif ann.get(key) not in (None, ""):
                out[role] = int(float(ann[key])) if role == PS or float(ann[key]) > 0 else 1
            else:
                out[role] = group.count(role)
        if out[W] == 0 and out[PS] == 0:
            out[W] = max(group.count(W), 1)
        return out

    def _discover(self, key, group: PodGroup, batch_jobs: dict, now: float) -> _Job | None:
        """A job seen for the first time: tracked once all its pods exist."""
        if any(labels.REJECTED in (p["metadata"].get("annotations") or {}) for p in group.pods) \
                or (group.succeeded and not group.live):
            self._ignored.add(key)
            return None
        owners = {}
        for p in group.pods:
            o = owner_job(p)
            if o:
                owners.setdefault(role_of(p), o)
        desired = self._desired(group, batch_jobs, owners)
        if any(group.count(r) < n for r, n in desired.items()):
            return None  # its Job is still creating pods
        name = job_name(key, self.namespace)
        created = self.clock.from_unix(group.created) if group.created else now
        try:
            spec = spec_from_pods(name, group.live, arrival=created, workers=desired[W] or None,
                                  ps=desired[PS])
        except ValueError as e:
            log.warning("job %s: %s; ignored", name, e)
            self._ignored.add(key)
            return None
        if spec.arrival > now:
            self._future_arrivals.append(spec.arrival)
            return None
        self._submitted.pop(key, None)
        status = JobStatus(spec=spec, target_workers=spec.initial_workers,
                           target_ps=spec.num_ps, reason="waiting: arrived, not yet scheduled")
        job = _Job(key, status, owners=owners, desired=desired, last_sync=now)
        job.checkpoint = max((float((p["metadata"].get("annotations") or {})
                                    .get(labels.CHECKPOINT, 0) or 0) for p in group.pods),
                             default=0.0)
        status.progress = min(job.checkpoint, spec.total_work)
        for p in group.pods:
            if not owner_job(p):
                job.templates.setdefault(role_of(p), _bare_template(p))
        self._tracked[key] = job
        self._by_name[name] = job
        self.jobs[name] = status
        self.active[name] = status
        return job

    def _update(self, job: _Job, group: PodGroup, batch_jobs: dict, now: float,
                mono: float) -> None:
        st = job.status
        job.missing_since = None
        if st.state.finished:
            return
        dt = now - job.last_sync
        if st.state is JobState.RUNNING and dt > 0:
            st.executed_time += dt
            st.attained_service += dt * st.spec.worker_demand.gpu * st.target_workers
        job.last_sync = now
        report = group.progress()
        st.progress = max(st.progress, min(report.iterations, st.spec.total_work))
        if report.metric is not None:
            st.metric = report.metric
        job.pending_pods = group.pending
        job.bound_pods = [p for p in group.live if p["spec"].get("nodeName")]
        if group.succeeded:
            # a training job's pods end together when its work is done; a Job with
            # completions unset creates no pod after one has succeeded, so pods still
            # pending (re-created by a restart that raced the end) would wait forever
            extra = [p for ps in group.pending.values() for p in ps]
            if extra:
                self._delete_pods(job, extra, recreate=False)
            self._complete(job, now)
            return
        if group.failed and not group.live and self._gave_up(job, batch_jobs):
            self._finish(job, now, JobState.REJECTED,
                         f"failed: {group.failed} pod(s) failed and none will be re-created")
            return
        view = self._view
        down = [p["spec"]["nodeName"] for p in job.bound_pods
                if p["spec"]["nodeName"] in view.node_index
                and not view.ready[view.node_index[p["spec"]["nodeName"]]]]
        if down:
            node = down[0]
            self.node_failures.append((now, node, job.name))
            self._restart(job, f"waiting: node {node} failed; resumes from checkpoint at"
                               f" {st.progress:,.0f} iterations", "NodeFailed", warning=True)
            return
        st.workers, st.ps = _placement(job.bound_pods)
        if job.plan is not None:
            self._advance_plan(job, group, mono)
            if job.plan is not None:
                # the placement is reserved: policies see it as the simulator shows a restart
                st.workers, st.ps = dict(job.plan[0]), dict(job.plan[1])
                st.state = JobState.RESTARTING
                st.throughput = 0.0
                return
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
            st.throughput = report.throughput if running else 0.0
        elif job.partial:
            st.state = JobState.HOLDING
            st.throughput = 0.0
        else:
            self._restart(job, f"waiting: {st.target_workers + st.target_ps - n_w - n_p} pods of"
                               " the gang were lost; resumes from checkpoint at"
                               f" {st.progress:,.0f} iterations", "GangBroken", warning=True)
            return
        if self.history_interval is not None and st.state is JobState.RUNNING and \
                (not st.history or now - st.history[-1][0] >= self.history_interval):
            st.history.append((now, st.progress, st.metric if st.metric is not None else np.nan))

    def _missing(self, job: _Job, batch_jobs: dict, now: float, mono: float) -> None:
        """A tracked job none of whose pods are left: re-created soon, or deleted for good."""
        st = job.status
        owners_alive = any((job.key[0], o) in batch_jobs for o in job.owners.values())
        if job.missing_since is None:
            job.missing_since = mono
        if st.state.placed and job.plan is None:
            st.workers, st.ps = {}, {}
            st.state = JobState.PENDING
            st.throughput = 0.0
        elif job.plan is not None:
            st.workers, st.ps = dict(job.plan[0]), dict(job.plan[1])
        if job.plan is not None and mono - job.plan_since > self.plan_timeout:
            job.plan = None
            st.workers, st.ps = {}, {}
            st.state = JobState.PENDING
            st.reason = f"waiting: its pods did not appear within {self.plan_timeout:.0f} s"
        if owners_alive or job.plan is not None or mono - job.missing_since < 10.0:
            return
        self._finish(job, now, JobState.REJECTED, "deleted: its pods and Job are gone")

    def _gave_up(self, job: _Job, batch_jobs: dict) -> bool:
        """Failed pods nobody re-creates: bare pods, or Jobs that failed or are gone."""
        if not job.owners:
            return True
        for owner in set(job.owners.values()):
            obj = batch_jobs.get((job.key[0], owner))
            if obj is None:
                continue
            conds = (obj.get("status") or {}).get("conditions") or []
            if not any(c.get("type") == "Failed" and c.get("status") == "True" for c in conds):
                return False
        return True

    def _finish(self, job: _Job, now: float, state: JobState, reason: str) -> None:
        st = job.status
        st.state = state
        st.finish_time = now
        st.throughput = 0.0
        st.reason = reason
        st.workers, st.ps = {}, {}
        job.plan = None
        self.active.pop(st.name, None)
        self.finished.append(st)

    def _complete(self, job: _Job, now: float) -> None:
        st = job.status
        st.progress = st.spec.total_work if np.isfinite(st.spec.total_work) else st.progress
        st.state = JobState.COMPLETED
        st.finish_time = now
        st.throughput = 0.0
        st.reason = "completed"
        st.workers, st.ps = {}, {}
        job.plan = None
        st.history.append((now, st.progress, st.metric if st.metric is not None else np.nan))
        self.active.pop(st.name, None)
        self.finished.append(st)

    def _reservations(self) -> np.ndarray:
        """Resources promised to planned placements whose pods are not bound yet."""
        reserved = np.zeros_like(self._allocated)
        for job in self._tracked.values():
            if job.plan is not None:
                reserved += self._job_reserved(job)
        return reserved

    def _job_reserved(self, job: _Job) -> np.ndarray:
        view = self._view
        reserved = np.zeros_like(self._allocated)
        if job.plan is None:
            return reserved
        bound = _placement(job.bound_pods)
        for k, role in enumerate((W, PS)):
            demand = job.status.spec.worker_demand if role == W else job.status.spec.ps_demand
            for node, count in job.plan[k].items():
                left = count - bound[k].get(node, 0)
                if left > 0 and node in view.node_index:
                    reserved[view.node_index[node]] += demand.as_array() * left
        return reserved

    # ---- actions -------------------------------------------------------------------------------

    def _apply_one(self, action: Action, used: np.ndarray) -> str | _Gang:
        job = self._tracked_by_name(action.job)
        st = job.status
        if (why := refusal(st, action, binding=job.plan is not None)) is not None:
            raise _Refused(why)
        if isinstance(action, Wait):
            st.reason = action.reason
            self._explain(job, "Waiting", action.reason, pending_only=True, warning=True)
            return ""
        if isinstance(action, Admit):
            st.admitted = True
            st.reason = action.reason
            return ""
        if isinstance(action, Reject):
            self._reject(job, action.reason, used)
            return ""
        if isinstance(action, Suspend):
            self._release(job, used)
            self._restart(job, action.reason, "Preempted")
            return ""
        if isinstance(action, Place):
            return self._place(job, action, used)
        return self._reshape(job, action, used)  # Scale or Migrate: refusal() let no other through

    def _tracked_by_name(self, name: str) -> _Job:
        job = self._by_name.get(name)
        if job is None or job.status.state.finished:
            raise _Refused(f"{name}: no such active job")
        return job

    def _need(self, job: _Job, workers: Placement, ps: Placement, used: np.ndarray) -> np.ndarray:
        """The resources a placement takes per node; refused if it does not fit now."""
        view = self._view
        try:
            per_node, _ = placement_need(job.status.spec, workers, ps, view.nodes, view.node_index,
                                         view.node_up, view.capacity, used)
        except ValueError as e:
            raise _Refused(str(e)) from None
        need = np.zeros_like(used)
        for i, add in per_node.items():
            need[i] = add
        return need

    def _place(self, job: _Job, a: Place, used: np.ndarray) -> str | _Gang:
        st = job.status
        if a.partial:
            need = self._need(job, a.workers, a.ps, used)
            tasks = self._tasks(job, a.workers, a.ps)
            used += need
            job.partial = True
            st.target_workers, st.target_ps = st.spec.initial_workers, st.spec.num_ps
            st.reason = a.reason
            return _Gang(job, a, tasks, need, "")
        need = self._need(job, a.workers, a.ps, used)
        used += need
        job.partial = False
        st.target_workers, st.target_ps = total(a.workers), total(a.ps)
        st.reason = a.reason
        st.admitted = True
        if st.first_start is not None:
            st.restarts += 1  # resumed after a preemption or failure
        detail = describe_placement(a.workers, a.ps)
        counts = {W: total(a.workers), PS: total(a.ps)}
        if all(len(job.pending_pods.get(r, [])) == n for r, n in counts.items()) and \
                all(job.desired.get(r, 0) == n for r, n in counts.items()):
            return _Gang(job, a, self._tasks(job, a.workers, a.ps), need, detail)
        # another worker count than its pods: resize, then bind the pods as they appear
        for role, n in counts.items():
            self._resize(job, role, n)
        job.plan = (dict(a.workers), dict(a.ps))
        job.plan_since = time.monotonic()
        st.workers, st.ps = dict(a.workers), dict(a.ps)
        st.state = JobState.RESTARTING
        return detail

    def _tasks(self, job: _Job, workers: Placement, ps: Placement) -> list:
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
                        raise _Refused(f"{st.name}: fewer pending {role} pods than the placement")
                    tasks.append((pod, node, patch if _needs_patch(pod, patch) else None))
        return tasks

    def _pod_patch(self, job: _Job) -> dict[str, str]:
        """Annotations new pods need before they run: the gang size when it is not the one
        their template says, and the checkpoint to resume from."""
        st = job.status
        patch = {}
        if (st.target_workers, st.target_ps) != (st.spec.initial_workers, st.spec.num_ps):
            patch = {labels.NUM_WORKERS: str(st.target_workers), labels.NUM_PS: str(st.target_ps)}
        if job.checkpoint > 0 or st.progress > 0:
            patch[labels.CHECKPOINT] = repr(float(max(job.checkpoint, st.progress)))
        return patch

    def _reshape(self, job: _Job, a: Scale | Migrate, used: np.ndarray) -> str:
        st = job.status
        # A job at its end is not re-created: deleting its pods would race their Succeeded.
        if st.progress >= st.spec.total_work * 0.999 or any(
                p.get("status", {}).get("phase") == "Succeeded" for p in job.bound_pods):
            raise _Refused(f"{st.name}: finishing; not {type(a).__name__.lower()}d")
        held = self._held(job) + self._job_reserved(job)
        need = self._need(job, a.workers, a.ps, used - held)
        for role, n in ((W, total(a.workers)), (PS, total(a.ps))):
            owner = job.owners.get(role)
            if owner and n > self._max_pods(job, role, owner):
                raise _Refused(f"{st.name}: Job {owner} has fixed completions; cannot run {n}")
        used -= held
        used += need
        job.checkpoint = max(job.checkpoint, st.progress)
        reason_kind = "Migrating" if isinstance(a, Migrate) else "Scaling"
        self._explain(job, reason_kind, f"{a.reason} (checkpoint at {job.checkpoint:,.0f}"
                                        " iterations; pods re-created)", bound_only=True)
        self._delete_pods(job, job.bound_pods)
        st.target_workers, st.target_ps = total(a.workers), total(a.ps)
        for role, n in ((W, st.target_workers), (PS, st.target_ps)):
            self._resize(job, role, n, deleted=True)
        job.plan = (dict(a.workers), dict(a.ps))
        job.plan_since = time.monotonic()
        job.partial = False
        st.workers, st.ps = dict(a.workers), dict(a.ps)  # reserved, as the simulator shows it
        st.state = JobState.RESTARTING
        st.throughput = 0.0
        st.restarts += 1
        st.reason = a.reason
        return describe_placement(a.workers, a.ps)

    def _max_pods(self, job: _Job, role: str, owner: str) -> int:
        obj = self.cache.jobs.get(f"{job.key[0]}/{owner}") if self.cache.jobs else None
        completions = (obj or {}).get("spec", {}).get("completions")
        return 10**9 if completions is None else int(completions)

    def _held(self, job: _Job) -> np.ndarray:
        held = np.zeros_like(self._allocated)
        view = self._view
        for pod in job.bound_pods:
            i = view.node_index.get(pod["spec"]["nodeName"])
            if i is not None:
                held[i] += self.cache.demand(pod).as_array()
        return held

    def _release(self, job: _Job, used: np.ndarray) -> None:
        used -= self._held(job) + self._job_reserved(job)

    def _reject(self, job: _Job, reason: str, used: np.ndarray) -> None:
        st = job.status
        if job.bound_pods:
            self._release(job, used)
            self._delete_pods(job, job.bound_pods, recreate=True)
        self._explain(job, "Rejected", reason, warning=True)
        mark = {"metadata": {"annotations": {labels.REJECTED: reason[:256]}}}
        for pods in job.pending_pods.values():
            for pod in pods:
                self.binder.run(self.binder.patch, f"/api/v1/namespaces/{job.key[0]}/pods/"
                                f"{pod['metadata']['name']}", mark)
        for owner in set(job.owners.values()):
            self.binder.run(self.binder.patch,
                            f"/apis/batch/v1/namespaces/{job.key[0]}/jobs/{owner}", mark)
        st.state = JobState.REJECTED
        st.finish_time = self.now
        st.reason = reason
        st.workers, st.ps = {}, {}
        st.throughput = 0.0
        job.plan = None
        self.active.pop(st.name, None)
        self.finished.append(st)
        self._queue = [j for j in self._queue if j is not st]

    def _restart(self, job: _Job, reason: str, event: str, warning: bool = False) -> None:
        """Checkpoint, delete the job's bound pods (their Job re-creates them), wait."""
        st = job.status
        log.info("%s: %s (%s)", st.name, event, reason)
        job.checkpoint = max(job.checkpoint, st.progress)
        self._explain(job, event, reason, bound_only=True, warning=warning)
        self._delete_pods(job, job.bound_pods, recreate=True)
        job.plan = None
        job.partial = False
        st.workers, st.ps = {}, {}
        st.state = JobState.PENDING
        st.throughput = 0.0
        st.target_workers, st.target_ps = st.spec.initial_workers, st.spec.num_ps
        st.reason = reason
        job.bound_pods = []

    def _delete_pods(self, job: _Job, pods: list[dict], recreate: bool = True) -> None:
        """Delete now (grace 0) on the pool; bare pods are re-created from their template."""
        if not pods:
            return
        mono = time.monotonic()
        for p in pods:
            self._deleting[p["metadata"]["uid"]] = mono
        errors = self.binder.delete_all(pods)
        for p, err in zip(pods, errors):
            if err:
                log.warning("delete %s: %s", p["metadata"]["name"], err)
                self._deleting.pop(p["metadata"]["uid"], None)
        if recreate:
            for p in pods:
                if not _owned(p):
                    self._create_bare(job, role_of(p))

    def _create_bare(self, job: _Job, role: str) -> None:
        template = job.templates.get(role)
        if template is not None:
            self.binder.create_pod(job.key[0], template)

    def _resize(self, job: _Job, role: str, n: int, deleted: bool = False) -> None:
        """Make the job have `n` pods of `role`: its Job's parallelism, or bare pods."""
        if job.desired.get(role, 0) == n:
            return
        owner = job.owners.get(role)
        if owner:
            err = self.binder.patch(f"/apis/batch/v1/namespaces/{job.key[0]}/jobs/{owner}",
                                    {"spec": {"parallelism": n}})
            if err:
                raise _Refused(f"{job.name}: cannot set parallelism of Job {owner}: {err}")
        elif role in job.templates:
            # pending pods, and bound ones (when just deleted, they were re-created)
            have = len(job.pending_pods.get(role, [])) + \
                sum(1 for p in job.bound_pods if role_of(p) == role)
            for _ in range(n - have):
                self._create_bare(job, role)
            if n < have:
                extra = job.pending_pods.get(role, [])[: have - n]
                self._delete_pods(job, extra, recreate=False)
        elif n:
            raise _Refused(f"{job.name}: no Job or pod template to create {role} pods from")
        job.desired[role] = n

    def _advance_plan(self, job: _Job, group: PodGroup, mono: float) -> None:
        """Bind the pods a planned placement still needs, all together once they exist."""
        st = job.status
        workers, ps = job.plan
        bw, bp = _placement(job.bound_pods)
        left_w = {n: c - bw.get(n, 0) for n, c in workers.items() if c > bw.get(n, 0)}
        left_p = {n: c - bp.get(n, 0) for n, c in ps.items() if c > bp.get(n, 0)}
        extra = any(bw.get(n, 0) > workers.get(n, 0) for n in bw) or \
            any(bp.get(n, 0) > ps.get(n, 0) for n in bp)
        if extra:  # someone else bound pods of this job elsewhere: start over
            self._restart(job, "waiting: its pods were bound outside the planned placement",
                          "GangBroken", warning=True)
            return
        if not left_w and not left_p:
            job.plan = None
            return
        if mono - job.plan_since > self.plan_timeout:
            self._restart(job, f"waiting: its pods did not appear within {self.plan_timeout:.0f} s"
                               " of the restart", "RestartTimeout", warning=True)
            return
        if len(group.pending.get(W, [])) != total(left_w) or \
                len(group.pending.get(PS, [])) != total(left_p):
            return  # its Job is still creating them (or deleting extra ones)
        try:
            tasks = self._tasks(job, left_w, left_p)
        except _Refused:
            return
        gang = _Gang(job, Place(st.name, st.reason), tasks, np.zeros(0), "")
        self._bind_gangs([gang])

    def _bind_gangs(self, gangs: list[_Gang]) -> None:
        """Bind every task of every gang at once; roll back each gang that did not fully bind."""
        flat = [t for g in gangs for t in g.tasks]
        results = self.binder.bind_all(flat) if flat else []
        k = 0
        for g in gangs:
            g.results = results[k:k + len(g.tasks)]
            k += len(g.tasks)
            job, st = g.job, g.job.status
            bound = [r for r in g.results if r.ok]
            if len(bound) == len(g.results):
                for r in g.results:
                    pod = r.pod
                    self._assumed[pod["metadata"]["uid"]] = (r.node, time.monotonic())
                    pend = job.pending_pods.get(role_of(pod), [])
                    if pod in pend:
                        pend.remove(pod)
                    job.bound_pods.append({**pod, "spec": {**pod["spec"], "nodeName": r.node}})
                    self.binder.event(pod, "Scheduled",
                                      f"Successfully assigned {job.key[0]}/{pod['metadata']['name']}"
                                      f" to {r.node}: {st.reason}")
                bound_now = _placement(job.bound_pods)
                if job.plan is not None and _covers(bound_now, job.plan):
                    job.plan = None
                if job.plan is None:
                    st.workers, st.ps = bound_now
                    partial = st.num_workers < st.target_workers or st.num_ps < st.target_ps
                    st.state = JobState.HOLDING if job.partial and partial else \
                        JobState.RESTARTING
                continue
            bad = next(r for r in g.results if not r.ok)
            why = (f"waiting: binding {bad.pod['metadata']['name']} to {bad.node} failed"
                   f" ({bad.error}); the gang was rolled back")
            for r in g.results:
                self.binder.event(r.pod, "FailedBinding", why, warning=True)
            if job.partial and job.plan is None:
                # pod by pod: the pods that did bind stay, as kube-scheduler's would
                for r in bound:
                    self._assumed[r.pod["metadata"]["uid"]] = (r.node, time.monotonic())
                    job.bound_pods.append({**r.pod, "spec": {**r.pod["spec"], "nodeName": r.node}})
                st.workers, st.ps = _placement(job.bound_pods)
                st.reason = why
                continue
            self.binder.stats["rollbacks"] += 1
            log.info("%s: rolled back (%s)", st.name, why)
            # bound by us, bound before us (a 409 for another node), and bound earlier
            rollback = [r.pod for r in g.results if r.ok or r.status == 409] + \
                list(job.bound_pods)
            self._delete_pods(job, rollback, recreate=True)
            job.plan = None
            job.bound_pods = []
            st.workers, st.ps = {}, {}
            st.state = JobState.PENDING
            st.reason = why
            if st.first_start is not None and isinstance(g.action, Place) and g.detail:
                st.restarts = max(st.restarts - 1, 0)

    def _explain(self, job: _Job, reason: str, message: str, *, pending_only: bool = False,
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

    # ---- introspection (metrics, tests) ------------------------------------------------------

    def stats(self) -> dict[str, float]:
        states = {s.value: 0 for s in JobState}
        for j in self.jobs.values():
            states[j.state.value] += 1
        out = {f"jobs_{k}": v for k, v in states.items()}
        out.update({k: float(v) for k, v in self.binder.stats.items()})
        view = self._view
        if view is not None:
            out["gpus_total"] = float(view.capacity[view.node_up, GPU].sum())
            out["gpus_allocated"] = float(self._allocated[:, GPU].sum())
            out["nodes_ready"] = float(view.ready.sum())
            out["nodes"] = float(len(view.nodes))
        for inf in self.cache.informers:
            kind = inf.path.rsplit("/", 1)[-1]
            out[f"watch_lists_{kind}"] = float(inf.lists)
            out[f"watch_expired_{kind}"] = float(inf.expired)
            out[f"watch_reconnects_{kind}"] = float(inf.reconnects)
        if self.binder.events is not None:
            out["events_posted"] = float(self.binder.events.posted)
        return out


def _covers(bound: tuple[Placement, Placement], plan: tuple[Placement, Placement]) -> bool:
    return all(bound[0].get(n, 0) >= c for n, c in plan[0].items()) and \
        all(bound[1].get(n, 0) >= c for n, c in plan[1].items())


def _placement(pods: list[dict]) -> tuple[Placement, Placement]:
    """Workers and PS per node of bound pods."""
    workers: Placement = {}
    ps: Placement = {}
    for p in pods:
        target = ps if role_of(p) == PS else workers
        node = p["spec"]["nodeName"]
        target[node] = target.get(node, 0) + 1
    return workers, ps


def _owned(pod: dict) -> bool:
    return any(r.get("controller") for r in pod["metadata"].get("ownerReferences") or [])


def _needs_patch(pod: dict, patch: dict[str, str]) -> bool:
    ann = pod["metadata"].get("annotations") or {}
    return any(ann.get(k) != v for k, v in patch.items())


def _bare_template(pod: dict) -> dict:
    """A bare pod's manifest to create it again (new name; nothing the server set)."""
    meta = pod["metadata"]
    job, role = (meta.get("labels") or {}).get(labels.JOB, meta["name"]), role_of(pod)
    ann = {k: v for k, v in (meta.get("annotations") or {}).items()
           if k not in (labels.PROGRESS, labels.CHECKPOINT)}
    spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{job}-{role}-", "labels": dict(meta.get("labels") or {}),
                         "annotations": ann},
            "spec": spec}


def load_api_client(kubeconfig: str | Path | None = None, pool_size: int = 32,
                    context: str | None = None):
    """An ApiClient from a kubeconfig file (its `context`, default the current one),
    $KUBECONFIG, ~/.kube/config, or the in-cluster service account; one clear error if none
    works."""
    import os

    from kubernetes import client, config

    from .rest import client_from_kubeconfig

    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        default = Path.home() / ".kube" / "config"
        path = default if default.exists() else None
    if path is not None:
        p = Path(str(path).split(os.pathsep)[0]).expanduser()
        if not p.is_file():
            raise ConfigError(f"--kubeconfig {p}: no such file")
        try:
            return client_from_kubeconfig(p, pool_size=pool_size, context=context)
        except Exception as e:  # noqa: BLE001 - one line naming the file
            what = f"no usable context {context!r} in it" if context else "not a usable kubeconfig"
            raise ConfigError(f"--kubeconfig {p}: {what}"
                              f" ({str(e).splitlines()[0][:200]})") from None
    try:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
    except Exception as e:  # noqa: BLE001
        raise ConfigError("no kubeconfig: pass --kubeconfig, set KUBECONFIG, or run in a pod"
                          f" with a service account ({e})") from None
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


__all__ = ["Clock", "K8sBackend", "load_api_client"]
