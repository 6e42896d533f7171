"""What a store is computing in the background (a switch preview, a what-if), so every console
on it can show a busy indicator while the work runs in a worker thread.

The work itself runs outside the app's thread (the views `await asyncio.to_thread(job)`), so
this is a plain counter under a lock, read by the consoles when they redraw, not a `param`
whose watchers would fire from the worker thread.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class BackgroundWork:
    """The store's running background jobs: `track` wraps one, `describe` names them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, str] = {}
        self._ids = itertools.count()

    def track(self, what: str, job: Callable[[], T]) -> Callable[[], T]:
        """`job`, counted as running (described as `what`) from its call until it returns or
        raises."""

        def run() -> T:
            key = next(self._ids)
            with self._lock:
                self._running[key] = what
            try:
                return job()
            finally:
                with self._lock:
                    self._running.pop(key, None)

        return run

    def describe(self) -> str:
        """What runs now ("" when nothing does), e.g. "what-if of 12 engines"."""
        with self._lock:
            return "; ".join(dict.fromkeys(self._running.values()))
