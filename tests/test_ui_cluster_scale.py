"""The cluster tab at 1,000 nodes (#15 item 11), in a browser: it opens on a heatmap that fits
the tab (no rack clipped at the right edge), a node is found by its label (its rack drilled
down to, its jobs listed, its cell outlined), a rack is drilled down to from the rack list,
and selecting a job outlines its GPUs."""

from __future__ import annotations

import re
import time

import pytest
from browser import Page, served

pytestmark = pytest.mark.ui

LARGE = ("--cluster", "large", "--trace", "synthetic:n=4000,rate=1.6,max_workers=16",
         "--speed", "3600")


@pytest.fixture(scope="module")
def large():
    with served(*LARGE) as url:
        yield url


def _box(p: Page, figure: str) -> dict:
    """The on-screen box of the Bokeh figure named `figure`."""
    return p.js(f"""() => {{
        const model = Bokeh.documents[0].get_model_by_name('{figure}');
        const r = Bokeh.index.find_one(model).el.getBoundingClientRect();
        return {{left: r.left, right: r.right, width: r.width, height: r.height}};
    }}""")


def test_a_thousand_nodes_read_at_a_glance(browser, large, screenshots):
    p = Page(browser, large)
    try:
        p.wait_for(lambda: len(p.source("node_heat", "use")) == 1000, what="1,000 node cells")
        assert p.source("gpu_cells", "left") == []  # no 8,000 tiny GPU cells until drilled
        p.click("Run")
        p.wait_for(lambda: sum(u > 0 for u in p.source("node_heat", "use")) > 500, timeout=90,
                   what="the cluster to fill")
        p.click("Pause")
        shares = p.source("rack_shares", "text")
        assert len(shares) == 25 and all(re.fullmatch(r"\d+%", s) for s in shares)
        assert len(p.source("rack_labels", "rack")) == 25
        shot = screenshots / "ui-cluster-1000-overview.png"
        p.page.screenshot(path=str(shot))
        box = _box(p, "cluster_overview")
        viewport = p.page.viewport_size
        assert box["right"] <= viewport["width"] and box["left"] >= 0  # no rack clipped
        assert 300 <= box["height"] <= 900  # 25 rack rows of readable cells
        assert box["width"] * box["height"] / 1000 > 16 * 16  # cells of ~16 x 16 px or more
        assert p.errors == []
    finally:
        p.close()


def test_find_a_node_drill_a_rack_and_highlight_a_job(browser, large, screenshots):
    p = Page(browser, large)
    try:
        p.click("Run")  # each session simulates its own run
        p.wait_for(lambda: sum(u > 0 for u in p.source("node_heat", "use")) > 100, timeout=90,
                   what="jobs on the cluster")
        p.click("Pause")
        find = p.page.get_by_placeholder("find a node or job (Enter)")
        # a node by its label: its rack drilled down to, labelled, the node outlined, its jobs
        find.fill("node-517")
        find.press("Enter")
        p.wait_for(lambda: "node-517" in p.source("node_labels", "node"),
                   what="node-517's rack drawn with its labels")
        assert set(p.source("gpu_cells", "rack")) == {"rack-12"}
        assert len(p.source("gpu_cells", "left")) == 40 * 8
        p.page.wait_for_selector("text=/node-517 \\(rack-12\\): [\\d.]+\\/8 GPUs in use/")
        assert len(p.source("node_marks", "left")) == 1
        p.page.screenshot(path=str(screenshots / "ui-cluster-1000-node.png"), full_page=True)
        # drill down to another rack, a busy one, from the rack list
        use, racks = p.source("node_heat", "use"), p.source("node_heat", "rack")
        busy = next(r for u, r in zip(use, racks) if u and u > 0.5 and r != "rack-12")
        p.page.locator("select").filter(has_text="all racks (overview)").select_option(busy)
        p.wait_for(lambda: set(p.source("gpu_cells", "rack")) == {busy}, what=f"{busy}'s GPUs")
        first = int(busy.split("-")[1]) * 40
        assert set(p.source("gpu_cells", "node")) == {f"node-{i:03d}" for i in range(first, first + 40)}
        # a job: its GPUs outlined in the rack shown and its nodes in the overview
        held = p.wait_for(lambda: [t for t in p.source("gpu_cells", "text") if t != "free"],
                          what=f"{busy}'s held GPUs")  # the cells' text may follow their layout
        job = held[0].split(",")[0].split(" ")[0]
        find.fill(job)
        find.press("Enter")
        p.page.wait_for_selector(f"text=/{re.escape(job)} holds \\d+ GPUs? on \\d+ nodes?/")
        marks = p.wait_for(lambda: len(p.source("gpu_marks", "left")), what="its GPUs outlined")
        text = p.source("gpu_cells", "text")
        assert marks == sum(job in t.replace(",", " ").split() for t in text)
        assert len(p.source("node_marks", "left")) >= 1
        time.sleep(0.5)
        p.page.screenshot(path=str(screenshots / "ui-cluster-1000-job.png"), full_page=True)
        assert p.errors == []
    finally:
        p.close()
