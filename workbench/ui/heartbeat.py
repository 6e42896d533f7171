"""Whether a browser still shows a notebook console: its page beats every few seconds.

A notebook cell run again, or its output cleared, leaves the console it showed behind in the
kernel: Panel would clean it up when JupyterLab says the output is gone, but the pyviz
extension's "output deleted" message is never sent (its comm is created only when its field
is null, and it starts undefined: pyviz_comms 3.0.6 `ContextManager.comm`). The old console
then ticked on, advancing its run and pushing changes to no one, one more with every rerun.
A `Heartbeat` in the console's layout lets it notice instead: the browser's view of it bumps
`beat` while it is on a page, and stops when its output is removed.
"""

from __future__ import annotations

import time

import param
from panel.reactive import ReactiveHTML

BEAT_MS = 5_000  # how often a shown console's page says so


class Heartbeat(ReactiveHTML):
    """An invisible element whose browser view counts up every BEAT_MS while on a page."""

    beat = param.Integer(default=0)

    _template = '<div id="pulse" style="display:none"></div>'
    _scripts = {  # noqa: RUF012 - Panel reads these class attributes
        # once when drawn (a first render may take longer than the silence allowed), then on
        "render": ("data.beat = data.beat + 1; state.timer = setInterval("
                   f"() => {{ data.beat = data.beat + 1 }}, {BEAT_MS})"),
        "remove": "clearInterval(state.timer)",
    }

    def __init__(self, **params) -> None:
        super().__init__(width=0, height=0, margin=0, **params)
        self.last = time.monotonic()
        self.param.watch(self._heard, "beat")

    def _heard(self, _event) -> None:
        self.last = time.monotonic()

    def silent_for(self) -> float:
        """Seconds since the last beat (or since made, before the first)."""
        return time.monotonic() - self.last
