"""The console's text panes: Panel's, except that what they show is sanitized HTML, and that
in a notebook rendered inline (offline) they keep their inlined styles when their text changes.

Their text carries names and messages from outside: job names from a trace, a node's name
from a cluster, a search, a link's `?job=`, a path typed into the Backend card and the error
about it. Panel puts a pane's HTML into the page as is (its Markdown renderer passes raw
HTML through), so such a name could run a script in an operator's page, with its token in
the URL. Every pane's HTML is cleaned (`nh3`, Panel's own sanitizer, with the tags and
attributes the console's own markup uses: style and class, no images, no event handlers,
no `javascript:` links).

Panel re-sends a pane's style sheets with every change of its text, as links to its CDN
(cdn.holoviz.org). The notebook's first render had inlined them; from the first update on,
the headline asked the internet for four style sheets each tick, and with no internet the
pane lost its styles (Panel issue #7073). A change of the text alone now leaves them be.
"""

from __future__ import annotations

import html

import nh3
import panel as pn

_TAGS = nh3.ALLOWED_TAGS - {"img", "map", "area"} | {"input"}  # (input: Markdown's task lists)
_ATTRIBUTES = {tag: set(names) for tag, names in nh3.ALLOWED_ATTRIBUTES.items() if tag in _TAGS}
_ATTRIBUTES["*"] = {"class", "style", "title"}
_ATTRIBUTES["input"] = {"type", "checked", "disabled"}


def clean_html(text: str) -> str:
    """`text` (HTML) with only the console's tags and attributes: no scripts, no event
    handlers, no images, no `javascript:` links."""
    return nh3.clean(text, tags=_TAGS, attributes=_ATTRIBUTES)


def as_text(message: str) -> str:
    """`message` (a name, a path, an error's words) to show as text in a pane: `<`, `>` and
    `&` escaped, quotes as typed (the text is an element's, never an attribute's)."""
    return html.escape(message, quote=False)


class _Sanitized:
    def _transform_object(self, obj) -> dict:
        # Panel's render, escaped for its model: cleaned in between (escape undoes exactly)
        props = super()._transform_object(obj)
        props["object"] = html.escape(clean_html(html.unescape(props["object"])))
        return props


class _KeepsInlinedStyles:
    def _update(self, ref, model) -> None:  # Panel's HTMLBasePane._update, less the sheets
        if not pn.config.inline or self.enable_streaming:
            return super()._update(ref, model)
        props = self._get_properties(model.document)
        props.pop("stylesheets", None)
        model.update(**props)


class Markdown(_Sanitized, _KeepsInlinedStyles, pn.pane.Markdown):
    pass


class HTML(_Sanitized, _KeepsInlinedStyles, pn.pane.HTML):
    pass


class Alert(_Sanitized, _KeepsInlinedStyles, pn.pane.Alert):
    pass
