"""A notebook's printed output must survive the consoles' messages from the page.

pyviz_comms (3.0.6) captures what a comm's message handler prints by swapping `sys.stdout`
for a StringIO and putting back what it found (`StandardOutput`). The kernel handles those
messages on another thread than the cell's, so (1) whatever a cell printed while a handler
ran went into that StringIO, and (2) when two handlers overlapped (two consoles, each sending
the page's changes) the second found the first's StringIO and put it back last: `sys.stdout`
stayed a StringIO and every later `print` went nowhere (seen in JupyterLab with two consoles
running: the cells ran, their output never came). `install` replaces it, in the kernel only,
with a capture of the handler's own thread: while any is open, `sys.stdout` routes each
thread's writes to its capture, or to the stream found, which the last capture puts back.
"""

from __future__ import annotations

import sys
import threading
from io import StringIO
from typing import Any, Self


class _Router:
    """`sys.stdout` while captures are open: a capturing thread's writes to its buffer, every
    other thread's to the stream found."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.buffers: dict[int, StringIO] = {}  # thread id -> its capture's buffer
        self.depth: dict[int, int] = {}  # thread id -> its captures open

    def write(self, text: str) -> int:
        return self.buffers.get(threading.get_ident(), self.stream).write(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, encoding...: the stream's
        return getattr(self.stream, name)


class ThreadStandardOutput(list):
    """`pyviz_comms.StandardOutput` (a context manager: the lines the wrapped code printed),
    capturing only its own thread's output, and safe when captures overlap."""

    _lock = threading.Lock()
    _router: _Router | None = None

    def __enter__(self) -> Self:
        cls, me = type(self), threading.get_ident()
        with cls._lock:
            if cls._router is None:
                cls._router = _Router(sys.stdout)
                sys.stdout = cls._router
            router = cls._router
            self._buffer = router.buffers.setdefault(me, StringIO())
            router.depth[me] = router.depth.get(me, 0) + 1
            self._from = self._buffer.tell()
        return self

    def __exit__(self, *exc: object) -> None:
        cls, me = type(self), threading.get_ident()
        with cls._lock:
            self.extend(self._buffer.getvalue()[self._from:].splitlines())
            router = cls._router
            router.depth[me] -= 1
            if router.depth[me] == 0:
                del router.depth[me], router.buffers[me]
            if not router.depth:  # the last capture: the stream found goes back
                if sys.stdout is router:  # (unless someone has replaced it since)
                    sys.stdout = router.stream
                cls._router = None


def install() -> None:
    """Use `ThreadStandardOutput` for pyviz's comms (its handler looks the name up for each
    message). Idempotent."""
    import pyviz_comms

    pyviz_comms.StandardOutput = ThreadStandardOutput
