"""Scheduling engines. Each module registers its engines with `@register(name)`."""

from .base import Policy, about, available, check_engine, make_policy, register

__all__ = ["Policy", "about", "available", "check_engine", "make_policy", "register"]
