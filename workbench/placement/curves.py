"""The openb replay's curves for people: a CSV table, an SVG drawn here (no plotting library
needed), or a PNG through matplotlib when it is installed. Input: `replay.curves()`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import ConfigError

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f")


def write_curves(path: str, data: dict[str, dict[str, np.ndarray]], title: str = "") -> str:
    """Write the curves of `curves()` to `path`: `.csv` (a table), `.svg` (drawn here, no
    plotting library needed) or `.png` (needs matplotlib). Returns the format written."""
    lower = str(path).lower()
    if lower.endswith(".csv"):
        rows = []
        for plugin, c in data.items():
            for load, alloc, frag in zip(c["load"], c["alloc"], c["frag"]):
                rows.append({"plugin": plugin, "requested_load": round(float(load), 4),
                             "allocated_share": float(alloc), "fragmentation_ratio": float(frag)})
        pd.DataFrame(rows).to_csv(path, index=False)
        return "csv"
    if lower.endswith(".svg"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(curves_svg(data, title))
        return "svg"
    if lower.endswith(".png"):
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ConfigError("--plot: .png needs matplotlib, which is not installed; "
                              "use a .svg or .csv file") from None
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for plugin, c in data.items():
            axes[0].plot(100 * c["load"], 100 * c["alloc"], label=plugin)
            axes[1].plot(100 * c["load"], 100 * c["frag"], label=plugin)
        axes[0].set(xlabel="requested GPUs, % of capacity", ylabel="allocated GPUs, %")
        axes[1].set(xlabel="requested GPUs, % of capacity",
                    ylabel="fragmented, % of unallocated GPUs")
        axes[0].legend()
        fig.suptitle(title)
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        return "png"
    raise ConfigError(f"--plot: unknown file type {path!r}; use .svg, .csv or .png")


def curves_svg(data: dict[str, dict[str, np.ndarray]], title: str = "") -> str:
    """Two panels: allocated GPU share and fragmentation ratio against requested load."""
    width, height, pad = 440, 300, 50
    x_max = max(float(c["load"][-1]) for c in data.values()) * 100 if data else 130.0
    panels = [("alloc", "allocated GPUs, % of capacity", (0, 100)),
              ("frag", "fragmented, % of unallocated GPUs", (0, 100))]
    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * width}" '
           f'height="{height + 40}" font-family="sans-serif" font-size="11">'),
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{width}" y="16" text-anchor="middle" font-size="13">{_esc(title)}</text>']
    for p, (key, label, (y_lo, y_hi)) in enumerate(panels):
        x0, y0 = p * width + pad, 30
        w, h = width - pad - 15, height - pad - 10

        def sx(x, x0=x0, w=w):
            return x0 + w * x / x_max

        def sy(y, y0=y0, h=h, y_lo=y_lo, y_hi=y_hi):
            return y0 + h * (1 - (y - y_lo) / (y_hi - y_lo))

        out.append(f'<rect x="{x0}" y="{y0}" width="{w}" height="{h}" fill="none" '
                   f'stroke="#999"/>')
        for tick in range(0, int(x_max) + 1, 20):
            out.append(f'<line x1="{sx(tick):.1f}" y1="{y0 + h}" x2="{sx(tick):.1f}" '
                       f'y2="{y0 + h + 4}" stroke="#999"/>'
                       f'<text x="{sx(tick):.1f}" y="{y0 + h + 16}" '
                       f'text-anchor="middle">{tick}</text>')
        for tick in range(y_lo, y_hi + 1, 20):
            out.append(f'<line x1="{x0 - 4}" y1="{sy(tick):.1f}" x2="{x0 + w}" '
                       f'y2="{sy(tick):.1f}" stroke="#eee"/>'
                       f'<text x="{x0 - 6}" y="{sy(tick) + 4:.1f}" '
                       f'text-anchor="end">{tick}</text>')
        out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 32}" text-anchor="middle">'
                   f'requested GPUs, % of capacity</text>')
        out.append(f'<text transform="translate({x0 - 36},{y0 + h / 2}) rotate(-90)" '
                   f'text-anchor="middle">{_esc(label)}</text>')
        for i, (plugin, c) in enumerate(data.items()):
            colour = _COLOURS[i % len(_COLOURS)]
            pts = " ".join(f"{sx(100 * x):.1f},{sy(100 * y):.1f}"
                           for x, y in zip(c["load"], c[key]))
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" '
                       f'stroke-width="1.5"/>')
            if p == 0:
                # bottom right: the curves are high there
                ly, lx = y0 + h - 12 - 14 * (len(data) - 1 - i), x0 + w - 120
                out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 18}" y2="{ly}" '
                           f'stroke="{colour}" stroke-width="2"/><text x="{lx + 22}" '
                           f'y="{ly + 4}">{_esc(plugin)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
