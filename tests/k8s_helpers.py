"""What the tests on the local Kubernetes control plane share: the binaries check and polling."""

from __future__ import annotations

import os
import time

import pytest

from workbench.k8s.controlplane import find_binaries


def need_binaries() -> None:
    """Skip (fail, where every test must run) without the control-plane binaries."""
    missing = [k for k, v in find_binaries().items() if v is None]
    if missing:
        msg = f"no {', '.join(missing)}: run .ci/k8s-setup (workbench cluster build)"
        if os.environ.get("WORKBENCH_REQUIRE_K8S") == "1" or \
                os.environ.get("WORKBENCH_REQUIRE_ALL") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


def until(what: str, check, timeout: float = 30.0, every: float = 0.1):
    """Poll `check` until it returns something true; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)
