"""What the tests on the local Kubernetes control plane share: the binaries check, polling,
fresh namespaces, and the fixtures `auditor` and `no_overcommit` through which every integration
test module runs the over-commit `Auditor` (`workbench.k8s.local.audit`; import both fixtures
into the module)."""

from __future__ import annotations

import contextlib
import os
import time
import uuid

import pytest

from workbench.k8s.local.audit import Auditor
from workbench.k8s.local.build import find_binaries


def need_binaries() -> None:
    """Skip (fail, where every test must run) without the control-plane binaries."""
    missing = [k for k, v in find_binaries().items() if v is None]
    if missing:
        msg = f"no {', '.join(missing)}: run .ci/k8s-setup (workbench cluster build)"
        if os.environ.get("WORKBENCH_REQUIRE_K8S") == "1" or \
                os.environ.get("WORKBENCH_REQUIRE_ALL") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


def small_cluster(speed: float):
    """The local control plane most integration modules run on (binaries checked first): 4
    emulated nodes of 4 GPUs, 48 cores and 192 GiB in 2 racks, `speed` emulated seconds per
    real second; use as `with small_cluster(SPEED) as cluster:`."""
    from workbench.k8s.local.cluster import LocalCluster

    need_binaries()
    return LocalCluster(nodes=4, gpus_per_node=4, cpus=48, mem=192, racks=2, speed=speed,
                        api_qps=200)


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


def run_in_background(controller, until_time: float):
    """Run `controller` until `until_time` on a daemon thread: (thread, errors it raised)."""
    import threading

    errors: list[BaseException] = []

    def run():
        try:
            controller.run(until=until_time)
        except BaseException as e:  # noqa: BLE001 - re-raised by the test
            errors.append(e)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def exists(rest, path: str) -> bool:
    try:
        rest.get(path)
        return True
    except Exception:  # noqa: BLE001 - any answer but a found object
        return False


@contextlib.contextmanager
def fresh_namespace(rest, prefix: str, timeout: float = 30.0):
    """A new namespace (with its default service account), emptied of Jobs and Pods after."""
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    rest.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": ns}})
    until("the default service account",
          lambda: exists(rest, f"/api/v1/namespaces/{ns}/serviceaccounts/default"), timeout)
    yield ns
    for job in rest.get(f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]:
        with contextlib.suppress(Exception):  # already gone
            rest.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/{job['metadata']['name']}",
                         {"kind": "DeleteOptions", "apiVersion": "v1",
                          "propagationPolicy": "Background"})
    for pod in rest.get(f"/api/v1/namespaces/{ns}/pods")["items"]:
        with contextlib.suppress(Exception):  # already gone
            rest.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}",
                        grace_period_seconds=0)


# ---- the over-commit audit ------------------------------------------------------------------


@pytest.fixture(scope="module")
def auditor(cluster):
    """The module's over-commit auditor on its `cluster` (see `Auditor`)."""
    with Auditor(cluster.kubeconfig) as a:
        yield a


@pytest.fixture(autouse=True)
def no_overcommit(request):
    """Every test on a cluster ends by asserting that no node ever held more than it has and
    no pod was bound twice while it ran (tests without a cluster are left alone)."""
    if "cluster" not in request.fixturenames:
        yield
        return
    audit = request.getfixturevalue("auditor")
    audit.begin()
    yield
    audit.assert_clean()
