"""The served app in a real browser (Playwright driving Debian's chromium).

Run: pytest -m ui tests/test_ui_browser.py
Screenshots go to $WORKBENCH_SCREENSHOTS (default: pytest's tmp dir)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ui

from browser import Page, free_port, served  # noqa: E402


@pytest.fixture(scope="module")
def server():
    with served("--speed", "3600") as url:
        yield url


def test_app_loads_with_no_console_errors(browser, server, screenshots):
    p = Page(browser, server)
    try:
        for tab in ("Jobs", "Forecasts", "Timeline", "Decisions", "What-if", "Engine", "Cluster"):
            p.tab(tab)
            time.sleep(0.8)
        p.click("Step")
        time.sleep(1.5)
        p.page.screenshot(path=str(screenshots / "ui-cluster-start.png"), full_page=True)
        assert p.errors == []
    finally:
        p.close()


def test_cluster_view_and_forecasts_update_while_running(browser, server, screenshots):
    p = Page(browser, server)
    try:
        free = p.source("gpu_cells", "colour")
        assert len(free) == 64 and len(set(free)) == 1  # all free at the start
        clock0 = p.clock()
        p.click("Run")
        held = p.wait_for(lambda: [c for c in p.source("gpu_cells", "colour") if c != free[0]],
                          what="GPU cells coloured by jobs")
        assert len(held) > 0
        assert p.wait_for(lambda: p.clock() != clock0, what="the clock to move")
        fills = p.source("gpu_cells", "used")
        assert max(fills) == 1.0
        p.page.screenshot(path=str(screenshots / "ui-cluster-running.png"), full_page=True)
        p.tab("Forecasts")  # a tab redraws while it is shown
        p.wait_for(lambda: len(p.source("forecasts", "job")) > 0, what="forecasts")
        first = (p.source("forecasts", "job"), p.source("forecasts", "finish"))
        p.wait_for(lambda: (p.source("forecasts", "job"), p.source("forecasts", "finish")) != first,
                   what="forecasts to change as the run goes on")
        p.page.screenshot(path=str(screenshots / "ui-forecasts.png"), full_page=True)
        p.tab("Timeline")
        assert p.wait_for(lambda: len(p.source("timeline", "time_h")) > 3, what="the timeline")
        p.page.screenshot(path=str(screenshots / "ui-timeline.png"), full_page=True)
        assert p.errors == []
    finally:
        p.close()


def test_switching_the_policy_live_changes_later_decisions(browser, server, screenshots):
    p = Page(browser, server)
    try:
        for _ in range(3):
            p.click("Step")
            time.sleep(0.6)
        p.tab("Decisions")
        p.wait_for(lambda: p.page.locator(".tabulator-cell[tabulator-field=policy]").count() > 0,
                   what="the first decisions")
        before = set(p.page.locator(".tabulator-cell[tabulator-field=policy]").all_inner_texts())
        assert before == {"tiresias"}
        placement = p.page.get_by_label("placement", exact=True)
        p.page.get_by_label("switch to").select_option("dl2")  # places by its own rules
        p.wait_for(placement.is_disabled, what="no placement plugin for dl2")
        p.page.get_by_label("switch to").select_option("fifo")
        p.wait_for(placement.is_enabled, what="a placement plugin offered for fifo")
        assert placement.input_value() == "(engine's own)"
        # The forecast comes first.
        p.page.wait_for_selector("text=If you switch tiresias → fifo now", timeout=60_000)
        p.page.screenshot(path=str(screenshots / "ui-switch-preview.png"), full_page=True)
        harm = p.page.locator(".confirm-harm input[type=checkbox]")  # "switch anyway"
        if harm.is_visible():  # a switch predicted to do harm is applied only once confirmed
            harm.check()
        p.click("Apply switch")
        p.wait_for(lambda: "fifo" in p.page.locator("text=Engine now").first.inner_text(),
                   what="the engine to change")
        p.click("Run")
        newest = p.wait_for(
            lambda: (c := p.page.locator(".tabulator-cell[tabulator-field=policy]")
                     .all_inner_texts()) and c[0] == "fifo" and c,
            what="decisions by the new engine")
        # Newest first: fifo's decisions sit above tiresias's, none of tiresias's after them.
        k = newest.index("tiresias") if "tiresias" in newest else len(newest)
        assert set(newest[:k]) == {"fifo"} and set(newest[k:]) <= {"tiresias"}
        p.page.screenshot(path=str(screenshots / "ui-decisions-after-switch.png"), full_page=True)
        p.tab("Timeline")
        p.wait_for(lambda: p.source("switches", "label") == ["tiresias → fifo"],
                   what="a switch marker on the timeline")
        time.sleep(1.0)
        p.page.screenshot(path=str(screenshots / "ui-timeline-switch.png"), full_page=True)
        assert p.errors == []
    finally:
        p.close()


def test_shared_cluster_is_read_only_without_the_token(browser, screenshots):
    with served("--shared", "--token", "s3cret") as url:
        viewer = Page(browser, url)
        operator = Page(browser, url + "?token=s3cret")
        try:
            assert viewer.page.get_by_role("button", name="Step", exact=True).is_disabled()
            assert viewer.page.locator("text=Read-only view").count() == 1
            clock = viewer.clock()
            operator.click("Step")
            operator.click("Step")
            # Both sessions watch the one cluster: the viewer sees the operator's steps.
            assert viewer.wait_for(lambda: viewer.clock() != clock, what="the shared clock")
            viewer.page.screenshot(path=str(screenshots / "ui-read-only.png"), full_page=True)
            assert viewer.errors == [] and operator.errors == []
        finally:
            viewer.close()
            operator.close()


def test_a_notebook_cell_renders_the_app_with_no_internet(browser, tmp_path, screenshots):
    """Execute the quickstart, export it to HTML and open it with every non-file request
    refused: the app cell must still draw the console (its JS is bundled in the output)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nbconvert = pytest.importorskip("nbconvert")
    path = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells = nb.cells[:2]  # the title and the app cell
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    html, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    page_file = tmp_path / "quickstart.html"
    page_file.write_text(html, encoding="utf-8")
    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    refused, errors = [], []

    def offline(route):
        url = route.request.url
        if url.startswith(("file:", "data:", "blob:")):
            route.continue_()
        else:
            refused.append(url)
            route.abort()

    page.route("**/*", offline)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(page_file.as_uri())
        page.locator(".bk-tab", has_text="Cluster").first.wait_for(timeout=60_000)
        # Bokeh drew (in shadow DOM); the 1,000-node overview is hidden on a small cluster
        page.locator("canvas >> visible=true").first.wait_for(timeout=60_000)
        page.screenshot(path=str(screenshots / "ui-notebook-offline.png"))
        # Only nbconvert's own page template reaches out (require.js, MathJax, widgets).
        ours = [u for u in refused if not any(k in u for k in ("require", "mathjax", "MathJax",
                                                                "html-manager"))]
        assert ours == [] and errors == []
    finally:
        page.close()


@contextlib.contextmanager
def _jupyterlab(root: Path, *extra: str, env: dict | None = None):
    """JupyterLab serving `root` on a free port until the block ends; yields its /lab URL
    with the token."""
    port, token = free_port(), "workbench-test"
    lab = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         "--allow-root", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         f"--LabApp.workspaces_dir={root / 'workspaces'}", *extra],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or lab.poll() is not None:
                    raise RuntimeError("JupyterLab did not start") from None
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/lab?token={token}"
    finally:
        os.killpg(lab.pid, 15)  # the server and the app it started behind the proxy
        try:
            lab.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, 9)


def test_the_jupyterlab_launcher_opens_the_app(browser, tmp_path, screenshots):
    """JupyterLab with the server-proxy entry point the installed package declares
    (pyproject.toml): the Launcher's "Scheduling Workbench" card opens the app in a tab, whose
    user (let in by Jupyter) is its operator: the Backend card loads a trace file (it said
    "needs the access token" when the proxy gave the app none)."""
    pytest.importorskip("jupyter_server_proxy")
    pytest.importorskip("jupyterlab")
    from importlib.metadata import entry_points

    assert [e.value for e in entry_points(group="jupyter_serverproxy_servers")
            if e.name == "workbench"] == ["workbench.ui.jupyter:setup_workbench"]
    with _jupyterlab(tmp_path) as url:
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        try:
            page.goto(f"{url}&reset")  # a fresh workspace
            card = page.locator(".jp-LauncherCard", has_text="Scheduling Workbench")
            card.wait_for(timeout=120_000)
            card.click()
            app = page.frame_locator("iframe").first
            app.locator(".bk-tab", has_text="Cluster").first.wait_for(timeout=120_000)
            app.get_by_role("button", name="Step", exact=True).click()
            app.locator("text=/[1-9][0-9]* running/").first.wait_for(timeout=30_000)  # it schedules
            trace = tmp_path / "three-jobs.csv"
            trace.write_text("name,time,application,num_replicas,batch_size\n"
                             "cifar10-0,107,cifar10,2,2048\nbert-1,200,bert,4,12\n"
                             "cifar10-2,300,cifar10,4,2048\n")
            app.locator(".card-header", has_text="Backend").first.click()
            field = app.get_by_label("trace", exact=True)
            field.fill(str(trace))
            field.press("Enter")
            app.get_by_role("button", name="Load", exact=True).click()
            app.locator("text=/loaded .*three-jobs.csv on default/").first.wait_for(
                timeout=30_000)
            time.sleep(1.0)
            page.screenshot(path=str(screenshots / "ui-jupyterlab.png"))
        finally:
            page.close()


def test_the_jupyterlab_extension_opens_the_app_in_a_main_area_tab(browser, tmp_path, screenshots):
    """The prebuilt workbench-launcher extension (as the wheel installs it under
    share/jupyter/labextensions): one Launcher card, and its command opens the app in a tab."""
    pytest.importorskip("jupyter_server_proxy")
    built = Path(__file__).resolve().parents[1] / "workbench" / "ui" / "labextensions"
    if not (built / "workbench-launcher" / "package.json").is_file():
        pytest.skip("extension not built (extensions/workbench-launcher: jlpm build:prod)")
    jupyter_path = tmp_path / "share"
    (jupyter_path / "labextensions").mkdir(parents=True)
    (jupyter_path / "labextensions" / "workbench-launcher").symlink_to(built / "workbench-launcher")
    config = tmp_path / "jupyter_server_config.py"
    config.write_text("from workbench.ui.jupyter import setup_workbench\n"
                      "c.ServerProxy.servers = {'workbench': setup_workbench()}\n")
    env = {**os.environ, "JUPYTER_PATH": str(jupyter_path)}
    with _jupyterlab(tmp_path, f"--config={config}", env=env) as url:
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        try:
            page.goto(f"{url}&reset")
            cards = page.locator(".jp-LauncherCard", has_text="Scheduling Workbench")
            cards.first.wait_for(timeout=120_000)
            time.sleep(2)
            assert cards.count() == 1  # the extension's card; the proxy then adds none
            cards.first.click()
            page.locator(".jp-WorkbenchPanel").wait_for(timeout=30_000)
            # While the proxy starts the app, the tab says so (not seconds of a blank pane).
            starting = page.locator(".jp-WorkbenchPanel-loading",
                                    has_text="Starting the Scheduling Workbench")
            starting.wait_for(timeout=10_000)
            page.screenshot(path=str(screenshots / "ui-jupyterlab-starting.png"))
            app = page.frame_locator(".jp-WorkbenchPanel iframe")
            app.locator(".bk-tab", has_text="Cluster").first.wait_for(timeout=120_000)
            assert starting.count() == 0  # gone once the app's page has loaded
            page.screenshot(path=str(screenshots / "ui-jupyterlab-extension.png"))
        finally:
            page.close()


def test_a_notebook_cell_in_jupyterlab_runs_the_app_offline(browser, tmp_path, screenshots):
    """A user's notebook in JupyterLab with no internet: `Workbench()` in a cell draws the
    console, its Step moves the clock (the kernel's comm works both ways) and nothing is asked
    of a CDN, then or after (Panel re-sent the headline's style sheets as CDN links with each
    step: four failed requests per update, the pane unstyled)."""
    pytest.importorskip("jupyterlab")
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from workbench.ui import Workbench\nWorkbench()")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, tmp_path / "app.ipynb")
    with _jupyterlab(tmp_path) as url:
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        asked = []

        def offline(route):  # the machine's own servers only
            if route.request.url.startswith(("http://127.0.0.1", "data:", "blob:")):
                route.continue_()
            else:
                asked.append(route.request.url)
                route.abort()

        page.route("**/*", offline)
        try:
            page.goto(url.replace("/lab?", "/lab/tree/app.ipynb?") + "&reset")
            _run_first_cell(page)
            page.locator(".bk-tab", has_text="Cluster").first.wait_for(timeout=180_000)
            clock = page.locator("text=/day 0, /").first
            before = clock.inner_text()
            for _ in range(3):
                page.get_by_role("button", name="Step", exact=True).click()
                time.sleep(0.7)
            for tab in ("Jobs", "Engine"):
                page.locator(".bk-tab", has_text=tab).first.click()
                time.sleep(1.5)
            assert clock.inner_text() != before
            page.screenshot(path=str(screenshots / "ui-jupyterlab-notebook.png"))
            ours = [u for u in asked if any(k in u for k in ("holoviz", "bokeh", "jsdelivr",
                                                             "unpkg", "tabulator"))]
            assert ours == [], ours
        finally:
            page.close()

def _accept_dialogs(page, wait_s: float = 5.0) -> None:
    """Accept any JupyterLab dialog over the notebook (a slow kernel start may ask which
    kernel to use): the full CI run once waited 120 s on a click the dialog took."""
    dialogs = page.locator(".jp-Dialog")
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        if dialogs.count():
            print("JupyterLab dialog:", dialogs.first.inner_text()[:200])  # (in the test's log)
            page.locator(".jp-Dialog .jp-mod-accept").first.click(timeout=10_000)
        else:
            time.sleep(0.5)


def _run_first_cell(page, tries: int = 6) -> None:
    """Run the notebook's first cell, again until its prompt says it ran or runs ("[*]:",
    "[1]:"): on a busy machine the keys could reach the page before the notebook took them,
    and the cell never ran (the console's tabs were awaited 180 s in vain)."""
    prompt = page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first
    for _ in range(tries):
        _accept_dialogs(page)
        page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first.click(timeout=120_000)
        page.keyboard.press("Control+Enter")  # run it, staying on it
        end = time.monotonic() + 20
        while time.monotonic() < end:
            if re.search(r"\[[*0-9]+\]", prompt.inner_text()):
                return
            time.sleep(0.5)
    raise AssertionError(f"the notebook's cell never ran (prompt {prompt.inner_text()!r})")


PROBE = ("import panel as pn\nprobes += 1\nreport = json.dumps({'n': probes, 'consoles': ["
         "{'ticking': bool(c._callbacks), 'now': w.state.backend.now,"
         " 'held': any(v[0] is c.layout for v in pn.state._views.values())}"
         " for w in made for c in w.consoles]})\nopen('probe.json', 'w').write(report)\n"
         "print(report)")


class _NotebookDriver:
    """Runs a JupyterLab notebook's cells by index and reads the probe cell's report (PROBE)
    from the file it writes in the notebook's folder `root`, then checks that its printed copy
    shows on the page (with two consoles running, a cell's prints were lost: `comm_stdout`)."""

    def __init__(self, page, root: Path) -> None:
        self.page, self.report, self.seen = page, root / "probe.json", 0

    def cell(self, i: int):
        return self.page.locator(".jp-Notebook .jp-Cell").nth(i)

    def run(self, i: int) -> None:
        self.cell(i).locator(".jp-InputArea-editor").click(timeout=60_000)
        self.page.keyboard.press("Control+Enter")

    def probe(self, i: int) -> list[dict]:
        """The report of the probe cell `i`, run until it writes a new one: keys sent to a
        busy page may reach it before the notebook takes them (see `_run_first_cell`)."""
        for _ in range(4):
            self.run(i)
            end = time.monotonic() + 20
            while time.monotonic() < end:
                found = self._read()
                if found and found["n"] > self.seen:
                    self.seen = found["n"]
                    self._printed(i, found["n"])
                    return found["consoles"]
                time.sleep(0.5)
        raise AssertionError(f"the probe cell wrote nothing new: {self.cell(i).inner_text()!r}")

    def _printed(self, i: int, n: int) -> None:
        out, end = self.cell(i).locator(".jp-OutputArea"), time.monotonic() + 20
        while f'"n": {n},' not in out.inner_text():
            assert time.monotonic() < end, f"the probe's print never showed: {out.inner_text()!r}"
            time.sleep(0.5)

    def _read(self) -> dict | None:
        try:
            return json.loads(self.report.read_text())
        except (OSError, ValueError):  # not written yet, or being written
            return None


def _notebook(path: Path, cells: list[str]) -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, path)


def test_a_notebook_cell_run_again_lets_go_of_the_console_it_showed(browser, tmp_path,
                                                                    screenshots):
    """A cell showing a console, run again in JupyterLab: the console it showed before, gone
    from the page, stops and is let go of (it ticked on in the kernel, advancing its run and
    sending changes to no one, held for good, one more with every rerun: JupyterLab never
    tells Panel an output is gone); the new one runs."""
    pytest.importorskip("jupyterlab")
    _notebook(tmp_path / "rerun.ipynb",
              ["import json\nfrom workbench.ui import Workbench\nmade, probes = [], 0",
               "wb = Workbench(trace='synthetic:n=400', running=True)\nmade.append(wb)\nwb",
               PROBE])
    with _jupyterlab(tmp_path) as url:
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        nb = _NotebookDriver(page, tmp_path)
        try:
            page.goto(url.replace("/lab?", "/lab/tree/rerun.ipynb?") + "&reset")
            _run_first_cell(page)
            nb.run(1)
            tabs = page.locator(".bk-tab", has_text="Cluster")
            tabs.first.wait_for(timeout=180_000)
            time.sleep(3)
            (first,) = nb.probe(2)
            assert first["ticking"] and first["held"] and first["now"] > 0, first
            nb.run(1)  # again: a new console replaces the first in the cell's output
            time.sleep(8)
            old, new = nb.probe(2)
            assert not old["ticking"] and not old["held"], old  # let go of
            assert new["ticking"] and new["held"], new
            time.sleep(8)
            old_again, later = nb.probe(2)
            assert old_again["now"] == old["now"]  # its run moves no more
            assert later["now"] > new["now"]  # the shown one's does
            assert tabs.count() == 1  # one console on the page
            page.screenshot(path=str(screenshots / "ui-jupyterlab-rerun.png"))
        finally:
            page.close()


def test_a_notebook_output_cleared_or_its_cell_deleted_lets_go_of_its_console(
        browser, tmp_path, screenshots):
    """Two cells each showing a console in JupyterLab. Clearing the first's output (no cell
    runs, so only the page knows) stops its console and lets go of it, the other ticking on;
    a saved notebook's page reloaded keeps the other running (a reload is not a removal);
    deleting the other's cell lets go of it too. Before `OutputGone` both ticked on in the
    kernel for good."""
    pytest.importorskip("jupyterlab")
    show = "wb = Workbench(trace='synthetic:n=400', running=True)\nmade.append(wb)\nwb"
    _notebook(tmp_path / "gone.ipynb",
              ["import json\nfrom workbench.ui import Workbench\nmade, probes = [], 0",
               show, show, PROBE])
    with _jupyterlab(tmp_path) as url:
        page = browser.new_page(viewport={"width": 1366, "height": 900})
        nb = _NotebookDriver(page, tmp_path)
        tabs = page.locator(".bk-tab", has_text="Cluster")
        try:
            page.goto(url.replace("/lab?", "/lab/tree/gone.ipynb?") + "&reset")
            _run_first_cell(page)
            nb.run(1)
            tabs.first.wait_for(timeout=180_000)
            nb.run(2)
            tabs.nth(1).wait_for(timeout=180_000)
            time.sleep(3)
            a, b = nb.probe(3)
            assert all(c["ticking"] and c["held"] for c in (a, b)), (a, b)
            nb.cell(1).locator(".jp-InputPrompt").click()  # (the menu acts on the active cell)
            nb.cell(1).locator(".jp-InputPrompt").click(button="right")
            page.get_by_text("Clear Cell Output", exact=True).first.click()
            time.sleep(6)
            a, b = nb.probe(3)
            assert not a["ticking"] and not a["held"], a  # let go of
            assert b["ticking"] and b["held"], b
            assert tabs.count() == 1
            page.keyboard.press("Control+s")
            time.sleep(3)
            page.reload()
            tabs.first.wait_for(timeout=180_000)
            time.sleep(6)
            a_again, b_reloaded = nb.probe(3)
            assert b_reloaded["ticking"] and b_reloaded["held"], b_reloaded
            assert b_reloaded["now"] > b["now"] and a_again["now"] == a["now"]
            nb.cell(2).locator(".jp-InputPrompt").click()
            page.keyboard.press("Escape")
            page.keyboard.press("d")
            page.keyboard.press("d")  # the cell deleted
            time.sleep(6)
            assert tabs.count() == 0
            _, b = nb.probe(2)  # (the probe is the third cell now)
            assert not b["ticking"] and not b["held"], b
            page.screenshot(path=str(screenshots / "ui-jupyterlab-output-gone.png"))
        finally:
            page.close()


def test_fragmentation_over_time_and_per_node_for_an_engine_with_fgd(browser, tmp_path, screenshots):
    """A GPU-sharing workload under fifo+fgd: the timeline draws the fragmented share of the
    free GPUs, and the Engine tab draws each node's fragmented GPUs."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_placement_engines import sharing_pods

    pods = tmp_path / "pods.csv"
    sharing_pods(5, 200).to_csv(pods, index=False)
    with served("--speed", "3600", "--cluster", "small", "--policy", "fifo+fgd",
                "--trace", f"openb:pods={pods},n=200,interval=10,max_duration=3600") as url:
        _fragmentation_in_browser(Page(browser, url), screenshots)


def _fragmentation_in_browser(p: Page, screenshots) -> None:
    try:
        p.click("Run")
        p.tab("Timeline")
        frag = p.wait_for(lambda: [v for v in p.source("timeline", "gpu_frag")
                                   if v is not None and not math.isnan(v) and v > 0],
                          what="fragmentation on the timeline")
        assert all(0 < v <= 1 for v in frag)
        assert p.js("() => !!Bokeh.documents[0].get_model_by_name('gpu_frag_line')")
        p.page.screenshot(path=str(screenshots / "ui-timeline-fragmentation.png"), full_page=True)
        p.tab("Engine")
        p.page.wait_for_selector("text=Engine: fifo+fgd", timeout=60_000)
        nodes = p.wait_for(lambda: p.js(
            "() => { const s = Bokeh.documents[0].get_model_by_name('engine_fragmentation');"
            " return s ? Array.from(s.data['key']) : []; }"), what="per-node fragmentation bars")
        values = p.source("engine_fragmentation", "value")
        assert set(nodes) <= {f"node-{i:02d}" for i in range(4)}
        assert values == sorted(values, reverse=True) and max(values) > 0
        p.page.screenshot(path=str(screenshots / "ui-engine-fgd.png"), full_page=True)
        assert p.errors == []
    finally:
        p.close()
