"""One string names a workload: `load_trace("philly")`, `load_trace("pollux:w.csv")`, ...

Forms:
- `default`: the Pollux workload shipped in the package with seeded deadlines, a mix of tight
  and loose (`default_workload()`, `DeadlineRule`); `default:deadlines=none` without them, as
  the Pollux artifact has it.
- `philly`: the shipped Philly trace, all 82,247 jobs; `philly:PATH` a Philly CSV.
- `pollux:PATH`: a Pollux workload CSV.
- `synthetic` or `synthetic:KEY=VALUE,...` with keys n (jobs), rate (jobs/s), deadline
  (a factor, LOW-HIGH, or none), max_workers, ps (0/1 or a share), apps (names joined by +),
  seed.
- `openb` or `openb:pods=NAME_OR_PATH,n=1000,interval=30,...`: GPU-sharing jobs drawn from
  an Alibaba openb pod list (`openb_jobs`).
- a bare path to a CSV: its header decides (`name,time,application,...` → Pollux;
  `timestamp,...` or `arrival,...` with duration and num_gpus → Philly).
"""

from __future__ import annotations

import math
import os
from importlib import resources

from ..errors import ConfigError, InputError
from .common import Jobs
from .deadline_rule import DeadlineRule
from .philly import load_philly
from .pollux import POLLUX_COLUMNS, load_pollux_workload
from .synthetic import synthetic_workload
from .validate import read_header_at

FORMS = ("default", "default:deadlines=none", "philly", "philly:PATH", "pollux:PATH", "openb[:pods=NAME,n=1000]", "synthetic",
         "synthetic:n=200,rate=0.01,deadline=2.0", "PATH.csv")


def shipped_workload_path() -> str:
    return str(resources.files("workbench.traces") / "data" / "pollux-workload-1.csv")


def default_workload(seed: int = 0, *, deadlines: bool = True) -> Jobs:
    """The small real workload shipped in the package: Pollux workload 1 (160 jobs sampled from
    the Philly trace, 6 applications, arrivals over 8 hours), with `deadlines` drawn by
    `DeadlineRule(seed)` from each job's ideal run time (a mix of tight and loose, so some are
    missed) or, with `deadlines=False`, none (as the Pollux artifact has it).

    Its job lengths are the project's (`lengths="project"`: the validation table's iterations,
    which the metric curves and forecasts count in), not the artifact's that `pollux:PATH`
    gives: the benches and scenarios built on this workload (qos, dqoes, dragon, ...) were
    measured on them."""
    rule = DeadlineRule(seed=seed) if deadlines else None
    jobs = load_pollux_workload(shipped_workload_path(), deadlines=rule, lengths="project")
    jobs.source = "default" if deadlines else "default:deadlines=none"
    return jobs


def load_trace(spec: str, *, seed: int = 0, limit: int | None = None) -> Jobs:
    """The jobs named by `spec` (see the module docstring for the forms), in arrival order;
    `limit` keeps only the first jobs (read cheaply for Philly)."""
    if limit is not None and limit < 0:
        raise ConfigError(f"limit: expected a non-negative integer, got {limit}")
    if str(spec).strip().partition(":")[0] == "philly":
        arg = str(spec).strip().partition(":")[2]
        if arg and "=" in arg and not os.path.exists(arg):  # philly:limit=100 read as a path
            raise InputError("no such file; philly:PATH takes the path of a Philly CSV, not"
                             " options (the first N jobs: --limit N)", file=arg)
        return load_philly(arg or None, seed=seed, limit=limit)
    jobs = _load(spec, seed)
    if limit is not None and limit < len(jobs):
        jobs = Jobs(jobs[:limit], source=jobs.source, skipped=jobs.skipped,
                    notes=jobs.notes + [f"first {limit} jobs kept"])
    return jobs


def names_a_file(spec: str) -> bool:
    """Whether loading `spec` reads a file it names (a path), rather than a workload shipped
    with the package, a generated one or a pod list by name from the data folder: a served
    session without the access token may not have the server read its files."""
    return trace_file(spec) is not None


def trace_file(spec: str) -> str | None:
    """The path of the file loading `spec` reads (see `names_a_file`), None if it names none."""
    kind, _, arg = str(spec).strip().partition(":")
    if kind in ("default", "synthetic"):
        return None
    if kind in ("philly", "pollux"):
        return arg if arg.strip() else None
    if kind == "openb":
        pods = [v.strip() for k, _, v in (item.partition("=") for item in arg.split(","))
                if k.strip() == "pods"]
        return next((v for v in pods if os.sep in v or "/" in v or v.endswith(".csv")), None)
    return str(spec).strip()


def trace_identity(spec: str) -> object:
    """What two specs of one workload share: `default` and `default:deadlines=rule`,
    `synthetic:n=20,rate=0.01` and `synthetic:rate=0.01,n=20`, two paths to one file (a spec
    that cannot be read is its own: loading it says why)."""
    spec = str(spec).strip()
    kind, _, arg = spec.partition(":")
    try:
        if kind == "default":
            return "default", _default_deadlines(arg)
        if kind == "synthetic":  # (seed -1: a seed given in the spec is told from none)
            return "synthetic", repr(sorted(_synthetic_options(arg, -1).items()))
    except ConfigError:
        return spec
    path = trace_file(spec)
    if kind != "openb" and path is not None and os.path.isfile(path):
        return "file", os.path.realpath(path)
    return spec


def _load(spec: str, seed: int) -> Jobs:
    spec = str(spec).strip()
    kind, _, arg = spec.partition(":")
    if kind == "default":
        return default_workload(seed, deadlines=_default_deadlines(arg))
    if kind == "pollux":
        if not arg:
            raise ConfigError("trace 'pollux:PATH' needs a path to a workload CSV")
        return load_pollux_workload(arg)
    if kind == "openb":
        from .openb_jobs import load_openb_jobs

        return load_openb_jobs(arg, seed)
    if kind == "synthetic":
        return synthetic_workload(**_synthetic_options(arg, seed))
    if os.path.exists(spec) or spec.endswith((".csv", ".csv.gz")):
        return _by_header(spec, seed)
    raise ConfigError(f"unknown trace {spec!r}: expected one of {', '.join(FORMS)}")


def _default_deadlines(arg: str) -> bool:
    """`default`'s one option: deadlines=rule (the default) or deadlines=none."""
    value = arg.strip().lower()
    if value in ("", "deadlines=rule"):
        return True
    if value == "deadlines=none":
        return False
    raise ConfigError(f"trace 'default:{arg}': expected default or default:deadlines=none")


def _by_header(path: str, seed: int) -> Jobs:
    columns, line = read_header_at(path)  # raises InputError for a missing file
    header = set(columns)
    if not header:
        raise InputError("empty file: expected a CSV header (a Pollux workload or Philly trace)",
                         file=path)
    if {"application", "num_replicas"} & header:
        return load_pollux_workload(path)
    if {"duration", "num_gpus"} & header:
        return load_philly(path, seed=seed)
    raise InputError(f"unknown trace format: expected a header like {','.join(POLLUX_COLUMNS)}"
                     " (Pollux) or timestamp,duration,num_gpus (Philly), got"
                     f" {','.join(columns)}", file=path, line=line)


def _synthetic_options(arg: str, seed: int) -> dict:
    options: dict = {"seed": seed}
    given: set[str] = set()
    for item in filter(None, (s.strip() for s in arg.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not value:
            raise ConfigError(f"synthetic option {item!r}: expected KEY=VALUE")
        if key in given:  # (n=20,n=30 kept the last)
            raise ConfigError(f"synthetic option {key!r} is given twice")
        given.add(key)
        try:
            if key == "n":
                options["n_jobs"] = int(value)
            elif key == "rate":
                options["arrival_rate"] = _finite(key, value)
            elif key == "deadline":
                if value.lower() == "none":
                    options["deadline_factor"] = None
                elif "-" in value[1:]:  # a range LOW-HIGH (a leading '-' is a sign)
                    cut = value.index("-", 1)
                    options["deadline_factor"] = (_finite(key, value, value[:cut]),
                                                  _finite(key, value, value[cut + 1:]))
                else:
                    options["deadline_factor"] = _finite(key, value)
            elif key == "max_workers":
                options["max_workers"] = int(value)
            elif key == "ps":
                share = float(value)
                options["ps_jobs"] = bool(share) if share in (0.0, 1.0) else share
            elif key == "apps":
                options["apps"] = [a for a in value.split("+") if a]
            elif key == "seed":
                options["seed"] = int(value)
                if options["seed"] < 0:  # numpy's own refusal is a traceback
                    raise ConfigError(f"synthetic option seed={value!r}: expected a"
                                      " non-negative integer")
            else:
                raise ConfigError(f"synthetic option {key!r}: expected one of n, rate, deadline,"
                                  " max_workers, ps, apps, seed")
        except ValueError:
            kind = "a whole number" if key in ("n", "max_workers", "seed") else "a number"
            raise ConfigError(f"synthetic option {key}={value!r}: expected {kind}") from None
    return options


def _finite(key: str, value: str, part: str | None = None) -> float:
    """`value` (or its `part`) as a finite number: deadline=inf gave every job a deadline, and
    all were reported missed."""
    number = float(value if part is None else part)
    if not math.isfinite(number):
        raise ConfigError(f"synthetic option {key}={value!r}: expected a finite number")
    return number
