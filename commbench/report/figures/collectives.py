"""Primitive-op figures: bus bandwidth vs message size (nccl-tests busbw) and latency vs size
(log-log) with the fitted alpha-beta segments, their breakpoints and the fit residuals.

busbw = S / t x factor(op, p) with S in nccl-tests bytes and GB = 1e9 B (nccl-tests PERFORMANCE.md);
a fitted segment t = alpha + beta S is drawn over the sizes it was fitted on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from commbench.ops import bus_factor
from commbench.report.figures import (
    WIDTH,
    Figure,
    legend_outside,
    log_labels,
    palette,
    render,
    setup,
    size_axis,
)
from commbench.report.inputs import Curve
from commbench.sizes import format_size

if TYPE_CHECKING:
    from commbench.calibration import Line, SeriesModel

# `regime`: the NCCL algorithm/protocol a series' runs pinned (RING/SIMPLE), "" NCCL's choice
KEY_EXTRAS = ("dtype", "backend", "timing", "placement", "regime")


def curve_labels(curves: list[Curve]) -> list[str]:
    """`p=4 intra`, plus dtype/backend/timing/placement/NCCL regime where they differ between
    curves (NCCL's own choice reads `NCCL's choice` beside a pinned regime)."""
    vary = [f for f in KEY_EXTRAS if len({getattr(c.key, f) for c in curves}) > 1]
    return [
        " ".join(
            [f"p={c.key.group_size}", c.key.link_class]
            + [getattr(c.key, f) or "NCCL's choice" for f in vary]
        )
        for c in curves
    ]


def _common(curves: list[Curve]) -> str:
    """The key fields all curves share, for the caption: `float32, mpi, per-iteration`."""
    same = [
        getattr(curves[0].key, f)
        for f in KEY_EXTRAS
        if len({getattr(c.key, f) for c in curves}) == 1
    ]
    return ", ".join(v for v in same if v)


def _grid(ax) -> None:
    ax.grid(True, which="major", alpha=0.6)
    ax.grid(True, which="minor", axis="x", alpha=0.15)


def _model_lines(model: SeriesModel, n: int = 64) -> Iterator[tuple[Line, np.ndarray, np.ndarray]]:
    """(segment, bytes, seconds) of each fitted segment over its own size range."""
    for seg in model.segments:
        lo, hi = max(seg.bytes_min, 1), max(seg.bytes_max, 1)
        xs = np.geomspace(lo, hi, n) if hi > lo else np.array([lo, lo])
        yield seg, xs, seg.alpha_s + seg.beta_s_per_byte * xs


def _breaks(model: SeriesModel) -> list[float]:
    """Breakpoints between segments: the geometric mean of the neighbouring sizes (where
    predict() switches lines)."""
    segs = model.segments
    return [math.sqrt(max(a.bytes_max, 1) * max(b.bytes_min, 1)) for a, b in zip(segs, segs[1:])]


def bandwidth(op: str, curves: list[Curve]) -> Figure:
    """Bus bandwidth (GB/s) vs S: one colour per group size / link class; points measured
    (median line through them), dashed the fitted model."""
    plt = setup()
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(WIDTH * 0.78, 4.4))
    labels = curve_labels(curves)
    colors = palette(len(curves))
    lo, hi = min(c.x.min() for c in curves), max(c.x.max() for c in curves)
    handles = []
    for c, label, col in zip(curves, labels, colors):
        f = bus_factor(op, c.key.group_size)
        ax.scatter(c.x, c.x / c.t / 1e9 * f, s=16, color=col, alpha=0.55, linewidths=0, zorder=3)
        for _run, xs, ts in c.lines():  # one median line per run: never across runs
            ax.plot(xs, xs / ts / 1e9 * f, color=col, lw=1.2, alpha=0.8, zorder=3)
        if c.model is not None:
            for _seg, mx, mt in _model_lines(c.model):
                ax.plot(mx, mx / mt / 1e9 * f, color=col, lw=2.0, ls="--", zorder=4)
        handles.append(Line2D([], [], color=col, marker="o", ms=5, lw=1.2, label=label))
    fitted = sum(c.model is not None for c in curves)
    style = [Line2D([], [], color="0.3", marker="o", ms=5, lw=1.2, label="measured (median line)")]
    if fitted:
        style.append(Line2D([], [], color="0.3", lw=2.0, ls="--", label="fitted alpha-beta model"))
    leg = legend_outside(ax, handles=handles + style, title="group size / link")
    leg.get_frame().set_alpha(0.9)
    size_axis(ax, lo, hi)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("message size S (nccl-tests bytes, log2 scale)")
    ax.set_ylabel("bus bandwidth (GB/s, 1 GB = 1e9 B)")
    ax.set_title(f"{op}: bus bandwidth vs message size")
    _grid(ax)
    n = sum(len(c.x) for c in curves)
    fits = f"{fitted} of {len(curves)} series with a fit (dashed)" if fitted else "no fit drawn"
    caption = (
        f"{op} bus bandwidth busbw = S/t x factor(op, p) (nccl-tests) in GB/s against message "
        f"size S from {format_size(lo)} to {format_size(hi)}; t = median over iterations of "
        f"the slowest rank. {n} measured points ({_common(curves)}); {fits}."
    )
    return Figure(f"busbw-{op}", f"{op}: bus bandwidth", caption, render(fig), "collectives")


def latency(op: str, curves: list[Curve]) -> Figure:
    """Time (us) vs S on log-log axes with the fitted segments and breakpoints, and below the
    relative residuals of the measured points against the fit."""
    plt = setup()
    from matplotlib.lines import Line2D

    fitted = [c for c in curves if c.model is not None]
    rows = 2 if fitted else 1
    fig, axes = plt.subplots(
        rows,
        1,
        figsize=(WIDTH * 0.78, 5.6 if rows == 2 else 4.2),
        sharex=True,
        gridspec_kw={"height_ratios": [3, 1.3]} if rows == 2 else None,
        squeeze=False,
    )
    ax = axes[0, 0]
    labels = curve_labels(curves)
    colors = palette(len(curves))
    lo, hi = min(c.x.min() for c in curves), max(c.x.max() for c in curves)
    handles = []
    nbreaks = 0
    for c, label, col in zip(curves, labels, colors):
        ax.scatter(c.x, c.t * 1e6, s=16, color=col, alpha=0.6, linewidths=0, zorder=3)
        if c.model is not None:
            for _seg, mx, mt in _model_lines(c.model):
                ax.plot(mx, mt * 1e6, color=col, lw=2.0, zorder=4)
            for b in _breaks(c.model):
                nbreaks += 1
                ax.axvline(b, color=col, lw=1.0, ls=":", zorder=2)
                ax.plot([b], [c.fitted(b)[0] * 1e6], marker="D", ms=6, color=col, mec="k", zorder=5)
        handles.append(Line2D([], [], color=col, marker="o", ms=5, lw=0, label=label))
    style = [Line2D([], [], color="0.3", marker="o", ms=5, lw=0, label="measured")]
    if fitted:
        style.append(Line2D([], [], color="0.3", lw=2.0, label="fitted segment"))
    if nbreaks:
        style.append(
            Line2D([], [], color="0.3", lw=1.0, ls=":", marker="D", mec="k", label="breakpoint")
        )
    legend_outside(ax, handles=handles + style, title="group size / link")
    ax.set_yscale("log")
    log_labels(ax)
    ax.set_ylabel("time per op (us, log scale)")
    ax.set_title(f"{op}: latency vs message size")
    _grid(ax)
    if fitted:
        rax = axes[1, 0]
        for c, col in zip(curves, colors):
            if c.model is None:
                continue
            x, r = c.residuals()
            rax.scatter(x, r * 100, s=14, color=col, alpha=0.7, linewidths=0, zorder=3)
        rax.axhline(0, color="0.2", lw=1.0)
        # symmetric log beyond +-10%: a few slow outliers must not flatten the rest
        rax.set_yscale("symlog", linthresh=10, linscale=1.0)
        from matplotlib.ticker import FixedLocator, FuncFormatter

        top = max(np.nanmax(np.abs(c.residuals()[1])) for c in fitted) * 100
        ticks = [
            t for t in (-100, -10, 0, 10, 100, 1000, 10000) if t <= max(top, 10) * 1.01 or t <= 10
        ]
        rax.yaxis.set_major_locator(FixedLocator(ticks))
        rax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:+g}" if v else "0"))
        rax.set_ylim(-150, max(top, 10) * 2.5)
        rax.set_ylabel("residual (%)\n(meas-fit)/fit")
        _grid(rax)
    size_axis(axes[-1, 0], lo, hi)
    axes[-1, 0].set_xlabel("message size S (nccl-tests bytes, log2 scale)")
    caption = (
        f"{op} time per op in microseconds (median over iterations of the slowest rank, log "
        f"scale) against message size S ({_common(curves)}). "
        + (
            "Solid: fitted alpha-beta segments t = alpha + beta S over the sizes each was "
            "fitted on; "
            + (
                f"{nbreaks} breakpoint(s) marked (dotted, diamond) where the fit switches lines"
                if nbreaks
                else "one segment per series (no breakpoint)"
            )
            + ". Bottom: relative residual (measured - fitted) / fitted in percent, linear "
            "within +-10% and logarithmic beyond."
            if fitted
            else "No fit drawn: " + "; ".join(sorted({c.missing for c in curves if c.missing}))
        )
    )
    return Figure(f"latency-{op}", f"{op}: latency and fit", caption, render(fig), "collectives")
