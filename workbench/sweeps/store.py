"""A sweep's results on disk: one tidy Parquet table (and a CSV copy on request), written as
the runs finish, resumable, and never half-written.

Each finished run is written at once as its own one-row Parquet part, `.NAME.parts/KEY.parquet`
beside the table, through `output.atomic_path` (temporary file + rename): a crash, a lost
worker or Ctrl-C loses at most the runs in flight. Every `CONSOLIDATE_EVERY` parts, and when
the sweep ends or stops, the table is rewritten (atomically again) from the old table and the
parts, and only then are those parts removed. A part is named by its run's key, so a run
stored twice is one row; reading takes the table and any parts left over, one row per key.
Two sweeps may write the same table at once: they take turns (`ResultStore.turn`), and each
removes only the parts it read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import pandas as pd

from ..errors import WorkbenchError
from ..output import atomic_path, check_writable

CONSOLIDATE_EVERY = 200
LIST_COLUMNS = ("jct_pct_h",)  # Parquet only: a CSV cell holds no list


class ResultStore:
    """The rows of `path` (a .parquet file; None: kept in memory only), CSV copy at `csv`."""

    def __init__(self, path: str | None, csv: str | None = None) -> None:
        self.path, self.csv = path, csv
        self.rows: list[dict[str, Any]] = []  # this session's, not yet in the table
        self.parts: list[str] = []
        if path is not None:
            check_writable(path, "--out")
            folder, name = os.path.split(os.path.abspath(path))
            self.folder, self.parts_dir = folder, os.path.join(folder, f".{name}.parts")
        if csv is not None:
            check_writable(csv, "--csv")

    def read(self, seen: list[str] | None = None) -> pd.DataFrame:
        """Every stored row, one per key: the table's, then leftover parts' (an earlier
        session's, or another sweep's writing the same table), then this session's. The
        paths of the parts read go to `seen`."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = []
        if self.path is not None:
            if os.path.exists(self.path):
                tables.append(self._read_table())
            mine = {os.path.basename(p) for p in self.parts}  # this session's are in rows
            for f in sorted(os.listdir(self.parts_dir)) if os.path.isdir(self.parts_dir) else ():
                if f.endswith(".parquet") and f not in mine:
                    part = os.path.join(self.parts_dir, f)
                    tables.append(pq.read_table(part))
                    if seen is not None:
                        seen.append(part)
        if self.rows:  # as its parts hold them: the same Arrow table
            tables.append(pa.Table.from_pylist(self.rows))
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return pd.DataFrame({"key": pd.Series(dtype=str)})
        # one conversion of all rows (pyarrow's per-table pandas conversion is slow)
        table = pa.concat_tables(tables, promote_options="permissive").to_pandas()
        return table.drop_duplicates("key", keep="first").reset_index(drop=True)

    @contextmanager
    def turn(self) -> Iterator[None]:
        """This store's turn at the table and its parts folder, among sweeps writing the same
        `path` at once: each rewrote the table from what it had read and removed the other's
        parts (written after that read), so rows were lost. The lock is on the table's folder
        (no lock file left behind); no lock where `fcntl` is not (Windows)."""
        try:
            import fcntl
        except ImportError:
            yield
            return
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # (releases the lock)

    def _read_table(self):
        """The table at `path`, or one line saying it is not a sweep's table (a CSV given as
        `--out`, another program's Parquet file): it would be overwritten at the end."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(self.path)
        except (OSError, pa.ArrowException) as e:
            raise WorkbenchError(f"--out {self.path}: not a sweep's Parquet table"
                                 f" ({str(e).splitlines()[0]}); name a new file") from None
        if "key" not in table.column_names:
            raise WorkbenchError(f"--out {self.path}: not a sweep's Parquet table (no 'key'"
                                 " column); name a new file")
        return table

    def done_keys(self) -> set[str]:
        return set(self.read()["key"])

    def add(self, row: dict[str, Any]) -> None:
        """Keep `row` (its part on disk before this returns); rewrite the table now and then."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.rows.append(row)
        if self.path is None:
            return
        part = os.path.join(self.parts_dir, f"{row['key']}.parquet")
        with self.turn():  # (another sweep's consolidation may be removing the folder)
            os.makedirs(self.parts_dir, exist_ok=True)
            with atomic_path(part, "--out") as tmp:
                pq.write_table(pa.Table.from_pylist([row]), tmp)
        self.parts.append(part)
        if len(self.parts) >= CONSOLIDATE_EVERY:
            self.consolidate()

    def consolidate(self, order: Sequence[str] = ()) -> pd.DataFrame:
        """Write the whole table (rows in the order of the keys in `order`, then the rest by
        key) and the CSV copy, then drop the parts it now holds. Returns the table."""
        if self.path is None:
            return sort_rows(self.read(), order)
        with self.turn():
            seen: list[str] = []
            table = sort_rows(self.read(seen), order)
            if table.empty and not os.path.exists(self.path):
                return table  # nothing ran (a Dask scheduler out of reach): no empty file either
            with atomic_path(self.path, "--out") as tmp:
                table.to_parquet(tmp, index=False)
            if self.csv is not None:
                with atomic_path(self.csv, "--csv") as tmp:
                    table.drop(columns=[c for c in LIST_COLUMNS if c in table]).to_csv(
                        tmp, index=False)
            for part in self.parts + seen:  # not the parts another sweep wrote since
                with suppress(FileNotFoundError):  # one of ours another sweep took in
                    os.remove(part)
            with suppress(OSError):  # not empty: another sweep's parts
                os.rmdir(self.parts_dir)
        self.rows, self.parts = [], []
        return table


def sort_rows(table: pd.DataFrame, order: Sequence[str]) -> pd.DataFrame:
    """`table` with the rows of `order`'s keys first, in that order, then the others by key."""
    rank = {key: i for i, key in enumerate(order)}
    position = table["key"].map(lambda k: (rank.get(k, len(rank)), k))
    return table.iloc[sorted(range(len(table)), key=lambda i: position.iloc[i])
                      ].reset_index(drop=True)
