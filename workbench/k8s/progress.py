"""`workbench.report(...)`: a training process reports its progress to the scheduler.

Inside a pod the call patches the pod's own `workbench.io/progress` annotation, which the
workbench's watch cache reads (the node emulator writes the same annotation for emulated
pods). It finds its pod from the downward API (`POD_NAME`, `POD_NAMESPACE` environment
variables, which `workbench k8s submit` sets) and the API server from the in-cluster service
account; the pod's service account needs `patch` on pods (`workbench k8s manifests` grants it
to `workbench-trainer`).

    import workbench
    for step in range(steps):
        loss = train_one_step()
        if step % 100 == 0:
            workbench.report(iterations=step, throughput=steps_per_second, metric=loss)

Reports closer together than `min_interval` seconds are skipped (the last one always goes
out with `force=True`); a failed report is logged and never raises into the training loop
unless `raise_errors=True`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time

log = logging.getLogger("workbench.progress")

_lock = threading.Lock()
_client = None
_last_sent = 0.0


def _api_client(kubeconfig: str | None):
    global _client
    if _client is None:
        from kubernetes import client, config

        configuration = client.Configuration()
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration)
        _client = client.ApiClient(configuration)
    return _client


def progress_annotation(iterations: float, throughput: float | None = None,
                        metric: float | None = None, at: float | None = None) -> str:
    """The annotation's JSON, as the emulator writes it."""
    return json.dumps({"iterations": float(iterations),
                       "throughput": None if throughput is None else float(throughput),
                       "metric": None if metric is None else float(metric),
                       "time": round(time.time() if at is None else at, 3)})


def report(iterations: float, throughput: float | None = None, metric: float | None = None, *,
           pod: str | None = None, namespace: str | None = None, kubeconfig: str | None = None,
           min_interval: float = 5.0, force: bool = False, raise_errors: bool = False) -> bool:
    """Patch this pod's `workbench.io/progress` annotation; True if a report was sent.

    `iterations`: done so far (at the job's batch size); `throughput`: iterations per second
    now; `metric`: the latest value of its accuracy/loss curve. `pod`, `namespace`,
    `kubeconfig` override the downward API and in-cluster account (for use outside a pod).
    """
    global _last_sent
    with _lock:
        now = time.monotonic()
        if not force and _last_sent and now - _last_sent < min_interval:
            return False
        _last_sent = now
    pod = pod or os.environ.get("POD_NAME")
    namespace = namespace or os.environ.get("POD_NAMESPACE") or _namespace_file()
    try:
        if not pod or not namespace:
            raise RuntimeError("no POD_NAME/POD_NAMESPACE: set them from the downward API"
                               " (metadata.name, metadata.namespace) or pass pod= and namespace=")
        from . import labels
        from .rest import MERGE, Rest

        body = {"metadata": {"annotations": {
            labels.PROGRESS: progress_annotation(iterations, throughput, metric)}}}
        Rest(_api_client(kubeconfig)).patch(f"/api/v1/namespaces/{namespace}/pods/{pod}", body,
                                            MERGE)
        return True
    except Exception as e:  # never stop training for a lost report
        if raise_errors:
            raise
        log.warning("workbench.report: %s", str(e).splitlines()[0][:200] if str(e) else e)
        return False


def _namespace_file() -> str | None:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or None
    except OSError:
        return None


__all__ = ["progress_annotation", "report"]
