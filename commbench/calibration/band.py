"""The uncertainty band of a prediction beyond the measured node counts.

A prediction at N nodes from a series measured at n nodes rests on the model holding over
log2(N / n) doublings of the node count. How far it can be trusted is read from the data
where there is any: when other node counts n_i of the same series family were measured, the
same scaling started from each of them lands at t_i instead of t; they disagree by
moved = max |t_i / t - 1| over a distance of max |log2(n / n_i)| doublings, a rate per
doubling that the band extends over the reach:

    w = max(moved, rate * log2(N / n)),   rate = moved / max |log2(n / n_i)|

and the band is [t / (1 + w), t (1 + w)] (symmetric in log time). With one node count there
is nothing to read a rate from, so the rate is a stated prior, PRIOR_PER_DOUBLING, the
median |error| per doubling of the transfers in bench/transfer_real_logs.py from one node
count (2 nodes to 8 on four clusters: 3-19%, two doublings), and the band says so. The band
never narrows below FLOOR (the run-to-run spread of a repeated nccl-tests row on those
clusters is a few percent). SimAI, ASTRA-sim and Lumos print no such band; the measure of an
honest one is how often it covers the truth (bench/transfer_real_logs.py: `covered`).
"""

from __future__ import annotations

import math

PRIOR_PER_DOUBLING = 0.10
FLOOR = 0.05


def node_band(
    seconds: float, n_from: int, n_to: int, others: list[tuple[int, float]]
) -> tuple[float, str]:
    """(w, why): the relative half-width of the band around `seconds` predicted at n_to nodes
    from n_from, `others` the (nodes, seconds) the same scaling gives from each other node
    count measured."""
    reach = abs(math.log2(n_to / n_from)) if n_from > 0 and n_to > 0 else 0.0
    spread = [
        (abs(t / seconds - 1), abs(math.log2(n_from / c)))
        for c, t in others
        if seconds > 0 and c != n_from
    ]
    if spread:
        moved = max(m for m, _ in spread)
        rate = moved / max(d for _, d in spread)
        w = max(moved, rate * reach, FLOOR)
        counts = "+".join(str(c) for c in sorted({n_from, *(c for c, _ in others)}))
        why = (
            f"band +-{w:.0%}: scaled from {counts} nodes the predictions differ by {moved:.0%}, "
            f"{rate:.0%} per doubling, over {reach:.1f} doublings to {n_to}"
        )
    else:
        w = max(PRIOR_PER_DOUBLING * reach, FLOOR)
        why = (
            f"band +-{w:.0%}: one node count measured ({n_from}), so a prior "
            f"{PRIOR_PER_DOUBLING:.0%} per doubling over {reach:.1f} doublings to {n_to}"
        )
    return w, why
