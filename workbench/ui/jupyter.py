"""The app inside JupyterLab: a jupyter-server-proxy entry point.

JupyterLab's Launcher shows a "Scheduling Workbench" card; opening it starts
`workbench serve` on a free local port behind the Jupyter server (which does the
authentication) and shows the app in a JupyterLab tab. With the workbench-launcher JupyterLab
extension installed (extensions/), that extension adds the card, a command and the tab
instead, and the proxy only serves. Declared in pyproject.toml:

    [project.entry-points.jupyter_serverproxy_servers]
    workbench = "workbench.ui.jupyter:setup_workbench"
"""

from __future__ import annotations

import secrets
import sys
from importlib import resources
from pathlib import Path

from ..commands.serve import TOKEN_ENV, TOKEN_HEADER

NAME = "workbench"
TITLE = "Scheduling Workbench"


def icon_path() -> str:
    return str(resources.files("workbench.ui") / "static" / "workbench.svg")


def labextension_installed() -> bool:
    """Whether JupyterLab has the workbench-launcher extension (then it, not the proxy, puts
    the card in the Launcher and opens the tab)."""
    try:
        from jupyter_core.paths import jupyter_path
    except ImportError:
        return False
    return any((Path(d) / "workbench-launcher" / "package.json").is_file()
               for d in jupyter_path("labextensions"))


def setup_workbench() -> dict:
    """The server-proxy configuration (`{port}` and `{base_url}` are filled in by the proxy).
    The proxy hands the app a token of its own, and adds it to every request it passes on:
    a user Jupyter has let in is the app's operator (loads trace files, connects to
    Kubernetes from the Backend card); a local request around the proxy is not."""
    token = secrets.token_urlsafe(18)
    return {
        # The same interpreter as the Jupyter server: no reliance on PATH.
        "command": [sys.executable, "-m", "workbench", "serve", "--port", "{port}",
                    "--address", "127.0.0.1", "--no-browser", "--prefix", "{base_url}" + NAME,
                    # The browser's origin is the Jupyter server's; it authenticated the user.
                    "--allow-websocket-origin", "*"],
        "environment": {TOKEN_ENV: token},
        "request_headers_override": {TOKEN_HEADER: token},
        "absolute_url": True,  # the app is served under {base_url}workbench/ (its --prefix)
        "timeout": 120,
        "new_browser_tab": False,
        "launcher_entry": {"enabled": not labextension_installed(), "title": TITLE,
                           "icon_path": icon_path(),
                           "category": "Notebook"},
    }
