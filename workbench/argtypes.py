"""Argument types for the command line: a bad number is refused by argparse in one line
naming the option ("argument --seed: expected a non-negative integer, got '-1'"), before any
work starts, instead of a traceback from deep inside or a run on a nonsense value."""

from __future__ import annotations

import argparse
import math


def _integer(text: str, minimum: int, words: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise argparse.ArgumentTypeError(f"expected {words}, got {text!r}")
    return value


def _number(text: str, ok, words: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and ok(value)):
        raise argparse.ArgumentTypeError(f"expected {words}, got {text!r}")
    return value


def seed(text: str) -> int:
    """A seed: an integer >= 0 (numpy refuses negative ones)."""
    return _integer(text, 0, "a non-negative integer")


def count(text: str) -> int:
    """A count of things to make or run: an integer >= 1."""
    return _integer(text, 1, "a positive integer")


MAX_WORKERS = 256  # worker processes: more is a typo (--workers 1000 forked 1,000 of them)


def workers(text: str) -> int:
    """A count of worker processes: 1 to `MAX_WORKERS`."""
    value = count(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"expected 1 to {MAX_WORKERS} worker processes,"
                                         f" got {text!r}")
    return value


def size(text: str) -> int:
    """A count that may be zero: an integer >= 0."""
    return _integer(text, 0, "a non-negative integer")


def positive(text: str) -> float:
    """A finite number > 0."""
    return _number(text, lambda v: v > 0, "a positive number")


def nonnegative(text: str) -> float:
    """A finite number >= 0."""
    return _number(text, lambda v: v >= 0, "a finite number >= 0")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def add_log_level(parser: argparse.ArgumentParser) -> None:
    """`--log-level`, any case, one of `LOG_LEVELS` (logging raised a traceback at 'nosuch')."""
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS)
