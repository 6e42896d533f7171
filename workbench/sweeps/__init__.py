"""Sweeps: many engines over many workloads, loads, clusters and seeds, on a process pool or a
Dask cluster, into one resumable table (`workbench sweep`, `workbench.sweep(...)`).

`grid` reads and checks the axes and expands the runs, `workloads` names the workloads,
`run` carries out one run, `executors` runs them (serial, pool, Dask), `store` writes the
table, `summary` and `report` turn it into confidence intervals and plots, `driver` ties
them together.

The package is `sweeps`, not `sweep`, so that `workbench.sweep` stays the function: importing
a submodule `workbench.sweep` would replace that attribute of the package with the module.
"""

from .driver import SweepOutcome, run_sweep, sweep
from .grid import Grid, RunConfig, make_grid

__all__ = ["Grid", "RunConfig", "SweepOutcome", "make_grid", "run_sweep", "sweep"]
