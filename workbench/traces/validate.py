"""Reading trace CSVs with vectorised validation: the first bad cell becomes one `InputError`.

Every table is read as text first, so a message can quote the cell exactly as written, then
each column is converted with numpy masks; the earliest row failing a mask is reported as
`file:line: column 'c': expected ..., got '...'`. Line numbers are physical lines of the file
(the header is line 1 unless the file opens with `#` comment lines). Blank lines are ignored.
"""

from __future__ import annotations

import gzip
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import InputError

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"

# Column kinds -> (what is expected, in words)
EXPECTED = {
    "positive_int": "a positive integer",
    "nonneg_int": "a non-negative integer",
    "positive_float": "a positive number",
    "nonneg_float": "a non-negative number",
    "timestamp": "a timestamp like 2017-10-09 07:01:55",
    "name": "a non-empty name",
}
MAX_INT = 2**53  # integers above this lose precision as floats (and overflow int64 further up)
# Times and durations (the float kinds) above this lose millisecond resolution as floats: a job
# arriving at 1e300 s would "finish" at its arrival, in no time.
MAX_SECONDS = 2**53 / 1000


def beyond_time_limit(what: str, seconds: float) -> str | None:
    """'`what` at `seconds` s, beyond MAX_SECONDS ...' when it is (or is not a number)."""
    if seconds <= MAX_SECONDS:
        return None
    return (f"{what} at {seconds:.3g} s, beyond {MAX_SECONDS:.3g} s (where a time loses its"
            " milliseconds)")


MAX_LINE = 1 << 16  # bytes in one row of a trace CSV
MAX_NAME = 253  # characters in a job name (a Kubernetes object name's limit)
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def bad_names(values: np.ndarray) -> np.ndarray:
    """The mask of names that are empty, longer than `MAX_NAME` or hold a control character
    (a NUL, a newline)."""
    text = pd.Series(values, dtype=object).astype(str)
    bad = (text == "") | (text.str.len() > MAX_NAME) | text.str.contains(CONTROL)
    return bad.to_numpy()


def bad_numbers(values: np.ndarray, kind: str) -> np.ndarray:
    """The mask of values that are not finite or not of `kind` (a positive/non-negative
    int/float); integers must also be at most `MAX_INT`, floats (times) `MAX_SECONDS`."""
    bad = ~np.isfinite(values)
    bad |= (values <= 0) if kind.startswith("positive") else (values < 0)
    if kind.endswith("_int"):
        bad |= (values != np.round(values)) | (np.abs(values) > MAX_INT)
    else:
        bad |= np.abs(values) > MAX_SECONDS
    return bad


@dataclass
class Table:
    """A validated table: converted columns plus the file line of every row."""

    path: str
    columns: dict[str, np.ndarray]
    lines: np.ndarray  # 1-based physical line of each row
    raw: pd.DataFrame  # the cells as written, for messages

    def __len__(self) -> int:
        return len(self.lines)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def fail(self, row: int, column: str, expected: str) -> InputError:
        """The error for row index `row` (0-based in the table) of `column`."""
        cell = self.raw[column].iat[row]
        return InputError(f"expected {expected}, got {quoted('' if pd.isna(cell) else str(cell))}",
                          file=self.path, line=int(self.lines[row]), column=column)

    def check(self, bad: np.ndarray, column: str, expected: str) -> None:
        """Raise for the first row where the boolean mask `bad` is true."""
        if bad.any():
            raise self.fail(int(np.argmax(bad)), column, expected)


def quoted(cell: str, limit: int = 60) -> str:
    """A cell as a message quotes it: repr, and only its start if it is long."""
    if len(cell) <= limit:
        return repr(cell)
    return f"{cell[:limit]!r}… ({len(cell):,} characters)"


def leading_comment_lines(path: str) -> tuple[int, str | None]:
    """How many `#` lines open the file, and the first line after them (the header)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    count = 0
    try:
        with opener(path, "rt", encoding="utf-8-sig", newline="") as f:
            for line in f:
                if line.startswith("#"):
                    count += 1
                    continue
                return count, line.rstrip("\r\n")
    except FileNotFoundError:
        raise InputError("no such file", file=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a CSV file", file=str(path)) from None
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise InputError(f"cannot read: {e}", file=str(path)) from None
    return count, None


def check_line_lengths(path: str, limit: int = MAX_LINE) -> None:
    """Raise for the first line longer than `limit` characters, reading in chunks: a trace's
    row is short, and a runaway cell (a 1 GB job name) must not be read into memory whole."""
    opener = gzip.open if str(path).endswith(".gz") else open
    line, length = 1, 0
    try:
        with opener(path, "rb") as f:
            while chunk := f.read(1 << 22):
                ends = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
                spans = np.diff(ends, prepend=-1) - 1  # bytes before each newline in the chunk
                if len(ends):
                    spans[0] += length
                    if (long := np.flatnonzero(spans > limit)).size:
                        line += int(long[0])
                        break
                    line, length = line + len(ends), len(chunk) - 1 - int(ends[-1])
                else:
                    length += len(chunk)
                if length > limit:
                    break
            else:
                return
    except (OSError, EOFError) as e:
        raise InputError(f"cannot read: {e}", file=str(path)) from None
    raise InputError(f"line longer than {limit:,} bytes: expected a CSV row", file=str(path),
                     line=line)


def read_header(path: str) -> list[str]:
    """The column names of a CSV (after any leading `#` lines); [] for an empty file."""
    return read_header_at(path)[0]


def read_header_at(path: str) -> tuple[list[str], int]:
    """`read_header`, and the header's line number (1 after no `#` lines)."""
    comments, header = leading_comment_lines(path)
    return ([c.strip() for c in header.split(",")] if header else []), comments + 1


def read_table(path: str | os.PathLike, kinds: dict[str, str], *,
               optional: Iterable[str] = ()) -> Table:
    """Read `path` and check every column in `kinds` (name -> kind from `EXPECTED`, or "str").

    Columns in `optional` may be absent; extra columns are kept in `raw` and ignored.
    """
    path = str(path)
    if not os.path.exists(path):
        raise InputError("no such file", file=path)
    skip, header = leading_comment_lines(path)
    check_line_lengths(path)
    expected_header = ",".join(kinds)
    if header is None or not header.strip():
        raise InputError(f"empty file: expected a CSV header with columns {expected_header}",
                         file=path)
    fast = _read_fast(path, skip, header.split(","), kinds, optional)
    return fast if fast is not None else _read_text(path, skip, kinds, optional)


class _Fallback(Exception):
    """The fast path met something it does not handle: read again as text for the message."""


def _read_fast(path: str, skip: int, header_names: list[str], kinds: dict[str, str],
               optional: Iterable[str]):
    """Let pandas infer numeric columns (fast); None if anything at all looks wrong.

    Only clean files pass here; any doubt goes to `_read_text`, which reads every cell as text
    and is the authority on what is wrong and where.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            text = {c: str for c, k in kinds.items() if k in ("str", "name", "timestamp")
                    and c in header_names}
            raw = pd.read_csv(path, skiprows=skip, index_col=False, keep_default_na=False,
                              na_values=[""], skip_blank_lines=False, skipinitialspace=True,
                              dtype=text)
        names = [str(c) for c in raw.columns]
        if names != header_names:  # spaces, repeated or unnamed columns
            raise _Fallback
        if any(name not in names and name not in optional for name in kinds):
            raise _Fallback
        lines = np.arange(len(raw)) + skip + 2
        blank = raw.isna().to_numpy().all(axis=1)
        if blank.any():
            raw, lines = raw[~blank].reset_index(drop=True), lines[~blank]
        if not len(raw):
            raise _Fallback
        table = Table(path, {}, lines, raw)
        for name, kind in kinds.items():
            if name not in raw.columns:
                continue
            column = raw[name]
            if kind in ("str", "name"):
                if column.isna().any() and kind == "name":
                    raise _Fallback
                values = column.fillna("").astype(str).to_numpy(dtype=object)
                if kind == "name" and bad_names(values).any():
                    raise _Fallback
            elif kind == "timestamp":
                values = pd.to_datetime(column, format=TIMESTAMP_FORMAT, errors="coerce")
                if values.isna().any():
                    raise _Fallback
                values = values.to_numpy()
            else:
                if not pd.api.types.is_numeric_dtype(column.dtype) or \
                        pd.api.types.is_bool_dtype(column.dtype):
                    raise _Fallback
                values = column.to_numpy(dtype=float)
                if bad_numbers(values, kind).any():
                    raise _Fallback
                values = values.astype(np.int64) if kind.endswith("_int") else values
            table.columns[name] = values
        return table
    except (_Fallback, Warning, ValueError, TypeError, KeyError, OverflowError, OSError, EOFError,
            UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None


def _read_text(path: str, skip: int, kinds: dict[str, str], optional: Iterable[str]) -> Table:
    """Read every cell as text and convert column by column, raising for the bad cell on the
    earliest line (of two on one line, the first column's in `kinds`)."""
    expected_header = ",".join(kinds)
    try:
        # header=None: the header line fixes the field count, so a longer row is an error
        # (with a header, pandas would quietly take an extra first field as the index)
        raw = pd.read_csv(path, skiprows=skip, header=None, dtype=str, keep_default_na=False,
                          na_filter=False, skip_blank_lines=False, skipinitialspace=True)
    except pd.errors.ParserError as e:
        m = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", str(e))
        if m:
            raise InputError(f"expected {m[1]} fields (like the header), got {m[3]}",
                             file=path, line=int(m[2])) from None
        raise InputError(f"not a readable CSV: {e}", file=path) from None
    except (pd.errors.EmptyDataError, UnicodeDecodeError, OSError, EOFError) as e:
        raise InputError(f"not a readable CSV: {e}", file=path) from None

    header_line = skip + 1
    names = [str(c).strip() for c in raw.iloc[0].fillna("")]
    repeated = [c for c in names if names.count(c) > 1]
    if repeated:
        raise InputError("expected each column once in the header", file=path,
                         line=header_line, column=repeated[0])
    raw = raw.iloc[1:].reset_index(drop=True)
    raw.columns = names
    for name in kinds:
        if name not in raw.columns and name not in optional:
            raise InputError(
                f"missing from the header: expected columns {expected_header},"
                f" found {','.join(raw.columns)}", file=path, line=header_line, column=name)
    raw = raw.fillna("")
    lines = np.arange(len(raw)) + header_line + 1
    blank = (raw == "").to_numpy().all(axis=1) if len(raw.columns) else np.ones(len(raw), bool)
    if blank.any():
        raw, lines = raw[~blank].reset_index(drop=True), lines[~blank]
    if not len(raw):
        raise InputError("no data rows: expected at least one job after the header",
                         file=path, line=header_line + 1)

    table = Table(path, {}, lines, raw)
    # the bad cell on the earliest line, whichever its column: one per column was reported in
    # the columns' order, so a file with several sent its reader down and then back up
    errors = []
    for name, kind in kinds.items():
        if name in raw.columns:
            try:
                table.columns[name] = convert(table, name, kind)
            except InputError as e:
                errors.append(e)
    if errors:
        raise min(errors, key=lambda e: e.line)
    return table


def convert(table: Table, name: str, kind: str) -> np.ndarray:
    """Convert one text column to its kind, raising for the first bad cell."""
    text = table.raw[name].str.strip()
    if kind == "str":
        return text.to_numpy(dtype=object)
    if kind == "name":
        values = text.to_numpy(dtype=object)
        table.check(values == "", name, EXPECTED[kind])
        table.check(bad_names(values), name,
                    f"{EXPECTED[kind]} of at most {MAX_NAME} printable characters")
        return values
    expected = EXPECTED[kind]
    if kind == "timestamp":
        stamps = pd.to_datetime(text, format=TIMESTAMP_FORMAT, errors="coerce")
        table.check(stamps.isna().to_numpy(), name, expected)
        return stamps.to_numpy()
    values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=float)
    bad = bad_numbers(values, kind)
    limit = MAX_INT if kind.endswith("_int") else MAX_SECONDS
    too_big = np.abs(values) > limit  # said only when that is what is wrong
    table.check(bad & ~too_big, name, expected)
    table.check(bad, name, f"{expected} up to {limit:,.0f}")
    return values.astype(np.int64) if kind.endswith("_int") else values


def check_choice(table: Table, name: str, allowed: Sequence[str]) -> None:
    """Every cell of text column `name` must be one of `allowed`."""
    bad = ~np.isin(table[name].astype(str), np.asarray(list(allowed), dtype=str))
    table.check(bad, name, "one of " + ", ".join(allowed))


def check_unique(table: Table, name: str) -> None:
    """No value of column `name` may repeat."""
    dup = pd.Series(table[name]).duplicated().to_numpy()
    if dup.any():
        row = int(np.argmax(dup))
        first = int(np.argmax(table[name] == table[name][row]))
        raise InputError(f"expected a unique value, got {quoted(str(table.raw[name].iat[row]))} again"
                         f" (first on line {int(table.lines[first])})",
                         file=table.path, line=int(table.lines[row]), column=name)
