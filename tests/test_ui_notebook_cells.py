"""What a notebook user's cells show, in a real kernel (nbclient): a console made again renders
in a page that lost its JavaScript, and bad input is one line, not a traceback.

Run: pytest -m notebooks tests/test_ui_notebook_cells.py"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.notebooks

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

LOADER = "application/vnd.holoviews_load.v0+json"  # Panel's JS loader (load_notebook)
SMALL = 'trace="synthetic:n=4", cluster="1x4"'
BAD = {  # cell -> words its one line must hold
    'Workbench(trace="nope")': ["ConfigError", "unknown trace 'nope'"],
    'Workbench(trace="/no/such/w.csv")': ["InputError", "/no/such/w.csv: no such file"],
    'Workbench(cluster="bogus")': ["ConfigError", "'bogus'"],
    'Workbench(policy="nosuch")': ["ConfigError", "unknown engine 'nosuch'"],
}
CELLS = ["from workbench.ui import Workbench",
         *BAD,  # before any console: a refused one must not have sent the JS either
         f"wb = Workbench({SMALL})\nwb",
         # the cell run again (as after a page reload, the kernel still running)
         f"wb = Workbench({SMALL})\nwb",
         'wb.state.switch_policy("nosuch")']


@pytest.fixture(scope="module")
def cells():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True).execute()
    return nb.cells


def loaders(cell) -> int:
    return sum(LOADER in o.get("data", {}) for o in cell.outputs)


def test_each_console_made_sends_panels_js(cells):
    """A page reloaded while its kernel ran has lost the JS an earlier cell sent: the console
    made again must bring it, or its output stays blank ("Bokeh or Panel library is missing").
    The first console of the kernel sent it; so must the second."""
    first, again = cells[len(BAD) + 1], cells[len(BAD) + 2]
    assert loaders(first) >= 1
    assert loaders(again) >= 1
    assert not [o for c in (first, again) for o in c.outputs if o.output_type == "error"]


@pytest.mark.parametrize("index", range(1, len(BAD) + 1))
def test_bad_input_is_one_line(cells, index):
    cell = cells[index]
    words = BAD[cell.source]
    errors = [o for o in cell.outputs if o.output_type == "error"]
    assert len(errors) == 1, cell.outputs
    lines = "\n".join(errors[0].traceback).splitlines()
    assert len(lines) == 1, lines
    for word in words:
        assert word in lines[0], (word, lines[0])
    # nothing else: no JS bundle sent for a console that was never made
    assert [o.output_type for o in cell.outputs] == ["error"]


def test_a_bad_engine_on_a_shown_console_is_one_line(cells):
    errors = [o for o in cells[-1].outputs if o.output_type == "error"]
    assert [len("\n".join(e.traceback).splitlines()) for e in errors] == [1]
