"""The app's state store and the data it derives: fast, no browser."""

from __future__ import annotations

import math

import numpy as np
import pytest

from workbench.clusters import make_cluster, preset
from workbench.commands.serve import (
    TOKEN_ENV,
    TOKEN_HEADER,
    is_loopback,
    session_locked,
    token_matches,
)
from workbench.errors import ConfigError
from workbench.model import JobSpec, JobState, Place, Resources
from workbench.sim import SimBackend
from workbench.ui.data import cluster_cells, cluster_layout, gpu_holders, job_colour
from workbench.ui.jupyter import setup_workbench
from workbench.ui.state import WorkbenchState
from workbench.ui.views.engines import _kind


@pytest.fixture
def store() -> WorkbenchState:
    return WorkbenchState.from_workload("default", "default", "tiresias")


def test_store_starts_paused_with_every_gpu_free(store):
    assert store.running is False
    assert store.policy == "tiresias"
    cells = store.cells
    n, g = len(store.layout.nodes), store.layout.max_gpus
    assert cells.gpu_used.shape == (n * g,)
    assert cells.gpus_in_use == 0
    assert store.summary["gpus_total"] == 64


def test_advance_moves_the_clock_and_the_cells_follow_the_backend(store):
    v = store.version
    store.advance(2 * 3600)
    assert store.now >= 2 * 3600
    assert store.version > v
    state = store.backend.observe()
    assert store.cells.gpus_in_use == pytest.approx(state.allocated[:, 2].sum())
    held = [c for c in store.cells.gpu_text if c not in ("free", "")]
    assert held, "some GPUs are held by jobs"
    running = store.jobs[store.jobs.state == "running"]
    assert len(running) and running.finish_h.notna().all()  # every running job has a forecast
    assert (running.finish_h >= store.now / 3600 - 1e-9).all()


def test_advance_reaches_the_time_asked_however_many_rounds_it_takes():
    """It stopped after 2,000 rounds, silently: 30 days of the Philly trace under FIFO ended
    at 596 h."""
    store = WorkbenchState.from_workload("philly", "philly", "fifo")
    start = store.summary["now_h"]
    store.advance(30 * 86400)
    assert store.summary["now_h"] == pytest.approx(start + 720)


@pytest.mark.parametrize("seconds", [-5, math.nan, math.inf, "1h"])
def test_advance_refuses_a_time_it_cannot_move_by(store, seconds):
    """-5 did nothing and NaN ran the whole workload to its end, both silently."""
    before = store.now
    with pytest.raises(ConfigError, match="seconds: expected a finite number >= 0"):
        store.advance(seconds)
    assert store.now == before


def test_jobs_table_lists_every_arrived_job_with_its_reason(store):
    store.advance(3600)
    arrived = set(store.backend.jobs)
    assert set(store.jobs.job) == arrived
    assert store.jobs.reason.str.len().gt(0).all()


def test_switching_live_changes_later_decisions_and_loses_no_job(store):
    store.advance(3600)
    before = {n: (j.state, dict(j.workers)) for n, j in store.backend.jobs.items()}
    n_decisions = len(store.recorder.decisions)
    store.switch_policy("fifo")
    # The switch itself touches no job.
    after = {n: (j.state, dict(j.workers)) for n, j in store.backend.jobs.items()}
    assert after == before
    store.advance(3 * 3600)
    later = store.recorder.decisions[n_decisions:]
    assert later and {d.policy for d in later} == {"fifo"}
    assert store.recorder.switches[-1][1:] == ("tiresias", "fifo")
    assert store.timeline_frame().policy.iloc[-1] == "fifo"


def test_switch_preview_forecasts_without_touching_the_live_run(store):
    store.advance(3600)
    now, n = store.now, len(store.recorder.decisions)
    preview = store.preview_switch("fifo", horizon=3 * 3600)
    assert store.now == now and len(store.recorder.decisions) == n
    assert list(preview.table.policy) == ["tiresias", "fifo"]
    assert "over the next 3 h" in preview.summary()
    assert set(preview.decisions.policy) <= {"tiresias", "fifo"}
    with pytest.raises(ValueError):
        store.preview_switch("tiresias")


def test_switching_to_an_engine_with_a_placement_plugin(store):
    store.advance(3600)
    preview = store.preview_switch("tiresias+best-fit", horizon=2 * 3600)
    assert list(preview.table.policy) == ["tiresias", "tiresias+best-fit"]
    for bad, named in (("fifo+nope", "'nope'"), ("dl2+fgd", "'dl2'"), ("nope+fgd", "'nope+fgd'")):
        with pytest.raises((KeyError, ConfigError)) as e:
            store.preview_switch(bad)
        assert named in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="unknown placement plugin 'nope'; known: .*fgd"):
        store.switch_policy("fifo+nope")
    assert store.controller.policy.name == "tiresias"
    n_decisions = len(store.recorder.decisions)
    assert store.preview_switch("fifo+fgd").candidate == "fifo+fgd"
    store.switch_policy("fifo+fgd")
    store.advance(3 * 3600)
    assert store.policy == store.controller.policy.name == "fifo+fgd"
    later = store.recorder.decisions[n_decisions:]
    assert later and {d.policy for d in later} == {"fifo+fgd"}
    assert store.recorder.switches[-1][1:] == ("tiresias", "fifo+fgd")


def test_what_if_runs_each_engine_to_the_end_on_a_fork(store):
    store.advance(3600)
    now = store.now
    result = store.what_if(["fifo", "tiresias"])
    assert store.now == now and not store.finished
    assert list(result.table.policy) == ["fifo", "tiresias"]
    assert (result.table.completed + result.table.rejected == 160).all()
    assert all(len(v) == c for v, c in zip(result.jct_h.values(), result.table.completed))


def test_locked_store_refuses_changes(store):
    store.controls_locked = True
    for action in (store.step, lambda: store.advance(60), lambda: store.switch_policy("fifo"),
                   store.play):
        with pytest.raises(PermissionError):
            action()


def test_run_to_end_finishes_and_stops(store):
    store.running = True
    store.run_to_end()
    assert store.finished and not store.running
    assert store.summary["completed"] + store.summary["rejected"] == 160


def test_load_replaces_cluster_and_workload(store):
    layout_v = store.layout_version
    store.load("synthetic:n=20,deadline=2.0", "small", "fifo")
    assert store.layout_version == layout_v + 1
    assert len(store.layout.nodes) == 4 and store.policy == "fifo"
    store.advance(4 * 3600)
    dl = store.jobs[store.jobs.deadline_h.notna() & ~store.jobs.state.isin(["completed",
                                                                               "rejected"])]
    assert dl.p_meet.between(0, 1).all()


# ---- derived data ---------------------------------------------------------------------------


@pytest.mark.parametrize("settings, message", [
    ({"limit": 0}, "limit: expected a positive integer, got 0"),
    ({"seed": -1}, "seed: expected a non-negative integer, got -1"),
    ({"cluster": "huge"}, "cluster: expected a preset"),
    ({"cluster": "0x4"}, "cluster 0x4: expected NxG"),
    ({"speed": -1}, "speed: expected a finite number from 1 to 1e+07, got -1"),
    ({"period_ms": 0}, "period_ms: expected a finite number from 50 to 60000, got 0"),
    ({"restart_delay": -1}, "restart_delay: expected a finite number from 0"),
    ({"load": 2}, "load: unknown setting; known: checkpoint_interval, contention, "),
])
def test_a_notebooks_bad_setting_is_named_as_it_typed_it(settings, message):
    """`WorkbenchState.from_workload` (a notebook's `Workbench(...)`) names the keyword: it said
    '--limit' (a CLI flag), 'Number parameter RunControls.speed' (Param's), or raised a TypeError
    ('unexpected keyword argument') for a setting that does not exist."""
    with pytest.raises(ConfigError) as e:
        WorkbenchState.from_workload("synthetic:n=5", **settings)
    assert str(e.value).startswith(message) and "--" not in str(e.value)


def test_fractional_gpus_are_shown_as_fractions_with_every_holder():
    nodes = make_cluster(1, gpus_per_node=2)
    half = Resources(cpu=1, mem=4, gpu=0.5)
    jobs = [JobSpec(f"j{k}", "cifar10", 0.0, 1000.0, 128, worker_demand=half) for k in range(3)]
    backend = SimBackend(nodes, jobs)
    backend.advance(0.0)
    backend.apply([Place(f"j{k}", "test", {nodes[0].name: 1}) for k in range(3)])
    state = backend.observe()
    cells = cluster_cells(state, gpu_holders(backend, state), 2)
    assert sorted(cells.gpu_used) == [0.5, 1.0]
    shared = cells.gpu_text[int(np.argmax(cells.gpu_used))]
    assert shared.count("0.50") == 2


def test_holders_from_placements_match_the_simulator_for_whole_gpus():
    store = WorkbenchState.from_workload("default", "default", "fifo")
    store.advance(2 * 3600)
    state = store.backend.observe()
    exact = gpu_holders(store.backend, state)

    class Opaque:  # a backend that cannot say which GPU a job holds
        pass

    derived = gpu_holders(Opaque(), state)
    assert {j: sum(a for *_, a in g) for j, g in exact.items()} == \
        pytest.approx({j: sum(a for *_, a in g) for j, g in derived.items()})


def test_layout_of_a_thousand_nodes_places_every_node_once_grouped_by_rack():
    nodes = preset("large")
    lay = cluster_layout(nodes)
    xy = set(zip(lay.node_x.round(3), lay.node_y.round(3)))
    assert len(xy) == len(nodes) == 1000
    assert 0.5 < lay.width / lay.height < 4
    for rack in ("rack-0", "rack-7"):  # a rack's nodes share a column, rows adjacent
        idx = [i for i, n in enumerate(nodes) if n.rack == rack]
        assert len(set(lay.node_x[idx])) == 1
        assert np.allclose(np.diff(lay.node_y[idx]), 1.0)
    assert lay.label_w == 0  # no names on 1,000 rows


def test_job_colours_are_stable():
    assert job_colour("cifar10-0") == job_colour("cifar10-0")
    assert job_colour("cifar10-0").startswith("#")


def test_jobs_holding_gpus_at_once_have_different_colours_while_the_palette_lasts():
    """By name alone two jobs running side by side were often alike ('colour = job'): on the
    default run's first half hour four jobs showed three colours. A job keeps its colour while
    it holds GPUs."""
    from workbench.ui.data import PALETTE, CellPainter

    store = WorkbenchState.from_workload("default", "default", "fifo")
    painter = CellPainter(len(store.layout.nodes), store.layout.max_gpus)
    kept: dict[str, str] = {}
    for hours in (0.5, 1, 2, 4, 8):
        store.advance(hours * 3600 - store.now)
        state = store.backend.observe()
        holders = gpu_holders(store.backend, state)
        cells = painter.paint(state, holders)
        colours = {job: cells.gpu_colour[painter.cells_of(job)[0]] for job in holders}
        assert len(set(colours.values())) == min(len(holders), len(PALETTE)), (hours, colours)
        for job, colour in colours.items():
            assert kept.setdefault(job, colour) == colour, (job, hours)
        kept = {j: c for j, c in kept.items() if j in holders}


# ---- engine views ---------------------------------------------------------------------------


def test_engine_view_values_are_drawn_by_shape():
    assert _kind(3.5) == "fact" and _kind("x") == "fact" and _kind(None) == "fact"
    assert _kind(["a", "b"]) == "fact"
    assert _kind({"cpu": 1.0, "gpu": None}) == "bars"
    assert _kind({"j1": {"nodes": 2}, "j2": {"nodes": 1}}) == "table"
    assert _kind([[1.0, 2.0], [3.0, 4.0]]) == "matrix"
    assert _kind([1.0, 2.0]) == "series"
    assert _kind([{"time": 0.0, "price": [1.0, 2.0]}]) == "timeseries"
    assert _kind([{"job": "a", "kind": "up"}]) == "table"


@pytest.fixture
def forget_test_engine():
    """Unregister the test's engine afterwards: later tests list `available()` in this
    process and expect the served app (another process) to offer the same engines."""
    from workbench.policies import base

    yield
    base._REGISTRY.pop("_ui-test-engine", None)


def test_engine_view_renders_any_engine_view_and_keeps_price_history(forget_test_engine):
    from workbench.policies.base import Policy, register
    from workbench.ui.views.engines import EngineView

    @register("_ui-test-engine")
    class Teaching(Policy):
        """A test engine with every shape of teaching data."""

        def schedule(self, state):
            from workbench.policies import make_policy

            self.t = state.now
            return make_policy("fifo").schedule(state)

        def engine_view(self):
            t = getattr(self, "t", 0.0)
            return {"resources": ["cpu", "mem", "gpu"], "slots": [t, t + 60],
                    "price": [[1.0, 2.0, 3.0], [1.5, 2.5, 3.5]], "U": {"cpu": 1, "gpu": 2},
                    "gangs": {"a": {"nodes": 2, "rack": "r0"}}, "alpha": 2.0,
                    "price_history": [{"time": t, "price": [1.0, 2.0, 3.0]}],
                    "events": [{"job": "a", "kind": "up", "detail": {"w": 2}}], "note": None}

    store = WorkbenchState.from_workload("default", "small", Teaching())
    view = EngineView(store)
    for _ in range(3):
        store.advance(600)
        view.sync()
    # slots are the x axis of price, not drawn on their own
    assert set(view.blocks) == {"price", "U", "gangs", "price_history", "events"}
    assert len(store.engine_history["U"]) >= 2  # dict-of-numbers values get a history
    assert "alpha" in set(view.facts.value.fact)
    lines = view.blocks["price"].lines.source.data
    assert lines["name"] == ["cpu", "mem", "gpu"]


def test_engine_history_draws_the_jobs_in_the_view_now(forget_test_engine):
    """A dict of numbers keyed by jobs (growth, hours to the next queue, ...) changes keys as
    jobs come and go: its chart over time draws the jobs of the latest view, not the first
    MAX_SERIES ever seen (it stopped at the hour those appeared, and the jobs on the bars
    now had no line)."""
    from workbench.policies.base import Policy, register
    from workbench.ui.views.engines import MAX_SERIES, EngineView

    @register("_ui-test-engine")
    class Rotating(Policy):
        """Shows 3 jobs' numbers, a new 3 each round."""

        def schedule(self, state):
            from workbench.policies import make_policy

            self.n = getattr(self, "n", -1) + 1
            return make_policy("fifo").schedule(state)

        def engine_view(self):
            n = getattr(self, "n", 0)
            return {"growth": {f"job-{3 * n + k}": float(k) for k in range(3)}}

    store = WorkbenchState.from_workload("default", "small", Rotating())
    view = EngineView(store)
    for _ in range(MAX_SERIES):
        store.advance(600)
        view.sync()
    latest = list(store.engine["growth"])
    drawn = view.blocks["growth"].history.source.data["name"]
    assert len(drawn) == MAX_SERIES and drawn[:3] == latest, (drawn, latest)



def test_engine_lines_mark_only_the_points_no_line_draws():
    """A job's line over time has a marker only where no line can show the value (a point
    with no neighbour: a job seen in one sample, the first round after a switch); a marker on
    every point scattered dots over the lines of a dozen jobs."""
    import numpy as np

    from workbench.ui.views.engines import _Lines

    lines = _Lines("growth over time", "h")
    nan = float("nan")
    x = np.arange(6.0)
    lines.set(x, {"a": np.array([1, nan, 2, 3, nan, 4]), "b": np.array([nan] * 5 + [7.0]),
                  "c": np.array([1.0, 2, 3, 4, 5, 6])})
    points = lines.points.data
    assert list(points["x"]) == [0.0, 5.0, 5.0] and list(points["y"]) == [1.0, 4.0, 7.0]
    assert len(set(points["colour"][:2])) == 1 and points["colour"][2] != points["colour"][0]
    assert len(lines.source.data["xs"]) == 3  # every series still a line


def test_a_bar_standing_for_no_jobs_is_no_line_over_time():
    """Tiresias's hours to the next queue is one bar "(no running job drops a queue)" when no
    job will drop one: drawn now, it was also a line over time in the chart's legend, beside
    the jobs' (and squeezed the plot at 900 px). Run Tiresias on the default workload: its
    history has the jobs' lines, and no line for the sentence."""
    from workbench.ui.views.engines import EngineView

    store = WorkbenchState.from_workload("default", "small", "tiresias")
    view = EngineView(store)
    nones = 0
    for k in range(25):  # the first view is before any job runs: "(no job running)"
        if k:
            store.advance(600)
        view.sync()
        nones += any(key.startswith("(") for key in store.engine["hours_to_next_queue"])
    assert nones, "the run never showed the sentence: the test checks nothing"
    drawn = view.blocks["hours_to_next_queue"].history.source.data["name"]
    assert drawn and not any(n.startswith("(") for n in drawn), drawn
    assert not any(k.startswith("(") for _, point in store.engine_history["hours_to_next_queue"]
                   for k in point)

# ---- serving ------------------------------------------------------------------------------


def test_loopback_and_tokens():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    assert token_matches({"token": [b"s3cret"]}, "s3cret")
    assert not token_matches({"token": [b"wrong"]}, "s3cret")
    assert not token_matches({}, "s3cret")
    # JupyterLab's proxy adds the app's token as a header; the URL's token is Jupyter's own
    assert token_matches({"token": [b"jupyters"]}, "s3cret", {TOKEN_HEADER: "s3cret"})
    assert not token_matches({}, "s3cret", {TOKEN_HEADER: "wrong"})
    assert not token_matches({}, "", {TOKEN_HEADER: ""})
    proxy = setup_workbench()
    given = proxy["request_headers_override"][TOKEN_HEADER]
    assert len(given) >= 20 and proxy["environment"][TOKEN_ENV] == given
    assert given not in " ".join(proxy["command"])  # (argv is readable by every local user)
    # Without a token required, nothing is locked; with one, shared or real clusters are.
    assert not session_locked(token=None, given_ok=False, shared=True, simulated=False)
    assert session_locked(token="t", given_ok=False, shared=True, simulated=True)
    assert session_locked(token="t", given_ok=False, shared=False, simulated=False)
    assert not session_locked(token="t", given_ok=False, shared=False, simulated=True)
    assert not session_locked(token="t", given_ok=True, shared=True, simulated=False)


def test_workbench_views_follow_the_store():
    from bokeh.document import Document

    from workbench.ui.app import Workbench

    wb = Workbench("default", "default", "tiresias", inline=False)
    wb.layout.get_root(Document())
    colours = list(wb.cluster.gpu_source.data["colour"])
    wb.state.advance(3600)
    wb.sync()  # the visible tab (Cluster) follows; the others catch up when shown
    assert list(wb.cluster.gpu_source.data["colour"]) != colours
    assert len(wb.timeline.source.data["time_h"]) == 0
    wb.tabs.active = 3  # Timeline
    assert len(wb.timeline.source.data["time_h"]) == len(wb.state.recorder.timeline)
    wb.sync(all_views=True)
    assert len(wb.timeline.source.data["time_h"]) == len(wb.state.recorder.timeline)
    assert len(wb.forecasts.source.data["job"]) > 0
    wb.controls.locked = True
    wb.controls.step.clicks += 1
    assert "Not done" in wb.controls.message.object
    assert JobState.RUNNING.value in set(wb.jobs.table.value.state)


def test_a_job_past_its_deadline_is_shown_as_passed_not_as_likely_late():
    """On the default run at 50 min, cifar10-15 waited past its deadline (0.76 h): the
    Forecasts tab called it 'likely late (< 50%)' beside jobs that can still make theirs.
    A deadline behind the clock is a class of its own, after the jobs still at stake."""
    from workbench.ui.views.forecasts import ForecastView

    state = WorkbenchState.from_workload("default", "default", "tiresias")
    state.advance(3000)
    data = ForecastView(state)._data()
    now = state.hours(state.now)
    passed = [d < now for d in data["deadline"]]
    assert any(passed) and not all(passed)
    assert [r == "deadline passed" for r in data["risk"]] == passed
    first_passed = passed.index(True)
    assert all(passed[first_passed:len(passed) - data["risk"].count("no deadline")])


# ---- a real (not forkable) cluster -------------------------------------------------------


class RealLike:
    """A backend that cannot fork, like Kubernetes: the simulator behind the Backend protocol
    only. It counts observations, to check when the console observes on its own."""

    def __init__(self, sim: SimBackend) -> None:
        self.sim = sim
        self.observations = 0
        self.jobs, self.active, self.finished, self.clock = (sim.jobs, sim.active, sim.finished,
                                                              sim.clock)

    @property
    def now(self) -> float:
        return self.sim.now

    def observe(self):
        self.observations += 1
        return self.sim.observe()

    def apply(self, actions):
        return self.sim.apply(actions)

    def advance(self, until: float) -> None:
        self.sim.advance(until)

    def next_event_time(self):
        return self.sim.next_event_time()

    def next_decision_time(self):
        return self.sim.next_decision_time()

    def done(self) -> bool:
        return self.sim.done()

    def submit(self, spec) -> None:
        self.sim.submit(spec)

    def pending_arrivals(self) -> int:
        return self.sim.pending_arrivals()

    def interrupt(self) -> None:
        self.sim.interrupt()

    def close(self) -> None:
        self.sim.close()


def test_a_real_cluster_is_scheduled_by_a_thread_and_watched_by_the_console():
    import time

    from workbench.traces import default_workload

    real = RealLike(SimBackend(preset("small"), default_workload()[:30]))
    store = WorkbenchState(real, "fifo")
    assert not store.simulated
    with pytest.raises(TypeError):
        store.advance(60)
    with pytest.raises(TypeError):
        store.preview_switch("tiresias")
    seen = real.observations
    for _ in range(5):
        store.refresh()
    # Paused, nobody else observes: the console looks itself rather than show a stale cluster.
    assert real.observations == seen + 5
    store.play()
    deadline = time.monotonic() + 60
    while not real.done() and time.monotonic() < deadline:
        time.sleep(0.05)
    store.pause()
    assert real.done() and store.controller.rounds > 0
    store.refresh()
    assert store.summary["completed"] + store.summary["rejected"] == 30
    assert store.scheduler_error == ""


def test_fragmentation_over_time_and_per_node_in_the_engine_view(tmp_path):
    """A GPU-sharing workload under fifo+fgd: the timeline carries the fragmented share of the
    free GPUs, and the engine view draws each node's fragmented GPUs with a history."""
    from test_placement_engines import sharing_pods

    from workbench.model import Node
    from workbench.placement.state import cluster_fragmentation
    from workbench.traces.openb_jobs import openb_jobs
    from workbench.ui.views.engines import EngineView
    from workbench.ui.views.timeline import TimelineView

    nodes = [Node(f"n{i}", cpus=64, mem=256, gpus=[2, 4, 8][i % 3], gpu_model="T4")
             for i in range(6)]
    jobs = openb_jobs(sharing_pods(4, 200), n=150, interval=10.0, max_duration=3600)
    store = WorkbenchState.from_workload(jobs=jobs, nodes=nodes, policy="fifo+fgd")
    timeline, engine = TimelineView(store), EngineView(store)
    for _ in range(6):
        store.advance(900)
        timeline.sync()
        engine.sync()
    frame = store.timeline_frame()
    frag = frame["gpu_frag"].to_numpy()
    assert np.isfinite(frag).all() and (frag >= 0).all() and (frag <= 1).all() and frag.max() > 0
    # The last sample agrees with a fresh measure of the cluster now.
    last = store.recorder.timeline[-1]
    fresh = cluster_fragmentation(store.backend.observe(), store.recorder.fragmentation.workload)
    if last.time == store.now:
        assert last.gpus_fragmented == pytest.approx(fresh["fragmented_gpus"])
    assert list(timeline.source.data["gpu_frag"]) == pytest.approx(list(frag), nan_ok=True)
    view = store.engine
    assert view["placement"] == "fgd" and "fragmentation" in engine.blocks
    bars = engine.blocks["fragmentation"].bars.source.data
    assert set(bars["key"]) <= {n.name for n in nodes} and bars["value"] == sorted(
        bars["value"], reverse=True)
    assert sum(bars["value"]) == pytest.approx(view["fragmented_gpus"])
    assert len(store.engine_history["fragmentation"]) >= 3  # per-node lines over time
    assert "fragmented gpus" in set(engine.facts.value.fact)


def test_the_speed_list_shows_the_speed_the_run_has():
    """`workbench serve --speed 36000` ran at 10 h/s while the speed list said "6 h / s" (the
    nearest it offered); and a speed set by another console sharing the store was not shown.
    The list names a speed it does not offer, and follows the store's."""
    from workbench.ui.views.controls import SPEEDS, ControlsView, speed_label

    assert all(speed_label(v) == name for name, v in SPEEDS.items())  # one way of naming them
    assert speed_label(259200.0) == "3 days / s"
    # rounded before the unit is chosen: just under an hour a second is an hour, not "60 min"
    assert [speed_label(v) for v in (3599.0, 59.99, 86399.0)] == ["1 h / s", "1 min / s",
                                                                   "1 day / s"]
    state = WorkbenchState.from_workload("default", "small", "fifo", limit=5, speed=36000.0)
    controls = ControlsView(state)
    assert controls.speed.value == 36000.0
    assert {label for label, v in controls.speed.options.items() if v == 36000.0} == {"10 h / s"}
    assert list(controls.speed.options.values()) == sorted(controls.speed.options.values())
    controls.speed.value = SPEEDS["1 h / s"]  # the user picks one
    assert state.speed == 3600.0
    state.speed = 90.0  # another console sharing the store
    controls.sync()
    assert controls.speed.value == 90.0 and "1.5 min / s" in controls.speed.options
    locked = ControlsView(state, locked=True)
    locked.speed.value = SPEEDS["1 day / s"]  # refused: the list goes back to the store's
    locked.sync()
    assert state.speed == 90.0 and locked.speed.value == 90.0


def test_the_timelines_count_charts_start_at_zero_in_whole_jobs(store):
    """On the Philly trace no job completes for days: the completions chart's axis ran from
    -1 to 1, and the jobs chart ticked at 2.5 jobs. Counts start at 0 and tick whole."""
    import panel as pn

    from workbench.ui.views.timeline import TimelineView

    view = TimelineView(store)
    figures = {p.object.title.text: p.object for p in view.panel.select(pn.pane.Bokeh)}
    for title in ("jobs", "completions and deadlines"):
        fig = figures[title]
        assert fig.y_range.start == 0 and fig.y_range.min_interval == 1, title
        assert fig.yaxis[0].ticker.min_interval == 1, title


@pytest.mark.parametrize("trace, which", [("default", "most at risk"),
                                          ("default:deadlines=none", "earliest arrivals")])
def test_the_forecasts_note_says_which_jobs_it_shows(trace, which):
    """On the Philly trace (no deadlines) the note said "the 40 most at risk of 1432 active
    jobs": with no deadline among them the rows are the earliest arrivals, and it says so."""
    from workbench.ui.views.forecasts import ForecastView

    store = WorkbenchState.from_workload(trace, "small", "fifo")
    store.advance(4 * 3600)
    view = ForecastView(store, max_jobs=3)
    view.update()
    assert view.total > 3
    assert f"the 3 {which} of {view.total} active jobs" in view.note.object


def test_an_engines_queue_table_says_it_is_the_head_of_a_longer_queue():
    """The Engine tab listed 20 jobs of a 1,340-job queue (two pages) under "the queue, in
    the order this engine would start it", as if that were all of it."""
    from workbench.policies.teaching import ROWS
    from workbench.ui.views.engines import EngineView

    store = WorkbenchState.from_workload("synthetic:n=120,rate=0.05", "small", "tiresias")
    view = EngineView(store)
    store.advance(1800)
    view.sync()
    waiting = int(view.facts.value.set_index("fact").loc["waiting jobs", "value"])
    assert waiting > ROWS
    assert view.blocks["queue"].title.object.endswith(f": the first {ROWS} of {waiting:,}")
    assert len(view.blocks["queue"].table.value) == ROWS


def test_the_busy_indicator_changes_only_its_text():
    """The busy indicator is one pane's text (a change of visibility or classes made the
    browser lay out every chart of every tab again, twice per preview): shown, hidden, its
    words escaped."""
    from workbench.ui.app import BusyIndicator

    busy = BusyIndicator()
    assert busy.panel.object == "" and busy.panel.visible
    busy.show("what-if of 13 <engines>")
    assert "working: what-if of 13 &lt;engines&gt;…" in busy.panel.object
    assert 'class="spin"' in busy.panel.object and busy.panel.visible
    busy.show("")
    assert busy.panel.object == "" and busy.panel.visible


def test_no_table_changes_its_configuration_when_its_rows_come():
    """Tabulator rebuilds itself on a new configuration, and a rebuild racing the cell styles
    of the next rows threw a page error: every table of the console keeps the configuration
    it was first shown with, empty, once rows fill it (a what-if, a preview, a job's why)."""
    import json

    from bokeh.document import Document
    from panel.models.tabulator import DataTabulator

    from workbench.ui.app import Workbench

    wb = Workbench("default", "default", "tiresias", inline=False)
    tables = list(wb.layout.get_root(Document()).select({"type": DataTabulator}))
    assert len(tables) >= 6, [t.css_classes for t in tables]

    def settings(t):  # a copy as plain data
        return json.loads(json.dumps(t.configuration, default=str))

    def rows(t):
        return len(next(iter(t.source.data.values()), ()))

    first = {t.id: settings(t) for t in tables}
    empty = {t.id for t in tables if not rows(t)}
    wb.state.advance(3600)
    wb.sync(all_views=True)
    wb.what_if.show(wb.state.prepare_what_if(["fifo", "tiresias"])())
    wb.controls.switch.show(wb.state.preview_switch("fifo"))
    wb.jobs.select(wb.jobs.table.value.job.iloc[0])
    filled = {t.id for t in tables if t.id in empty and rows(t)}
    assert len(filled) >= 4, "the tables filled in"
    changed = {t.css_classes[0]: [b["field"] for a, b in zip(first[t.id]["columns"],
                                                           t.configuration["columns"]) if a != b]
               for t in tables if settings(t) != first[t.id]}
    assert changed == {}  # table: the fields whose settings changed


def test_run_to_end_from_the_console_goes_a_tick_at_a_time_and_pause_stops_it(store):
    whole = WorkbenchState.from_workload("default", "default", "tiresias")
    whole.run_to_end()
    store.period_ms = 50  # a tick runs rounds for most of it
    store.run_to_end(wait=False)
    assert store.running and store.to_end and not store.finished

    def tick():
        store._last_tick = -math.inf  # each call a new period
        store.tick()

    tick()
    assert 0 < store.controller.rounds < whole.controller.rounds  # moved, one slice only
    store.pause()
    assert not store.running and not store.to_end and store.pace is None
    rounds = store.controller.rounds
    tick()
    assert store.controller.rounds == rounds  # paused: nothing moves
    store.run_to_end(wait=False)
    store.speed = 3600.0  # a speed chosen meanwhile: on at that speed, not to the end
    assert store.running and not store.to_end
    store.run_to_end(wait=False)
    for _ in range(10_000):
        if store.finished:
            break
        tick()
    assert store.finished and not store.running and not store.to_end
    # the same run as at once (the slices are whole rounds)
    assert store.controller.rounds == whole.controller.rounds
    assert store.summary == whole.summary
    assert list(store.recorder.decisions) == list(whole.recorder.decisions)
    assert store.recorder.timeline == whole.recorder.timeline


def test_a_notebook_cell_run_again_lets_go_of_the_consoles_it_showed(monkeypatch):
    """Running a notebook cell again clears its output: the consoles it showed stop, and Panel
    lets go of their models. Here IPython's `pre_run_cell` calls are made as the kernel makes
    them, with the cell ids JupyterLab sends (the browser's side: tests/test_ui_browser.py)."""
    from types import SimpleNamespace

    import panel as pn

    from workbench.ui import app, cells

    monkeypatch.setattr(cells, "_hook", lambda: True)  # (no kernel here)
    monkeypatch.setattr(cells, "_shown", [])

    def held(console) -> bool:
        return any(view[0] is console.layout for view in pn.state._views.values())

    cells.before_cell(SimpleNamespace(cell_id="cell-a"))
    wb = app.Workbench("synthetic:n=40", "1x4", "fifo", inline=False)
    wb._repr_mimebundle_()  # cell a shows it
    first = wb.console
    cells.before_cell(SimpleNamespace(cell_id="cell-b"))
    wb._repr_mimebundle_()  # and cell b again: a second console on the same run
    second = wb.consoles[-1]
    assert first is not second and all(held(c) and c._callbacks for c in (first, second))
    cells.before_cell(SimpleNamespace(cell_id="cell-c"))  # another cell: nothing changes
    assert all(held(c) and c._callbacks for c in (first, second))
    cells.before_cell(SimpleNamespace(cell_id="cell-a"))  # cell a again
    assert not held(first) and not first._callbacks
    assert held(second) and second._callbacks  # cell b's output is still on the page
    cells.before_cell(SimpleNamespace(cell_id=None))  # a front-end that sends no id
    assert held(second) and second._callbacks
    cells.before_cell(SimpleNamespace(cell_id="cell-b"))
    assert not held(second) and not second._callbacks


def test_a_notebook_output_cleared_or_deleted_lets_go_of_the_console_it_showed(monkeypatch):
    """The page says a notebook output is gone (cleared, its cell deleted: no cell runs, so
    the kernel cannot see it): a comm opened to `cells`' target names the output, and the
    console it showed stops and is let go of, not another; an output that is not ours changes
    nothing; a console let go of this way is not let go of again when its cell runs. The comm
    is a stand-in (`FakeComm`); the page's side: tests/test_ui_browser.py."""
    from types import SimpleNamespace

    import panel as pn

    from workbench.ui import app, cells
    from workbench.ui.output_gone import TARGET, OutputGone

    monkeypatch.setattr(cells, "_hook", lambda: True)  # (no kernel here)
    monkeypatch.setattr(cells, "_shown", [])

    class FakeComm:
        closed = False

        def close(self) -> None:
            self.closed = True

    def held(console) -> bool:
        return any(view[0] is console.layout for view in pn.state._views.values())

    def gone(ref: str) -> FakeComm:
        comm = FakeComm()
        cells._on_output_gone(comm, {"content": {"data": {"ref": ref}}})
        return comm

    cells.before_cell(SimpleNamespace(cell_id="cell-a"))
    wb = app.Workbench("synthetic:n=40", "1x4", "fifo", inline=False)
    wb._repr_mimebundle_()
    first = wb.console
    cells.before_cell(SimpleNamespace(cell_id="cell-b"))
    wb._repr_mimebundle_()
    second = wb.consoles[-1]
    assert first.layout.select(OutputGone)  # in every console's layout
    assert TARGET in OutputGone._scripts["remove"]
    (ref,) = [r for r in pn.state._views if first.shows(r)]
    assert not second.shows(ref)
    assert gone("not-an-output-of-ours").closed
    assert all(held(c) and c._callbacks for c in (first, second))
    assert gone(ref).closed  # cell a's output cleared
    assert not held(first) and not first._callbacks
    assert held(second) and second._callbacks
    assert all(c is not first for _, c in cells._shown)
    cells.before_cell(SimpleNamespace(cell_id="cell-a"))  # cell a runs again: nothing left
    assert held(second) and second._callbacks
    (ref,) = [r for r in pn.state._views if second.shows(r)]
    gone(ref)  # cell b deleted
    assert not held(second) and not second._callbacks and cells._shown == []


def test_the_headline_says_how_fast_a_run_to_the_end_goes():
    from workbench.ui import Workbench

    store = WorkbenchState.from_workload("philly", "philly", "tiresias", limit=3000)
    wb = Workbench(state=store, inline=False)
    store.period_ms = 50  # two ticks of 40 ms do not reach the end of 3,000 jobs
    store.run_to_end(wait=False)
    for _ in range(2):
        store._last_tick = -math.inf
        store.tick()
    wb.sync()
    text = wb.controls.clock.object
    assert "· running to the end" in text and "simulating " in text and " / s" in text
    assert store.pace > 0  # simulated seconds per wall second
    store.pause()
    wb.sync()
    assert "· paused" in wb.controls.clock.object
    assert "simulating" not in wb.controls.clock.object and store.pace is None


def test_the_headline_says_when_the_machine_cannot_keep_up_with_the_speed():
    from workbench.ui import Workbench

    store = WorkbenchState.from_workload("philly", "philly", "tiresias", limit=3000)
    wb = Workbench(state=store, inline=False)
    store.advance(20 * 86400)  # to where the trace's jobs come thick and fast
    store.period_ms, store.speed = 50, 1e7  # 116 simulated days a wall second: no machine can
    store.play()
    for _ in range(3):
        store._last_tick = -math.inf
        store.tick()
    wb.sync()
    text = wb.controls.clock.object
    assert "· running\n" in text and "as fast as this machine goes (116 days / s asked)" in text


def test_slow_forecasts_lag_but_never_cover_fewer_than_half_the_active_jobs(store):
    from workbench.ui import Workbench

    wb = Workbench(state=store, inline=False)
    store.advance(3600)
    first = store.forecasts
    store._forecasts._every = 10  # as after a slow forecast: recomputed every 10th version
    store.advance(60)
    assert store.forecasts is first  # a version on, the same jobs: the forecasts lag
    wb.forecasts.sync()  # and the view says so
    assert "Forecast 1 min ago: each takes" in wb.forecasts.note.object
    store.advance(8 * 3600)
    active = store.cluster_state.jobs
    assert 2 * sum(name in first for name in active) < len(active)  # most jobs new since
    assert store.forecasts is not first and set(active) <= set(store.forecasts)


def test_the_headline_says_when_the_next_job_arrives_in_a_quiet_stretch():
    from workbench.traces import load_philly
    from workbench.ui import Workbench

    store = WorkbenchState.from_workload("philly", "philly", "tiresias", limit=500)
    wb = Workbench(state=store, inline=False)
    store.step()  # the trace's first job; its second comes 65.5 h later
    wb.sync()
    # in hours from the start, as `now_h` beside it (it was the backend's seconds)
    assert store.summary["next_arrival_h"] == pytest.approx(
        load_philly(None, limit=500)[1].arrival / 3600)
    assert "499 yet to arrive (the next at day 2, 17:28:16)" in wb.controls.clock.object
    while store.summary["to_arrive"]:
        store.advance(10 * 86400)
    wb.sync()
    assert store.summary["next_arrival_h"] is None and "the next at" not in wb.controls.clock.object


def test_comm_captures_overlapping_on_two_threads_leave_print_working():
    """Two consoles' page messages are handled on a thread of their own each, overlapping:
    pyviz's capture (a global swap of `sys.stdout`) left a StringIO behind and every later
    print of the notebook went nowhere, and a cell's print during a handler was swallowed.
    The kernel's replacement captures each handler's own thread only and puts the stream back
    when the last capture closes. (Reproduced here with pyviz's own class, then ours.)"""
    import io
    import sys
    import threading

    import pyviz_comms

    from workbench.ui.comm_stdout import ThreadStandardOutput

    def overlap(capture) -> tuple[bool, list, list, str]:
        """A enters, B enters, the main thread prints, A leaves, B leaves (threads in step)."""
        real = io.StringIO()
        steps = [threading.Event() for _ in range(4)]
        got: dict[str, list] = {}

        def handler(name: str, enter_after: int, leave_after: int, done: int) -> None:
            if enter_after >= 0:
                steps[enter_after].wait(5)
            with capture() as lines:
                print(f"from {name}")
                steps[done].set()
                steps[leave_after].wait(5)
            got[name] = lines
            if name == "a":
                steps[3].set()

        saved, sys.stdout = sys.stdout, real
        try:
            a = threading.Thread(target=handler, args=("a", -1, 2, 0))
            b = threading.Thread(target=handler, args=("b", 0, 3, 1))
            a.start()
            b.start()
            steps[1].wait(5)  # both captures open
            print("from the cell")
            steps[2].set()  # A leaves, then B
            a.join(5)
            b.join(5)
            left = sys.stdout
        finally:
            sys.stdout = saved
        return left is real, got["a"], got["b"], real.getvalue()

    back, _, _, printed = overlap(pyviz_comms.StandardOutput)
    assert not back and "from the cell" not in printed  # pyviz's: a StringIO left, print lost
    back, a, b, printed = overlap(ThreadStandardOutput)
    assert back and printed == "from the cell\n"  # the stream put back; the cell's print in it
    assert a == ["from a"] and b == ["from b"]  # each handler's own lines


def test_the_engines_charts_have_points_along_a_run_to_the_end(store):
    """After Run to end, "jobs per priority queue over time" drew one straight line from
    0.86 h to 22.7 h: the engine's view was sampled at each redraw only, and the run to the
    end took a few redraws."""
    store.advance(0.86 * 3600)
    before = len(store.engine_history["jobs_per_queue"])
    store.run_to_end(wait=True)
    times = [t for t, _ in store.engine_history["jobs_per_queue"]][before:]
    assert len(times) >= 10, times
    assert sum(t < store.now / 2 for t in times) >= 5, times  # along the run, not at its end


def test_an_engine_tables_infinite_numbers_read_as_infinity_signs():
    """QoS's job table showed "-Infinity" in "slack at plan (h)"."""
    from workbench.ui.views.engines import _frame

    df = _frame({"a": {"job": "a", "slack_at_plan": -math.inf, "score": math.inf},
                 "b": {"job": "b", "slack_at_plan": 7200.0, "score": 0.123456}})
    assert list(df.slack_at_plan_h) == ["−∞", 2.0] and list(df.score) == ["∞", 0.123]


def test_the_engine_tab_says_an_engine_switched_to_has_not_scheduled_yet():
    """Switched to qos while paused at 1.53 h, the Engine tab showed "time (h) 0" and no
    forecasts beside 4 running jobs, with nothing saying why, until the next Step."""
    from bokeh.document import Document

    from workbench.ui.app import Workbench

    wb = Workbench("default", "default", "tiresias", inline=False)
    wb.layout.get_root(Document())
    wb.state.advance(1.5 * 3600)
    wb.sync(all_views=True)
    assert "not scheduled" not in wb.engine.header.object
    wb.state.switch_policy("qos")
    wb.sync(all_views=True)
    assert "qos has not scheduled a round yet" in wb.engine.header.object
    wb.state.step()
    wb.sync(all_views=True)
    assert wb.engine.header.object.startswith("### Engine: qos")
    assert "not scheduled" not in wb.engine.header.object
