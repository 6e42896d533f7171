"""A link that restores the view: the served console keeps its tab, engine and selected job in
the page's URL (`?tab=jobs&engine=fifo&job=imagenet-11`, beside any `token`), so copying the
address bar shares what one is looking at, and a session opened from such a link starts there.

The engine in a link is applied only where the session may change the cluster and nothing
has been scheduled yet (a fresh simulation of its own); on a shared or real cluster, or a
run under way, the engine is a fact of the cluster, not of the view, and the link leaves it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol
from urllib.parse import urlencode

import panel as pn

from ..errors import ConfigError
from .state import WorkbenchState


class _Console(Protocol):  # what the link reads and sets on a console
    state: WorkbenchState
    tabs: pn.Tabs
    jobs: Any
    controls: Any


def tab_key(title: str) -> str:
    """The URL form of a tab title: "What-if" -> "what-if"."""
    return title.strip().lower().replace(" ", "-")


class ViewLink:
    """Restores a console's view from the URL at start, then keeps the URL up to date."""

    def __init__(self, console: _Console, titles: Sequence[str]) -> None:
        self.console = console
        self.keys = [tab_key(t) for t in titles]
        self._shown: dict[str, str] = {}
        self._query: dict[str, Any] = {}
        # Writes the address bar in the browser (replaceState: no history entry per click).
        # Panel's Location would too, but only once the document has been idle, which a
        # console updating twice a second may never be.
        self.widget = pn.widgets.TextInput(visible=False)
        self.widget.jscallback(value="if (source.value) window.history.replaceState("
                                     "null, '', source.value)")

    def restore(self, query: dict[str, Any]) -> None:
        """Show the tab, engine and job that `query` (the URL's parameters) names; other
        parameters (the token) stay in the URL as it is rewritten."""
        self._query = {k: v for k, v in query.items() if k not in ("tab", "engine", "job")}
        c = self.console
        tab = str(query.get("tab", "")).lower()
        if tab in self.keys:
            c.tabs.active = self.keys.index(tab)
        engine = str(query.get("engine", ""))
        state = c.state
        if engine and engine != state.engine_name and c.controls.may_change \
                and state.simulated and not state.recorder.decisions:
            try:
                state.switch_policy(engine)
            except (ConfigError, KeyError, ValueError):
                pass  # an unknown engine in a link: keep the one the console started with
        job = str(query.get("job", ""))
        if job:
            c.jobs.select(job)

    def current(self) -> dict[str, str]:
        c = self.console
        view = {"tab": self.keys[c.tabs.active], "engine": c.state.engine_name}
        if c.jobs.selected:
            view["job"] = c.jobs.selected
        return view

    def sync(self) -> None:
        """Write the view into the URL when it changed."""
        view = self.current()
        if view != self._shown:
            self._shown = view
            self.widget.value = "?" + urlencode(self._query | view)
