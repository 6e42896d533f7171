"""The console in a notebook rendered inline (no internet): its models keep the style sheets
the first render inlined. Panel re-sent a Markdown pane's sheets as CDN links with each change
of its text: after one step, the headline asked cdn.holoviz.org for four style sheets (seen in
JupyterLab with no internet: four failed requests per tick, and the pane unstyled).

The render is Panel's notebook path without a kernel: the root model on a comm, its sheets
inlined as `Viewable._repr_mimebundle_` does with `config.inline`."""

from __future__ import annotations

import re
from pathlib import Path

import panel as pn
from bokeh.document import Document
from bokeh.models import ImportedStyleSheet, UIElement
from panel.io.notebook import patch_inline_stylesheets
from panel.io.resources import set_resource_mode
from panel.io.state import state
from pyviz_comms import Comm

from workbench import ui
from workbench.ui.app import Console, load_extension
from workbench.ui.state import WorkbenchState


def _linked_sheets(root) -> list[tuple[str, str]]:
    return [(type(m).__name__, s.url) for m in root.select({"type": UIElement})
            for s in m.stylesheets if isinstance(s, ImportedStyleSheet) and s.url.startswith("http")]


def test_stepping_keeps_the_inlined_styles():
    load_extension(inline=False)
    with pn.config.set(inline=True):
        console = Console(WorkbenchState.from_workload("default", "default", "tiresias"))
        doc, comm = Document(), Comm()
        with set_resource_mode("inline"):
            root = console.layout.get_root(doc, comm, preprocess=True)
        for model in root.select({"type": UIElement}):
            patch_inline_stylesheets(model)
        state._views[root.ref["id"]] = (console.layout, root, doc, comm)
        try:
            assert _linked_sheets(root) == []
            before = console.state.summary
            for _ in range(5):
                console.state.step()
                console.sync()
            assert console.state.summary != before  # the headline's text changed
            assert _linked_sheets(root) == []
        finally:
            del state._views[root.ref["id"]]


def test_the_console_makes_its_text_panes_from_views_panes():
    """A Panel text pane made directly would bring the CDN links back on its first update."""
    root = Path(ui.__file__).parent
    direct = [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py"))
              if path.name != "_panes.py"
              for n, line in enumerate(path.read_text().splitlines(), 1)
              if re.search(r"pn\.pane\.(Markdown|HTML|Alert|Str)\(", line)]
    assert direct == []
