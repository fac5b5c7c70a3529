"""Strategy figures from suite points: one training step's communication time per config,
stacked by op and axis; EP tokens per expert and per destination rank (router imbalance); the
1F1B pipeline schedule as a timeline with its bubble (PipeDream-Flush / Megatron-LM 1F1B);
a whole measured step's ops per axis over time.
"""

from __future__ import annotations

import numpy as np

from commbench.report.figures import WIDTH, Figure, legend_outside, palette, render, setup
from commbench.report.inputs import EPLoad, PointRow, role
from commbench.report.step_timeline import StepTimeline
from commbench.report.timeline import Timeline
from commbench.traffic.patterns import PATTERNS, Role


def strategy_order() -> list[str]:
    """The strategies in the order of a training step (in-layer, pipeline, gradient), each
    role's in registry order; a sweep of primitive ops is drawn by the collectives figures."""
    roles = list(Role)
    steps = [s for s in PATTERNS.values() if s.role is not Role.SWEEP]
    return [s.name for s in sorted(steps, key=lambda s: roles.index(s.role))]


def _unit(us_max: float) -> tuple[float, str]:
    """(microseconds per unit, unit) for a panel whose longest bar is us_max."""
    return (1e6, "s") if us_max >= 2e6 else (1e3, "ms")


def panels(rows: list[PointRow]) -> list[tuple[str, list[PointRow]]]:
    """One panel per strategy and model, strategies in suite order: a toy model's
    milliseconds and llama-70b's seconds on one axis would leave the toy bars invisible."""
    order = strategy_order()
    keys = sorted(
        dict.fromkeys((r.pattern, r.model) for r in rows),
        key=lambda k: (k[0] not in order, order.index(k[0]) if k[0] in order else 0, k[0]),
    )
    return [(f"{p}, {m}", [r for r in rows if (r.pattern, r.model) == (p, m)]) for p, m in keys]


def step_breakdown(rows: list[PointRow]) -> Figure:
    """Horizontal bars, one per measured point, one panel per strategy, stacked by op@axis in
    milliseconds; an incomplete point (no point record) is hatched."""
    plt = setup()
    from matplotlib.patches import Patch

    groups = panels(rows)
    keys = sorted({k for r in rows for k in r.breakdown})
    colors = dict(zip(keys, palette(len(keys))))
    runs = {r.run_id for r in rows}
    heights = [0.9 + 0.42 * len(mine) for _, mine in groups]
    fig, axes = plt.subplots(
        len(groups),
        1,
        figsize=(WIDTH, sum(heights) + 0.6),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
        layout="constrained",
    )
    for ax, (name, mine) in zip(axes[:, 0], groups):
        pat = mine[0].pattern
        labels = [r.label + (f"  ({r.run_id})" if len(runs) > 1 else "") for r in mine]
        y = np.arange(len(mine))
        left = np.zeros(len(mine))
        scale, unit = _unit(max(sum(r.breakdown.values()) for r in mine))
        for k in keys:
            w = np.array([r.breakdown.get(k, 0.0) / scale for r in mine])
            if not w.any():
                continue
            hatch = ["//" if not r.complete else "" for r in mine]
            bars = ax.barh(y, w, left=left, color=colors[k], edgecolor="white", height=0.7)
            for b, h in zip(bars, hatch):
                b.set_hatch(h)
            left += w
        for yi, r in zip(y, mine):
            tail = "" if r.complete else " (incomplete)"
            ax.text(left[yi], yi, f" {r.time_us / scale:.3g} {unit}{tail}", va="center", fontsize=8)
        ax.set_yticks(y, labels)
        ax.invert_yaxis()
        ax.set_xlim(0, max(left.max(), 1e-9) * 1.28)
        title = f"{name}: communication per training step"
        if role(pat) is Role.PIPELINE:
            title += " (p2p schedule time includes its synthetic compute)"
        ax.set_title(title, loc="left", fontsize=11)
        ax.set_xlabel(f"time per step ({unit})")
        ax.grid(True, axis="x", alpha=0.6)
        ax.grid(False, axis="y")
    handles = [Patch(color=colors[k], label=k) for k in keys]
    if any(not r.complete for r in rows):
        handles.append(
            Patch(facecolor="white", edgecolor="0.3", hatch="//", label="incomplete point")
        )
    legend_outside(axes[0, 0], handles=handles, title="op@axis")
    caption = (
        "Communication time of one training step for each measured strategy config (suite "
        "points), one panel per strategy and model, in milliseconds (seconds where a panel's "
        "longest bar exceeds 2 s), stacked by op and mesh axis (op@axis): sum over the "
        "Program's steps of median time (slowest rank) x repeat count, all groups of an axis "
        f"at once. {len(rows)} point(s) from {len(runs)} run(s); label = model, "
        "tp-cp-(ep-)dp-pp layout [swept options]."
    )
    return Figure(
        "strategy-step-time", "Per-strategy step communication", caption, render(fig), "strategies"
    )


MAX_EP_SERIES = 6  # bars side by side per expert that still read as bars


def ep_series(loads: list[EPLoad]) -> list[EPLoad]:
    """The loads the figure draws: all of them when few, else the most imbalanced and, as
    the baseline, the most balanced (MAX_EP_SERIES in all), most imbalanced first."""
    if len(loads) <= MAX_EP_SERIES:
        return loads
    ranked = sorted(loads, key=lambda ld: -ld.imbalance)
    return ranked[: MAX_EP_SERIES - 1] + ranked[-1:]


def ep_load(loads: list[EPLoad]) -> Figure:
    """Left: tokens per expert; right: tokens per destination EP rank; one colour per router,
    the mean dashed; the legend carries max/mean imbalance and the dropped share."""
    plt = setup()
    total, loads = len(loads), ep_series(loads)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(WIDTH, 3.9), gridspec_kw={"wspace": 0.28})
    colors = palette(len(loads))
    n = len(loads)
    width = 0.8 / n
    for i, (ld, col) in enumerate(zip(loads, colors)):
        off = (i - (n - 1) / 2) * width
        e = np.arange(len(ld.experts))
        ax1.bar(e + off, ld.experts, width=width, color=col)
        r = np.arange(len(ld.per_rank))
        extra = f", {ld.dropped:.0%} dropped" if ld.dropped else ""
        if ld.router_imbalance and abs(ld.router_imbalance - ld.imbalance) > 0.01:
            extra = f" (router {ld.router_imbalance:.2f}){extra}"
        ax2.bar(
            r + off,
            ld.per_rank,
            width=width,
            color=col,
            label=f"{ld.label}: max/mean {ld.imbalance:.2f}{extra}",
        )
        ax1.axhline(np.mean(ld.experts), color=col, ls="--", lw=1)
        ax2.axhline(np.mean(ld.per_rank), color=col, ls="--", lw=1)
        if ld.capacity:
            ax1.axhline(ld.capacity * len(ld.per_rank), color=col, ls=":", lw=1)
    ax1.set_xlabel("expert")
    ax1.set_ylabel("tokens per MoE layer")
    ax1.set_title("tokens per expert", fontsize=11)
    ax2.set_xlabel("destination EP rank")
    ax2.set_ylabel("tokens received per MoE layer")
    ax2.set_title("tokens per destination rank", fontsize=11)
    for ax in (ax1, ax2):
        ax.grid(False, axis="x")
    ax2.set_xticks(np.arange(max(len(ld.per_rank) for ld in loads)))
    ax2.legend(
        loc="upper center", bbox_to_anchor=(-0.15, -0.2), ncol=1, title="router (dashed: mean)"
    )
    caption = (
        "Expert-parallel all-to-all load per router measured: tokens each expert receives "
        "(left) and tokens each destination EP rank receives (right) in one MoE layer's "
        "dispatch, summed over the source ranks of one EP group, after the capacity limit "
        "(dotted: ep x capacity per expert). Dashed: the mean; max/mean is the imbalance "
        "that stretches the all-to-all."
        + (
            f" {len(loads)} of {total} points shown: the most imbalanced and the most balanced."
            if len(loads) < total
            else ""
        )
    )
    return Figure("ep-imbalance", "EP: tokens per destination", caption, render(fig), "strategies")


def pp_timeline(tl: Timeline, name: str) -> Figure:
    """Stages as rows, forward (blue) and backward (orange) passes as boxes labelled with their
    micro-batch, idle time (the bubble) shaded grey, idle share per stage at the right."""
    plt = setup()
    from matplotlib.patches import Patch

    scale, unit = (1e3, "ms") if tl.unit == "s" else (1.0, "forward passes")
    fig, ax = plt.subplots(figsize=(WIDTH, 0.55 * tl.stages + 1.9))
    col = {"F": palette(2)[0], "B": palette(2)[1]}
    span = tl.makespan * scale
    for s in range(tl.stages):
        ax.barh(s, span, left=0, height=0.8, color="0.88", edgecolor="none")
        ax.text(span, s, f" idle {tl.idle_fraction(s):.0%}", va="center", fontsize=8)
    for p in tl.passes:
        w = (p.end - p.start) * scale
        ax.barh(
            p.stage,
            w,
            left=p.start * scale,
            height=0.8,
            color=col[p.direction],
            edgecolor="white",
            lw=0.6,
        )
        if w > span / 60:
            ax.text(
                p.start * scale + w / 2,
                p.stage,
                str(p.micro_batch),
                ha="center",
                va="center",
                fontsize=7,
                color="white",
            )
    ax.set_yticks(range(tl.stages), [f"stage {s}" for s in range(tl.stages)])
    ax.invert_yaxis()
    ax.set_xlim(0, span * 1.1)
    ax.set_xlabel(f"time ({unit})")
    ax.grid(False, axis="y")
    measured = f"measured {tl.bubble_measured:.1%}, " if tl.bubble_measured is not None else ""
    ax.set_title(
        f"{tl.schedule} {tl.label}: bubble {measured}theory {tl.formula} = {tl.bubble_theory:.1%}",
        fontsize=11,
    )
    legend_outside(
        ax,
        handles=[
            Patch(color=col["F"], label="forward (micro-batch)"),
            Patch(color=col["B"], label="backward (micro-batch)"),
            Patch(color="0.88", label="idle (bubble)"),
        ],
    )
    if tl.unit == "s" and tl.measured_s is not None:
        how = (
            f"compute per pass from the run's synthetic compute; message time {tl.message_s * 1e3:.3g} ms "
            f"chosen so the replay lasts the measured {tl.measured_s * 1e3:.3g} ms"
        )
    else:
        how = tl.note
    caption = (
        f"The 1F1B pipeline schedule of {tl.label} ({tl.stages} stages, {tl.micro_batches} "
        f"micro-batches) replayed from the point's Program: each stage's forward and backward "
        f"passes over time in {unit} ({how}); grey is idle time, the pipeline bubble."
    )
    return Figure(name, f"PP: 1F1B schedule {tl.label}", caption, render(fig), "strategies")


def step_timeline(tl: StepTimeline, name: str) -> Figure:
    """A whole step's measured ops per axis over time, coloured by phase; the pipeline's
    synthetic compute hatched inside its span."""
    plt = setup()
    from matplotlib.patches import Patch

    axes = tl.axes()
    phases = list(dict.fromkeys(s.phase for s in tl.spans))
    col = dict(zip(phases, palette(len(phases))))
    fig, ax = plt.subplots(figsize=(WIDTH, 0.5 * len(axes) + 1.9))
    for s in tl.spans:
        row = axes.index(s.axis)
        ax.barh(row, (s.end - s.start) * 1e3, left=s.start * 1e3, height=0.7,
                color=col[s.phase], edgecolor="white", lw=0.4)  # fmt: skip
        if s.phase == "forward+backward" and tl.compute_s:
            ax.barh(row, min(tl.compute_s, s.end - s.start) * 1e3, left=s.start * 1e3,
                    height=0.35, color="none", edgecolor="0.2", hatch="//", lw=0.0)  # fmt: skip
    ax.set_yticks(range(len(axes)), axes)
    ax.invert_yaxis()
    ax.set_xlabel("time in the step (ms)")
    ax.grid(False, axis="y")
    ax.set_title(f"{tl.label}: {tl.total_s * 1e3:.3g} ms of exposed communication", fontsize=11)
    handles = [Patch(color=col[p], label=p) for p in phases]
    if tl.compute_s:
        handles.append(Patch(facecolor="none", edgecolor="0.2", hatch="//", label="compute"))
    legend_outside(ax, handles=handles)
    caption = (
        f"One measured training step of {tl.label}: every op of the step Program in the order "
        "Megatron-Core issues it, on its axis's row, each as long as its measured median x "
        "repeat (ms). Ops were timed one at a time, so all of it is exposed communication; "
        "hatched: the pipeline's synthetic compute stand-in inside the 1F1B span."
    )
    return Figure(name, f"Step: timeline {tl.label}", caption, render(fig), "strategies")
