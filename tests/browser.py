"""Shared pieces of the browser tests: Debian's chromium driven by Playwright, a served app
on a free port, and a `Page` that collects console errors. Test modules import the fixtures
(`browser`, `screenshots`) from here."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = os.environ.get("WORKBENCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip("needs Debian's chromium (apt-get install chromium)", allow_module_level=True)

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Warnings the browser may print that say nothing about the app.
HARMLESS = ("GL Driver Message", "WebGL", "favicon.ico")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(*extra: str):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "serve", "--no-browser", "--port", str(port), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"workbench serve exited: {proc.stdout.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}/"
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("workbench serve did not start within 90 s")


def stop(proc: subprocess.Popen) -> None:
    """Ask a served app to stop; kill it if it has not within 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def served(*extra: str) -> Iterator[str]:
    """`workbench serve` with `extra` options on a free port until the block ends; yields its
    URL."""
    proc, url = serve(*extra)
    try:
        yield url
    finally:
        stop(proc)


_TABLE_FACTS = """([cls, field]) => {
  const rows = [];
  for (const m of Bokeh.documents[0].all_models)
    if (m.css_classes && m.css_classes.includes(cls)) rows.push(m.source ? m.source.get_length() : null);
  const cells = [];
  const walk = (root) => root.querySelectorAll('*').forEach(e => {
    if (e.shadowRoot) walk(e.shadowRoot);
    if (e.classList.contains('tabulator-cell') && e.getAttribute('tabulator-field') === field) {
      const r = e.getBoundingClientRect(); cells.push([r.width, r.height]); } });
  walk(document);
  const tables = [];  // the table elements of that class: their size and rows drawn
  const find = (root) => root.querySelectorAll('*').forEach(e => {
    if (e.shadowRoot) find(e.shadowRoot);
    if (e.classList.contains(cls) && e.shadowRoot) { const r = e.getBoundingClientRect();
      tables.push([r.width, r.height, e.shadowRoot.querySelectorAll('.tabulator-row').length]); } });
  find(document);
  return {model_rows: rows, cells_drawn: cells, tables, visibility: document.visibilityState};
}"""


# Each table of a class that is wider than its place, scrolled to its right end: the holder's
# left and right edges, and each `field` cell's text and edges.
_SCROLL_TO_END = """([cls, field]) => { const out = [];
  const walk = (root) => root.querySelectorAll('*').forEach(e => {
    if (e.shadowRoot) walk(e.shadowRoot);
    if (!e.classList.contains(cls) || !e.shadowRoot) return;
    const h = e.shadowRoot.querySelector('.tabulator-tableholder');
    if (!h || h.scrollWidth <= h.clientWidth + 1) return;
    h.scrollLeft = h.scrollWidth; const hb = h.getBoundingClientRect();
    const cells = [...e.shadowRoot.querySelectorAll(`.tabulator-cell[tabulator-field=${field}]`)]
      .map(c => { const r = c.getBoundingClientRect();
                  return [c.textContent, Math.round(r.left), Math.round(r.right)]; });
    out.push([[Math.round(hb.left), Math.round(hb.right)], cells]); });
  walk(document); return out; }"""


class Page:
    """One browser session on the app, collecting console errors."""

    def __init__(self, browser, url: str) -> None:
        self.page = browser.new_page(viewport={"width": 1500, "height": 1000})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error"
                     and not any(h in m.text for h in HARMLESS) else None)
        # the stack's first frames name the script that failed (a bare message rarely does)
        self.page.on("pageerror", lambda e: self.errors.append(
            f"page error: {e} at {' | '.join((e.stack or '').splitlines()[1:4])}"))
        self.page.goto(url)
        self.page.wait_for_selector("text=Scheduling Workbench", timeout=60_000)
        self.wait_for(lambda: self.js("() => !!Bokeh.documents[0].get_model_by_name('gpu_cells')"))

    def js(self, code: str):
        return self.page.evaluate(code)

    def source(self, name: str, column: str) -> list:
        """A column of the data source `name`; [] while no view shows it yet (a tab's models
        reach the page when the tab is first shown)."""
        return self.js(f"() => (m => m ? Array.from(m.data['{column}']) : [])"
                       f"(Bokeh.documents[0].get_model_by_name('{name}'))")

    def table_facts(self, css_class: str, field: str) -> dict:
        """For a failure's message: the rows the browser's model of the table `css_class` holds,
        and the size of each `field` cell drawn (Panel draws them inside shadow roots)."""
        return self.page.evaluate(_TABLE_FACTS, [css_class, field])

    def wait_for(self, condition, timeout: float = 60.0, what: str = "condition"):
        end, value = time.monotonic() + timeout, None
        while time.monotonic() < end:
            value = condition()
            if value:
                return value
            time.sleep(0.25)
        raise AssertionError(f"timed out waiting for {what} (last seen: {repr(value)[:300]})")

    def click(self, name: str) -> None:
        self.page.get_by_role("button", name=name, exact=True).click()

    def tab(self, name: str) -> None:
        self.page.locator(".bk-tab", has_text=name).first.click()

    def clock(self) -> str:
        return self.page.locator("text=day 0").first.inner_text()

    def close(self) -> None:
        self.page.close()


def cut_titles(p: Page, table: str) -> list[str]:
    """Header titles with a word wider than their column (titles wrap between words, so only
    a word too long is cut), or with text under their column's sort arrow (Tabulator's arrow
    sat beside the title, over the last letters of a word that filled a narrow column); a
    column hidden for want of room is not cut."""
    return p.page.locator(f".{table} .tabulator-col-title").evaluate_all("""els => els
        .filter(e => e.innerText.trim() && e.closest('.tabulator-col').offsetWidth > 0)
        .filter(e => {
            const probe = document.createElement('span');
            probe.style.cssText = 'position:absolute;white-space:nowrap;visibility:hidden';
            e.appendChild(probe);
            const widest = Math.max(...e.innerText.split(/\\s+/).map(word => {
                probe.textContent = word; return probe.getBoundingClientRect().width; }));
            probe.remove();
            const arrow = e.closest('.tabulator-col').querySelector('.tabulator-arrow');
            const a = arrow && arrow.getBoundingClientRect(), text = document.createRange();
            text.selectNodeContents(e);
            const under = a && [...text.getClientRects()].some(r => r.right > a.left
                && r.left < a.right && r.bottom > a.top && r.top < a.bottom);
            return under || widest > e.closest('.tabulator-col').clientWidth - 8;
        }).map(e => e.innerText)""")


def cut_cells(p: Page, table: str, field: str) -> list[str]:
    """Cells of `field` whose one-line text is wider than the cell (clipped with no ellipsis
    to say so); a column hidden for want of room is not cut."""
    return p.page.locator(f".{table} .tabulator-cell[tabulator-field={field}]").evaluate_all(
        "els => els.filter(e => e.offsetWidth > 0 && e.scrollWidth > e.clientWidth + 1)"
        ".map(e => e.innerText)")


def column_fields(p: Page, table: str) -> list[str]:
    """The fields of `table`'s columns, in order (hidden ones too)."""
    return p.page.locator(f".{table} .tabulator-col[tabulator-field]").evaluate_all(
        "els => els.map(e => e.getAttribute('tabulator-field'))")


def column_titles(p: Page, table: str) -> list[str]:
    """The titles of `table`'s columns, in order (hidden ones too)."""
    return p.page.locator(f".{table} .tabulator-col[tabulator-field] .tabulator-col-title"
                          ).evaluate_all("els => els.map(e => e.textContent.trim())")


def scrolled_to_the_end(p: Page, css_class: str, field: str) -> list:
    """Scroll each table of `css_class` wider than its place to its right end; per table, its
    holder's (left, right) and each `field` cell's (text, left, right) then (a frozen column's
    cells stay inside the holder)."""
    p.page.evaluate(_SCROLL_TO_END, [css_class, field])
    time.sleep(0.3)  # Tabulator moves frozen cells on the scroll event
    return p.page.evaluate(_SCROLL_TO_END, [css_class, field])


def out_of_view(scrolled: list) -> list:
    """The tables of `scrolled_to_the_end` whose `field` cells are missing or not all inside
    the table (as (holder, cells)): none when the column stays in view."""
    return [(holder, cells) for holder, cells in scrolled
            if not cells or not all(left >= holder[0] and right <= holder[1]
                                    for _, left, right in cells)]
