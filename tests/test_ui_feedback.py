"""What the console says of its own state, in a real browser: a chart with nothing to draw
says why, and a button that cannot be pressed looks it.

Run: pytest -m ui tests/test_ui_feedback.py"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.ui

from browser import Page, served

# the line each tab shows while its chart has nothing to draw
NO_DATA = {"Timeline": "No data yet: the timeline starts", "Forecasts": "No data yet: no queued"}
# the computed look of a button: its colour, its text's, the cursor over it, whether the
# pointer reaches it (Bokeh's 'none' let it through, and the cursor never showed)
_LOOK = """e => { const s = getComputedStyle(e);
  return [e.disabled, s.backgroundColor, s.color, s.cursor, s.pointerEvents]; }"""


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


def test_a_disabled_button_looks_disabled(browser, server, screenshots):
    """The disabled 'Apply switch' was drawn in the blue of an enabled one (only fainter): it
    is grey now, as a disabled plain button is, under a not-allowed cursor."""
    p = Page(browser, server)
    try:
        apply = p.page.get_by_role("button", name="Apply switch", exact=True)
        recompute = p.page.get_by_role("button", name="Recompute", exact=True)
        p.tab("What-if")
        run = p.page.get_by_role("button", name="Fork and run every engine", exact=True)
        disabled, colour, text, cursor, pointer = apply.evaluate(_LOOK)
        plain = recompute.evaluate(_LOOK)
        enabled = run.evaluate(_LOOK)
        assert disabled and plain[0] and not enabled[0]
        assert colour != enabled[1] and (colour, text) == tuple(plain[1:3]), (colour, text, plain)
        assert cursor == "not-allowed" and pointer != "none", (cursor, pointer)
        apply.hover()  # the pointer reaches it (Playwright waits for it to be hit)
        p.page.screenshot(path=str(screenshots / "ui-feedback-disabled-button.png"))
        assert p.errors == []
    finally:
        p.close()
