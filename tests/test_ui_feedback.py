"""What the console says of its own state, in a real browser: a chart with nothing to draw
says why.

Run: pytest -m ui tests/test_ui_feedback.py"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.ui

from browser import Page, served

# the line each tab shows while its chart has nothing to draw
NO_DATA = {"Timeline": "No data yet: the timeline starts", "Forecasts": "No data yet: no queued"}


@pytest.fixture(scope="module")
def server():
    with served("--speed", "600") as url:
        yield url


def test_empty_charts_say_there_is_no_data_yet_until_it_comes(browser, server, screenshots):
    """Before any job had arrived the Timeline's charts and the Forecasts' chart were blank
    boxes, with no word of why: a line says so, and goes once there is something to draw."""
    p = Page(browser, server)
    try:
        for tab in ("Timeline", "Forecasts"):
            p.tab(tab)
            p.page.get_by_text(NO_DATA[tab]).wait_for(state="visible", timeout=30_000)
            p.page.screenshot(path=str(screenshots / f"ui-feedback-empty-{tab.lower()}.png"))
        for tab, source, column in (("Timeline", "timeline", "time_h"),
                                    ("Forecasts", "forecasts", "job")):
            p.tab(tab)  # (a tab's models reach the page when it is shown)
            p.wait_for(lambda s=source, c=column: p.click("Step") or p.source(s, c),
                       what=f"data in the {tab} chart")
            p.wait_for(lambda t=tab: p.page.get_by_text(NO_DATA[t]).count() == 0,
                       what=f"the {tab} note to go")
        assert p.errors == []
    finally:
        p.close()

