"""Running a sweep: the grid's runs not yet in the store go to an executor, each finished
row is stored as it arrives, and the table is written whole when the sweep ends, fails or is
stopped (Ctrl-C: the runs in flight are dropped, every finished one is kept, and running the
same sweep again runs only the missing ones).

`sweep(...)` is the Python entry (`workbench.sweep`), `run_sweep` the one the CLI and the
bench share.
"""

from __future__ import annotations

import signal
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..argtypes import MAX_WORKERS
from ..errors import ConfigError
from ..output import check_separate, check_writable
from .executors import dask_rows, pool_rows, serial_rows
from .grid import Grid, RunConfig, as_values, make_grid, read_grid_file
from .progress import Progress
from .store import ResultStore, sort_rows


@dataclass
class SweepOutcome:
    """What a sweep did: `table` holds every row of its grid (earlier sessions' too)."""

    grid: Grid
    table: pd.DataFrame
    ran: int = 0
    skipped: int = 0
    failures: list[tuple[RunConfig, str]] = field(default_factory=list)
    wall_s: float = 0.0


def executor_rows(configs: Sequence[RunConfig], *, serial: bool = False,
                  workers: int | None = None, dask: Any = None) -> Iterator[dict[str, Any]]:
    """The finished rows of `configs` from the executor the options choose (see
    `executors`): Dask when `dask` is given, this process when `serial`, else the pool."""
    if dask is not None:
        return dask_rows(configs, dask, workers)
    if serial:
        return serial_rows(configs)
    return pool_rows(configs, workers)


def check_executor(serial: bool, workers: Any, dask: Any) -> None:
    """One line for executor options that cannot both hold or make no pool, before any work
    (`--serial` with `--dask` ran on Dask; `workers=-2` was a ValueError of the pool's)."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                or workers < 1):
        raise ConfigError(f"workers: expected a positive integer, got {workers!r}")
    if workers is not None and workers > MAX_WORKERS:
        raise ConfigError(f"workers: expected 1 to {MAX_WORKERS} worker processes, got {workers}")
    if dask is not None and not (isinstance(dask, str) and dask.strip()
                                 or callable(getattr(dask, "submit", None))):  # (5: Dask's TypeError)
        raise ConfigError(f"dask: expected an address like tcp://host:8786, 'local' or a"
                          f" distributed.Client, got {dask!r}")
    if serial and dask is not None:
        raise ConfigError("serial, dask: give one (serial runs in this process, dask on Dask)")


def check_files(grid: Grid, out: str | None, csv: str | None, report: str | None,
                file: str | None = None, dashes: str = "--") -> None:
    """Refuse, before any run, outputs naming one file or a file the sweep reads (a
    workload's trace, the sweep file): the Parquet table of recorded runs was overwritten by
    the CSV copy. `dashes` starts the names (`--out` for the CLI, `out` for `sweep()`)."""
    from ..traces.registry import trace_file

    check_separate([(f"{dashes}out", out), (f"{dashes}csv", csv), (f"{dashes}report", report)],
                   [(f"{dashes}workloads", trace_file(w)) for w in grid.workloads
                    if not w.startswith("scenario:")] + [("the sweep file", file)])


def run_sweep(grid: Grid, *, out: str | None = None, csv: str | None = None,
              serial: bool = False, workers: int | None = None, dask: Any = None,
              progress: bool = False) -> SweepOutcome:
    """Run the runs of `grid` not yet stored in `out` (a Parquet file; None: in memory)."""
    check_executor(serial, workers, dask)
    start = time.perf_counter()
    store = ResultStore(out, csv)
    configs = list({c.key: c for c in grid.runs()}.values())  # a Grid made by hand may repeat
    done = store.done_keys()
    todo = [c for c in configs if c.key not in done]
    outcome = SweepOutcome(grid, pd.DataFrame(), skipped=len(configs) - len(todo))
    by_key = {c.key: c for c in todo}
    bar = Progress(len(todo), progress and bool(todo))
    rows = executor_rows(todo, serial=serial, workers=workers, dask=dask)
    with _terminate_as_interrupt():
        try:
            for row in rows:
                if "error" in row:
                    outcome.failures.append((by_key[row["key"]], row["error"]))
                else:
                    store.add(row)
                    outcome.ran += 1
                bar.update("error" not in row)
        finally:
            rows.close()  # stops the executor's workers if the loop ended early
            bar.close()
            order = [c.key for c in configs]
            table = store.consolidate(order)
            outcome.table = sort_rows(table[table["key"].isin(set(order))], order)
            outcome.wall_s = time.perf_counter() - start
    return outcome


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (`kill`, a batch system's stop) stops the sweep as Ctrl-C does: it ended the
    process at once, leaving the pool's workers running as orphans. A second one while the
    sweep stops is ignored, so the table is still written whole. (Only the main thread can
    take a signal: elsewhere nothing changes.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def sweep(engines: Sequence[str] | str | None = None, workloads: Sequence[str] | None = None,
          loads: Sequence[float | None] | None = None, clusters: Sequence[str] | None = None,
          seeds: int | Sequence[int] | str | None = None, *, file: str | None = None,
          limit: int | None = None, restart_delay: float | None = None, out: str | None = None,
          csv: str | None = None, report: str | None = None, serial: bool = False,
          workers: int | None = None, dask: Any = None, progress: bool = False
          ) -> pd.DataFrame:
    """Run every combination of `engines` × `workloads` × `loads` × `clusters` × `seeds` and
    return the table, one row per run (its configuration, every metric, `wall_s`, `version`).

    `file`: a YAML/TOML sweep file with the same keys; arguments given here override it.
    `out`: a Parquet file written as runs finish; a second call skips the runs it holds.
    `report`: an HTML file of plots. Runs go to a process pool of `workers` (all cores),
    this process (`serial=True`) or Dask (`dask`: "tcp://host:8786", "local" or a
    `distributed.Client`). Failed runs are left out of the table and listed, with their
    errors, in `table.attrs["failures"]`.

        table = workbench.sweep(["fifo", "tiresias"], ["default"], seeds=5)
    """
    values = read_grid_file(file) if file else {}
    values.update(as_values(engines if engines is not None else values.get("engines"),
                            workloads=workloads, loads=loads, clusters=clusters, seeds=seeds,
                            limit=limit, restart_delay=restart_delay))
    if values.get("engines") is None:
        values.pop("engines")
    grid = make_grid(values, file or "")
    check_files(grid, out, csv, report, file, dashes="")
    if report:  # before the runs, not after them
        check_writable(report, "report")
    outcome = run_sweep(grid, out=out, csv=csv, serial=serial, workers=workers, dask=dask,
                        progress=progress)
    if report:
        from .report import write_report
        from .summary import METRICS

        write_report(report, outcome.table, METRICS, "workbench sweep")
    table = outcome.table
    table.attrs["failures"] = [{"key": c.key, "engine": c.engine, "workload": c.workload,
                                "seed": c.seed, "error": e} for c, e in outcome.failures]
    if outcome.failures:
        warnings.warn(f"{len(outcome.failures)} runs failed; first: {outcome.failures[0][1]}",
                      stacklevel=2)
    return table
