"""The Panel app: a state store (`WorkbenchState`), views, and the shell (`Workbench`)."""

from .state import SwitchPreview, WhatIfResult, WorkbenchState


def __getattr__(name: str):
    # The shell imports Panel's widgets; load it only when asked for.
    if name in ("Workbench", "app"):
        from . import app as _app

        return getattr(_app, name)
    raise AttributeError(name)


__all__ = ["SwitchPreview", "WhatIfResult", "Workbench", "WorkbenchState", "app"]
