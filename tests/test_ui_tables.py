"""The console's tables, charts, exports and links in a real browser (issue #15, items 8-9 and
what operators expect): rows that stay put with a selection that follows its job, integer
counts and uncut columns, CSV downloads, distinct engine colours with legends beside the data,
step lines, a busy indicator, and a URL that restores the view.

Run: pytest -m ui tests/test_ui_tables.py (screenshots in $WORKBENCH_SCREENSHOTS)."""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ui

from browser import (
    Page,
    column_fields,
    column_titles,
    cut_cells,
    cut_titles,
    out_of_view,
    scrolled_to_the_end,
    served,
)

SELECTED = ".jobs-table .tabulator-row.tabulator-selected"


@pytest.fixture(scope="module")
def server():
    with served("--speed", "600", "--limit", "60") as url:
        yield url


def _column(p: Page, table: str, field: str) -> list[str]:
    return p.page.locator(f".{table} .tabulator-cell[tabulator-field={field}]").all_inner_texts()


def _overflows(p: Page, table: str) -> bool:
    """Whether the table is wider than its place (columns pushed off the right edge)."""
    return p.page.locator(f".{table} .tabulator-tableholder").first.evaluate(
        "e => e.scrollWidth > e.clientWidth + 1")


def _right_edges(p: Page, table: str) -> tuple[float, float]:
    """The right edge of the table's rightmost cell, and of the widget's own box in the page
    (a table wider than its place runs past it, clipped by what holds it)."""
    return p.page.locator(f".{table}").first.evaluate("""e => [
        Math.max(...[...e.querySelectorAll('.tabulator-cell')]
                 .map(c => c.getBoundingClientRect().right)),
        (e.getRootNode().host || e).getBoundingClientRect().right]""")


def _rows(p: Page) -> list[dict]:
    """One snapshot of the jobs table's rows on the page: job, state, arrival, selected."""
    return p.page.locator(".jobs-table .tabulator-row").evaluate_all("""rows => rows
        .filter(r => r.querySelector('[tabulator-field=job]'))
        .map(r => ({job: r.querySelector('[tabulator-field=job]').innerText,
                    state: r.querySelector('[tabulator-field=state]').innerText,
                    arrival_h: r.querySelector('[tabulator-field=arrival_h]').innerText,
                    selected: r.classList.contains('tabulator-selected')}))""")


def _pause(p: Page) -> None:
    pause = p.page.get_by_role("button", name="Pause", exact=True)
    if pause.count():  # (a short trace may have run to its end already)
        pause.click()


def _highlight_on(job: str, rows: list[dict]) -> bool:
    """The highlight is on `job`'s row, and only there (or `job` is on another page)."""
    return job not in [r["job"] for r in rows] or \
        [r["job"] for r in rows if r["selected"]] == [job]


def test_jobs_rows_stay_put_and_the_selection_follows_its_job(browser, server, screenshots):
    p = Page(browser, server)
    try:
        p.tab("Jobs")
        p.wait_for(lambda: p.click("Step") or len(_column(p, "jobs-table", "job")) >= 5,
                   what="five jobs listed")
        row = p.page.locator(".jobs-table .tabulator-row").nth(3)
        row.locator("[tabulator-field=reason]").click()
        p.wait_for(lambda: p.page.locator(SELECTED).count() == 1, what="a selected row")
        chosen = p.page.locator(SELECTED).locator("[tabulator-field=job]").inner_text()
        p.click("Run")
        seen_moves = False
        for _ in range(16):  # eight seconds of a running cluster: jobs arrive, start, finish
            time.sleep(0.5)
            # A refresh may be drawing: the highlight must be right within a second.
            (rows,) = p.wait_for(lambda: (r := _rows(p), _highlight_on(chosen, r))[1] and (r,),
                                 timeout=1.5, what=f"the highlight on {chosen}")
            jobs = [r["job"] for r in rows]
            seen_moves |= chosen in jobs and jobs.index(chosen) != 3
            # Active jobs in arrival order, then finished ones: no reshuffle by state.
            arrivals = [float(r["arrival_h"]) for r in rows
                        if r["state"] not in ("completed", "rejected")]
            assert arrivals == sorted(arrivals), rows
            assert p.page.get_by_text(f"{chosen} now:").count() == 1  # the details follow it
        _pause(p)
        workers = _column(p, "jobs-table", "workers") + _column(p, "jobs-table", "ps")
        assert workers and all(w.isdigit() for w in workers), workers  # "4", never "4.0"
        assert cut_titles(p, "jobs-table") == []
        assert not _overflows(p, "jobs-table")
        p.page.screenshot(path=str(screenshots / "ui-tables-jobs.png"), full_page=True)
        print("the selected row moved while selected:", seen_moves)
        assert p.errors == []
    finally:
        p.close()


def _visible_fields(p: Page, table: str) -> list[str]:
    return p.page.locator(f".{table} .tabulator-col").evaluate_all(
        "els => els.filter(e => e.offsetParent !== null && e.offsetWidth > 0)"
        ".map(e => e.getAttribute('tabulator-field')).filter(f => f)")


def _fit_at(p: Page, table: str, width: int) -> list[str]:
    """Make the page `width` px wide, wait for `table` to fit its tab (no column pushed off
    the right edge), and give the fields it shows then."""
    p.page.set_viewport_size({"width": width, "height": 1000})
    p.wait_for(lambda: not _overflows(p, table), timeout=10,
               what=f"the {table} fitting at {width} px")
    return _visible_fields(p, table)


def test_on_a_laptop_screen_the_jobs_table_keeps_the_reason_in_view(browser, server):
    """At 1,366 and 1,280 px the jobs table was wider than its tab: the reason, the column
    that says why a job is where it is, was off the right edge (and at 1,024 px still, until
    the placement and workers could give way too). The least needed columns give way, in
    their order (PS, arrival, band, last decision, placement, workers, deadline), and only as
    many as needed."""
    p = Page(browser, server)
    try:
        p.tab("Jobs")
        p.wait_for(lambda: p.click("Step") or len(_column(p, "jobs-table", "job")) >= 3,
                   what="jobs listed")
        seen = {}
        for width in (1500, 1366, 1280, 1024):
            seen[width] = _fit_at(p, "jobs-table", width)
            assert {"job", "state", "progress", "finish_h", "p_meet", "reason"} <= \
                set(seen[width]), (width, seen[width])
            assert cut_titles(p, "jobs-table") == []
        hidden = {w: [f for f in seen[1500] if f not in fields] for w, fields in seen.items()}
        order = ["ps", "arrival_h", "band", "last_action", "placement", "workers", "deadline_h"]
        assert hidden[1500] == [] and hidden[1366] and hidden[1280]
        for w in (1366, 1280, 1024):  # a prefix of the order
            assert sorted(hidden[w], key=order.index) == order[:len(hidden[w])], hidden
        assert len(hidden[1024]) >= len(hidden[1280]) >= len(hidden[1366])
        # In a split screen (800 px) the tabs stood beside the controls, 410 px wide: the
        # table showed four columns and rows made tall by a reason scrolled out of view. The
        # tabs go under the controls there, and the table shows what it shows at 1,024 px.
        shown = _fit_at(p, "jobs-table", 800)
        assert set(seen[1024]) <= set(shown), (seen[1024], shown)
        # narrower still (a phone), it scrolls sideways within itself, job names in view
        p.page.set_viewport_size({"width": 480, "height": 1000})
        scrolled = p.wait_for(lambda: scrolled_to_the_end(p, "jobs-table", "job"),
                              what="the jobs table scrolling at 480 px")
        assert out_of_view(scrolled) == []
        assert p.errors == []
    finally:
        p.close()


def test_a_long_job_name_is_shown_whole(browser, tmp_path):
    """On a real cluster a job is "namespace/name": at 1,366 px "default/deepspeech2-22"
    showed as "default/deepspeech2-2", clipped with no sign, in the column that is each row's
    key. A name wider than its column wraps now (after the "/", or anywhere if it must)."""
    from workbench.traces.registry import shipped_workload_path

    lines = [line for line in Path(shipped_workload_path()).read_text().splitlines()
             if not line.startswith("#")]
    trace = tmp_path / "long-names.csv"
    trace.write_text("\n".join([lines[0]] + [f"team-speech-recognition/{line}"
                                              for line in lines[1:13]]) + "\n")
    with served("--trace", str(trace), "--policy", "fifo") as url:
        p = Page(browser, url)
        try:
            p.tab("Jobs")
            p.wait_for(lambda: p.click("Step") or len(_column(p, "jobs-table", "job")) >= 3,
                       what="jobs listed")
            assert all(name.startswith("team-speech-recognition/")
                       for name in _column(p, "jobs-table", "job"))
            for width in (1366, 1024, 800):
                _fit_at(p, "jobs-table", width)
                assert cut_cells(p, "jobs-table", "job") == [], width
            assert p.errors == []
        finally:
            p.close()


def test_a_forecast_band_of_two_digit_hours_is_shown_whole_or_not_at_all(browser):
    """On a queue a day long the bands read "20.84–28.29": at 1,366 px their column was 69 px
    wide and cut them to "20.84–28.2" with no sign. It is now wide enough, or given way."""
    with served("--trace", "synthetic:n=80,ps=0.6", "--cluster", "small",
                "--policy", "fifo") as url:
        p = Page(browser, url)
        try:
            p.tab("Jobs")
            p.wait_for(lambda: p.click("Step") or any(
                len(t) >= 11 for t in _column(p, "jobs-table", "band")), what="a long band")
            for width in (1500, 1366, 1280, 1024):
                _fit_at(p, "jobs-table", width)
                assert cut_cells(p, "jobs-table", "band") == [], width
            assert p.errors == []
        finally:
            p.close()


def test_a_forecast_band_of_hundreds_of_hours_is_shown_whole(browser):
    """On the Philly trace's months-long queue on a small cluster the bands read
    "596.00–636.48": at 1,500 px their column was 96 px wide and cut them ("596.00–636.4").
    Past 100 h a band has one decimal, past 1,000 h none: it fits, shown at 1,500 px."""
    with served("--trace", "philly", "--cluster", "small", "--policy", "fifo") as url:
        p = Page(browser, url)
        try:
            p.tab("Jobs")
            p.wait_for(lambda: p.click("Step") or any(
                float(t.split("–")[-1]) >= 100 for t in _column(p, "jobs-table", "band") if t),
                what="a band of hundreds of hours")
            for width in (1500, 1024):
                shown = _fit_at(p, "jobs-table", width)
                assert cut_cells(p, "jobs-table", "band") == [], \
                    (width, p.table_facts("jobs-table", "band"))
                assert width < 1500 or "band" in shown, shown
            assert p.errors == []
        finally:
            p.close()


def test_a_progress_bar_is_one_line_high_in_a_tall_row(browser, server):
    """Tabulator's progress bar filled its cell: in a row grown by wrapped text (a placement
    over three nodes, a long reason) it was a block as tall as the row."""
    p = Page(browser, server)
    try:
        p.page.set_viewport_size({"width": 1366, "height": 1000})
        p.tab("Jobs")
        cells = ".jobs-table .tabulator-cell[tabulator-field=progress]"

        def sizes():  # (cell height, bar height) of each progress cell with a bar drawn
            return p.page.locator(cells).evaluate_all(
                "els => els.filter(e => e.firstElementChild && e.firstElementChild.offsetHeight)"
                ".map(e => [e.offsetHeight, e.firstElementChild.offsetHeight])")
        # the sizes of one look (the table may redraw between two) with a row taller than a line
        seen = p.wait_for(lambda: p.click("Step") or ((s := sizes()) and
                                                      any(cell >= 40 for cell, _ in s) and s),
                          what="a row taller than a line")
        line = p.page.locator(".jobs-table .tabulator-cell[tabulator-field=job]").first \
            .evaluate("e => parseFloat(getComputedStyle(e).lineHeight) || 17")
        assert all(bar <= 1.5 * line for _, bar in seen), (line, seen)
        assert p.errors == []
    finally:
        p.close()


def test_a_last_decision_keeps_its_time_and_unit_on_one_line(browser, server):
    """At 1,366 px 'Place @ 0.05 h' wrapped before the 'h', left alone on a second line: the
    column wraps in balanced lines now ('Place @' / '0.05 h'). Checked on the text's own
    layout: the first digit of the time and the unit's 'h' sit on the same line."""
    p = Page(browser, server)
    try:
        p.page.set_viewport_size({"width": 1366, "height": 1000})
        p.tab("Jobs")
        cells = ".jobs-table .tabulator-cell[tabulator-field=last_action]"

        def tops():  # [(top of the time's first digit, top of its 'h')] of each decision shown
            return p.page.locator(cells).evaluate_all("""els => els.map(e => {
                const w = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
                const node = w.nextNode();
                const s = node ? node.textContent : "";
                const at = s.lastIndexOf(" @ ") + 3;
                if (at < 3 || !s.endsWith(" h")) return null;
                const top = (i) => { const r = document.createRange();
                    r.setStart(node, i); r.setEnd(node, i + 1);
                    return r.getBoundingClientRect().top; };
                return [top(at), top(s.length - 1)];
            }).filter(x => x)""")
        seen = p.wait_for(lambda: p.click("Step") or ((t := tops()) and len(t) >= 5 and t),
                          what="five decisions in the table")
        assert all(abs(digit - unit) < 2 for digit, unit in seen), seen
        assert p.errors == []
    finally:
        p.close()


def test_in_a_notebook_cell_the_tabs_start_under_the_controls_side_by_side(browser, server):
    """In a notebook cell beside JupyterLab's file browser (~930 px) the tabs stood beside the
    controls, ~540 px wide, and at 800 px 410. Under ~1,000 px they go under the controls now,
    and the controls put their two groups (the run's, the engine's) side by side there, so the
    tabs start about as high as the controls' first group ends; beside the tabs (1,366 px) the
    groups stand one above the other in the 380 px column."""
    p = Page(browser, server)
    try:
        for width, beside in ((1366, True), (930, False), (800, False)):
            p.page.set_viewport_size({"width": width, "height": 900})
            time.sleep(1.0)
            tab = p.page.locator(".bk-tab").first.bounding_box()
            engine = p.page.get_by_text("Engine now:").first.bounding_box()
            step = p.page.get_by_role("button", name="Step", exact=True).bounding_box()
            if beside:
                assert tab["x"] > 300 and engine["y"] > step["y"] + step["height"], \
                    (width, tab, engine, step)
            else:  # the engine's group beside the run's, the tabs under both
                assert tab["x"] < 50 and engine["x"] > 300, (width, tab, engine)
                assert engine["y"] < step["y"] + step["height"], (width, engine, step)
                assert tab["y"] < 350, (width, tab)
        assert p.errors == []
    finally:
        p.close()


def test_on_a_laptop_screen_no_tab_scrolls_sideways(browser, server):
    """At 1,366 and 1,280 px the whole page scrolled sideways (by 19 and 62 px), on every tab:
    the Engine tab's charts stand two side by side, and a title as long as Tiresias's 'hours
    until each running job drops a queue (soonest first) over time' (Bokeh does not wrap
    one) ran past the right edge with its toolbar; a hidden tab is still laid out. At 1,024 px
    (or in a notebook's cell) the rows of search boxes and download buttons did too (by 246
    px): they go on to the next line now (a wide table still scrolls within itself). Under
    ~1,000 px the tabs go under the controls, and at 480 px (a phone) the page was 620 px
    wide: Panel gave the row of controls and tabs the sum of their least widths."""
    p = Page(browser, server)
    try:
        p.click("Step")
        for width in (1366, 1280, 1024, 800, 480):
            p.page.set_viewport_size({"width": width, "height": 900})
            time.sleep(0.5)
            tabs_left = p.page.locator(".bk-tab").first.evaluate(
                "e => e.getBoundingClientRect().left")
            assert (tabs_left > 300) == (width >= 1024), (width, tabs_left)  # beside / under
            for tab in ("Engine", "Cluster", "Jobs"):
                p.tab(tab)
                time.sleep(1.0)  # the charts' layout
                sizes = p.page.evaluate("() => [document.documentElement.scrollWidth,"
                                        " document.documentElement.clientWidth]")
                assert sizes[0] <= sizes[1], (width, tab, sizes)
        assert p.errors == []
    finally:
        p.close()


def test_the_engine_tabs_queue_fits_the_tab_with_its_reasons_whole(browser, server):
    """Tiresias's queue table was sized to its data: at 1,366 px its reason column ran past
    the tab's right edge and was cut ('... higher priority jobs need th'), and 'attained_gpu_h'
    was cut in its header. It is the console's table now: text wraps, columns fit. At 1,024 px
    the facts' names were cut too ('queue_thresholds_gpu_'): they are words now, and wrap."""
    p = Page(browser, server)
    try:
        p.page.set_viewport_size({"width": 1366, "height": 1000})
        p.tab("Engine")
        p.wait_for(lambda: p.click("Step") or any(
            len(t) > 40 for t in _column(p, "engine-table", "reason")), what="a queued job")
        _pause(p)
        assert "queue thresholds gpu (h)" in _column(p, "engine-facts", "fact")
        for width in (1366, 1280, 1024):
            p.page.set_viewport_size({"width": width, "height": 1000})
            time.sleep(1.0)
            assert not _overflows(p, "engine-table"), width
            assert cut_cells(p, "engine-table", "reason") == [], width
            assert cut_titles(p, "engine-table") == [], width
            assert cut_cells(p, "engine-facts", "value") == [], width
            assert cut_cells(p, "engine-facts", "fact") == [], width
        assert p.errors == []
    finally:
        p.close()


def test_a_switch_previews_changed_jobs_are_shown_whole_in_the_sidebar(browser):
    """The preview's jobs table in the sidebar was sized to its data: 'restarting, 37% done'
    ran past the sidebar's edge, cut with no sign. Each engine's outcome wraps now, and a
    second preview (other engines, other columns) gets a table of its own. On the default
    workload, where jobs are still running 4 hours on."""
    with served("--speed", "600") as url:
        _preview_changes_whole(Page(browser, url))


def _preview_changes_whole(p: Page) -> None:
    try:
        p.page.set_viewport_size({"width": 1366, "height": 1000})
        for _ in range(6):
            p.click("Step")
        _pause(p)
        select = p.page.get_by_label("switch to")
        for engine in ("pollux", "fifo"):
            p.wait_for(lambda e=engine: e in select.locator("option").all_inner_texts(),
                       what=f"option {engine}")
            select.select_option(engine)
            p.page.wait_for_selector(f"text=/If you switch \\S+ → {engine} now/",
                                     timeout=60_000)
            # the engines' outcomes in columns that never change (a change of columns made
            # the browser build the table anew), the engines named in the summary's first row
            assert p.wait_for(lambda e=engine: _column(p, "preview-summary", "candidate")[:1]
                              == [e], what=f"the summary of {engine}")
            assert _column(p, "preview-summary", "current")[:1] == ["tiresias"]
            # (Tabulator's own '_index' column, hidden, may come and go)
            assert [(f, t) for f, t in zip(column_fields(p, "preview-changes"),
                                           column_titles(p, "preview-changes"))
                    if f != "_index"] == [("job", "job"), ("current", "if kept"),
                                          ("candidate", "if switched")]
            for field in ("job", "current", "candidate"):
                assert cut_cells(p, "preview-changes", field) == [], (engine, field)
            texts = _column(p, "preview-changes", "candidate")
            assert any(len(t) >= 16 for t in texts), texts  # 'pending, 0% done'
            cells, box = _right_edges(p, "preview-changes")
            assert cells <= box + 1, (engine, cells, box)
        # in a notebook cell (930 px) the engine's group takes a line of its own for the
        # preview, its two tables side by side (one above the other, they pushed the tabs down
        # 1,200 px); cancelled, the group goes back beside the run's
        p.page.set_viewport_size({"width": 930, "height": 1000})
        summary, changes = (p.page.locator(f".{name}").first for name in
                            ("preview-summary", "preview-changes"))
        p.wait_for(lambda: abs(summary.bounding_box()["y"] - changes.bounding_box()["y"]) < 2,
                   what="the preview's tables side by side at 930 px")
        assert summary.bounding_box()["x"] + summary.bounding_box()["width"] <= \
            changes.bounding_box()["x"] + 1
        step = p.page.get_by_role("button", name="Step", exact=True).bounding_box()
        engine = p.page.get_by_text("Engine now:").first
        assert engine.bounding_box()["y"] > step["y"] + step["height"]  # under the run's
        p.page.get_by_role("button", name="Cancel", exact=True).click()
        p.wait_for(lambda: engine.bounding_box()["y"] < step["y"] + step["height"],
                   what="the engine's group beside the run's again")
        assert p.errors == []
    finally:
        p.close()


def test_csv_downloads_of_jobs_and_decisions(browser, server, tmp_path):
    p = Page(browser, server)
    try:
        for _ in range(4):
            p.click("Step")
            time.sleep(0.4)
        p.tab("Jobs")
        with p.page.expect_download() as info:
            p.page.get_by_text("Download jobs (CSV)").click()
        rows = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text())))
        assert rows and {"job", "state", "workers", "arrival_h", "reason"} <= set(rows[0])
        p.tab("Decisions")
        with p.page.expect_download() as info:
            p.page.get_by_text("Download log (CSV)").click()
        log = list(csv.DictReader(io.StringIO(Path(info.value.path()).read_text())))
        assert log and {"time_h", "policy", "action", "job", "reason"} <= set(log[0])
        times = [float(r["time_h"]) for r in log]
        assert times == sorted(times)  # a log reads forwards
        assert cut_titles(p, "decisions-table") == [] and not _overflows(p, "decisions-table")
        # on a small laptop's screen the log was wider than its tab, the detail cut at the edge:
        # 'applied' and then 'policy' give way
        shown = _fit_at(p, "decisions-table", 1024)
        assert {"time_h", "action", "job", "reason", "detail"} <= set(shown), shown
        assert cut_titles(p, "decisions-table") == []
        assert p.errors == []
    finally:
        p.close()


def test_what_if_colours_legend_counts_and_busy_indicator(browser, screenshots):
    with served() as url:  # every job of the default trace: a what-if that runs for seconds
        _what_if_in_browser(Page(browser, url), screenshots)


def _what_if_in_browser(p: Page, screenshots) -> None:
    try:
        p.tab("What-if")
        p.click("Fork and run every engine")
        from workbench.policies import available

        busy = p.page.get_by_text(f"working: what-if of {len(available())} engines")
        # Playwright's own wait watches every frame: a short what-if shows the indicator briefly
        busy.wait_for(state="visible", timeout=30_000)
        p.page.screenshot(path=str(screenshots / "ui-tables-whatif-busy.png"))
        # the chart fills in as engines end: the whole result is there once every engine has
        # its line (the busy indicator may go a moment before the last sync draws it)
        labels = p.wait_for(lambda: (got := p.source("whatif_cdf", "label")) and
                            len(got) == len(available()) and got, timeout=180,
                            what="every engine's line in the what-if's chart")
        colours = p.source("whatif_cdf", "colour")
        assert len(set(colours)) == len(colours)  # one colour each
        assert all(" done" in label for label in labels)  # counts beside every engine
        # The legend names every engine with its counts, and sits beside the plot (not over
        # the lines) on a wide screen
        assert p.wait_for(lambda: _cdf_layout(p)["legend"], what="the legend") == labels
        wide = _cdf_layout(p)
        assert wide["legend_box"][0] >= wide["plot_box"][2] - 1, wide
        p.wait_for(lambda: not busy.is_visible(), what="the busy indicator to go")
        counts = _column(p, "whatif-table", "completed") + _column(p, "whatif-table", "rejected")
        assert counts and all(c.isdigit() for c in counts)
        assert cut_titles(p, "whatif-table") == []
        p.page.screenshot(path=str(screenshots / "ui-tables-whatif.png"), full_page=True)
        # on a small laptop's screen the notes were off the right edge
        shown = _fit_at(p, "whatif-table", 1024)
        assert {"policy", "completed", "rejected", "avg_jct_h", "note"} <= set(shown), shown
        assert cut_titles(p, "whatif-table") == []
        # in a split screen (800 px) the tabs go under the controls: every column fits, and
        # the legend stays beside a chart with room for its curves
        shown = _fit_at(p, "whatif-table", 800)
        assert set(_visible_fields(p, "whatif-table")) >= {"policy", "note"}, shown
        split = _cdf_layout(p)
        assert split["legend_box"][0] >= split["plot_box"][2] - 1, split
        assert split["inner_width"] >= 300, split
        # narrower (a phone), the table scrolls sideways with each engine's name in view
        p.page.set_viewport_size({"width": 480, "height": 1000})
        scrolled = p.wait_for(lambda: scrolled_to_the_end(p, "whatif-table", "policy"),
                              what="the what-if table scrolling at 480 px")
        assert out_of_view(scrolled) == []
        # and the legend goes below the chart: beside it, it left the curves 134 px
        narrow = p.wait_for(lambda: (c := _cdf_layout(p))["legend_box"][1] >=
                            c["plot_box"][3] - 1 and c, what="the legend below the chart")
        assert narrow["inner_width"] >= 300, narrow
        assert p.errors == []
    finally:
        p.close()


def test_a_second_what_if_leaves_no_row_lookup_warnings(browser):
    """A second what-if starts from one row where the first left thirteen, two of them
    styled (DL2's and OASIS's rejected counts): the browser drew the one row with the old
    styles, and Tabulator warned "Find Error - No matching row found: 7" on each start."""
    with served() as url:
        p = Page(browser, url)
        warnings: list[str] = []
        p.page.on("console", lambda m: warnings.append(m.text) if "matching row" in m.text
                  else None)
        try:
            p.tab("What-if")
            stop = p.page.get_by_role("button", name="Stop", exact=True)
            for run in range(2):
                p.click("Fork and run every engine")
                p.wait_for(stop.is_enabled, timeout=30, what=f"what-if {run + 1} running")
                p.wait_for(lambda: not stop.is_enabled(), timeout=180,
                           what=f"what-if {run + 1} to end")
            time.sleep(1.0)
            # the rejected counts stand out on the rows of the engines that rejected jobs
            flagged = p.page.locator(".whatif-table .tabulator-row").evaluate_all("""rows =>
                rows.map(r => [r.querySelector('[tabulator-field=policy]').innerText,
                               r.querySelector('[tabulator-field=rejected]')])
                    .map(([name, c]) => [name, c.innerText,
                                         getComputedStyle(c).backgroundColor])""")
            assert len(flagged) > 1, flagged
            for name, rejected, colour in flagged:
                assert (colour == "rgb(253, 224, 220)") == (int(rejected) > 0), flagged
            assert warnings == [] and p.errors == []
        finally:
            p.close()


_CDF_LAYOUT = """() => {
  const f = Bokeh.documents[0].get_model_by_name('whatif_cdf_figure');
  const box = (e) => {
    const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  let legend = null;
  const walk = (root) => root.querySelectorAll('*').forEach(e => {
    if (e.shadowRoot) walk(e.shadowRoot);
    if (e.classList.contains('whatif-legend')) legend = legend || e; });
  walk(document);
  const plot = legend && [...legend.parentNode.children]  // its row's chart
    .find(e => e.classList.contains('bk-Figure'));
  const entries = legend ? [...(legend.shadowRoot || legend).querySelectorAll('.entry')]
    .map(d => d.textContent) : [];
  return {inner_width: f.inner_width, plot_box: plot && box(plot),
          legend_box: legend && box(legend), legend: entries}; }"""


def _cdf_layout(p: Page) -> dict:
    """The what-if CDF's plot width, and where its chart and legend are drawn."""
    return p.js(_CDF_LAYOUT)


def test_timeline_draws_steps_with_legends_beside(browser, server, screenshots):
    p = Page(browser, server)
    try:
        p.click("Run")
        p.tab("Timeline")
        p.wait_for(lambda: len(p.source("timeline", "time_h")) > 5, what="timeline samples")
        glyphs = p.js("""() => [...Bokeh.documents[0].all_models]
            .filter(m => m.type == 'GlyphRenderer' && m.data_source.name == 'timeline')
            .map(m => m.glyph.type)""")
        assert glyphs and set(glyphs) == {"Step"}
        _pause(p)
        p.page.screenshot(path=str(screenshots / "ui-tables-timeline.png"), full_page=True)
        assert p.errors == []
    finally:
        p.close()


def test_a_link_restores_tab_engine_and_selected_job(browser, server, screenshots):
    p = Page(browser, server + "?tab=jobs&engine=fifo&job=cifar10-0")
    try:
        assert "fifo" in p.page.locator("text=Engine now").first.inner_text()
        assert p.page.locator(".bk-tab.bk-active").inner_text() == "Jobs"
        p.click("Step")
        p.wait_for(lambda: p.page.locator(SELECTED).count() == 1, what="the linked job selected")
        assert p.page.locator(SELECTED).locator("[tabulator-field=job]").inner_text() == "cifar10-0"
        assert p.page.get_by_text("cifar10-0 now:").count() == 1
        p.tab("Decisions")
        href = p.wait_for(lambda: (h := p.js("() => window.location.href")) and
                          "tab=decisions" in h and h, what="the URL to follow the tab")
        assert "engine=fifo" in href and "job=cifar10-0" in href
        p.page.screenshot(path=str(screenshots / "ui-tables-link.png"), full_page=True)
        assert p.errors == []
    finally:
        p.close()



def test_titles_keep_their_font_and_fit_in_a_jupyterlab_page(browser, server, screenshots):
    """In JupyterLab, Panel's jupyter.css gives the console JupyterLab's font (system-ui: wider
    than the Helvetica/Arial the columns are sized for): the What-if table's titles were cut
    ("complete", "unfinishe", "makespa") in a notebook cell. Here the served page gets that
    style sheet, with JupyterLab's font."""
    import panel

    jupyter_css = (Path(panel.__file__).parent / "_templates" / "jupyter.css").read_text()
    p = Page(browser, server)
    try:
        p.page.add_style_tag(content=":root { --jp-ui-font-family: system-ui, -apple-system, "
                                     "blinkmacsystemfont, 'Segoe UI', helvetica, arial, sans-serif; }"
                                     + jupyter_css)
        p.page.set_viewport_size({"width": 1150, "height": 1000})  # tabs ~740 px: a notebook's
        p.tab("What-if")
        time.sleep(1.0)
        font = p.page.locator(".whatif-table .tabulator-col-title").first.evaluate(
            "e => getComputedStyle(e).fontFamily")
        assert font.startswith("Helvetica"), font
        assert cut_titles(p, "whatif-table") == []
        p.page.screenshot(path=str(screenshots / "ui-tables-jupyter-font.png"), full_page=True)
        assert p.errors == []
    finally:
        p.close()
