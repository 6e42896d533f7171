"""The Panel app: a state store (`WorkbenchState`), views, and the shell (`Workbench`)."""

import importlib

from ..whatif import SwitchPreview, WhatIfResult
from .state import WorkbenchState


def __getattr__(name: str):
    # The shell imports Panel's widgets; load it only when asked for.
    if name == "Workbench":
        return importlib.import_module(f"{__name__}.app").Workbench
    raise AttributeError(name)


__all__ = ["SwitchPreview", "WhatIfResult", "Workbench", "WorkbenchState"]
