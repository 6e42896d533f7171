"""Views: each presents part of a `WorkbenchState` and holds no state of its own beyond what
it draws. Every view has `.panel` (the Panel object to lay out) and `update()`, called when
the store's `version` changes; Bokeh figures are built once and fed through their
ColumnDataSources."""

from .cluster import ClusterView
from .controls import ControlsView
from .decisions import DecisionsView
from .engines import EngineView
from .forecasts import ForecastView
from .jobs import JobsView
from .timeline import TimelineView
from .whatif import WhatIfView

__all__ = ["ClusterView", "ControlsView", "DecisionsView", "EngineView", "ForecastView", "JobsView", "TimelineView",
           "WhatIfView"]
