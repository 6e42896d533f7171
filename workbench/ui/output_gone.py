"""The page tells the kernel when a notebook output showing a console is gone.

Panel lets go of a notebook output's models when JupyterLab says the output was deleted, but
that message is never sent (pyviz_comms 3.0.6: its comm is opened only when its field is
null, and the field starts undefined). Running the cell again is caught in the kernel
(`cells.before_cell`); clearing the output or deleting the cell is not: the kernel hears
nothing, and the console ticked on, advancing its run for no one. An `OutputGone` in the
console's layout says it instead: when its view is removed, it opens a comm to the kernel's
`TARGET` naming the output (its root model, the key of Panel's `state._views`). It goes
through the kernel handle pyviz keeps per output, captured when the view is drawn (pyviz
forgets it just before it removes the views). After a page reload, or with the notebook's
tab closed (JupyterLab 4.6), the console runs on, as the kernel's other work does. Outside a
JupyterLab notebook (a served page, VS Code, an ipywidget) there is no such handle: it does
nothing.
"""

from __future__ import annotations

from panel.reactive import ReactiveHTML

TARGET = "workbench.output_gone"  # the kernel's comm target (`cells`)


class OutputGone(ReactiveHTML):
    """An invisible element whose view, removed from a notebook page, tells the kernel."""

    _template = '<div id="mark" style="display:none"></div>'
    _scripts = {  # noqa: RUF012 - Panel reads these class attributes
        "render": ("const kernels = window.PyViz && window.PyViz.kernels;"
                   " state.ref = view.root.model.id;"
                   " state.kernel = kernels ? kernels[state.ref] : undefined"),
        "remove": ("if (state.kernel) { try {"
                   f" state.kernel.connectToComm('{TARGET}').open({{ref: state.ref}})"
                   " } catch (e) { console.warn('workbench: output gone, kernel not told', e) } }"),
    }

    def __init__(self, **params) -> None:
        super().__init__(width=0, height=0, margin=0, **params)
