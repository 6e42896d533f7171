"""What the local control plane's own processes (the node emulator, the training operator) do
the same as command-line programs: log lines with a time, the kubeconfig loaded with a one-line
error, SIGTERM and SIGINT stopping the loop, and their counts logged at the end."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from typing import Any

from ..rest import client_from_kubeconfig


def run_daemon(who: str, kubeconfig: str, pool_size: int, log_level: str,
               make: Callable[[Any], Any], log: logging.Logger) -> int:
    """Run `make(api_client)` (an object with `run()`, `stop()` and `stats`) until a signal
    stops it; 2 with one line on stderr when the kubeconfig cannot be loaded."""
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        api_client = client_from_kubeconfig(kubeconfig, pool_size=pool_size)
    except Exception as e:  # noqa: BLE001 - one line for a bad kubeconfig
        print(f"{who}: {kubeconfig}: cannot load kubeconfig: {e}", file=sys.stderr)
        return 2
    daemon = make(api_client)
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    signal.signal(signal.SIGINT, lambda *_: daemon.stop())
    daemon.run()
    log.info("stopped: %s", dict(daemon.stats))
    return 0
