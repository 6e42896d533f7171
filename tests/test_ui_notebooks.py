"""The notebooks under notebooks/ execute top to bottom (nbclient), and the app's cell output
carries everything it needs to render with no internet.

Run: pytest -m notebooks tests/test_ui_notebooks.py"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.notebooks

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def execute(path: Path, timeout: int = 600):
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def errors(nb) -> list[str]:
    return [f"{o.ename}: {o.evalue}" for c in nb.cells if c.cell_type == "code"
            for o in c.outputs if o.output_type == "error"]


@pytest.fixture(scope="module")
def quickstart():
    return execute(NOTEBOOKS / "quickstart.ipynb")


def test_every_notebook_is_listed_here():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == ["quickstart.ipynb"]


def test_quickstart_runs_without_errors(quickstart):
    assert errors(quickstart) == []


def test_the_app_cell_renders_the_console_with_bundled_js(quickstart):
    app_cell = next(c for c in quickstart.cells
                    if c.cell_type == "code" and c.source.rstrip().endswith("\nwb"))
    outputs = json.dumps(app_cell.outputs)
    assert "application/vnd.holoviews_exec.v0+json" in outputs  # a live Panel output
    assert "Scheduling Workbench" in outputs
    # Offline: Bokeh and Tabulator are inlined; no script is fetched from the Bokeh CDN.
    assert "cdn.bokeh.org" not in outputs
    assert outputs.count("tabulator-row") > 0 and len(outputs) > 2_000_000


def test_quickstart_switches_live_and_compares_engines(quickstart):
    text = json.dumps([c.outputs for c in quickstart.cells if c.cell_type == "code"])
    assert "over the next 4 h" in text  # the switch preview
    assert "BokehModel" in text  # the ipywidget
