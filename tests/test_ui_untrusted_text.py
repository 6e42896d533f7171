"""Text from outside (a trace's job names, a search, a link's `?job=`, a typed path and the
error about it) is shown as text, never run as markup; and a session without the token cannot
have the server read a file it names. Fast, no browser (the browser check of a crafted link
is in test_ui_browser.py)."""

from __future__ import annotations

import html

import pytest
from bokeh.document import Document

from workbench.traces.registry import names_a_file
from workbench.ui.app import Workbench
from workbench.ui.views._panes import HTML, Alert, Markdown

EVIL = '<img src=x onerror="document.title=1"><script>alert(1)</script>'


def _shown(pane) -> str:
    """The HTML a pane's model carries to the page (Panel escapes it for the model)."""
    return html.unescape(pane.get_root(Document()).text)


@pytest.mark.parametrize("pane", [Markdown, HTML, Alert])
def test_every_pane_drops_scripts_and_event_handlers_and_keeps_the_consoles_own_markup(pane):
    p = pane(f'**{EVIL}** <span class="busy" style="color:red" onclick="x()">kept</span>'
             ' <a href="javascript:alert(1)">link</a>')
    shown = _shown(p)
    for bad in ("onerror", "<script", "alert(1)", "onclick", "javascript:", "<img"):
        assert bad not in shown, (bad, shown)
    assert '<span class="busy" style="color:red">kept</span>' in shown
    p.object = f"<i>{EVIL}</i>"  # an update is cleaned as the first render was
    assert "onerror" not in _shown(p) and "<i>" in _shown(p)


@pytest.fixture
def console():
    wb = Workbench("default", "default", "tiresias", inline=False)
    wb.layout.get_root(Document())
    return wb


def test_a_search_for_markup_is_echoed_as_the_text_typed(console):
    console.cluster.select(EVIL)
    shown = _shown(console.cluster.info)
    assert "No node or job named" in shown and "<img" not in shown
    assert "&lt;img src=x onerror=" in shown  # the typed text, as text


def test_a_search_for_a_finished_job_finds_it_and_says_it_holds_nothing(console):
    """It said "No node or job named ncf-7" of a job the Jobs tab listed as completed."""
    console.state.advance(6 * 3600)
    done = console.state.jobs[console.state.jobs.state == "completed"].job
    assert len(done)
    console.cluster.select(done.iloc[0])
    assert _shown(console.cluster.info) == \
        f"<p><strong>{done.iloc[0]}</strong> holds no GPU now (completed).</p>\n"


def test_a_job_named_with_markup_is_shown_as_text_in_the_jobs_tab(console):
    console.jobs._fill_why(EVIL)  # (a `?job=` link names any job, real or not)
    shown = _shown(console.jobs.why_title)
    assert "<img" not in shown and "<script" not in shown
    assert "&lt;img src=x onerror=" in shown  # the name, as text


@pytest.mark.parametrize("spec, reads", [
    ("default", False), ("default:deadlines=none", False), ("philly", False),
    ("synthetic:n=5", False), ("openb", False), ("openb:pods=gpushare40,n=10", False),
    ("/etc/passwd", True), ("philly:/tmp/p.csv", True), ("pollux:w.csv", True),
    ("openb:pods=/tmp/p.csv", True), ("openb:n=5,pods=../x.csv", True), ("w.csv", True),
])
def test_which_trace_specs_read_a_file_they_name(spec, reads):
    assert names_a_file(spec) is reads


def test_a_session_without_the_token_cannot_have_the_server_read_a_file(console, tmp_path):
    """A read-only URL's Load of /etc/passwd answered "unknown trace format: ... got
    root:x:0:0:...": the file's first line, and whether any path exists."""
    secret = tmp_path / "secret.csv"
    secret.write_text("root:x:0:0:root\n")
    controls = console.controls
    controls.real_ok = False  # as `workbench serve` makes a session without the token
    controls.trace.value = str(secret)
    controls.load.clicks += 1
    said = controls.message.object
    assert "needs the access token" in said and "root:x" not in said
    assert console.state.workload == "default"  # nothing loaded
    controls.trace.value = "synthetic:n=5"  # a built-in workload loads without it
    controls.load.clicks += 1
    assert console.state.workload.startswith("synthetic")
    controls.real_ok = True  # with the token: the file is read, its error one line of text
    controls.trace.value = str(secret)
    controls.load.clicks += 1
    assert "Not done:" in controls.message.object and "needs the access token" not in \
        controls.message.object
