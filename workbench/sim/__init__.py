"""The discrete-event simulator backend."""

from .engine import Fault, SimBackend

__all__ = ["SimBackend", "Fault"]
