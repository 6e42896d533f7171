"""Where a sweep's runs execute: in this process (`serial`), on a local process pool
(`pool`, all cores by default) or on a Dask cluster (`dask`: an address, `"local"` for a
`LocalCluster` started here, or a `distributed.Client`). Each is a generator of finished
rows, in the order the runs finish; the caller stores each one as it comes.

Stopping: closing the generator (Ctrl-C in the caller, an error) cancels the runs not yet
started and ends those in flight, on every executor. Losing a worker: the pool is rebuilt
and the unfinished runs resubmitted (a run whose worker keeps dying is reported failed after
`MAX_POOL_BREAKS`); Dask reschedules a lost worker's tasks itself. A finished run is yielded
once: the caller keys rows by their configuration hash, so a rerun can never duplicate one.
Dask is imported only here, only when asked for, so `workbench` starts as fast without it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..errors import ConfigError
from .grid import RunConfig
from .run import run_one

MAX_POOL_BREAKS = 3
Row = dict[str, Any]


def failed(config: RunConfig, error: BaseException | str) -> Row:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return {"key": config.key, "error": text.splitlines()[0] if text else "failed"}


def serial_rows(configs: Sequence[RunConfig]) -> Iterator[Row]:
    for config in configs:
        yield run_one(config)


def _ignore_sigint() -> None:
    # Ctrl-C reaches the whole process group: the parent stops the workers, they stay quiet.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # and the parent's SIGTERM handler (`driver`), inherited by the fork, is not theirs: the
    # parent ends a worker with SIGTERM, which must end it
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def pool_rows(configs: Sequence[RunConfig], workers: int | None = None) -> Iterator[Row]:
    """The rows of `configs` from a process pool of `workers` (default: all cores)."""
    pending, breaks = list(configs), 0
    while pending:
        # no more workers than runs to do (each would be forked, to sit idle)
        size = min(workers or os.cpu_count() or 1, len(pending))
        pool = ProcessPoolExecutor(size, initializer=_ignore_sigint)
        futures: dict[Future, RunConfig] = {}
        yielded: set[str] = set()
        finished = False
        try:
            futures = {pool.submit(run_one, c): c for c in pending}
            try:
                for future in as_completed(futures):
                    row = future.result()
                    yielded.add(row["key"])
                    yield row
                finished = True
                pending = []
            except BrokenProcessPool:
                breaks += 1
                for future, config in futures.items():  # finished before the break: keep
                    if config.key not in yielded and _succeeded(future):
                        yielded.add(config.key)
                        yield future.result()
                pending = [c for c in pending if c.key not in yielded]
                if breaks > MAX_POOL_BREAKS:
                    for config in pending:
                        yield failed(config, f"its worker process died {breaks} times")
                    pending = []
        finally:
            _stop(pool, wait=finished)


_shared: ProcessPoolExecutor | None = None
_shared_lock = threading.Lock()


def shared_pool(workers: int | None = None) -> ProcessPoolExecutor:
    """The process's one long-lived pool (all cores by default) for interactive work: the
    app's switch previews and what-ifs (`whatif.on_executor`). Made on first use and made
    anew when a worker died (a broken pool refuses new work). Its workers are forked from
    this process, as `pool_rows`'s are, so they start with `workbench` imported and need no
    `if __name__ == "__main__"` guard in a user's script (a fork server or spawn would)."""
    global _shared
    with _shared_lock:
        if _shared is None or _broken(_shared):
            _load_slow_imports()
            _shared = ProcessPoolExecutor(workers or os.cpu_count() or 1,
                                          initializer=_shared_worker_start)
        return _shared


def _load_slow_imports() -> None:
    """Load here, before the shared pool forks its workers, the modules an engine imports on
    first use and slowly: each worker would otherwise load them inside its first preview of
    that engine (scipy.optimize, for Pollux's fits: 0.14-0.23 s)."""
    import scipy.optimize  # noqa: F401


def _shared_worker_start() -> None:
    """A shared worker ends when its parent does: a served app stopped by a signal never
    shuts the pool down, and its idle workers would otherwise live on as orphans."""
    _ignore_sigint()
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)
    threading.Thread(target=watch, name="workbench-parent-watch", daemon=True).start()


def _broken(pool: ProcessPoolExecutor) -> bool:
    # Set (to a message) by the pool once a worker died; asking by a task would wait in line.
    return bool(getattr(pool, "_broken", False) or getattr(pool, "_shutdown_thread", False))


def _succeeded(future: Future) -> bool:
    return future.done() and not future.cancelled() and future.exception() is None


def _stop(pool: ProcessPoolExecutor, wait: bool) -> None:
    """Shut `pool` down; unless `wait`, end its workers now (runs in flight are dropped: the
    next sweep reruns them)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=wait, cancel_futures=True)
    if not wait:
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=5)


def dask_rows(configs: Sequence[RunConfig], dask: Any, workers: int | None = None,
              log=sys.stderr) -> Iterator[Row]:
    """The rows of `configs` from Dask: `dask` an address (tcp://host:8786), "local" (a
    `LocalCluster` of `workers` processes, one thread each, closed at the end) or a
    `distributed.Client` (left open)."""
    try:
        from distributed import Client, LocalCluster
        from distributed import as_completed as dask_completed
    except ImportError:
        raise ConfigError("--dask: needs dask.distributed (pip install 'dask[distributed]')"
                          ) from None
    cluster = client = None
    if isinstance(dask, Client):
        client = dask
    else:
        try:
            if dask == "local":
                cluster = LocalCluster(n_workers=max(1, min(workers or os.cpu_count() or 1,
                                                            len(configs))),
                                       threads_per_worker=1, processes=True)
            client = Client(cluster or dask, timeout=10)
        except (OSError, TimeoutError, ValueError) as e:
            if cluster is not None:
                cluster.close()
            raise ConfigError(f"--dask {dask}: cannot connect ({e})".splitlines()[0]) from None
    if log is not None and client.dashboard_link:
        log.write(f"dask dashboard: {client.dashboard_link}\n")
    by_key = {f"workbench-sweep-{c.key}": c for c in configs}
    futures = [client.submit(run_one, c, key=k, pure=False) for k, c in by_key.items()]
    try:
        for future in dask_completed(futures):
            try:
                row = future.result()
            except Exception as e:  # noqa: BLE001 - KilledWorker and the like: this run failed
                row = failed(by_key[future.key], e)
            future.release()
            yield row
    finally:
        client.cancel([f for f in futures if not f.done()])
        if client is not dask:
            client.close()
        if cluster is not None:
            cluster.close()
