"""Model figures: predicted vs measured step time per suite point (validate), and the planner's
top configs with their step time split by axis (plus compute and the pipeline bubble).
"""

from __future__ import annotations

import numpy as np

from commbench.calibration.accuracy import ACCURACY_BAND
from commbench.report.figures import (
    WIDTH,
    Figure,
    legend_outside,
    log_labels,
    palette,
    render,
    setup,
)
from commbench.report.inputs import Plan, predicted_pairs
from commbench.report.step_timeline import Verification

# mesh axes in Megatron's rank order, then any other the planner names
AXES = ("tp", "cp", "ep", "dp", "pp")


def axis_order(names) -> list[str]:
    return sorted(names, key=lambda a: (AXES.index(a) if a in AXES else len(AXES), a))


# relative error inside which a prediction counts as good (the planner issue's goal)


def predicted_vs_measured(rows: list[dict], band: float = ACCURACY_BAND, note: str = "") -> Figure:
    """Log-log scatter of predicted vs measured seconds, one colour per pattern, the y = x line
    and the +-band shaded; the legend gives each pattern's median |error|."""
    plt = setup()

    pairs = predicted_pairs(rows)
    assert pairs, "predicted_vs_measured needs rows with measured_s and predicted_s"
    pats = sorted({str(r.get("pattern", "?")) for r in pairs})
    colors = dict(zip(pats, palette(len(pats))))
    fig, ax = plt.subplots(figsize=(WIDTH * 0.72, 5.2))
    m = np.array([r["measured_s"] for r in pairs]) * 1e3
    p = np.array([r["predicted_s"] for r in pairs]) * 1e3
    lo, hi = min(m.min(), p.min()) / 1.6, max(m.max(), p.max()) * 1.6
    xs = np.geomspace(lo, hi, 50)
    ax.fill_between(
        xs, xs * (1 - band), xs * (1 + band), color="0.85", label=f"within +-{band:.0%}"
    )
    ax.plot(xs, xs, color="0.2", lw=1.2, label="y = x (exact)")
    for pat in pats:
        sel = [i for i, r in enumerate(pairs) if str(r.get("pattern", "?")) == pat]
        err = np.abs(p[sel] - m[sel]) / m[sel]
        ax.scatter(
            m[sel],
            p[sel],
            s=36,
            color=colors[pat],
            edgecolor="k",
            lw=0.4,
            zorder=3,
            label=f"{pat} ({len(sel)} pts, median |err| {np.median(err):.0%})",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    log_labels(ax, "x")
    log_labels(ax, "y")
    ax.set_xlabel("measured step communication time (ms, log scale)")
    ax.set_ylabel("predicted (ms, log scale)")
    ax.set_title("validate: predicted vs measured")
    legend_outside(ax, title="pattern")
    left = len(rows) - len(pairs)
    caption = (
        "Each suite point's measured communication time per training step against the time "
        "the calibration predicts for the same Program (commbench validate), in milliseconds "
        f"on log axes; the line is y = x and the grey band +-{band:.0%} relative error. "
        f"{len(pairs)} point(s)"
        + (f"; {left} row(s) without a prediction are left out (see the table)" if left else "")
        + (f". {note}" if note else ".")
    )
    return Figure("validate", "Predicted vs measured", caption, render(fig), "validation")


def plan_top(plan: Plan, name: str, top: int = 10) -> Figure:
    """Horizontal stacked bars of the best `top` configs: comm per axis, compute, bubble (ms, or
    s for steps of seconds);
    a black tick at step_s when the plan gives it."""
    plt = setup()
    from matplotlib.artist import Artist
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    cfgs = plan.configs[:top]
    axes_ = axis_order({a for c in cfgs for a, v in c.comm_s.items() if v})
    parts = [f"comm {a}" for a in axes_]
    has_compute = any(c.compute_s for c in cfgs)
    has_bubble = any(c.bubble_s for c in cfgs)
    parts += ["compute"] * has_compute + ["bubble"] * has_bubble
    cols = dict(zip(parts, palette(len(parts))))
    if has_compute:
        cols["compute"] = "0.75"
    if has_bubble:
        cols["bubble"] = "0.45"
    fig, ax = plt.subplots(figsize=(WIDTH, 0.42 * len(cfgs) + 1.6))
    y = np.arange(len(cfgs))
    left = np.zeros(len(cfgs))
    longest = max([c.step_s or 0.0 for c in cfgs] + [sum(c.comm_s.values()) for c in cfgs])
    scale, unit = (1.0, "s") if longest >= 2.0 else (1e3, "ms")
    for part in parts:
        if part.startswith("comm "):
            w = np.array([c.comm_s.get(part[5:], 0.0) for c in cfgs])
        else:
            w = np.array([(getattr(c, f"{part}_s") or 0.0) for c in cfgs])
        ax.barh(y, w * scale, left=left, color=cols[part], edgecolor="white", height=0.7)
        left += w * scale
    steps = [(i, c.step_s * scale) for i, c in enumerate(cfgs) if c.step_s is not None]
    for i, s in steps:
        ax.plot([s, s], [i - 0.42, i + 0.42], color="k", lw=2)
    ax.set_yticks(y, [f"#{c.rank} {c.label}" for c in cfgs])
    ax.invert_yaxis()
    ax.set_xlabel(f"time per training step ({unit})")
    ax.grid(False, axis="y")
    handles: list[Artist] = [Patch(color=cols[p], label=p) for p in parts]
    if steps:
        handles.append(Line2D([], [], color="k", lw=2, label="step time (plan)"))
    legend_outside(ax, handles=handles)
    head = ", ".join(f"{k} {v}" for k, v in plan.header.items())
    ax.set_title(f"plan: top {len(cfgs)} configs", loc="left")
    caption = (
        f"The planner's best {len(cfgs)} of {len(plan.configs)} configs from {plan.source}"
        + (f" ({head})" if head else "")
        + ", best first: predicted communication time per step split by mesh axis"
        + (", compute" if has_compute else "")
        + (", pipeline bubble" if has_bubble else "")
        + (" in seconds" if unit == "s" else " in milliseconds")
        + (
            "; the black tick is the plan's step time (overlap makes it differ from the sum)"
            if steps
            else ""
        )
        + "."
    )
    return Figure(name, "Planner: top configs", caption, render(fig), "plans")


def verify_ranking(v: Verification) -> Figure:
    """plan --verify: predicted vs measured step communication per config (left, y = x
    dashed) and the two rankings side by side (right, a line per config)."""
    from commbench.plan.verify import kendall_tau

    plt = setup()
    labels = [c[0] for c in v.configs]
    pred = np.array([c[1] for c in v.configs]) * 1e3
    meas = np.array([c[2] for c in v.configs]) * 1e3
    colors = palette(len(labels))
    fig, (left, right) = plt.subplots(1, 2, figsize=(WIDTH, 4.2))
    for i, lab in enumerate(labels):
        left.scatter(meas[i], pred[i], color=colors[i], label=lab, zorder=3)
    hi = float(max(pred.max(), meas.max())) * 1.1
    left.plot([0, hi], [0, hi], "--", color="0.5", lw=1)
    left.set(xlim=(0, hi), ylim=(0, hi), xlabel="measured (ms)", ylabel="predicted (ms)")
    rank_p = np.argsort(np.argsort(pred)) + 1
    rank_m = np.argsort(np.argsort(meas)) + 1
    for i in range(len(labels)):
        right.plot([0, 1], [rank_p[i], rank_m[i]], "-o", color=colors[i])
    right.set_xticks([0, 1], ["predicted rank", "measured rank"])
    right.set_yticks(range(1, len(labels) + 1))
    right.invert_yaxis()
    right.grid(False, axis="x")
    tau = kendall_tau(list(pred), list(meas))
    top1 = "same" if int(np.argmin(pred)) == int(np.argmin(meas)) else "differs"
    fig.suptitle(f"plan --verify {v.run_id}: Kendall tau {tau:.2f}, top-1 {top1}", fontsize=11)
    handles, names = left.get_legend_handles_labels()
    right.legend(handles, names, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    caption = (
        f"plan --verify ({v.run_id}): each config's step communication as the planner priced "
        "its step Program (predicted) and as measured on this world, in ms per step; right, "
        "the configs ranked by each (1 = least communication)."
    )
    return Figure(f"verify-{v.run_id}", f"Planner check: {v.run_id}", caption, render(fig),
                  "models")  # fmt: skip
