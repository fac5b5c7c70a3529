"""Traced job figure: one step of a profiled training job (`commbench trace --results`), one
row per rank: compute shaded grey, each collective or p2p op a bar coloured by its parallel
axis, the part of it no compute hid (exposed) hatched in red above the bar."""

from __future__ import annotations

from commbench.report.figures import WIDTH, Figure, palette, render, setup
from commbench.report.trace_inputs import TracedJob

MAX_RANKS = 16  # rows drawn; the per-axis table below the figure covers every rank


def timeline(job: TracedJob, name: str) -> Figure:
    plt = setup()
    from matplotlib.patches import Patch

    ops = job.step_ops()
    every = sorted({o.rank for o in ops} | set(job.windows))
    ranks = every[:MAX_RANKS]
    axes = sorted({o.axis or "unknown" for o in ops})
    colours = dict(zip(axes, palette(len(axes))))
    fig, ax = plt.subplots(figsize=(WIDTH, 1.2 + 0.55 * len(ranks)))
    for y, rank in enumerate(ranks):
        for a, b in job.compute.get(rank, []):
            ax.broken_barh([(a / 1e3, (b - a) / 1e3)], (y - 0.4, 0.8), color="0.8", lw=0)
        for o in (o for o in ops if o.rank == rank):
            x, w = o.start_us / 1e3, o.time_us / 1e3
            ax.broken_barh([(x, w)], (y - 0.3, 0.6), color=colours[o.axis or "unknown"], lw=0)
            if o.exposed_us > 0:
                ax.broken_barh([(x, w)], (y + 0.3, 0.1), facecolor="none", edgecolor="tab:red",
                               hatch="////", lw=0.5)  # fmt: skip
        if rank in job.windows:
            ax.plot([job.windows[rank] / 1e3] * 2, [y - 0.45, y + 0.45], color="k", lw=0.8)
    ax.set_yticks(range(len(ranks)), [f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlabel("time from the step's start on each rank (ms)")
    handles = [Patch(color=colours[a], label=a) for a in axes]
    handles += [Patch(color="0.8", label="compute"),
                Patch(facecolor="none", edgecolor="tab:red", hatch="////", label="exposed")]  # fmt: skip
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    layout = job.meta.get("layout") or "layout unknown"
    step = "the traced span" if job.step < 0 else f"ProfilerStep#{job.step}"
    ax.set_title(f"{job.run_id}: {step}, {layout}", loc="left", fontsize=11)
    share = job.meta.get("comm_share")
    exposed = job.meta.get("exposed_share")
    caption = (
        f"One step ({step}) of traced job {job.run_id} ({job.meta.get('backend')}, world "
        f"{job.meta.get('world_size')}, {layout}), one row per rank, times in ms from the "
        "step's start on that rank: grey = compute, bars = communication ops coloured by "
        "parallel axis, red hatch = the part of an op no compute overlapped (exposed), black "
        "tick = the step's end."
        + (f" The first {MAX_RANKS} of {len(every)} ranks are drawn." if len(every) > MAX_RANKS else "")
        + (f" Over every traced step: communication {100 * share:.1f}% of the step, exposed "
           f"{100 * exposed:.1f}%." if share is not None and exposed is not None else "")
    )  # fmt: skip
    return Figure(name, "Traced job: one step", caption, render(fig), "trace")
