"""The note a sweep prints when its time budget clipped an iteration count.

A point's count adapts to `--budget` (measure/runner.py), within [min_iters, max_iters]. At
the floor, one iteration took over budget / min_iters, so the point ran past the budget; at the
cap, the budget held more. Either way the count was not the budget's, and the reader should
know, and how to fix the count instead: `-n N -w W`, OSU's `-i`/`-x`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the analysis commands' imports stay light: no numpy, no measure/
    from commbench.measure.runner import TimingConfig


def clipped(iters: list[int], cfg: TimingConfig) -> str | None:
    """`# iterations clipped: ...` for the points whose budgeted count hit a bound, else None
    (fixed counts, `-n`, were asked for and are never clipped)."""
    if cfg.iters is not None:
        return None
    floor = sum(n <= cfg.min_iters for n in iters)
    cap = sum(n >= cfg.max_iters for n in iters)
    parts = []
    if floor:
        parts.append(
            f"{floor} point(s) at the floor of {cfg.min_iters} (an iteration took over "
            f"{cfg.budget_s:g} s / {cfg.min_iters}: they ran past --budget)"
        )
    if cap:
        parts.append(f"{cap} at the cap of {cfg.max_iters} (--budget {cfg.budget_s:g} s held more)")
    if not parts:
        return None
    return (
        "# iterations clipped: " + "; ".join(parts) + "; -n N -w W fixes the counts (OSU's -i/-x)"
    )
