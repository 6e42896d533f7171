"""Feeding ColumnDataSources cheaply: send only the cells that changed."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from bokeh.models import ColumnDataSource

PATCH_SHARE = 0.15  # above this share of rows changed, resend the column instead of patching


def sync_columns(source: ColumnDataSource, new: Mapping[str, np.ndarray],
                 old: dict[str, np.ndarray]) -> int:
    """Bring `source` to `new` (same length as before) by patching the rows that changed, or
    replacing whole columns when many did. `old` holds what was last sent and is updated.
    Returns the number of cells sent."""
    patches: dict[str, list] = {}
    replace: dict[str, np.ndarray] = {}
    sent = 0
    for key, value in new.items():
        prev = old.get(key)
        if prev is None or len(prev) != len(value):
            replace[key] = value
            continue
        if value.dtype == object:
            changed = np.flatnonzero(value != prev)
        else:
            changed = np.flatnonzero(~((value == prev) | (np.isnan(value) & np.isnan(prev))))
        if not len(changed):
            continue
        if len(changed) > PATCH_SHARE * len(value):
            replace[key] = value
        else:
            conv = str if value.dtype == object else float
            patches[key] = [(int(i), conv(value[i])) for i in changed]
            sent += len(changed)
    if replace:
        source.data.update({k: (list(v) if v.dtype == object else v) for k, v in replace.items()})
        sent += sum(len(v) for v in replace.values())
    if patches:
        source.patch(patches)
    for key, value in new.items():
        old[key] = value
    return sent
