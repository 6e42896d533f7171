"""Shared test set-up.

Tests that need a browser (marker `ui`), the local Kubernetes control plane
(`integration`) or a notebook kernel (`notebooks`) skip with the reason on a machine
without those parts. CI sets WORKBENCH_REQUIRE_ALL=1: there any skip fails the run, so
nothing is skipped silently.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

REQUIRE_ALL = os.environ.get("WORKBENCH_REQUIRE_ALL") == "1"


_PYTEST_PID = os.getpid()


def _interrupted(signum, frame):
    if os.getpid() != _PYTEST_PID:  # a forked worker (a process pool): die as it would have
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    # A run stopped with SIGTERM (a CI time-out, `kill`) ends as Ctrl-C does, tearing its
    # fixtures down: the local clusters they start run in their own session (so that
    # `workbench cluster up` can outlive its shell) and would otherwise be left running.
    signal.signal(signal.SIGTERM, _interrupted)


def pytest_sessionfinish(session, exitstatus):
    if not REQUIRE_ALL:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        reasons = sorted({str(r.longrepr[-1]) if isinstance(r.longrepr, tuple) else str(r.longrepr)
                          for r in skipped})
        print(f"\nWORKBENCH_REQUIRE_ALL=1: {len(skipped)} skipped tests count as failures:")
        for reason in reasons:
            print(f"  - {reason}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ---- browser tests (marker `ui`): one chromium per module, a folder for screenshots ----------

@pytest.fixture(scope="module")
def browser():
    from browser import ARGS, CHROMIUM, playwright  # here: only browser tests need Playwright

    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def screenshots(tmp_path) -> Path:
    d = Path(os.environ.get("WORKBENCH_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d

