"""workbench: an interactive scheduling workbench for deep-learning training jobs."""

__version__ = "0.1.0"

from .k8s.progress import report  # noqa: F401 - workbench.report(...) for training scripts
