"""Trace loaders: real traces and synthetic workloads turned into `JobSpec`s.

    from workbench.traces import load_trace
    jobs = load_trace("philly")            # or "default", "pollux:PATH", "synthetic:n=200", PATH

Every loader returns a `Jobs` list (a list of `JobSpec` with `source`, `skipped`, `notes`) and
raises `InputError` naming file, line and column for bad input.
"""

from .common import Jobs
from .philly import load_philly
from .pollux import load_pollux_workload
from .registry import default_workload, load_trace
from .synthetic import synthetic_workload

__all__ = ["Jobs", "default_workload", "load_philly", "load_pollux_workload", "load_trace",
           "synthetic_workload"]
