"""The notebooks under notebooks/ execute top to bottom (nbclient), and the app's cell output
carries everything it needs to render with no internet. The teaching notebooks' printed
results are checked too (each notebook's engines really ran and said what the prose says).

Run: pytest -m notebooks tests/test_ui_notebooks.py"""

from __future__ import annotations

import json
import math
import re
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


def text_of(nb) -> str:
    """Everything the notebook printed or displayed as text, in order."""
    out = []
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        for o in c.outputs:
            if o.output_type == "stream":
                out.append(o.text)
            elif o.output_type in ("execute_result", "display_data"):
                out.append(o.get("data", {}).get("text/plain", ""))
    return "\n".join(out)


def number(text: str, pattern: str) -> float:
    m = re.search(pattern, text)
    assert m, f"not printed: {pattern!r}"
    return float(m.group(1).replace(",", ""))


def bokeh_plots(nb) -> int:
    return sum("application/vnd.bokehjs_exec.v0+json" in o.get("data", {})
               for c in nb.cells if c.cell_type == "code" for o in c.outputs)


def test_every_notebook_is_executed_by_some_test():
    """Each notebook is named in a test file (the Kubernetes console notebook has its own)."""
    tests = "".join(p.read_text() for p in Path(__file__).parent.glob("*.py"))
    missing = [p.name for p in NOTEBOOKS.glob("*.ipynb") if p.name not in tests]
    assert missing == []


def test_notebooks_are_saved_without_outputs():
    for path in NOTEBOOKS.glob("*.ipynb"):
        if path.name not in Path(__file__).read_text():
            continue  # another test file owns it
        nb = nbformat.read(path, as_version=4)
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), path.name


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


# ---- teaching notebooks ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def philly():
    return execute(NOTEBOOKS / "philly_comparison.ipynb")


def test_philly_comparison_runs_without_errors(philly):
    assert errors(philly) == []
    assert bokeh_plots(philly) >= 1  # the JCT distribution


def test_philly_table_has_a_finite_row_per_engine(philly):
    table_cell = next(c for c in philly.cells if c.cell_type == "code"
                      and "results = compare(" in c.source)
    table = table_cell.outputs[-1]["data"]["text/plain"]
    text = text_of(philly)
    jobs = int(number(text, r"day 40: (\d+) jobs"))
    for engine in ("fifo", "drf", "tiresias", "optimus", "dorm", "dragon"):
        row = re.search(rf"^\d+\s+{engine}\s+(\d+)\s+([0-9.]+)", table, re.MULTILINE)
        assert row, engine
        assert int(row.group(1)) == jobs  # every job of the day completed
        avg = number(text, rf"{engine}\s+avg JCT\s+([0-9.]+) h")
        assert math.isfinite(avg) and avg > 0
    # Queue order matters on an overloaded day: the best engine is well below FIFO.
    assert number(text, r"([0-9]+)% below FIFO") >= 10


@pytest.fixture(scope="module")
def oasis():
    return execute(NOTEBOOKS / "oasis_prices.ipynb")


def test_oasis_notebook_runs_without_errors(oasis):
    assert errors(oasis) == []
    assert bokeh_plots(oasis) >= 3


def test_oasis_prices_rise_with_load(oasis):
    text = text_of(oasis)
    quiet = number(text, r"jobs are in the system: ([0-9.e+-]+);")
    busy = number(text, r"or more: ([0-9.e+-]+) \(")
    assert busy > 10 * quiet
    assert number(text, r"jobs in the system: (-?[0-9.]+)") > 0.5


def test_oasis_admits_and_rejects_with_reasons(oasis):
    text = text_of(oasis)
    admitted = number(text, r"admitted (\d+) of 240")
    assert 0 < admitted < 240
    assert "admitted: payoff" in text and "cost" in text and "rejected:" in text


def test_oasis_utility_beats_every_baseline(oasis):
    text = text_of(oasis)
    for base in ("fifo", "drf", "dorm"):
        assert number(text, rf"OASiS / {base}: total utility x([0-9.]+)") > 1.0


@pytest.fixture(scope="module")
def dl2():
    return execute(NOTEBOOKS / "dl2.ipynb")


def test_dl2_notebook_runs_without_errors(dl2):
    assert errors(dl2) == []
    assert bokeh_plots(dl2) >= 3


def test_dl2_shows_action_probabilities_and_training(dl2):
    text = text_of(dl2)
    assert number(text, r"shipped network: ([0-9,]+) parameters") > 1000
    probs_cell = next(c for c in dl2.cells if c.cell_type == "code" and "first_step" in c.source)
    table = probs_cell.outputs[-1]["data"]["text/plain"]
    values = [float(v) for v in re.findall(r"\b[01]\.\d+\b", table)]
    assert values and abs(sum(values) - 1.0) < 0.02  # one step's probabilities sum to one
    loss0, loss1 = (float(x) for x in re.search(r"imitation loss ([0-9.]+) -> ([0-9.]+)", text).groups())
    assert loss1 < loss0 / 2  # the warm-up learns the teacher


def test_dl2_beats_drf_and_optimus(dl2):
    text = text_of(dl2)
    for base in ("drf", "optimus"):
        assert number(text, rf"DL2 vs {base}: average JCT (-?[0-9.]+)% lower") > 0


@pytest.fixture(scope="module")
def qos():
    return execute(NOTEBOOKS / "qos_forecasting.ipynb")


def test_qos_notebook_runs_without_errors(qos):
    assert errors(qos) == []
    assert bokeh_plots(qos) >= 2


def test_qos_forecast_band_holds_the_truth(qos):
    text = text_of(qos)
    assert number(text, r"inside the 90% band at arrival: (\d+)%") >= 80
    assert number(text, r"Brier score at arrival: ([0-9.]+)") < 0.1


def test_qos_meets_more_deadlines_than_baselines(qos):
    text = text_of(qos)
    mine = number(text, r"qos meets (\d+)% of deadlines")
    best_other = number(text, r"ignores deadlines \([a-z-]+\) (\d+)%")
    assert mine > best_other


@pytest.fixture(scope="module")
def fgd():
    from workbench.traces.openb import find_data_dir

    if find_data_dir() is None:
        pytest.skip("openb data not found (not shipped; set WORKBENCH_OPENB_DATA)")
    return execute(NOTEBOOKS / "fgd_fragmentation.ipynb")


def test_fgd_notebook_runs_without_errors(fgd):
    assert errors(fgd) == []
    assert bokeh_plots(fgd) >= 1


def test_fgd_tiny_node_packing_is_not_fragmented(fgd):
    tiny = next(c for c in fgd.cells if c.cell_type == "code" and "packed = tiny_node()" in c.source)
    table = tiny.outputs[-1]["data"]["text/plain"]
    assert re.search(r"spread: one per GPU\s+0\.5\s+0\.5\s+0\.5", table)
    assert re.search(r"packed: both on GPU 0\s+0\.0\s+1\.0\s+0\.0", table)


def test_fgd_allocates_more_than_random_and_best_fit(fgd):
    text = text_of(fgd)
    fgd_alloc = number(text, r"130% requested load: fgd ([0-9.]+)%")
    best_fit = number(text, r"best-fit ([0-9.]+)%, random")
    random = number(text, r"random ([0-9.]+)%\n")
    assert fgd_alloc >= best_fit >= random
