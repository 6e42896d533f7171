"""Which notebook cell shows each console, so that the kernel lets go of a console whose
output is gone: its cell run again, its output cleared, the cell deleted.

A notebook cell that shows a console, run again, replaces its output: the console it showed
before is on no page any more. Panel would let go of it when JupyterLab says an output is gone,
but that message is never sent (pyviz_comms 3.0.6: its comm is opened only when its field is
null, and the field starts undefined), so the old console ticked on in the kernel, advancing
its run and sending changes to no one, held for good: one more with every rerun. The kernel
does know which cell runs: JupyterLab sends the cell's id with each execution, and IPython
hands it to `pre_run_cell` hooks. (A front-end that sends no id, such as nbclient, leaves
everything as it was.) An output cleared or deleted without a run is told by the page
instead (`output_gone`): a comm opened to `TARGET` naming the output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from . import comm_stdout
from .output_gone import TARGET


class _Releasable(Protocol):
    def release(self) -> None: ...

    def shows(self, ref: str) -> bool: ...


# the consoles shown in this kernel and not let go of yet, each with the id of the cell whose
# run showed it (None: the front-end sent none)
_shown: list[tuple[str | None, _Releasable]] = []
_running: str | None = None  # the id of the cell running now
_hooked: list[Any] = []  # the IPython shell the hook is registered with


def shown_here(console: _Releasable) -> None:
    """Note that the cell running now shows `console` (nothing outside a notebook kernel)."""
    if not _hook():
        return
    _shown.append((_running, console))


def before_cell(info: Any) -> None:
    """IPython's `pre_run_cell`: the cell about to run loses its outputs, and with them the
    consoles it showed last time."""
    global _running
    _running = getattr(info, "cell_id", None)
    if _running is not None:  # (a cell without an id is never known to run again)
        _let_go_of(lambda cell, _: cell == _running)


def output_gone(ref: str | None) -> None:
    """The page says Panel's notebook output `ref` is gone: let go of the console it showed."""
    if ref is not None:
        _let_go_of(lambda _, console: console.shows(ref))


def _on_output_gone(comm: Any, message: dict) -> None:
    """The comm target the page opens a comm to, naming the output gone (`OutputGone`)."""
    data = (message.get("content") or {}).get("data") or {}
    comm.close()
    output_gone(data.get("ref"))


def _let_go_of(which: Callable[[str | None, _Releasable], bool]) -> None:
    """Stop the consoles `which(cell, console)` picks and forget them here (each is let go of
    once, whichever way it went)."""
    gone = [pair for pair in _shown if which(*pair)]
    _shown[:] = [pair for pair in _shown if pair not in gone]
    for _, console in gone:
        console.release()


def _hook() -> bool:
    """Register `before_cell` with the running IPython kernel once; False outside one."""
    global _running
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    if shell not in _hooked:
        shell.events.register("pre_run_cell", before_cell)
        comms = getattr(getattr(shell, "kernel", None), "comm_manager", None)
        if comms is not None:  # (a terminal IPython has no front-end to tell it)
            comms.register_target(TARGET, _on_output_gone)
            comm_stdout.install()  # two consoles' messages must not leave print() dead
        _hooked.append(shell)
        # the cell showing the first console is already running: its id, as the hook would
        # have read it
        parent = getattr(getattr(shell, "kernel", None), "get_parent", dict)() or {}
        _running = (parent.get("metadata") or {}).get("cellId")
    return True
