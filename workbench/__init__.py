"""workbench: an interactive scheduling workbench for deep-learning training jobs."""

__version__ = "0.1.0"

from .k8s.progress import report  # noqa: F401 - workbench.report(...) for training scripts


def __getattr__(name: str):
    # `workbench.sweep(...)`, imported on first use: pandas and the engines stay out of
    # `import workbench` (a training script imports it for `report` alone).
    if name == "sweep":
        from .sweeps import sweep

        return sweep
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
