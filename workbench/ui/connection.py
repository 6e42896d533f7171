"""Reaching a real Kubernetes cluster from the app: the kubeconfig's contexts for the picker,
a quick probe of the API server (one clear line when it is not there), the backend, and the
wrapper that keeps the Controller's observations for the console to show.

    names, current = kubeconfig_contexts(default_kubeconfig())
    backend = connect_backend("~/.kube/config", context=current, namespace="ml")
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigError


def default_kubeconfig() -> str:
    """The kubeconfig kubectl would use: $KUBECONFIG's first file, else ~/.kube/config."""
    env = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if env:
        return env
    home = Path.home() / ".kube" / "config"
    return str(home) if home.is_file() else ""


def kubeconfig_contexts(path: str) -> tuple[list[str], str]:
    """The context names of a kubeconfig file and its current context; `ConfigError` with one
    line when it cannot be read."""
    import yaml

    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"kubeconfig {p}: no such file")
    try:
        config = yaml.safe_load(p.read_text())
    except Exception as e:  # noqa: BLE001 - one line
        raise ConfigError(f"kubeconfig {p}: not YAML ({str(e).splitlines()[0][:120]})") from None
    if not isinstance(config, dict) or not isinstance(config.get("contexts"), list):
        raise ConfigError(f"kubeconfig {p}: not a kubeconfig (no contexts)")
    names = [c["name"] for c in config["contexts"] if isinstance(c, dict) and c.get("name")]
    if not names:
        raise ConfigError(f"kubeconfig {p}: no contexts in it")
    current = config.get("current-context") or ""
    return names, current if current in names else names[0]


def connect_backend(kubeconfig: str | None = None, *, context: str | None = None,
                    namespace: str | None = None, clock_speed: float | None = None) -> Any:
    """The backend of `kubeconfig`'s `context` (default: its current one), for pods with
    schedulerName=workbench in `namespace` (None: all); nothing on the cluster is touched.
    `clock_speed`: the backend clock's speed-up (None: the one its emulated nodes say, else 1).
    `ConfigError` with one line when the cluster cannot be reached."""
    from ..k8s.backend import K8sBackend, load_api_client

    api_client = load_api_client(kubeconfig, pool_size=24, context=context)
    probe(api_client, context)  # one quick, clear error when it is not there
    try:
        backend = K8sBackend(api_client, namespace=namespace, serve=True, speed=clock_speed)
    except BaseException:
        api_client.close()
        raise
    return backend


def probe(api_client: Any, context: str | None, timeout: float = 5.0) -> None:
    """Ask the API server for its version: a clear one-line `ConfigError` now when it cannot
    be reached or refuses our credentials, rather than a watch that times out later."""
    from kubernetes.client.exceptions import ApiException

    from ..k8s.rest import Rest

    server = getattr(api_client.configuration, "host", "?")
    where = f"{server}" + (f" (context {context})" if context else "")
    try:
        Rest(api_client).request("GET", "/version", timeout=timeout)
    except ApiException as e:  # it answered: reachable; only unknown credentials stop us here
        if e.status == 401:
            api_client.close()
            raise ConfigError(f"the API server at {where} refused the credentials:"
                              f" {e.status} {e.reason}") from None
    except Exception as e:  # noqa: BLE001 - one line, never a traceback
        api_client.close()
        reason = str(getattr(e, "reason", "") or e).splitlines()[0][:160]
        raise ConfigError(f"cannot reach the API server at {where}: {reason}") from None


class ObservedBackend:
    """A real cluster's backend as the store sees it: the Controller's own observations are
    kept, and the console shows the last one. The console must not observe by itself: on
    Kubernetes an observation also marks the changes seen so far as handled by a round.
    Everything else is the backend's own."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self._last: Any = None
        self._lock = threading.Lock()

    def observe(self):
        state = self._backend.observe()
        with self._lock:
            self._last = state
        return state

    def last_observed(self):
        with self._lock:
            last = self._last
        return last if last is not None else self.observe()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)
