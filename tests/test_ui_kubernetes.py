"""The live console on a real Kubernetes API server (the local control plane, emulated GPU
nodes): the store and the app reached through a kubeconfig context show the cluster's own
nodes and jobs, follow their progress and the scheduler's decisions, switch the engine live,
and on a shared host stay read-only without the token. The controls' backend chooser moves a
simulated console to the cluster (and says in one line why when it cannot), and the
cluster's times are hours since the console connected. One test drives the served app in
headless chromium; one executes notebooks/kubernetes_console.ipynb on a cluster of its own.

Run: pytest -q tests/test_ui_kubernetes.py   (markers: integration; ui; notebooks)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from k8s_helpers import auditor, fresh_namespace, no_overcommit, until  # noqa: F401 - fixtures
from k8s_helpers import need_binaries as _need_binaries

from workbench.k8s.local.cluster import LocalCluster
from workbench.model import JobSpec
from workbench.perf import default_perf
from workbench.traces import synthetic_workload
from workbench.ui.data import FREE_COLOUR

pytestmark = pytest.mark.integration

SPEED = 50.0  # the emulator's clock (and the console's backend clock) runs this much faster
WORK_S = 400.0  # emulated seconds of training per job: ~8 s of real time
CONTEXT = "workbench-local"
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "kubernetes_console.ipynb"
CHROMIUM = os.environ.get("WORKBENCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
HARMLESS = ("GL Driver Message", "WebGL", "favicon.ico")
PERF = default_perf()


def _until(what: str, check, timeout: float = 60.0, every: float = 0.2):
    return until(what, check, timeout, every)  # a cluster behind a browser answers slower


@pytest.fixture(scope="module")
def cluster():
    _need_binaries()
    with LocalCluster(nodes=4, gpus_per_node=4, cpus=48, mem=192, racks=2, speed=SPEED,
                      api_qps=200) as c:
        yield c


@pytest.fixture(scope="module")
def kubeconfig(cluster, tmp_path_factory) -> Path:
    """The cluster's kubeconfig with a second context made current, one that leads nowhere:
    the console only reaches the cluster when asked for CONTEXT by name."""
    config = json.loads(cluster.kubeconfig.read_text())
    assert [c["name"] for c in config["contexts"]] == [CONTEXT]
    config["clusters"].append({"name": "nowhere", "cluster": {
        "server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}})
    config["contexts"].append({"name": "nowhere", "context": {
        "cluster": "nowhere", "user": config["contexts"][0]["context"]["user"]}})
    config["current-context"] = "nowhere"
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture
def namespace(cluster):
    """A fresh namespace (with its default service account); emptied afterwards."""
    with fresh_namespace(cluster.rest, "ui", timeout=60.0) as ns:
        yield ns


def _jobs(prefix: str, n: int, seed: int = 1, work_s: float = WORK_S) -> list[JobSpec]:
    """`n` small jobs (at most one node's 4 GPUs each, no deadlines), ~`work_s` emulated
    seconds of work each."""
    out = []
    for i, j in enumerate(synthetic_workload(n, arrival_rate=1 / 30, max_workers=4, seed=seed,
                                             deadline_factor=None, gpus_per_node=4)):
        rate = PERF.iteration_rate(j, {"a": j.initial_workers}, {"a": j.num_ps} if j.num_ps else {})
        out.append(j.with_(name=f"{prefix}-{i}", arrival=0.0, total_work=rate * work_s))
    return out


def _submit(state, specs: list[JobSpec]) -> None:
    now = state.backend.now
    for s in specs:
        state.backend.submit(s.with_(arrival=now))


def _state(kubeconfig: Path, namespace: str, policy: str = "fifo", **params):
    from workbench.ui.state import WorkbenchState

    return WorkbenchState.from_kubeconfig(str(kubeconfig), policy, namespace=namespace,
                                          context=CONTEXT, clock_speed=SPEED, period_ms=200,
                                          **params)


def _node_names(cluster) -> list[str]:
    return sorted(n["metadata"]["name"] for n in cluster.rest.get("/api/v1/nodes")["items"])


def _bound_pods(cluster, ns: str) -> dict[str, str]:
    """Pod name -> node, for the namespace's pods that are bound."""
    pods = cluster.rest.get(f"/api/v1/namespaces/{ns}/pods")["items"]
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods
            if p["spec"].get("nodeName")}


def _refreshed(state, check, what: str, timeout: float = 60.0):
    """Refresh the store as the app's tick does until `check(state)` holds."""
    def look():
        state.refresh()
        return check(state)
    return _until(what, look, timeout)


# ---- the store and the views on a real cluster -------------------------------------------


def test_console_shows_the_real_nodes_and_jobs_and_follows_their_progress(
        cluster, kubeconfig, namespace):
    from workbench.ui.app import Workbench

    state = _state(kubeconfig, namespace)
    try:
        assert not state.simulated
        assert f"({CONTEXT})" in state.cluster_name
        # The nodes are the API server's, with their GPUs, in their racks.
        assert sorted(n.name for n in state.layout.nodes) == _node_names(cluster)
        assert state.summary["nodes"] == 4 and state.summary["gpus_total"] == 16.0
        wb = Workbench(state=state, inline=False)
        console = wb.console
        console.sync(all_views=True)
        cells = list(console.cluster.gpu_source.data["colour"])
        assert cells == [FREE_COLOUR] * 16  # 4 nodes × 4 GPUs, all free

        specs = _jobs("watch", 3)
        _submit(state, specs)
        # Paused, the console still shows what is on the cluster: the jobs, waiting.
        _refreshed(state, lambda s: set(s.jobs["job"]) == {j.name for j in specs},
                   "the submitted jobs in the jobs table while paused")
        assert set(state.jobs["state"]) == {"pending"}
        assert state.summary["queued"] == 3 and not _bound_pods(cluster, namespace)

        state.play()
        progress = _refreshed(
            state, lambda s: (p := dict(zip(s.jobs["job"], s.jobs["progress"])))
            and all(s.jobs["state"] == "running") and all(v > 0 for v in p.values()) and p,
            "every job running with progress reported by its pods")
        # The GPU cells are coloured by the jobs holding them, on the nodes the pods run on.
        console.sync(all_views=True)
        held = [c for c in console.cluster.gpu_source.data["colour"] if c != FREE_COLOUR]
        assert len(held) == state.summary["gpus_used"] > 0
        bound = _bound_pods(cluster, namespace)
        placed = set()
        for p in state.jobs["placement"]:
            placed |= {part.split("×")[0] for part in p.split(", ") if part}
        assert placed == set(bound.values())
        # Decisions: every job placed by fifo, with its reason, in the table and the view.
        decisions = state.decisions_frame(include_waits=False)
        assert set(decisions["job"]) == {j.name for j in specs}
        assert set(decisions["policy"]) == {"fifo"} and all(decisions["reason"].str.len() > 0)
        assert all(state.jobs["last_action"].str.startswith("Place"))
        console.tabs.active = 4  # Decisions
        console.sync()
        assert set(console.decisions.table.value["job"]) == {j.name for j in specs}
        # Progress moves on as the pods train, then the jobs complete.
        _refreshed(state, lambda s: any(
            v > progress[n] for n, v in zip(s.jobs["job"], s.jobs["progress"])),
            "progress to move on")
        _refreshed(state, lambda s: s.summary["completed"] == 3, "every job to complete",
                   timeout=90)
        assert all(state.jobs["state"] == "completed")
        assert len(state.timeline_frame()) > 0
        console.tabs.active = 0
        console.sync()
        _refreshed(state, lambda s: s.summary["gpus_used"] == 0, "the GPUs to be freed")
        console.sync()
        assert set(console.cluster.gpu_source.data["colour"]) == {FREE_COLOUR}  # free again
        assert state.scheduler_error == ""
        wb.stop()
    finally:
        state.close()


def test_switching_the_engine_live_changes_later_decisions_on_the_cluster(
        cluster, kubeconfig, namespace):
    state = _state(kubeconfig, namespace)
    try:
        first = _jobs("before", 2, seed=3)
        _submit(state, first)
        state.play()
        _refreshed(state, lambda s: {d for d in s.decisions_frame(include_waits=False)["job"]}
                   == {j.name for j in first}, "fifo to place the first jobs")
        state.switch_policy("tiresias")
        switched_at = state.recorder.switches[-1][0]
        assert state.policy == "tiresias" and state.running
        assert list(state.switches_frame()[["from", "to"]].iloc[0]) == ["fifo", "tiresias"]
        later = _jobs("after", 2, seed=4)
        _submit(state, later)
        _refreshed(state, lambda s: {j.name for j in later} <= set(
            s.decisions_frame(include_waits=False)["job"]), "tiresias to place the later jobs")
        d = state.decisions_frame(last=1000)
        assert set(d[d["job"].isin([j.name for j in first]) & (d["action"] == "Place")]
                   ["policy"]) == {"fifo"}
        assert set(d[d["job"].isin([j.name for j in later])]["policy"]) == {"tiresias"}
        assert set(d[state.time_origin + d["time_h"] * 3600 > switched_at + 1e-6]["policy"]) \
            == {"tiresias"}
        # The later jobs really run on the cluster: their pods are bound to its nodes.
        _until("the later jobs' pods bound", lambda: {
            n.rsplit("-", 1)[0] for n in _bound_pods(cluster, namespace)} >= {
            j.name for j in later} or None)
        # The timeline marks the switch; the engine view belongs to the new engine.
        assert state.summary["policy"] == "tiresias"
        _refreshed(state, lambda s: s.summary["completed"] == 4, "every job to complete",
                   timeout=120)
        assert set(state.timeline_frame()["policy"]) == {"fifo", "tiresias"}
        assert state.scheduler_error == ""
    finally:
        state.close()


def test_locked_console_can_view_the_cluster_but_not_change_it(cluster, kubeconfig, namespace):
    from workbench.ui.app import Workbench

    state = _state(kubeconfig, namespace)
    try:
        specs = _jobs("locked", 2, seed=5)
        _submit(state, specs)
        wb = Workbench(state=state, inline=False, locked=True)  # a session without the token
        controls = wb.console.controls
        assert controls.play.disabled and controls.step.disabled
        assert controls.lock_note.visible
        controls.play.value = True  # what a dishonest browser could send: refused on the server
        assert not state.running and controls.play.value is False
        assert "Not done" in controls.message.object
        controls.step.clicks += 1
        controls.switch.candidate.value = "tiresias"
        controls.switch.apply_choice()
        assert state.policy == "fifo"
        # Viewing works: the jobs are listed, waiting; nothing was bound.
        _refreshed(state, lambda s: set(s.jobs["job"]) == {j.name for j in specs},
                   "the jobs listed to a viewer")
        wb.console.sync(all_views=True)
        assert set(wb.console.jobs.table.value["job"]) == {j.name for j in specs}
        time.sleep(2.0)
        assert not _bound_pods(cluster, namespace) and state.recorder.decisions == []
        # The store itself refuses too when locked (every session is then read-only).
        state.controls_locked = True
        for change in (state.play, state.step, lambda: state.switch_policy("tiresias")):
            with pytest.raises(PermissionError):
                change()
        wb.stop()
    finally:
        state.close()


def test_the_console_says_which_cluster_it_is_on_and_does_not_run_beside_a_leading_scheduler(
        cluster, kubeconfig, namespace):
    """The header names the API server, context and namespace and who leads scheduling; while
    a `workbench schedule` replica holds the scheduler Lease (a real elector here, on the
    real API server) the console's Run is refused in one line and nothing is bound."""
    from workbench.k8s.backend import load_api_client
    from workbench.k8s.leader import LeaderElector
    from workbench.ui.app import Workbench

    state = _state(kubeconfig, namespace)
    state.scheduler_lease = (namespace, "workbench-scheduler")  # this test's own Lease
    api_client = load_api_client(cluster.kubeconfig)
    elector = LeaderElector(api_client, "workbench-scheduler", namespace, identity="replica-a",
                            retry_period=0.5)
    try:
        specs = _jobs("lease", 2, seed=7)
        _submit(state, specs)
        wb = Workbench(state=state, inline=False)
        header = wb.console.header.object
        server = state.backend.api_client.configuration.host
        for part in (f"Kubernetes cluster {server}", f"context {CONTEXT}",
                     f"namespace {namespace}", "no workbench scheduler has led here"):
            assert part in header, (part, header)
        elector.start()
        assert elector.wait_leading(timeout=30), "the elector never led"
        holder = state.lease_holder(max_age=0.0)
        assert holder.live and holder.holder == "replica-a", holder
        controls = wb.console.controls
        controls.play.value = True
        assert not state.running and controls.play.value is False
        assert "Not done" in controls.message.object
        assert "replica-a leads" in controls.message.object, controls.message.object
        wb.console.sync()
        assert "workbench scheduler replica-a leads" in wb.console.header.object
        time.sleep(1.0)
        assert not _bound_pods(cluster, namespace)
        # The replica stops (releasing its Lease): the console may run, and binds the jobs.
        elector.stop(release=True, timeout=10)
        state.lease_holder(max_age=0.0)
        wb.console.sync()
        assert "lease " in wb.console.header.object and "free" in wb.console.header.object
        controls.play.value = True
        assert state.running, controls.message.object
        _until("the jobs bound", lambda: len(_bound_pods(cluster, namespace)) >= 1)
        wb.console.sync()
        assert "this console schedules" in wb.console.header.object
        state.pause()
        wb.stop()
    finally:
        elector.stop(release=True, timeout=10)
        api_client.close()
        state.close()


# ---- the backend chooser in the controls; the cluster's clock ------------------------------


def _simulated_workbench(**kwargs):
    from bokeh.document import Document

    from workbench.ui.app import Workbench

    wb = Workbench("default", "small", "fifo", inline=False, period_ms=200, **kwargs)
    wb.layout.get_root(Document())
    return wb


def test_the_controls_switch_a_simulated_console_to_the_cluster(cluster, kubeconfig, namespace):
    wb = _simulated_workbench()
    state, console, controls = wb.state, wb.console, wb.console.controls
    try:
        assert state.simulated and controls.backend_kind.value == "simulated"
        sim_nodes = sorted(n.name for n in state.layout.nodes)
        state.advance(3600)
        console.sync(all_views=True)
        assert len(console.timeline.source.data["time_h"]) > 0
        controls.backend_kind.value = "Kubernetes"
        assert controls.k8s_box.visible and not controls.sim_box.visible
        controls.kubeconfig.value = str(kubeconfig)
        # The context picker offers the kubeconfig's contexts, its current one chosen.
        assert controls.context.options == [CONTEXT, "nowhere"]
        assert controls.context.value == "nowhere"
        controls.context.value = CONTEXT
        controls.namespace.value = namespace
        controls.k8s_policy.value = "fifo"
        controls.connect_options = {"clock_speed": SPEED}  # the emulated cluster's fast clock
        controls.connect.clicks += 1
        assert not state.simulated, controls.message.object
        assert controls.message.object.startswith("connected to")
        assert f"({CONTEXT})" in state.cluster_name and state.connection["namespace"] == namespace
        # The console now shows the API server's nodes, all GPUs free, and no simulation left.
        assert sorted(n.name for n in state.layout.nodes) == _node_names(cluster) != sim_nodes
        console.sync(all_views=True)
        assert list(console.cluster.gpu_source.data["colour"]) == [FREE_COLOUR] * 16
        assert sorted(set(console.cluster.gpu_source.data["node"])) == _node_names(cluster)
        assert "Kubernetes cluster" in console.header.object
        assert len(console.timeline.source.data["time_h"]) == 0
        assert not controls.to_end.visible and not controls.speed.visible
        # a what-if runs on a cluster too, on a simulator restored from its snapshot
        assert not console.what_if.run_button.disabled and controls.play.disabled is False
        # The clock: the wall clock, and hours since the console connected.
        assert state.time_origin > 1.6e9 and 0 <= state.hours(state.now) < 0.2
        assert abs(state.wall_time(state.now) - time.time()) < 5
        assert "UTC" in controls.clock.object and "since connected" in controls.clock.object

        # Run from the controls: the cluster's jobs are scheduled, and every view's times
        # are small hours since the console connected (not ~500,000 h since 1970).
        specs = _jobs("chooser", 2, seed=11)
        _submit(state, specs)
        controls.play.value = True
        assert state.running and controls.play.label == "Pause"
        names = {j.name for j in specs}
        _refreshed(state, lambda s: names <= set(s.decisions_frame(include_waits=False)["job"])
                   and len(s.timeline_frame()) >= 2, "the jobs placed, on the timeline")
        console.tabs.active = 3  # Timeline
        console.sync()
        t = np.asarray(console.timeline.source.data["time_h"], dtype=float)
        assert len(t) >= 2 and (t >= 0).all() and (t < 1.0).all(), t
        assert console.timeline.figures[-1].xaxis[0].axis_label == \
            "hours since the console connected"
        d = state.decisions_frame(last=1000)
        assert ((d["time_h"] >= 0) & (d["time_h"] < 1.0)).all(), d["time_h"]
        assert all(re.fullmatch(r"\d\d:\d\d:\d\d", a) for a in d["at"])  # wall clock too
        console.tabs.active = 4  # Decisions
        console.sync()
        assert (console.decisions.table.value["time_h"] < 1.0).all()
        _refreshed(state, lambda s: s.jobs["finish_h"].notna().all(),
                   "a predicted finish for every job")
        jobs = state.jobs
        assert all(re.search(r"@ 0\.\d\d h$", a) for a in jobs["last_action"]), jobs["last_action"]
        assert ((jobs["finish_h"] > 0) & (jobs["finish_h"] < 5)).all(), jobs["finish_h"]
        console.tabs.active = 2  # Forecasts
        console.sync()
        assert 0 <= console.forecasts.now_line.location < 1.0
        # A switch from the controls: marked at a small hour, reported on the wall clock.
        preview = state.preview_switch("tiresias", horizon=3600)  # on the cluster's snapshot
        assert preview.snapshot_at is not None and "snapshot" in preview.summary()
        controls.switch.candidate.value = "tiresias"
        assert "No forecast" not in controls.switch.preview_text.object
        controls.switch.apply_choice()
        assert state.policy == "tiresias"
        assert re.search(r"switched to tiresias at \d\d:\d\d:\d\d UTC", state.message)
        assert 0 <= state.switches_frame()["time_h"].iloc[-1] < 1.0
        _refreshed(state, lambda s: s.summary["completed"] == 2, "both jobs to complete",
                   timeout=90)
        assert state.scheduler_error == ""

        # Back to a simulation through the controls: the cluster is let go (its watches and
        # scheduler stopped), the clock starts at the trace's start again.
        k8s = state.backend
        controls.backend_kind.value = "simulated"
        controls.load.clicks += 1
        assert state.simulated and state.time_origin == 0.0 and not state.running
        assert k8s._backend._closed
        console.sync(all_views=True)
        assert "simulated cluster" in console.header.object and controls.to_end.visible
        assert not console.what_if.run_button.disabled
        wb.stop()
    finally:
        state.close()


def test_the_controls_say_in_one_line_why_they_cannot_connect(cluster, kubeconfig, tmp_path):
    config = json.loads(kubeconfig.read_text())
    config["contexts"].append({"name": "broken", "context": {"cluster": "gone", "user": "gone"}})
    broken = tmp_path / "broken-config"
    broken.write_text(json.dumps(config))
    not_yaml = tmp_path / "not-a-kubeconfig"
    not_yaml.write_text("just: [some, yaml]\n")
    wb = _simulated_workbench()
    state, controls = wb.state, wb.console.controls
    nodes = [n.name for n in state.layout.nodes]
    try:
        controls.backend_kind.value = "Kubernetes"
        cases = [
            (str(tmp_path / "missing"), None, "no such file"),
            (str(not_yaml), None, "not a kubeconfig"),
            (str(broken), "broken", "no usable context 'broken'"),
            (str(kubeconfig), "nowhere", "cannot reach the API server at https://127.0.0.1:9"),
        ]
        for path, context, words in cases:
            controls.message.object = ""
            controls.kubeconfig.value = path
            if context is not None:
                assert context in controls.context.options
                controls.context.value = context
            t0 = time.monotonic()
            controls.connect.clicks += 1
            line = controls.message.object
            assert line.startswith("**Not connected:**") and words in line, line
            assert "\n" not in line and "Traceback" not in line and len(line) < 400, line
            assert time.monotonic() - t0 < 20  # a clear line soon, not a watch timing out
            # Nothing changed: the console stays on its simulation.
            assert state.simulated and [n.name for n in state.layout.nodes] == nodes
        # The store says the same to code, as a ConfigError.
        from workbench.errors import ConfigError
        with pytest.raises(ConfigError, match="no usable context 'nope'"):
            state.connect(str(kubeconfig), context="nope")
        assert state.simulated
        wb.stop()
    finally:
        state.close()

    # A session without the operator token may not even read the server's kubeconfigs.
    viewer = _simulated_workbench(real_ok=False)
    try:
        controls = viewer.console.controls
        assert controls.may_change and not controls.may_connect  # its own simulation: yes
        assert controls.kubeconfig.value == "" and controls.connect.disabled
        assert "needs the access token" in controls.k8s_note.object
        controls.kubeconfig.value = str(kubeconfig)
        assert controls.context.options == []
        controls.context.options = [CONTEXT]  # what a dishonest browser could send
        controls.context.value = CONTEXT
        controls.connect.clicks += 1
        assert "needs the access token" in controls.message.object
        assert viewer.state.simulated
        viewer.stop()
    finally:
        viewer.state.close()


# ---- the served app in a browser ---------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _served(*args: str):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "serve", "--no-browser", "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"workbench serve exited: {proc.stdout.read()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("workbench serve did not start within 90 s") from None
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        print("workbench serve said:", proc.stdout.read()[-6000:])  # shown when a test fails


class _Page:
    def __init__(self, browser, url: str) -> None:
        self.page = browser.new_page(viewport={"width": 1500, "height": 1000})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error"
                     and not any(h in m.text for h in HARMLESS) else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.goto(url)
        self.page.wait_for_selector("text=Scheduling Workbench", timeout=60_000)
        _until("the cluster view", lambda: self.js(
            "() => !!Bokeh.documents[0].get_model_by_name('gpu_cells')"))

    def js(self, code: str):
        return self.page.evaluate(code)

    def cells(self) -> list:
        return self.js("() => Array.from(Bokeh.documents[0].get_model_by_name('gpu_cells')"
                       ".data['colour'])")

    def tab(self, name: str) -> None:
        self.page.locator(".bk-tab", has_text=name).first.click()

    def column(self, field: str) -> list[str]:
        # every table with this field (another tab's may be drawn too): callers compare sets
        return self.page.locator(f".tabulator-cell[tabulator-field={field}]").all_inner_texts()

    def button(self, name: str):
        return self.page.get_by_role("button", name=name, exact=True)


@pytest.mark.ui
def test_served_console_on_the_cluster_is_read_only_without_the_token(
        cluster, kubeconfig, namespace, tmp_path):
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    from workbench.k8s.manifests import training_jobs

    shots = Path(os.environ.get("WORKBENCH_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    specs = _jobs("web", 3, seed=7, work_s=2000.0)  # ~40 s each: still running when looked at
    for spec in specs:  # submitted as any user would: batch/v1 Jobs with schedulerName workbench
        for manifest in training_jobs(spec.with_(arrival=time.time()), namespace):
            cluster.rest.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", manifest)
    with _served("--kubeconfig", str(kubeconfig), "--context", CONTEXT, "--namespace", namespace,
                 "--policy", "fifo", "--address", "127.0.0.1", "--token", "s3cret") as url, \
            playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        viewer = _Page(browser, url)
        try:
            # The viewer sees the real cluster (4 nodes × 4 GPUs, all free) and its jobs.
            assert viewer.cells() == [FREE_COLOUR] * 16
            assert viewer.page.locator("text=Kubernetes cluster").count() >= 1
            assert viewer.page.locator("text=Read-only view").count() == 1
            assert viewer.button("Run").is_disabled() and viewer.button("Step").is_disabled()
            viewer.tab("Jobs")
            _until("the jobs, waiting", lambda: sorted(set(viewer.column("job"))) ==
                   sorted(s.name for s in specs) and set(viewer.column("state")) == {"pending"})
            # A dishonest browser flips the Run toggle's model anyway: the server refuses.
            viewer.js("() => { const t = Bokeh.documents[0].all_models; for (const m of t)"
                      " if (m.type === 'Toggle' || m.constructor.name === 'Toggle')"
                      " { m.disabled = false; m.active = true; } }")
            viewer.page.wait_for_selector("text=Not done", timeout=30_000)
            time.sleep(2.0)
            assert not _bound_pods(cluster, namespace)
            viewer.page.screenshot(path=str(shots / "ui-k8s-read-only.png"), full_page=True)

            operator = _Page(browser, url + "?token=s3cret")
            try:
                assert operator.button("Run").is_enabled()
                operator.button("Run").click()
                _until("the jobs' pods bound", lambda: _bound_pods(cluster, namespace))
                # Both sessions watch the one cluster: the viewer sees the GPUs taken.
                viewer.tab("Cluster")
                _until("the viewer's GPU cells coloured by the jobs",
                       lambda: set(viewer.cells()) - {FREE_COLOUR})
                operator.tab("Decisions")
                _until("fifo's decisions", lambda: set(operator.column("policy")) == {"fifo"})
                operator.page.get_by_label("switch to").select_option("tiresias")
                operator.page.wait_for_selector(
                    "text=restored from a snapshot of the cluster", timeout=60_000)
                operator.button("Apply switch").click()
                _until("the engine to change", lambda: "tiresias" in operator.page.locator(
                    "text=Engine now").first.inner_text())
                _until("the viewer to see the new engine", lambda: "tiresias" in
                       viewer.page.locator("text=Engine now").first.inner_text())
                later = _jobs("web-later", 1, seed=8, work_s=2000.0)
                for manifest in training_jobs(later[0].with_(arrival=time.time()), namespace):
                    cluster.rest.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", manifest)
                viewer.tab("Decisions")
                newest = _until("the later job placed by tiresias, seen by the viewer", lambda: (
                    c := viewer.column("policy")) and c[0] == "tiresias" and c)
                k = newest.index("fifo") if "fifo" in newest else len(newest)
                assert set(newest[:k]) == {"tiresias"} and set(newest[k:]) <= {"fifo"}
                viewer.page.screenshot(path=str(shots / "ui-k8s-after-switch.png"),
                                       full_page=True)
                assert operator.errors == []
            finally:
                operator.page.close()
            assert viewer.errors == []
        finally:
            viewer.page.close()
            browser.close()


@pytest.mark.ui
def test_served_simulation_connects_to_the_cluster_from_the_controls_with_the_token(
        cluster, kubeconfig, namespace, tmp_path):
    """The served app on a simulation: the operator (with the token) picks Kubernetes in the
    Backend card, a context of the kubeconfig, and connects; a wrong choice is one line; a
    session without the token cannot connect at all."""
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    shots = Path(os.environ.get("WORKBENCH_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with _served("--cluster", "small", "--policy", "fifo", "--address", "127.0.0.1",
                 "--token", "s3cret") as url, playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        viewer = _Page(browser, url)
        try:
            assert len(viewer.cells()) == 16  # "small": its own simulation, 4 × 4 GPUs
            viewer.page.locator(".card-header", has_text="Backend").first.click()
            viewer.button("Kubernetes").click()
            viewer.page.wait_for_selector("text=Connecting to a Kubernetes cluster needs the"
                                          " access token", timeout=30_000)
            assert viewer.button("Connect").is_disabled()
            assert viewer.errors == []
        finally:
            viewer.page.close()
        operator = _Page(browser, url + "?token=s3cret")
        page = operator.page
        try:
            assert operator.page.locator("text=simulated cluster").count() >= 1
            page.locator(".card-header", has_text="Backend").first.click()
            operator.button("Kubernetes").click()
            page.get_by_label("kubeconfig").fill(str(kubeconfig))
            page.get_by_label("kubeconfig").press("Enter")
            picker = page.get_by_label("context")
            _until("the kubeconfig's contexts in the picker", lambda: picker.locator(
                "option").all_inner_texts() == [CONTEXT, "nowhere"], timeout=30)
            # The kubeconfig's current context leads nowhere: one line says so.
            picker.select_option("nowhere")
            operator.button("Connect").click()
            page.wait_for_selector("text=Not connected", timeout=30_000)
            line = page.locator("p", has_text="Not connected").first.inner_text()
            assert "cannot reach the API server at https://127.0.0.1:9" in line
            assert "Traceback" not in page.content()
            assert len(operator.cells()) == 16 and page.locator(
                "text=Kubernetes cluster").count() == 0
            picker.select_option(CONTEXT)
            page.get_by_label("namespace").fill(namespace)
            page.get_by_label("namespace").press("Enter")
            operator.button("Connect").click()
            page.wait_for_selector("text=Kubernetes cluster", timeout=60_000)
            _until("the cluster's nodes drawn", lambda: operator.cells() == [FREE_COLOUR] * 16)
            page.wait_for_selector("text=since connected", timeout=30_000)
            page.wait_for_selector(f"text=connected to {kubeconfig} ({CONTEXT})", timeout=30_000)
            # The cells stand for the API server's nodes.
            _until("the cluster's node names on the cells", lambda: sorted(operator.js(
                "() => Array.from(new Set(Bokeh.documents[0].get_model_by_name('gpu_cells')"
                ".data['node']))")) == _node_names(cluster), timeout=30)
            page.screenshot(path=str(shots / "ui-k8s-connected-from-controls.png"),
                            full_page=True)
            assert operator.errors == []
        finally:
            page.close()
            browser.close()


# ---- the notebook ----------------------------------------------------------------------------


@pytest.mark.notebooks
def test_kubernetes_console_notebook_runs_on_a_cluster(cluster, kubeconfig, namespace):
    """The notebook connects to this module's cluster (WORKBENCH_KUBECONFIG and its context),
    submits jobs, shows the console inline, switches the engine and shows the decisions."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        "the notebook is saved without outputs"
    env = {"WORKBENCH_KUBECONFIG": str(kubeconfig), "WORKBENCH_CONTEXT": CONTEXT,
           "WORKBENCH_NAMESPACE": namespace, "WORKBENCH_CLOCK_SPEED": str(SPEED)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits them
    try:
        nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert [f"{o.ename}: {o.evalue}" for o in outputs if o.output_type == "error"] == []
    text = json.dumps(outputs)
    assert "application/vnd.holoviews_exec.v0+json" in text  # the live console, inline
    assert "Kubernetes cluster" in text
    for node in _node_names(cluster):
        assert node in text
    assert "switched to tiresias" in text
    # The decisions: the first jobs placed by fifo, the later ones by tiresias.
    engines = next(o["text"] for o in outputs if o.get("name") == "stdout"
                   and "engine of each job's decisions" in o["text"])
    by_job = dict(line.split() for line in engines.splitlines() if line.startswith("nb-"))
    assert by_job == {**{f"nb-first-{i}": "fifo" for i in range(3)},
                      **{f"nb-later-{i}": "tiresias" for i in range(2)}}
    # It cleaned up: its Jobs are gone from the cluster.
    assert "closed: 5 jobs deleted" in text
    _until("the notebook's Jobs deleted", lambda: not cluster.rest.get(
        f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"])

