"""Errors in the served console (issue #15), in a real browser.

- A workload with a job asking for 99,999 GPUs is served; Jobs and Forecasts open, and the
  app stays responsive.
- Jobs that can never run (rigid, bigger than the cluster) show rejected with their reason in
  Jobs and Decisions (the check `session.refusals` that `workbench simulate` uses too).
- Backend -> Load with a missing or malformed trace shows one clear line in the app, and the
  app stays on what it was showing.

The serve options checked before serving (`--policy fifo+nosuch`, `--speed -5`,
`--cluster 16x0`: one line, exit 2) are in tests/test_validation.py, which needs no browser.

Run: pytest -m ui tests/test_ui_errors.py
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest

pytestmark = pytest.mark.ui

from browser import Page, serve, stop

REASON = "rejected: needs 5 GPUs, the cluster has 4"  # dssm-0 of synthetic:n=6,ps=1
# elements the crafted text would have made, counted through Panel's shadow roots
_MARKUP_RUN = """() => { let n = 0;
  const walk = root => root.querySelectorAll('*').forEach(e => {
    if ((e.tagName === 'IMG' && e.getAttribute('src') === 'x') ||
        (e.tagName === 'I' && e.textContent === 'it')) n++;
    if (e.shadowRoot) walk(e.shadowRoot); });
  walk(document); return n; }"""


def responds_quickly(url: str, limit: float = 5.0) -> float:
    """Seconds the server's event loop takes to answer a request (it must, within `limit`).
    A missing page: answered by the loop at once, without building a session (a page does)."""
    started = time.monotonic()
    try:
        urllib.request.urlopen(url + "no-such-page", timeout=limit).close()
    except urllib.error.HTTPError as e:
        assert e.code == 404
    return time.monotonic() - started


def cell_texts(p: Page, field: str) -> list[str]:
    return p.page.locator(f".tabulator-cell[tabulator-field={field}]").all_inner_texts()


def test_a_99999_gpu_job_leaves_the_server_responsive(browser, tmp_path, screenshots):
    """The issue's workload: Jobs and Forecasts open while a job asks for 99,999 GPUs (an
    elastic Pollux row: the default scheduler binds 64 of its pods, holds them, and ends it
    with the run; tiresias, which gives a job its requested size or nothing, now rejects it as
    it arrives); the server keeps answering throughout."""
    trace = tmp_path / "impossible.csv"
    trace.write_text("name,time,application,num_replicas,batch_size\n"
                     "cifar10-0,107,cifar10,2,2048\n"
                     "big,200,cifar10,99999,2048\n"
                     "cifar10-1,300,cifar10,4,2048\n")
    proc, url = serve("--trace", str(trace), "--speed", "3600", "--policy", "kube-default")
    try:
        p = Page(browser, url)
        try:
            p.tab("Jobs")
            p.tab("Forecasts")
            p.click("Run")
            p.tab("Jobs")
            p.wait_for(lambda: "big" in cell_texts(p, "job"), what="the big job listed")
            assert responds_quickly(url) < 5.0
            p.tab("Forecasts")
            time.sleep(1.0)
            assert responds_quickly(url) < 5.0
            p.wait_for(lambda: "finished" in p.clock() or "finished" in p.page.content(),
                       what="the run to end (the big job cannot start)")
            p.tab("Jobs")
            p.wait_for(lambda: any("stalled: nothing can change" in t
                                   for t in cell_texts(p, "reason")),
                       what="the big job ended with the run, saying why")
            p.page.screenshot(path=str(screenshots / "ui-99999-gpu-job.png"), full_page=True)
            assert p.errors == []
        finally:
            p.close()
    finally:
        stop(proc)


def test_an_impossible_job_is_rejected_with_its_reason(browser, screenshots):
    """Rigid jobs bigger than the whole (4-GPU) cluster: rejected as they arrive, with the
    reason, in Jobs and in Decisions (by the admission step, the check the CLI uses)."""
    proc, url = serve("--trace", "synthetic:n=6,ps=1", "--cluster", "1x4", "--speed", "3600")
    try:
        p = Page(browser, url)
        try:
            p.tab("Jobs")
            p.tab("Forecasts")
            p.click("Run")
            p.tab("Jobs")
            p.wait_for(lambda: REASON in cell_texts(p, "reason"), what="a rejection reason")
            assert responds_quickly(url) < 5.0
            p.tab("Decisions")
            p.wait_for(lambda: "admission" in cell_texts(p, "policy"),
                       what="the admission step's decision")
            assert cell_texts(p, "reason").count(REASON) >= 2  # in Jobs and in Decisions
            p.page.screenshot(path=str(screenshots / "ui-impossible-job.png"), full_page=True)
            p.tab("Jobs")
            time.sleep(1.0)
            p.page.screenshot(path=str(screenshots / "ui-impossible-job-jobs.png"),
                              full_page=True)
            assert p.errors == []
        finally:
            p.close()
    finally:
        stop(proc)


@pytest.mark.parametrize("bad, words", [
    ("/nonexistent/w.csv", ["/nonexistent/w.csv", "no such file"]),
    ("MALFORMED", ["column 'num_replicas'", "expected a positive integer", "'many'"]),
])
def test_a_bad_trace_loaded_from_the_backend_card_is_one_line_in_the_app(
        browser, tmp_path, screenshots, bad, words):
    if bad == "MALFORMED":
        path = tmp_path / "malformed.csv"
        path.write_text("name,time,application,num_replicas,batch_size\n"
                        "a,0,cifar10,many,2048\n")
        bad = str(path)
        words = [f"{path}:2", *words]
    # a file on the server is read for the session with the token only (test_ui_untrusted_text)
    proc, url = serve("--speed", "3600", "--token", "t0ken")
    try:
        p = Page(browser, url + "?token=t0ken")
        try:
            p.page.locator(".card-header", has_text="Backend").first.click()
            trace_input = p.page.get_by_label("trace", exact=True)
            trace_input.fill(bad)
            trace_input.press("Enter")
            p.click("Load")
            message = p.wait_for(
                lambda: (t := p.page.locator("p", has_text="Not done:").all_inner_texts()) and t[0],
                what="the error in the app")
            for word in words:
                assert word in message, (word, message)
            assert "Traceback" not in p.page.content()
            assert "loading" not in message
            # the app is where it was: the default workload, and it still answers
            assert p.page.locator("text=workload default").count() > 0
            p.click("Step")
            assert responds_quickly(url) < 5.0
            p.page.screenshot(path=str(screenshots / f"ui-load-error-{tmp_path.name}.png"),
                              full_page=True)
            assert p.errors == []
        finally:
            p.close()
    finally:
        stop(proc)


def test_a_crafted_link_or_search_shows_its_markup_as_text(browser, screenshots):
    """`?tab=jobs&job=<img src=x onerror=...>` ran the script in the page (an operator's URL
    carries its token); typing it into the Cluster tab's search did too."""
    from urllib.parse import quote

    evil = '<img src=x onerror="document.title=\'PWNED\'">'
    proc, url = serve("--speed", "3600")
    try:
        p = Page(browser, url + "?tab=jobs&job=" + quote(evil))
        try:
            p.wait_for(lambda: p.page.locator("text=now: no such job").count() > 0,
                       what="the linked job's line")
            assert p.page.locator("text=<img src=x").count() > 0  # the name, as text
            p.tab("Cluster")
            box = p.page.get_by_placeholder("find a node or job")
            box.fill(evil + "<i>it</i>")
            box.press("Enter")
            p.wait_for(lambda: p.page.locator("text=No node or job named").count() > 0,
                       what="the search's answer")
            time.sleep(0.5)  # an image's error (a script's run) comes after it is drawn
            p.page.screenshot(path=str(screenshots / "ui-crafted-link.png"), full_page=True)
            assert p.page.title() != "PWNED"
            assert p.js(_MARKUP_RUN) == 0
            assert p.errors == []
        finally:
            p.close()
    finally:
        stop(proc)
