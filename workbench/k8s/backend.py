"""`K8sBackend`: the Backend protocol on a real Kubernetes API server.

Jobs are what users already write: batch/v1 Jobs (or bare pods) whose pods set
`schedulerName: workbench` and carry the `workbench.io/job` and `workbench.io/role` labels and
the training annotations of `labels`. The backend is a thin facade over four parts:

- `cache.ClusterCache` watches nodes, pods and Jobs;
- `reconcile.Reconciler` turns what the watch shows into each job's `JobStatus` and the
  resources held and reserved (its `JobBook`), and sends jobs on a NotReady node back to
  waiting from their checkpoint, as the simulator's faults do;
- `actions.Actuator` carries out Place / Scale / Migrate / Suspend / Reject / Wait, binding
  gangs all or nothing (`binder.Binder` makes the API calls, Events included);
- this module: the clock, job submission, the waiting between rounds, `stats()`, and
  `snapshot()` (the cluster now as a `sim.snapshot.Snapshot`, for what-ifs and previews).

The clock is the wall clock, optionally sped up (`speed`, to match the node emulator's fast
clock; by default the speed the emulated nodes say, `cluster_clock_speed`, else real time):
`advance(until)` sleeps until that time, or until the watch sees a change a decision may
depend on (a pod to place, a pod ended, a node changed).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from kubernetes.client.exceptions import ApiException

from ..backend import Outcome
from ..errors import ConfigError
from ..model import GPU, Action, ClusterState, JobSpec, JobState, JobStatus
from ..sim.snapshot import Snapshot, take
from . import labels
from .actions import Actuator
from .binder import Binder
from .cache import Clock, ClusterCache
from .reconcile import JobBook, Reconciler
from .rest import Rest
from .restarts import DEFAULT_RESTART_DELAY, RestartMeter, progress_now

log = logging.getLogger("workbench.k8s.backend")


def cluster_clock_speed(rest: Rest) -> float:
    """How much faster than real time the cluster's clock runs: the speed its emulated nodes'
    emulator says on them (`labels.CLOCK_SPEED`), or 1 (real nodes, or nodes that disagree).
    A scheduler on real time beside a 60x emulator credited a job a minute of service for
    an hour of its training, and forecast it 60 times too late."""
    try:
        nodes = rest.get("/api/v1/nodes", labelSelector=f"{labels.EMULATED}=true")["items"]
    except Exception as e:  # noqa: BLE001 - a clock on real time is the safe default
        log.warning("could not read the emulated nodes' clock speed (%s); real time",
                    str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
        return 1.0
    said = {(n["metadata"].get("annotations") or {}).get(labels.CLOCK_SPEED) for n in nodes}
    said.discard(None)
    try:
        speeds = {float(v) for v in said}
    except ValueError:
        speeds = set()
    if len(speeds) != 1 or not 0 < (speed := speeds.pop()) < float("inf"):
        if said:
            log.warning("emulated nodes say clock speeds %s; the clock runs at real time",
                        ", ".join(sorted(said)))
        return 1.0
    if speed != 1.0:
        log.info("the emulated nodes' clock runs %gx real time; so does the scheduler's", speed)
    return speed


class K8sBackend:
    """The Backend protocol on a Kubernetes API server (see the module docstring).

    `namespace`: where `submit` creates Jobs and which pods are watched (None: every
    namespace). `speed`: the clock's speed-up (None: the cluster's, `cluster_clock_speed`).
    `serve`: never `done()` (a scheduler that runs until stopped). `threads`: concurrent API
    writes.
    """

    def __init__(self, api_client=None, *, kubeconfig: str | Path | None = None,
                 namespace: str | None = "default", speed: float | None = None,
                 threads: int = 16, events: bool = True, serve: bool = False,
                 scheduler_name: str = labels.SCHEDULER_NAME, image: str | None = None,
                 plan_timeout: float = 30.0, idle_wait: float = 60.0,
                 history_interval: float = 300.0, debounce: float = 0.05,
                 sync_interval: float = 0.5, start: bool = True,
                 context: str | None = None, restart_delay: float | None = None) -> None:
        if api_client is None:
            api_client = load_api_client(kubeconfig, pool_size=threads + 8, context=context)
        self.api_client = api_client
        self.rest = Rest(api_client)
        self.namespace = namespace
        self.submit_namespace = namespace or "default"
        self.clock = Clock(cluster_clock_speed(self.rest) if speed is None else speed)
        self.serve = serve
        self.scheduler_name = scheduler_name
        self.image = image
        self.idle_wait = idle_wait
        self.debounce = debounce
        self.sync_interval = sync_interval
        # what a snapshot's simulator charges per restart: this, or None: as measured here
        self.restart_delay = restart_delay
        self.restarts = RestartMeter()
        # job -> (iterations its pods last reported, when that report reached the watch)
        self._progress_seen: dict[str, tuple[float, float]] = {}
        self.cache = ClusterCache(api_client, namespace, scheduler_name)
        self.binder = Binder(self.rest, threads=threads, events=events)
        self.book = JobBook()
        self.actuator = Actuator(self.book, self.binder, self.cache, self.clock,
                                 plan_timeout=plan_timeout)
        self.reconciler = Reconciler(self.book, self.cache, self.clock, self.actuator,
                                     namespace=namespace, scheduler_name=scheduler_name,
                                     plan_timeout=plan_timeout, history_interval=history_interval)
        self._deferred: list[tuple[float, int, JobSpec]] = []  # submissions not yet due
        self._seq = 0
        self._lock = threading.RLock()
        self._observed = -1
        self._fresh_round = True
        self.rounds_observed = 0
        self._closed = False
        self._interrupted = False
        if start:
            self.start()

    # ---- what the book holds ------------------------------------------------------------------

    @property
    def jobs(self) -> dict[str, JobStatus]:
        """Every job seen, finished ones included."""
        return self.book.jobs

    @property
    def active(self) -> dict[str, JobStatus]:
        return self.book.active

    @property
    def finished(self) -> list[JobStatus]:
        return self.book.finished

    @property
    def node_failures(self) -> list[tuple[float, str, str]]:
        """(time, node, job) for each job a NotReady node sent back to waiting."""
        return self.book.node_failures

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
        if key in self.book.tracked or key in self.book.submitted or \
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
        self.book.submitted[(ns, k8s_name(spec.name))] = time.monotonic()

    def observe(self) -> ClusterState:
        with self._lock:
            if self._fresh_round:
                # what the policy sees; a second look in the same round (the Controller's
                # timeline sample after applying) must not hide a change it has not seen
                self._observed = self.cache.decisive
                self._fresh_round = False
            self.rounds_observed += 1
            return self._state()

    def _state(self) -> ClusterState:
        """The cluster as the book holds it after a sync (without marking changes as seen by
        a round, which only `observe` does)."""
        self._sync()
        book = self.book
        return book.view.state(self.now, book.allocated + book.reserved, book.active,
                               queue=book.queue)

    def _sync(self) -> None:
        """Bring the book up to the watch, noting when each job's latest progress report was
        first seen (a snapshot extrapolates from then: reports come every few seconds)."""
        self.reconciler.sync()
        now, seen, tracked = self.now, self._progress_seen, self.book.by_name
        for job in list(self.book.active.values()):
            t = tracked.get(job.name)
            reported = t.reported if t is not None else job.progress
            if (last := seen.get(job.name)) is None or last[0] != reported:
                # when the report reached the watch, not this sync (up to a round later)
                arrived = t.reported_at if t is not None else None
                seen[job.name] = (reported, now if arrived is None else
                                  min(self.clock.at_monotonic(arrived), now))
        self.restarts.observed(self.book.active, now, seen)
        if len(seen) > 2 * len(self.book.active) + 64:  # forget finished jobs now and then
            for name in [n for n in seen if n not in self.book.active]:
                del seen[name]

    def estimated_progress(self, job: JobStatus, now: float) -> float:
        """A running job's progress now: its pods' last report, carried forward at its
        reported throughput from when the report was seen (reports come every few seconds).
        Just after a restart that is below the most it ever reported: the new pods resumed
        from a checkpoint and redo the work done since it."""
        return progress_now(job, self._progress_seen.get(job.name), now)

    def restart_cost(self) -> float:
        """Seconds a snapshot's simulator charges per restart: `restart_delay` when given,
        else what restarts have cost here (`restarts`), 30 s (the simulator's default) until
        a few were measured."""
        if self.restart_delay is not None:
            return self.restart_delay
        return self.restarts.delay(DEFAULT_RESTART_DELAY)

    def snapshot(self, engine: str = "") -> Snapshot:
        """The cluster now as a `Snapshot` (see `sim.snapshot`): a running job's progress is
        `estimated_progress`; the restart delay is `restart_cost()`. Safe beside a running
        scheduler: it marks no change as seen by a round."""
        with self._lock:
            state = self._state()
            now = state.now
            progress = {j.name: self.estimated_progress(j, now) for j in state.jobs.values()
                        if j.state is JobState.RUNNING}
            return take(self, state, source="kubernetes", engine=engine,
                        restart_delay=self.restart_cost(), progress_at=progress,
                        upcoming=[spec for _, _, spec in sorted(self._deferred)],
                        clock_origin=self.clock.origin)

    def apply(self, actions: Sequence[Action]) -> list[Outcome]:
        with self._lock:
            now, active = self.now, self.book.active
            before = {a.job: self.estimated_progress(active[a.job], now)
                      for a in actions if a.job in active}
            outcomes = self.actuator.apply(actions)
            for o in outcomes:
                if o.applied and o.action.job in before:
                    self.restarts.applied(o.action, active.get(o.action.job), now,
                                          before[o.action.job])
            return outcomes

    def advance(self, until: float) -> None:
        """Wait until `until` on the backend clock, or until a decisive change is seen."""
        self._fresh_round = True
        while True:
            self._release_arrivals()
            since = self.cache.decisive
            if self.reconciler.due():
                with self._lock:
                    self._sync()
            now = self.now
            if now >= until or self.cache.decisive != self._observed or self._interrupted:
                return
            wait = until - now
            if self._deferred:
                wait = min(wait, self._deferred[0][0] - now)
            if self.book.future_arrivals:
                wait = min(wait, min(self.book.future_arrivals) - now)
            # wake now and then to follow what no decision waits for (pods starting, progress)
            real = min(self.clock.real(max(wait, 0.0)), self.sync_interval)
            if self.cache.wait(since, real):
                time.sleep(self.debounce)  # let a burst of changes arrive together

    def next_event_time(self) -> float | None:
        now = self.now
        times = [now + self.idle_wait]  # on a live cluster something may always happen
        if self._deferred:
            times.append(self._deferred[0][0])
        if self.book.future_arrivals:
            times.append(min(self.book.future_arrivals))
        if self.cache.decisive != self._observed:
            times.append(now)
        return max(min(times), now)

    def next_decision_time(self) -> float | None:
        """Every change on a live cluster may matter to a decision."""
        return self.next_event_time()

    def pending_arrivals(self) -> int:
        return len(self._deferred)

    def done(self) -> bool:
        if self.serve or self._deferred or self.book.submitted or self.book.future_arrivals:
            return False
        return not self.book.active

    def _release_arrivals(self) -> None:
        """Create the Jobs of submissions that have come due (retried later on an API error)."""
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

    # ---- introspection (metrics, tests) ------------------------------------------------------

    def stats(self) -> dict[str, float]:
        states = {s.value: 0 for s in JobState}
        for j in self.book.jobs.values():
            states[j.state.value] += 1
        out = {f"jobs_{k}": v for k, v in states.items()}
        out.update({k: float(v) for k, v in self.binder.stats.items()})
        view = self.book.view
        if view is not None:
            out["gpus_total"] = float(view.capacity[view.node_up, GPU].sum())
            out["gpus_allocated"] = float(self.book.allocated[:, GPU].sum())
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


def load_api_client(kubeconfig: str | Path | None = None, pool_size: int = 32,
                    context: str | None = None):
    """An ApiClient from a kubeconfig file (its `context`, default the current one),
    $KUBECONFIG, ~/.kube/config, or the in-cluster service account; one clear error if none
    works."""
    import os

    from kubernetes import client, config

    from .outage import with_backoff
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
    with_backoff(configuration)
    return client.ApiClient(configuration)


__all__ = ["Clock", "K8sBackend", "load_api_client"]
