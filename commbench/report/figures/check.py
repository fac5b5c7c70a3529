"""Cluster check figure: the pair-bandwidth heatmap of a `commbench check` run, rank x rank
(host x host medians beyond MAX_RANKS ranks), the ranks of a named outlier marked in red."""

from __future__ import annotations

import numpy as np

from commbench.check.summary import Summary
from commbench.check.text import MATRIX_MAX_RANKS
from commbench.report.figures import WIDTH, Figure, render, setup


def pair_heatmap(run_id: str, summary: Summary, name: str) -> Figure:
    """Pair bandwidth (GB/s, one direction with both at once) of every measured pair."""
    plt = setup()
    import seaborn as sns

    m = summary.matrix()
    n = len(m)
    slow = {r for f in summary.judgement.findings for r in f.ranks}
    if n <= MATRIX_MAX_RANKS:
        grid = np.array([[np.nan if v is None else v for v in row] for row in m], dtype=float)
        labels = [f"{i} {r.host}" for i, r in enumerate(summary.ranks)]
        red = [i in slow for i in range(n)]
        what = "rank x rank"
    else:
        hosts = list(dict.fromkeys(r.host for r in summary.ranks))
        idx = {h: [i for i, r in enumerate(summary.ranks) if r.host == h] for h in hosts}
        grid = np.full((len(hosts), len(hosts)), np.nan)
        for a, ha in enumerate(hosts):
            for b, hb in enumerate(hosts):
                vals = [m[i][j] for i in idx[ha] for j in idx[hb] if m[i][j] is not None]
                if vals:
                    grid[a, b] = float(np.median([v for v in vals if v is not None]))
        labels = hosts
        red = [any(i in slow for i in idx[h]) for h in hosts]
        what = "host x host (median over the hosts' rank pairs)"
    side = min(WIDTH, 2.5 + 0.42 * len(labels))
    fig, ax = plt.subplots(figsize=(side + 1.2, side))
    sns.heatmap(
        grid,
        ax=ax,
        cmap="viridis",
        annot=len(labels) <= 12,
        fmt=".3g",
        xticklabels=labels,
        yticklabels=labels,
        cbar_kws={"label": "pair bandwidth (GB/s)"},
        mask=np.isnan(grid),
    )
    for ticks in (ax.get_xticklabels(), ax.get_yticklabels()):
        for t, is_red in zip(ticks, red):
            if is_red:
                t.set_color("tab:red")
                t.set_fontweight("bold")
    ax.set_title(f"{run_id}: pair bandwidth, {what}", loc="left", fontsize=11)
    caption = (
        f"Every pair of ranks of check run {run_id} exchanging S = "
        f"{next((r.bytes for r in summary.results if r.test == 'pairs'), 0)} B both ways at "
        "once, in rounds of disjoint pairs (a round-robin tournament); a cell is S / t per "
        "direction in GB/s (t: median over iterations of the pair's slower rank), blank where "
        "the schedule did not pair them. Labels in red: ranks of a named outlier (see the "
        "outlier table)."
    )
    return Figure(name, "Cluster check: pair bandwidth", caption, render(fig), "check")
