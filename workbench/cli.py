"""The `workbench` command. Subcommands live in `workbench/commands/*.py` and benchmarks in
`workbench/bench/*.py`; each module exposes `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import sys

from .errors import WorkbenchError


class Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (`workbench: error: ...`, exit 2), as every other
    error of bad input; the usage stays a `--help` away."""

    def error(self, message: str):
        command = self.prog.removeprefix("workbench").strip()
        self.exit(2, f"workbench: error: {command + ': ' if command else ''}{message}"
                     f" (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from . import bench, commands

    parser = Parser(
        prog="workbench", description="Scheduling workbench for deep-learning training jobs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _modules(commands):
        module.register(sub)
    bench_parser = sub.add_parser("bench", help="benchmarks that print ratios against an anchor")
    bench_sub = bench_parser.add_subparsers(dest="bench", metavar="BENCH", required=True)
    for module in _modules(bench):
        module.register(bench_sub)
    return parser


def _modules(package):
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{package.__name__}.{info.name}")


def attach_dashed_values(argv: list[str]) -> list[str]:
    """`--cluster -1x4` as `--cluster=-1x4`: argparse takes a word starting with a dash for an
    option unless it is a plain negative number, and said "expected one argument". No option
    here starts with a dash and a digit, so such a word is the value of the option before it,
    and that value's own check says what is wrong with it ("at least 1 node")."""
    out: list[str] = []
    for arg in argv:
        if (out and re.match(r"-\d", arg) and not re.fullmatch(r"-\d+|-\d*\.\d+", arg)
                and re.fullmatch(r"--[a-z][a-z0-9-]*", out[-1])):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(attach_dashed_values(sys.argv[1:] if argv is None else argv))
    try:
        return int(args.func(args) or 0)
    except WorkbenchError as e:
        print(f"workbench: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("workbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (`workbench trace show philly | head`): not an error of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not raise it again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports a process ended by SIGPIPE (128 + 13)


if __name__ == "__main__":
    sys.exit(main())
