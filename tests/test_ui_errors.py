"""Errors in the served console (issue #15), in a real browser.

- A workload with a job asking for 99,999 GPUs is served; Jobs and Forecasts open, the app
  stays responsive, and the job shows rejected with its reason (the check `session.refusals`
  that `workbench simulate` uses too).
- Backend -> Load with a missing or malformed trace shows one clear line in the app, and the
  app stays on what it was showing.

The serve options checked before serving (`--policy fifo+nosuch`, `--speed -5`,
`--cluster 16x0`: one line, exit 2) are in tests/test_validation.py, which needs no browser.

Run: pytest -m ui tests/test_ui_errors.py
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request

import pytest

pytestmark = pytest.mark.ui

from browser import Page, serve

REASON = "rejected: needs 99,999 GPUs, the cluster has 64"


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


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


def test_an_impossible_job_is_rejected_with_its_reason_and_the_server_stays_up(
        browser, tmp_path, screenshots):
    trace = tmp_path / "impossible.csv"
    trace.write_text("name,time,application,num_replicas,batch_size\n"
                     "cifar10-0,107,cifar10,2,2048\n"
                     "big,200,cifar10,99999,2048\n"
                     "cifar10-1,300,cifar10,4,2048\n")
    proc, url = serve("--trace", str(trace), "--speed", "3600")
    try:
        p = Page(browser, url)
        try:
            p.tab("Jobs")
            p.tab("Forecasts")
            p.click("Run")  # the big job arrives, is judged and rejected
            p.tab("Jobs")
            p.wait_for(lambda: "big" in cell_texts(p, "job"), what="the big job listed")
            p.wait_for(lambda: REASON in cell_texts(p, "reason"), what="its rejection reason")
            assert responds_quickly(url) < 5.0
            p.tab("Forecasts")
            time.sleep(1.0)
            assert responds_quickly(url) < 5.0
            p.tab("Decisions")
            # the admission step's Reject, with the reason (the Jobs tab's cells stay in the page)
            p.wait_for(lambda: "admission" in cell_texts(p, "policy"),
                       what="the admission step's decision")
            assert cell_texts(p, "reason").count(REASON) >= 2
            p.tab("Jobs")
            time.sleep(1.0)
            p.page.screenshot(path=str(screenshots / "ui-impossible-job.png"), full_page=True)
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
    proc, url = serve("--speed", "3600")
    try:
        p = Page(browser, url)
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
