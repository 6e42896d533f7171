"""A stop asked of work already running, in this process or in its worker processes (a what-if's
forks on the process pool): a file in a private temporary directory that exists once the stop
is asked, so a copy of the request pickled into a worker sees it too. A run checks it between
slices of rounds (`whatif.run_ahead`); one stat call per slice costs nothing next to them."""

from __future__ import annotations

import os
import shutil
import tempfile


class StopRequest:
    """`ask()` from any thread; `asked` anywhere on this machine; `close()` when the work is
    over (removes the file; a request closed or never asked reads as not asked)."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="workbench-stop-")
        self._path = os.path.join(self._dir, "stop")

    def ask(self) -> None:
        if os.path.isdir(self._dir):
            with open(self._path, "w"):
                pass

    @property
    def asked(self) -> bool:
        return os.path.exists(self._path)

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
