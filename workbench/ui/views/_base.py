"""What every view shares: it redraws when the store's `version` moved since it last looked.

Views poll (`sync`, called by the app's periodic tick in the view's own session) rather than
watch the store, so several browser sessions can watch one shared store: each session's
Bokeh document is then only ever changed from that session's own callbacks."""

from __future__ import annotations

from collections.abc import Callable

import panel as pn

from ..state import WorkbenchState


def in_session(action: Callable[[], None]) -> None:
    """Run `action` where it may change the session's Bokeh models: a widget's watcher in a
    served session runs without its document's lock, so on the session's next tick."""
    doc = pn.state.curdoc
    if doc is not None and doc.session_context is not None:
        doc.add_next_tick_callback(action)
    else:
        action()


def widget_row(*objects, **params) -> pn.FlexBox:
    """Widgets side by side that go on to the next line where the tab is too narrow for them
    all (a notebook's cell, a small screen): in a Row, fixed-width widgets ran past the tab
    and the whole page scrolled sideways."""
    return pn.FlexBox(*objects, flex_wrap="wrap", align_items="center", **params)


# Bokeh draws a disabled button in its own colour, only fainter: a disabled "Apply switch"
# was the enabled one's blue. Greyed as a disabled plain one is, and the pointer says so
# (Bokeh let it through to what is behind, so the not-allowed cursor never showed).
DISABLED_CSS = """.bk-btn[disabled] { background-color: #f3f3f3 !important; color: #555 !important;
  border-color: #dcdcdc !important; pointer-events: auto; }"""


def button(label: str, widget: type = pn.widgets.Button, **params) -> pn.widgets.Button:
    """A button (or a `widget` such as Toggle) that looks disabled while it is."""
    return widget(label=label, stylesheets=[DISABLED_CSS], **params)


class View:
    def __init__(self, state: WorkbenchState) -> None:
        self.state = state
        self._seen = -1

    def sync(self) -> None:
        if self._seen != self.state.version:
            self._seen = self.state.version
            self.update()

    def update(self) -> None:
        raise NotImplementedError
