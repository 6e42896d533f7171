"""One log line per API server outage, not one per failed request (issue #14, item 6).

When the apiserver goes away every client of it fails at once: the watches, the binder's
threads, the Event recorder, the node emulator's writes, and urllib3 logs a 'Retrying ...'
warning for each retry of each of them (4,857 lines in two 9-second outages). `OUTAGES`
counts those failures instead and says, once the server answers again, for how long it was
unreachable and how many requests failed (with a reminder every so often while it lasts).
`install()` puts the filter on urllib3's logger and gives an ApiClient configuration retries
with back-off; `Rest` reports each request's outcome here.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("workbench.k8s.outage")

# retries of a request that got no connection (safe for any method: nothing was sent) wait
# 0, 0.5 and 1 s instead of hammering a server that is down
RETRY_BACKOFF = 0.25
RETRY_TOTAL = 3


class OutageLog(logging.Filter):
    """Tracks whether the API server answers; a logging filter for urllib3's retry lines."""

    def __init__(self, min_seconds: float = 1.0, first_note: float = 10.0) -> None:
        super().__init__()
        self.min_seconds = min_seconds  # shorter blips (a closed kept-alive socket) say nothing
        self.first_note = first_note
        self.lock = threading.Lock()
        self.since: float | None = None  # monotonic start of the outage under way
        self.failures = 0
        self.reason = ""
        self.server = ""
        self.next_note = 0.0
        self.outages: list[tuple[float, int]] = []  # (seconds, failed requests) of each ended

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if not msg.startswith("Retrying"):
            return True
        why = msg.split("after connection broken by", 1)[-1].strip(" '\"")
        self.failed(why[:200])
        return False

    @property
    def down(self) -> bool:
        return self.since is not None

    def failed(self, reason: str, server: str = "") -> None:
        """A request got no answer."""
        now = time.monotonic()
        with self.lock:
            if self.since is None:
                self.since, self.failures = now, 0
                self.next_note = now + self.first_note
            self.failures += 1
            self.reason = reason or self.reason
            self.server = server or self.server
            note = now >= self.next_note
            if note:
                self.next_note = now + 2 * (now - self.since)
            seconds, failures = now - self.since, self.failures
        if note:
            log.warning("API server %sunreachable for %.0f s so far (%d requests failed: %s);"
                        " retrying with back-off", self._name(), seconds, failures, self.reason)

    def ok(self) -> None:
        """A request was answered: an outage under way has ended."""
        if self.since is None:  # the common case, without the lock
            return
        with self.lock:
            if self.since is None:
                return
            seconds, failures, reason = time.monotonic() - self.since, self.failures, self.reason
            self.since = None
            self.outages.append((seconds, failures))
        level = logging.WARNING if seconds >= self.min_seconds else logging.DEBUG
        log.log(level, "API server %sunreachable for %.1f s (%d requests failed: %s); answering"
                " again", self._name(), seconds, failures, reason)

    def _name(self) -> str:
        return f"{self.server} " if self.server else ""


OUTAGES = OutageLog()
_installed = False


def install() -> None:
    """Route urllib3's per-retry warnings to `OUTAGES` (once per process)."""
    global _installed
    if not _installed:
        logging.getLogger("urllib3.connectionpool").addFilter(OUTAGES)
        _installed = True


def with_backoff(configuration) -> None:
    """Retries with back-off for an ApiClient `configuration` (urllib3's default has none)."""
    from urllib3.util.retry import Retry

    configuration.retries = Retry(total=RETRY_TOTAL, backoff_factor=RETRY_BACKOFF)


def no_answer(e: BaseException) -> bool:
    """Whether an error means the server gave no HTTP answer (down, unreachable, reset)."""
    return getattr(e, "status", None) in (None, 0)


__all__ = ["OUTAGES", "OutageLog", "install", "no_answer", "with_backoff"]
