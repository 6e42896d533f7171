"""User-facing errors: one line naming the file/line/field and what was expected, and the
checks of option values that raise them."""

from __future__ import annotations

import math
import re

_LARGEST = 1.7976931348623157e308  # the largest float: an int beyond it has no float value


class WorkbenchError(Exception):
    """Any error caused by the user's input; the CLI prints it on one line and exits 2."""

    def _render_traceback_(self) -> list[str]:
        # IPython (a notebook, the IPython shell) shows what this returns in place of the
        # traceback: the one line, as the CLI prints it, not a screen of frames for a typo.
        return [f"{type(self).__name__}: {self}"]


class InputError(WorkbenchError):
    """Bad input in a file: says where (file, line, column) and what was expected."""

    def __init__(self, what: str, *, file: str | None = None, line: int | None = None,
                 column: str | None = None) -> None:
        self.file, self.line, self.column, self.what = file, line, column, what
        where = ":".join(str(p) for p in (file, line) if p is not None)
        col = f"column '{column}': " if column else ""
        super().__init__(f"{where + ': ' if where else ''}{col}{what}")


class ConfigError(WorkbenchError):
    """A bad option or configuration value."""


def as_keyword(error: ConfigError) -> ConfigError:
    """`error` as a Python caller reads it: a message opening with a CLI flag ('--limit: ...',
    '--cluster 0x4: ...', '--gpus-per-node: ...') names the keyword they typed ('limit: ...')."""
    return ConfigError(re.sub(r"^--([a-z][a-z0-9-]*)", lambda m: m[1].replace("-", "_"),
                              str(error)))


class AnotherSchedulerLeads(WorkbenchError):
    """A live cluster's pods are scheduled by a `workbench schedule` that holds the Lease: a
    second scheduler there would bind the same pods twice."""


def check_number(flag: str, value: float, *, minimum: float | None = None,
                 maximum: float | None = None) -> float:
    """`value` if it is a finite number in [`minimum`, `maximum`] (either may be open), else
    a `ConfigError` naming `flag`: NaN and infinities are never meant as an option's value."""
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and abs(value) <= _LARGEST and math.isfinite(value))  # (10**400: isfinite's OverflowError)
    ok = ok and (minimum is None or value >= minimum) and (maximum is None or value <= maximum)
    if not ok:
        bound = (f" from {minimum:g} to {maximum:g}" if minimum is not None and maximum is not None
                 else f" >= {minimum:g}" if minimum is not None
                 else f" <= {maximum:g}" if maximum is not None else "")
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}…{repr(value)[-10:]}"
        raise ConfigError(f"{flag}: expected a finite number{bound}, got {shown}")
    return float(value)


def unknown_keyword(fn, options, skip: tuple[str, ...] = ()) -> tuple[str, list[str]] | None:
    """The first of `options` that `fn` takes no keyword for, with the keywords it takes
    (less `skip`), or None (also when `fn` takes any keyword): for a one-line error where
    the call would be a TypeError."""
    import inspect

    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    takes = [n for n, p in params.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and n not in skip]
    return next(((key, takes) for key in options if key not in takes), None)
