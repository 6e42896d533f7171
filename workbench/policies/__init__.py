"""Scheduling engines. Each module registers its engines with `@register(name)`."""

from .base import Policy, available, make_policy, register

__all__ = ["Policy", "available", "make_policy", "register"]
