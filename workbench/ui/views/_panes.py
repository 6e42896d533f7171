"""The console's text panes: Panel's, except that in a notebook rendered inline (offline)
they keep their inlined styles when their text changes.

Panel re-sends a pane's style sheets with every change of its text, as links to its CDN
(cdn.holoviz.org). The notebook's first render had inlined them; from the first update on,
the headline asked the internet for four style sheets each tick, and with no internet the
pane lost its styles (Panel issue #7073). A change of the text alone now leaves them be.
"""

from __future__ import annotations

import panel as pn


class _KeepsInlinedStyles:
    def _update(self, ref, model) -> None:  # Panel's HTMLBasePane._update, less the sheets
        if not pn.config.inline or self.enable_streaming:
            return super()._update(ref, model)
        props = self._get_properties(model.document)
        props.pop("stylesheets", None)
        model.update(**props)


class Markdown(_KeepsInlinedStyles, pn.pane.Markdown):
    pass


class HTML(_KeepsInlinedStyles, pn.pane.HTML):
    pass


class Alert(_KeepsInlinedStyles, pn.pane.Alert):
    pass
