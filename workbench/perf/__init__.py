"""Performance models from measured profiles (Pollux throughput/convergence, DL2 PS speeds).

See `workbench.perf.model` for how interpolation works, the units and the measured errors.
"""

from .model import PerfModel, artifact_perf, default_perf

__all__ = ["PerfModel", "artifact_perf", "default_perf"]
