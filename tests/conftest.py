"""Shared test set-up.

Tests that need a browser (marker `ui`), the local Kubernetes control plane
(`integration`) or a notebook kernel (`notebooks`) skip with the reason on a machine
without those parts. CI sets WORKBENCH_REQUIRE_ALL=1: there any skip fails the run, so
nothing is skipped silently.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_ALL = os.environ.get("WORKBENCH_REQUIRE_ALL") == "1"


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
