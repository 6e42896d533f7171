"""Printing and writing results: aligned tables for people, strict JSON for programs
(`--json`), and output files written whole or not at all.

JSON: a float that is not finite (a rate of nothing, an infinite wait) is written `null`,
since `NaN` and `Infinity` are not JSON (JavaScript's `JSON.parse` rejects them).

Files: every writer goes through `atomic_open`/`atomic_path`, which write a temporary file in
the same directory and rename it over the target only once it is complete, so an interrupted
run (SIGINT, a full disk, an error) leaves the previous file whole.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from .errors import ConfigError, WorkbenchError


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
            return f"{value:.3g}"
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.1f}"
    if value is None:
        return "-"
    return str(value)


def format_table(rows: Sequence[dict[str, Any]], columns: Iterable[str] | None = None,
                 title: str | None = None) -> str:
    if not rows:
        return (title + "\n" if title else "") + "(no rows)"
    cols = list(columns) if columns else list(dict.fromkeys(k for r in rows for k in r))
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    numeric = [all(_is_number(r.get(c)) for r in rows) for c in cols]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [title] if title else []
    out += [line(cols), line(["-" * w for w in widths])] + [line(r) for r in cells]
    return "\n".join(out)


def _is_number(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def emit(result: dict[str, Any], *, as_json: bool, tables: dict[str, Sequence[dict]] | None = None,
         notes: Sequence[str] = (), stream=None) -> None:
    """Print `result` as JSON, or its `tables` (title -> rows) and notes as text."""
    stream = stream or sys.stdout
    if as_json:
        stream.write(to_json(result) + "\n")
        return
    for title, rows in (tables or {}).items():
        stream.write(format_table(rows, title=title) + "\n\n")
    for note in notes:
        stream.write(note + "\n")


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if hasattr(o, "value"):
        return o.value
    return str(o)


def strict(value: Any) -> Any:
    """`value` with every non-finite float (NaN, ±inf) replaced by None, recursively, and
    numpy values turned into Python ones, ready for a strict JSON encoder."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return strict(_json_default(value))


def to_json(result: Any, indent: int | None = 2) -> str:
    """`result` as strict JSON: NaN and infinities become null (see the module docstring)."""
    return json.dumps(strict(result), indent=indent, allow_nan=False)


def check_writable(path: str, flag: str) -> None:
    """Raise a one-line error now, before any work, if `path` (given as `flag`) could not be
    written: its directory is missing or read-only, or it is a directory."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise WorkbenchError(f"{flag} {path}: is a directory, expected a file name")
    if not os.path.isdir(folder):
        raise WorkbenchError(f"{flag} {path}: cannot write (no directory {folder})")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise WorkbenchError(f"{flag} {path}: cannot write (directory {folder} is read-only)")


def check_separate(outputs: Iterable[tuple[str, str | None]],
                   inputs: Iterable[tuple[str, str | None]] = ()) -> None:
    """Raise a one-line error now, before any work, if two of `outputs` (option, path) name
    one file, or one names a file of `inputs`: the later write would replace the other output,
    or the data the run read (`--out runs.parquet --csv runs.parquet` lost every run)."""
    given = [(flag, path, True) for flag, path in inputs if path]
    for flag, path in ((f, p) for f, p in outputs if p):
        for other_flag, other, is_input in given:
            if _same_file(path, other):
                raise ConfigError(
                    f"{flag} {path}: the same file as {other_flag} {other}; "
                    + ("an output may not replace an input" if is_input
                       else "give each output a file of its own"))
        given.append((flag, path, False))


def _same_file(a: str, b: str) -> bool:
    """Whether paths `a` and `b` name one file: the same once resolved (`..`, symlinks), or
    one file under two names (a hard link) when both exist."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # either does not exist (yet)
        return False


@contextmanager
def atomic_path(path: str, flag: str) -> Iterator[str]:
    """A temporary path beside `path` to write to; renamed over `path` when the block ends
    without an exception, removed otherwise (the previous `path` is left as it was). An
    `OSError` becomes one line naming `flag` (the option that gave the path)."""
    check_writable(path, flag)
    folder, name = os.path.split(os.path.abspath(path))
    # Named, not created, here: the block creates it inside the `try`, so an interrupt at any
    # moment leaves no temporary file behind.
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        _keep_mode(path, tmp)
        os.replace(tmp, path)
    except OSError as e:
        _remove(tmp)
        raise WorkbenchError(f"{flag} {path}: cannot write ({e.strerror})") from None
    except BaseException:
        _remove(tmp)
        raise


@contextmanager
def atomic_open(path: str, flag: str, mode: str = "w", **open_args: Any) -> Iterator[IO]:
    """`open(path, mode)` through `atomic_path`: the file appears whole or not at all."""
    if mode.startswith("w") and "b" not in mode:
        open_args.setdefault("encoding", "utf-8")
    with atomic_path(path, flag) as tmp, open(tmp, mode, **open_args) as f:
        yield f


def write_json(path: str, flag: str, result: Any) -> None:
    """Write `result` as strict JSON to `path`, atomically."""
    with atomic_open(path, flag) as f:
        f.write(to_json(result) + "\n")


def _keep_mode(path: str, tmp: str) -> None:
    """Give the new file the old one's permissions (a new file has the usual ones)."""
    try:
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
    except FileNotFoundError:
        pass


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
