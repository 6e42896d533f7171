"""Leader election on a `coordination.k8s.io/v1` Lease, so that of several `workbench schedule`
replicas exactly one binds pods and the others wait as standbys.

`LeaderElector` follows client-go's `leaderelection` (what kube-scheduler's `--leader-elect`
uses), in our own code on the official client's `CoordinationV1Api`:

- The Lease's spec is the record: `holderIdentity`, `leaseDurationSeconds`, `acquireTime`,
  `renewTime`, `leaseTransitions`.
- A candidate takes the Lease when it is absent, already ours, has no holder (released), or
  has expired. Expiry is judged by the observed-time rule: a candidate measures the lease
  duration from when IT last saw the record change, on its own monotonic clock, never from
  the `renewTime` another host wrote (clocks of two hosts need not agree; their rates do).
- Every write carries the `resourceVersion` that was read (a create can only succeed once),
  so when two candidates race, the API server answers one of them 409 Conflict: not won.
- The leader renews every `retry_period`. One that has not renewed for `renew_deadline`
  stops leading at once, and `is_leader` turns False by the clock even while a renewal
  hangs. A standby can take over no earlier than `lease_duration` after it saw the last
  renewal, and `renew_deadline < lease_duration`, so two leaders never overlap.
- A clean stop releases the Lease (clears `holderIdentity`), so a standby takes over
  within about one retry period rather than one lease duration.

`LeadingOnly` wraps a backend so that its observing, waiting and writing calls raise
`NotLeading` once leadership is gone: the scheduling loop of a deposed leader stops before
its next API write, not at its next round.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the kubernetes package is imported when an elector is made (CLI start-up)
    from kubernetes import client

log = logging.getLogger("workbench.k8s.leader")

LEASE_DURATION = 15.0  # kube-scheduler's defaults
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0
_JITTER = 0.2  # a candidate waits retry_period × (1 .. 1 + _JITTER) between attempts


def default_identity() -> str:
    """The host name (a pod's name in a cluster) and a random suffix, as kube-scheduler."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:12]}"


def _micro_time(t: dt.datetime) -> str:
    """A MicroTime as the API server parses it (always six fractional digits)."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease's spec says about its holder; compared whole to see whether it changed."""

    holder: str = ""
    duration: float = 0.0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def of(cls, lease: client.V1Lease) -> LeaseRecord:
        s = lease.spec
        if s is None:
            return cls()

        def stamp(t) -> str | None:
            return None if t is None else t if isinstance(t, str) else _micro_time(t)
        return cls(s.holder_identity or "", float(s.lease_duration_seconds or 0),
                   stamp(s.acquire_time), stamp(s.renew_time), int(s.lease_transitions or 0))

    def spec(self) -> dict:
        """The Lease spec that says this (no holder: the field left out)."""
        out = {"leaseDurationSeconds": max(1, round(self.duration)),
               "acquireTime": self.acquire_time, "renewTime": self.renew_time,
               "leaseTransitions": self.transitions}
        if self.holder:
            out["holderIdentity"] = self.holder
        return out


class NotLeading(RuntimeError):
    """This scheduler lost (or gave up) leadership: it must not touch the cluster."""


class LeaderElector:
    """Campaign for the Lease `namespace/name` as `identity`; lead until lost or stopped.

    `run()` (or `start()`, in a thread) waits as a candidate until it acquires the Lease,
    calls `on_started_leading()`, renews until it fails to for `renew_deadline` seconds, a
    different holder is seen, or `stop()` is called, then calls `on_stopped_leading()` and
    returns (as client-go's `Run`: a deposed leader starts over as a new process, with fresh
    state). `on_new_leader(identity)` is called whenever the observed holder changes.
    Callbacks run on the elector's thread and must be quick.
    """

    def __init__(self, api_client, name: str, namespace: str = "default", *,
                 identity: str | None = None, lease_duration: float = LEASE_DURATION,
                 renew_deadline: float = RENEW_DEADLINE, retry_period: float = RETRY_PERIOD,
                 on_started_leading: Callable[[], None] | None = None,
                 on_stopped_leading: Callable[[], None] | None = None,
                 on_new_leader: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("expected lease duration > renew deadline > retry period > 0, got"
                             f" {lease_duration} > {renew_deadline} > {retry_period}")
        if lease_duration < 1:
            raise ValueError(f"the lease duration is whole seconds (>= 1), got {lease_duration}")
        from kubernetes.client import CoordinationV1Api

        self.api = CoordinationV1Api(api_client)
        self.name, self.namespace = name, namespace
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.on_new_leader = on_new_leader
        self._clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._release_on_stop = True
        self._leading = False
        self._became_leader = threading.Event()
        self._last_renew = float("-inf")  # monotonic start of our last successful write
        self._observed: LeaseRecord | None = None
        self._observed_time = float("-inf")  # monotonic time we saw `_observed` first
        self._lease: client.V1Lease | None = None  # the last one read or written
        self._thread: threading.Thread | None = None

    # ---- state --------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Leading and renewed within the renew deadline (False by the clock alone, even while
        a renewal is still hanging)."""
        return self._leading and self._clock() < self._last_renew + self.renew_deadline

    @property
    def leader(self) -> str:
        """The holder last seen ('' when none)."""
        return self._observed.holder if self._observed else ""

    @property
    def running(self) -> bool:
        """Whether the election thread runs (campaigning or leading)."""
        return self._thread is not None and self._thread.is_alive()

    def wait_leading(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` s until this elector leads; whether it does."""
        return self._became_leader.wait(timeout) and self.is_leader

    # ---- running ------------------------------------------------------------------------

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, daemon=True,
                                        name=f"leader-elect-{self.name}")
        self._thread.start()
        return self._thread

    def stop(self, release: bool = True, timeout: float | None = None) -> None:
        """Stop campaigning or leading. `release`: clear the holder so a standby takes over at
        once (a clean shutdown); without it the Lease simply expires (as if this died)."""
        self._release_on_stop = release
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.renew_deadline if timeout is None else timeout)

    def run(self) -> None:
        try:
            if self._campaign():
                self._renew_while_leading()
        finally:
            if self._step_down() and self._stop.is_set() and self._release_on_stop:
                self.release()

    def _campaign(self) -> bool:
        while not self._stop.is_set():
            start = self._clock()
            if self._try_acquire_or_renew(self.renew_deadline):
                with self._lock:
                    self._leading, self._last_renew = True, start
                self._became_leader.set()
                log.info("%s: leading (lease %s/%s)", self.identity, self.namespace, self.name)
                self._call(self.on_started_leading)
                return True
            self._stop.wait(self.retry_period * (1 + _JITTER * random.random()))
        return False

    def _renew_while_leading(self) -> None:
        while True:
            left = self._last_renew + self.renew_deadline - self._clock()
            if self._stop.wait(max(min(self.retry_period, left), 0.0)):
                return
            start = self._clock()
            left = self._last_renew + self.renew_deadline - start
            if left <= 0:
                log.warning("%s: no renewal within %.1f s; stopping", self.identity,
                            self.renew_deadline)
                return
            renewed = self._try_acquire_or_renew(left)
            if self._clock() >= self._last_renew + self.renew_deadline:
                log.warning("%s: renewal too late (deadline %.1f s); stopping", self.identity,
                            self.renew_deadline)
                return
            if renewed:
                self._last_renew = start
            elif self.leader not in ("", self.identity):
                log.warning("%s: %s holds the lease; stopping", self.identity, self.leader)
                return

    def _step_down(self) -> bool:
        """Stop leading (calling on_stopped_leading); whether we were leading."""
        with self._lock:
            was, self._leading = self._leading, False
        self._became_leader.clear()
        if was:
            log.info("%s: stopped leading", self.identity)
            self._call(self.on_stopped_leading)
        return was

    def _call(self, callback, *args) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception:  # a callback's error must not end the election
            log.exception("leader election callback %s failed", callback)

    # ---- one attempt --------------------------------------------------------------------

    def _observe(self, lease: client.V1Lease) -> LeaseRecord:
        """Note `lease` as seen now; its expiry counts from the first time we saw it so."""
        record = LeaseRecord.of(lease)
        self._lease = lease
        if record != self._observed:
            old = self.leader
            self._observed, self._observed_time = record, self._clock()
            if record.holder and record.holder != old:
                self._call(self.on_new_leader, record.holder)
        return record

    def _try_acquire_or_renew(self, timeout: float) -> bool:
        """One attempt to take or keep the Lease; True if this elector holds it now."""
        timeout = max(timeout, 0.1)
        now = _micro_time(dt.datetime.now(dt.UTC))
        mine = LeaseRecord(self.identity, self.lease_duration, now, now, 0)
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace,
                                                   _request_timeout=timeout)
        except Exception as e:  # noqa: BLE001 - any failure (unreachable, 5xx): not won
            if _status(e) == 404:
                return self._create(mine, timeout)
            log.warning("%s: reading lease %s/%s: %s", self.identity, self.namespace, self.name,
                        _short(e))
            return False
        old = self._observe(lease)
        if old.holder and old.holder != self.identity and \
                self._clock() < self._observed_time + (old.duration or self.lease_duration):
            return False  # held by someone else, not expired
        if old.holder == self.identity:  # a renewal keeps the acquisition's time and count
            mine = LeaseRecord(self.identity, self.lease_duration, old.acquire_time or now, now,
                               old.transitions)
        else:
            mine = LeaseRecord(self.identity, self.lease_duration, now, now, old.transitions + 1)
        return self._replace(lease, mine, timeout)

    def _create(self, record: LeaseRecord, timeout: float) -> bool:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": record.spec()}
        try:
            self._observe(self.api.create_namespaced_lease(self.namespace, body,
                                                           _request_timeout=timeout))
            return True
        except Exception as e:  # noqa: BLE001 - any failure: not won
            if _status(e) != 409:  # 409: another candidate created it first
                log.warning("%s: creating lease: %s", self.identity, _short(e))
            return False

    def _replace(self, lease: client.V1Lease, record: LeaseRecord, timeout: float) -> bool:
        """Write `record` over the `lease` we read; a 409 means someone wrote since: not won."""
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "resourceVersion": lease.metadata.resource_version},
                "spec": record.spec()}
        try:
            self._observe(self.api.replace_namespaced_lease(self.name, self.namespace, body,
                                                            _request_timeout=timeout))
            return True
        except Exception as e:  # noqa: BLE001 - any failure: not won
            if _status(e) != 409:
                log.warning("%s: updating lease: %s", self.identity, _short(e))
            return False

    def release(self) -> bool:
        """Clear the holder of a Lease we hold (as client-go: duration 1 s, same transitions),
        so a standby takes it at its next attempt. Whether it was cleared."""
        lease = self._lease
        if lease is None or self._observed is None or self._observed.holder != self.identity:
            return False
        now = _micro_time(dt.datetime.now(dt.UTC))
        ok = self._replace(lease, LeaseRecord("", 1, now, now, self._observed.transitions),
                           self.renew_deadline)
        if ok:
            log.info("%s: released lease %s/%s", self.identity, self.namespace, self.name)
        return ok


DEFAULT_LEASE = ("default", "workbench-scheduler")  # `workbench schedule --leader-elect`'s


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds a scheduler Lease, as an onlooker (the console) sees it: `renewed_ago` is
    this host's clock minus the holder's `renewTime` (hosts' clocks may differ a little, so
    `live` is a reading, not the election's rule)."""

    namespace: str
    name: str
    holder: str
    renewed_ago: float
    duration: float

    @property
    def live(self) -> bool:
        return bool(self.holder) and self.renewed_ago <= self.duration

    def describe(self) -> str:
        if not self.live:
            return f"no workbench scheduler leads (lease {self.namespace}/{self.name} free)"
        return (f"workbench scheduler {self.holder} leads (lease {self.namespace}/{self.name},"
                f" renewed {max(self.renewed_ago, 0):.0f} s ago)")


def read_lease(api_client, name: str = DEFAULT_LEASE[1], namespace: str = DEFAULT_LEASE[0],
               timeout: float = 3.0) -> LeaseHolder | None:
    """The holder of Lease `namespace/name`, or None when there is no such Lease (no
    scheduler ever led there). Other failures raise a `RuntimeError` of one line."""
    from kubernetes import client

    try:
        lease = client.CoordinationV1Api(api_client).read_namespaced_lease(
            name, namespace, _request_timeout=timeout)
    except Exception as e:  # noqa: BLE001 - 404: no Lease; the rest is the caller's
        if _status(e) == 404:
            return None
        raise RuntimeError(_short(e)) from e
    spec = lease.spec
    holder = (spec.holder_identity or "") if spec else ""
    renewed = spec.renew_time if spec else None
    if isinstance(renewed, str):
        renewed = dt.datetime.fromisoformat(renewed.replace("Z", "+00:00"))
    ago = (dt.datetime.now(dt.UTC) - renewed).total_seconds() if renewed else math.inf
    return LeaseHolder(namespace, name, holder, ago,
                       float(spec.lease_duration_seconds or 0) if spec else 0.0)


def _status(e: Exception) -> int | None:
    """The HTTP status of a failed API call (an ApiException), None for other failures."""
    return getattr(e, "status", None)


def _short(e: Exception) -> str:
    status = _status(e)
    if status is not None:
        return f"{status} {getattr(e, 'reason', '') or ''}".strip()
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


class LeadingOnly:
    """A backend whose `observe`, `advance` and `apply` raise `NotLeading` unless
    `is_leader()`; everything else passes through. Observing and waiting are fenced too,
    because the K8s backend binds the re-created pods of a planned placement while it syncs."""

    def __init__(self, backend, is_leader: Callable[[], bool]) -> None:
        self._backend = backend
        self._is_leader = is_leader

    def _check(self) -> None:
        if not self._is_leader():
            raise NotLeading("not the leader")

    def observe(self):
        self._check()
        return self._backend.observe()

    def advance(self, until: float) -> None:
        self._check()
        self._backend.advance(until)

    def apply(self, actions):
        self._check()
        return self._backend.apply(actions)

    def __getattr__(self, name: str):
        return getattr(self._backend, name)


__all__ = ["LeaderElector", "LeadingOnly", "LeaseRecord", "NotLeading", "default_identity"]
