"""Kubernetes resource quantities ("500m", "16Gi", "2") to numbers, and back."""

from __future__ import annotations

_SUFFIX = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0,
    "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60,
}
GIB = 2.0**30


def parse_quantity(text: str | float) -> float:
    """The value of a quantity in base units (cores, bytes, devices)."""
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip()
    for suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * _SUFFIX[suffix]
    if s and s[-1] in "numkMGTPE" and s[-2:-1].lower() != "e":
        return float(s[:-1]) * _SUFFIX[s[-1]]
    return float(s)  # plain or exponent form ("1e3")


def cpu_quantity(cores: float) -> str:
    return f"{round(cores * 1000)}m" if cores != int(cores) else str(int(cores))


def mem_quantity(gib: float) -> str:
    return f"{round(gib * 1024)}Mi" if gib != int(gib) else f"{int(gib)}Gi"
