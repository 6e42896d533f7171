"""Trace loaders: real traces and synthetic workloads turned into `JobSpec`s.

    from workbench.traces import load_trace
    jobs = load_trace("philly")            # or "default", "pollux:PATH", "synthetic:n=200", PATH

Every loader returns a `Jobs` list (a list of `JobSpec` with `source`, `skipped`, `notes`) and
raises `InputError` naming file, line and column for bad input.

Seeded workloads built on the real traces, for the engines' benches and DL2's training:
`ps_jobs` (Philly jobs as elastic parameter-server jobs), `philly_sample` (a load-scaled
sample of Philly), `deadlines` (Pollux workload 1 with deadlines or QoE targets), and
`openb_jobs` (GPU-sharing jobs from an openb pod list).
"""

from .common import Jobs
from .philly import load_philly
from .pollux import load_pollux_workload
from .registry import default_workload, load_trace
from .synthetic import synthetic_workload

__all__ = ["Jobs", "default_workload", "load_philly", "load_pollux_workload", "load_trace",
           "synthetic_workload"]
