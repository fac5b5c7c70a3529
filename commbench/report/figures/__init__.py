"""Figures of the report: matplotlib (Agg) + seaborn styling, rendered to PNG bytes.

Each figure module takes plain data (built by commbench.report.inputs, or by a test) and returns
`Figure`s; nothing here reads runs or calibrations. matplotlib and seaborn are imported inside
`setup()`, so importing this package costs nothing on the measuring path.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np

from commbench.sizes import format_size

DPI = 110
# the widest figure (inches); the page shows figures at their natural size up to its width
WIDTH = 10.0


@dataclass
class Figure:
    """One rendered figure: file stem, heading, caption (what, on what, which units), PNG."""

    name: str
    title: str
    caption: str
    png: bytes
    section: str = ""


def setup():
    """Select the Agg backend and the seaborn theme once; return pyplot."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")
    plt.rcParams.update(
        {
            "figure.dpi": DPI,
            "savefig.dpi": DPI,
            "axes.titlesize": 12,
            "axes.labelsize": 11,
            "legend.fontsize": 9,
            "legend.title_fontsize": 9,
            "xtick.labelsize": 9,
            "ytick.labelsize": 9,
        }
    )
    return plt


def render(fig) -> bytes:
    """The figure as PNG bytes (tight bounding box, so outside legends are kept); closes it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", pad_inches=0.15)
    plt.close(fig)
    return buf.getvalue()


def palette(n: int) -> list:
    """n distinct colours (colorblind palette, extended with husl when n > 10)."""
    import seaborn as sns

    return sns.color_palette("colorblind", n) if n <= 10 else sns.color_palette("husl", n)


def size_axis(ax, lo: float, hi: float, axis: str = "x") -> None:
    """A log2 byte axis labelled in binary units (8 B, 64 B, ..., 1 GiB): a label every k-th
    power of two from the bottom of the range (at most 10), a minor tick at every power of two;
    a range under three powers of two gets four evenly spread labels instead."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    lo = max(lo, 1.0)
    hi = max(hi, lo)
    e0, e1 = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    if e1 == e0:
        e0, e1 = e0 - 1, e1 + 1
    span = e1 - e0
    step = max(1, math.ceil(span / 9))  # at most 10 labels
    if span % step and span % (step + 1) == 0:
        step += 1  # so the last label is the top of the range
    majors = [2.0**e for e in range(e0, e1 + 1, step) if lo <= 2.0**e <= hi]
    if len(majors) < 3:  # a narrow range: label sizes spread evenly between its ends
        majors = sorted({float(v) for v in np.geomspace(lo, hi, 4).round()})
    minors = [2.0**e for e in range(e0, e1 + 1)]
    a = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    a.set_major_locator(FixedLocator(majors))
    a.set_minor_locator(FixedLocator(minors))
    a.set_major_formatter(FuncFormatter(lambda v, _pos: format_size(v)))
    a.set_minor_formatter(NullFormatter())
    pad = min(2**0.3, max(hi / lo, 1.01) ** 0.05)  # a margin, narrower for a narrow range
    (ax.set_xlim if axis == "x" else ax.set_ylim)(lo / pad, hi * pad)


def log_labels(ax, axis: str = "y") -> None:
    """Plain numbers (0.5, 20, 3000) on a log axis; minor ticks labelled too when the axis
    spans under a decade, and at 2 and 5 (x a power of ten) under two decades, so a short
    range still carries numbers."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    a = ax.yaxis if axis == "y" else ax.xaxis
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    span = hi / max(lo, 1e-300)
    a.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))

    def minor(v, _pos):
        lead = round(v / 10 ** math.floor(math.log10(v) + 1e-9)) if v > 0 else 0
        return f"{v:g}" if span < 10 or (span < 100 and lead in (2, 5)) else ""

    a.set_minor_formatter(FuncFormatter(minor) if span < 100 else NullFormatter())


def legend_outside(ax, **kw):
    """A legend to the right of the axes, so it never covers data."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kw)
