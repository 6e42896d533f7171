"""Printing results: aligned tables for people, JSON for programs (`--json`)."""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Iterable, Sequence


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
        json.dump(result, stream, indent=2, default=_json_default)
        stream.write("\n")
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
