"""A sweep's grid: its axes (engines, workloads, loads, clusters, seeds) and fixed options,
read from the command line, a Python call or a small YAML/TOML file, checked in full before
anything runs, and expanded into one `RunConfig` per run.

Every bad value is one `ConfigError` naming its key ("engines: unknown engine 'fifoo'; …",
"loads: expected positive numbers, got 'high'"), so the CLI prints one line, exits 2 and
writes nothing. A run's key is a hash of its whole configuration: the store skips runs whose
key it holds, which makes a sweep resumable and a rerun of the same grid free.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from itertools import product
from typing import Any

import numpy as np

from ..errors import ConfigError, InputError, WorkbenchError

AXES = ("engines", "workloads", "loads", "clusters", "seeds")
OPTIONS = ("limit", "restart_delay")
KEYS = AXES + OPTIONS


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides one run's result; `load` None: the workload's own arrivals,
    `cluster` None: the workload's usual cluster (`session.cluster_for`)."""

    engine: str
    workload: str
    load: float | None
    cluster: str | None
    seed: int
    limit: int | None = None
    restart_delay: float = 30.0
    trace_digest: str | None = None  # of the file a workload names (`workloads.trace_digest`)

    @property
    def key(self) -> str:
        """16 hex digits of a SHA-256 over the configuration's canonical JSON."""
        data = asdict(self)
        if data["trace_digest"] is None:  # a workload named, not a file: keys as they were
            del data["trace_digest"]
        text = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Grid:
    """The axes of a sweep and its fixed options; `runs()` is their product."""

    engines: list[str]
    workloads: list[str] = field(default_factory=lambda: ["default"])
    loads: list[float | None] = field(default_factory=lambda: [None])
    clusters: list[str | None] = field(default_factory=lambda: [None])
    seeds: list[int] = field(default_factory=lambda: [0])
    limit: int | None = None
    restart_delay: float = 30.0
    digests: dict[str, str] = field(default_factory=dict)  # workload -> its file's digest

    def runs(self) -> list[RunConfig]:
        """One config per point, the engine varying fastest: consecutive runs share a
        workload, which a worker loads once (`run.workload_jobs` caches it)."""
        return [RunConfig(engine, workload, load, cluster, seed, self.limit, self.restart_delay,
                          self.digests.get(workload))
                for workload, cluster, load, seed, engine in
                product(self.workloads, self.clusters, self.loads, self.seeds, self.engines)]

    def axes(self) -> dict[str, list]:
        return {k: getattr(self, k) for k in AXES}


def make_grid(values: Mapping[str, Any], where: str = "") -> Grid:
    """A checked `Grid` from `values` (a parsed sweep file, keyword arguments or CLI options;
    a list, or a comma-separated string, per axis). `where` (a file name) starts messages."""
    prefix = f"{where}: " if where else ""
    try:
        unknown = sorted(set(values) - set(KEYS))
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r}; expected {', '.join(KEYS)}")
        if "engines" not in values:
            raise ConfigError("engines: missing; name at least one engine")
        grid = Grid(engines=_engines(values["engines"]))
        if "workloads" in values:
            grid.workloads = _strings("workloads", values["workloads"], split=False)
        if "loads" in values:
            grid.loads = [_load(v) for v in _items("loads", values["loads"])]
        if "clusters" in values:
            grid.clusters = _strings("clusters", values["clusters"])
        if "seeds" in values:
            grid.seeds = _seeds(values["seeds"])
        if values.get("limit") is not None:
            grid.limit = _number("limit", values["limit"], int, minimum=1)
        if values.get("restart_delay") is not None:
            from ..sim.snapshot import MAX_RESTART_DELAY

            grid.restart_delay = _number("restart_delay", values["restart_delay"], float, 0.0,
                                         MAX_RESTART_DELAY)
        for key in ("engines", "workloads", "loads", "clusters"):
            _once(key, getattr(grid, key))
        _check_runs(math.prod(len(v) for v in grid.axes().values()), "the grid")
        from .workloads import trace_digest

        # an edited trace file is a new workload: its runs are not the stored ones
        grid.digests = {w: d for w in grid.workloads if (d := trace_digest(w)) is not None}
        _check_inputs(grid)
    except WorkbenchError as e:
        raise ConfigError(f"{prefix}{e}") from None
    return grid


def read_grid_file(path: str) -> dict[str, Any]:
    """The mapping in a sweep file: YAML (.yaml, .yml) or TOML (.toml)."""
    if os.path.isdir(path):
        raise InputError("is a directory, expected a sweep file", file=path)
    if not os.path.isfile(path):
        raise InputError("no such sweep file", file=path)
    if not path.endswith((".toml", ".yaml", ".yml")):  # before the `try`, which wraps errors
        raise InputError("expected a .yaml, .yml or .toml sweep file", file=path)
    try:
        if path.endswith(".toml"):
            import tomllib

            with open(path, encoding="utf-8-sig") as f:  # (a byte-order mark, as Notepad wrote)
                data = tomllib.loads(f.read())
        else:
            with open(path, encoding="utf-8-sig") as f:
                data = _read_yaml(f.read(), path)
    except WorkbenchError:
        raise
    except (ValueError, ImportError) as e:  # tomllib and yaml errors are ValueErrors or YAMLError
        raise InputError(f"cannot parse: {str(e).splitlines()[0]}", file=path) from None
    except Exception as e:  # noqa: BLE001 - yaml.YAMLError without importing yaml here
        raise InputError(f"cannot parse: {str(e).splitlines()[0]}", file=path) from None
    if isinstance(data, dict) and isinstance(data.get("sweep"), dict):
        if len(data) > 1:  # (read alone it said "missing engines" or "unknown key 'sweep'")
            raise InputError("give the keys all at the top level or all in one [sweep] table,"
                             f" not both ({', '.join(k for k in data if k != 'sweep')} outside"
                             " it)", file=path)
        data = data["sweep"]  # the keys in one `[sweep]` table, as a TOML file may group them
    if not isinstance(data, dict):
        raise InputError("expected a mapping of keys (engines, workloads, …)", file=path)
    return data


def _read_yaml(text: str, path: str) -> Any:
    """`text` as `yaml.safe_load` reads it, except that a key given twice in one mapping is
    refused, naming it and its line (YAML kept the last silently; TOML refuses it too)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`, overridden at will
                    continue
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, (str, int, float, bool)):  # (a list: yaml's own error)
                    continue
                if key in seen:
                    raise InputError(f"key {key!r} is given twice", file=path,
                                     line=key_node.start_mark.line + 1)
                seen.add(key)
            return super().construct_mapping(node, deep)

    return yaml.load(text, Loader=Loader)  # (a SafeLoader: no arbitrary objects)


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (`np.arange(5)`'s items are numpy's)."""
    return value.item() if isinstance(value, np.generic) else value


def _items(key: str, value: Any, split: bool = True) -> list:
    """`value` as a non-empty list: a string split at commas (when `split`), one number, or
    any other sequence of values (a list, `range(10)`, a numpy array) as its items."""
    value = _plain(value)
    if isinstance(value, str):
        items = [s.strip() for s in value.split(",")] if split else [value.strip()]
        items = [s for s in items if s]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        items = [value]
    elif isinstance(value, Iterable) and not isinstance(value, (Mapping, bytes)):
        items = [_plain(v) for v in value]
    else:
        raise ConfigError(f"{key}: expected a list, got {value!r}")
    if not items:
        raise ConfigError(f"{key}: empty; give at least one value")
    return items


def _once(key: str, values: list) -> None:
    """Refuse a value listed twice (as seeds do): it ran once while the grid's line counted it
    twice ("2 engines × … = 2 runs: ran 1")."""
    seen = set()
    for v in values:
        if v in seen:
            raise ConfigError(f"{key}: {'trace' if v is None else v!r} is listed twice")
        seen.add(v)


def _strings(key: str, value: Any, split: bool = True) -> list[str]:
    items = _items(key, value, split)
    for v in items:
        if not isinstance(v, str) or not v.strip():
            # YAML reads an unquoted 0x4 as hex 4, 1e3 as 1000.0, no as False
            hint = "; quote it in a YAML file" if isinstance(v, (int, float)) else ""
            raise ConfigError(f"{key}: expected names, got {v!r}{hint}")
    return [v.strip() for v in items]


def _engines(value: Any) -> list[str]:
    from ..policies import check_engine

    names = _strings("engines", value)
    for name in names:
        check_engine(name, "engines")
    return names


def _load(value: Any) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("trace", "none")):
        return None
    try:
        load = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"loads: expected positive numbers (or 'trace'), got {value!r}") from None
    if not (load > 0 and math.isfinite(load)) or isinstance(value, bool):
        raise ConfigError(f"loads: expected positive numbers (or 'trace'), got {value!r}")
    return load


# A row's seed is an int64 of the Parquet table: 2**64 ran, then failed to be stored, and the
# table's other rows with it (pyarrow's OverflowError).
MAX_SEED = 2**63 - 1
MAX_RUNS = 1_000_000  # a bound on what a typo can allocate (10^9 seeds were still being listed after a minute)


def _check_runs(count: int, what: str, unit: str = "runs") -> None:
    if count > MAX_RUNS:
        raise ConfigError(f"{what}: {count:,} {unit}, more than the {MAX_RUNS:,} runs a sweep"
                          " takes")


def _seeds(value: Any) -> list[int]:
    """`10` (seeds 0..9), `"3-7"` (3..7), or a list of seeds."""
    value = _plain(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ConfigError(f"seeds: one number is a count of seeds (10: seeds 0-9), so at"
                              f" least 1, got {value}; one seed alone is a range (0-0) or a list")
        _check_runs(value, "seeds", "seeds")
        return list(range(value))
    if isinstance(value, str) and "-" in value and "," not in value:
        low, _, high = value.partition("-")
        try:
            _check_runs(int(high) + 1 - int(low), "seeds", "seeds")
            seeds = list(range(int(low), int(high) + 1))
        except ValueError:
            raise ConfigError(f"seeds: expected a range like 0-9, got {value!r}") from None
        if not seeds or int(low) < 0 or seeds[-1] > MAX_SEED:
            raise ConfigError(f"seeds: expected a range like 0-9 (seeds up to 2**63 - 1),"
                              f" got {value!r}")
        return seeds
    if isinstance(value, str) and "," not in value:  # `--seeds 0` reads "0": a count of 0
        return _seeds(_number("seeds", value, int, minimum=0))
    seeds = [_number("seeds", v, int, minimum=0, maximum=MAX_SEED) for v in _items("seeds", value)]
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds: a seed is listed twice in {seeds}")
    return seeds


def _number(key: str, value: Any, kind: type, minimum: float, maximum: float = math.inf) -> Any:
    try:
        if isinstance(value, bool) or (kind is int and isinstance(value, float)
                                       and not value.is_integer()):
            raise ValueError
        number = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected {'an integer' if kind is int else 'a number'}"
                          f" >= {minimum:g}, got {value!r}") from None
    if not (minimum <= number <= maximum and math.isfinite(number)):
        bound = f">= {minimum:g}" if maximum == math.inf else f"from {minimum:g} to {maximum:g}"
        raise ConfigError(f"{key}: expected a number {bound}, got {value!r}")
    return number


def _check_inputs(grid: Grid) -> None:
    """Load each workload (its first job) and build each cluster once, so a bad name fails
    now, naming its key, instead of in every run."""
    from ..clusters import parse_cluster
    from ..traces.registry import trace_identity
    from .workloads import check_workload

    for workload in grid.workloads:
        try:
            check_workload(workload, grid.seeds[0])
        except WorkbenchError as e:
            raise ConfigError(f"workloads: {workload!r}: {e}") from None
    _same("workloads", grid.workloads, trace_identity, "workload")
    for cluster in grid.clusters:
        try:
            parse_cluster(cluster)
        except WorkbenchError as e:
            raise ConfigError(f"clusters: {str(e).removeprefix('--cluster: ').removeprefix('--cluster ')}") from None
    _same("clusters", grid.clusters, lambda c: tuple(parse_cluster(c)), "cluster")
    loads = [v for v in grid.loads if v is not None]
    for workload in grid.workloads if loads else ():  # (each run would fail, one by one)
        from ..session import cluster_for
        from .workloads import check_loads

        names = [cluster_for(workload, c) for c in grid.clusters]
        gpus = {c: sum(n.gpus for n in parse_cluster(c)) for c in names}
        try:
            check_loads(workload, grid.seeds[0], grid.limit, loads, gpus,
                        grid.digests.get(workload))
        except WorkbenchError as e:
            raise ConfigError(f"loads: {e}") from None


def _same(key: str, values: list, identity, what: str) -> None:
    """Refuse two values naming one thing (`default` and `16x4`, the nodes it stands for): the
    same configuration ran twice, under two names."""
    seen: dict[Any, Any] = {}
    for v in values:
        first = seen.setdefault(identity(v), v)
        if first != v:
            raise ConfigError(f"{key}: {v!r} is the same {what} as {first!r}; list it once")


def describe(grid: Grid) -> str:
    """`12 engines × 8 workloads × 4 loads × 1 cluster × 10 seeds = 3,840 runs`."""
    parts = [f"{len(v)} {k if len(v) != 1 else k[:-1]}" for k, v in grid.axes().items()]
    runs = len(grid.runs())
    return " × ".join(parts) + f" = {runs:,} run{'' if runs == 1 else 's'}"


def as_values(engines: Iterable[str] | str, **axes: Any) -> dict[str, Any]:
    """Keyword arguments to `make_grid` values, leaving out those not given (None)."""
    return {"engines": engines, **{k: v for k, v in axes.items() if v is not None}}
