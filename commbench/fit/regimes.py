"""The size regimes of an op's link-table terms, chosen on held-out error.

The series fit picks its segments by a robust BIC with segments of 3 sizes or more
(FitOptions.min_sizes), which keeps false segments out of noisy data. On a factor-2 sweep of a
CPU host a cache level spans two or three sizes and the cost per byte drifts inside one (2-rank
all-to-all: 72, 52, 70, 58, 42 us/MiB from 64 KiB to 2 MiB, then 3x per doubling from 4 to 16
MiB), which 3-size segments cannot follow: the link table's all-to-all and send/recv missed
by 17% at >= 64 KiB where one more regime fits them within 5%. So each op's regimes are chosen
again here: exact segmentation (fit/segments.py) with segments of REGIME_MIN_SIZES sizes
allowed, the number K chosen by leave-one-size-out error with the whole segmentation redone
without the size (cross-validation, Stone 1974: a segment that fits only noise predicts the
left-out size worse), fewer segments winning ties; secant regimes (fit/segments.py) are a
second family held out alike. Two adjacent sizes that deviate the same way are a regime, not
outliers (the series fit's robust weights with two-size segments).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from commbench.calibration.lines import Line, SegmentLike, predict_segments
from commbench.calibration.series_key import SeriesKey
from commbench.fit.options import FitOptions
from commbench.fit.segments import TRUSTED, best_partitions, partition, prepare
from commbench.fit.series import fit_series
from commbench.fit.wls import TINY, median

# a link's points per series: (key, bytes, seconds, series weights, the series' segments)
LinkPoints = tuple[SeriesKey, np.ndarray, np.ndarray, np.ndarray, Sequence[SegmentLike]]

REGIME_MIN_SIZES = 2
REGIME_MAX = 8
TIE = 1.02  # a K whose held-out error is within this factor of the lowest ties with it
# a size held out by more than CAP x the lowest median held-out error (the noise of the best K)
# counts as that much: a preempted size that no partition predicts cannot decide K, while every size a regime
# holds still counts (a median over sizes is blind to a regime of fewer than half of them)
CAP = 3.0


def capped_mean(errs: np.ndarray, cap: float) -> float:
    """Mean of the finite held-out errors, each at most cap."""
    return float(np.mean(np.minimum(errs[np.isfinite(errs)], cap)))


def _lines(
    x: np.ndarray, t: np.ndarray, w: np.ndarray, opts: FitOptions, cuts: Sequence[float]
) -> list[list[Line]]:
    """The best partition of every K = 1..kmax (index K - 1; [] where none is allowed) with a
    boundary at each of cuts (bytes)."""
    prep, order = prepare(x, t)
    parts = best_partitions(prep, w[order], opts, cuts=cuts)
    out: list[list[Line]] = []
    for k, rss in enumerate(parts.rss, 1):
        if not np.isfinite(rss):
            out.append([])
            continue
        bounds, lines = partition(prep, parts, k)
        out.append(
            [
                Line(
                    int(round(prep.sizes[i] * prep.x_scale)),
                    int(round(prep.sizes[j - 1] * prep.x_scale)),
                    a * prep.t_scale,
                    b * prep.t_scale / prep.x_scale,
                )
                for (i, j), (a, b) in zip(zip(bounds[:-1], bounds[1:]), lines)
            ]
        )
    return out


def regime_weights(x: np.ndarray, t: np.ndarray, opts: FitOptions) -> np.ndarray:
    """Robust weights of one series as its fit makes them (series.fit_series: from the most
    flexible segmentation, a point an outlier only if its neighbours disagree) with regimes of
    two sizes allowed: under the series fit's three, a two-size cache level between two others
    left its sizes with weight 0."""
    return fit_series(x, t, _options(opts)).weights


def _options(opts: FitOptions, secants: bool = False) -> FitOptions:
    return dataclasses.replace(
        opts, min_sizes=REGIME_MIN_SIZES, max_segments=REGIME_MAX, bootstrap=0, secants=secants
    )


def held_out_regimes(
    x: np.ndarray,
    t: np.ndarray,
    w: np.ndarray,
    opts: FitOptions,
    segments: Sequence[SegmentLike] = (),
) -> list[Line]:
    """The regimes of one series (bytes x, seconds t, weights w: 0 leaves a point out), as
    lines of the chosen partition: with the boundary below the series fit's top segment where
    that is a two-size cliff (segments.EDGE: on one sweep 5.7x from 16 to 32 MiB, which no
    held-out size can credit), K of 1..REGIME_MAX, with or without secant regimes
    (fit/segments.py), by the capped mean over sizes of the leave-one-size-out
    |log(pred / t)|, fewer regimes and then no secants winning ties (a secant's held-out size
    in a cache transition can miss by more than a line does)."""
    cuts: list[float] = []
    if len(segments) > 1:
        top, under = segments[-1], segments[-2]
        if len(np.unique(x[x >= top.bytes_min])) < opts.min_sizes:  # its cliff's edge
            cuts = [math.sqrt(max(under.bytes_max, 1) * max(top.bytes_min, 1))]
    cands: list[tuple[int, bool, list[Line], np.ndarray]] = []  # (K, secants, lines, errors)
    for secants in (False, True):
        ro = _options(opts, secants)
        full = _lines(x, t, w, ro, cuts)
        errs = _held_out_errors(x, t, w, ro, len(full), cuts)
        cands += [(k, secants, lines, errs[:, k]) for k, lines in enumerate(full) if lines]
    if not cands:  # the weights here leave the cliff's segment too few sizes
        return held_out_regimes(x, t, w, opts) if cuts else []
    cands.sort(key=lambda c: (c[0], c[1]))
    meds = [median(e[np.isfinite(e)]) for *_, e in cands if np.isfinite(e).any()]
    if not meds:
        return cands[0][2]
    cap = CAP * min(meds)  # one cap for both families: their scores are compared
    score = [capped_mean(e, cap) if np.isfinite(e).any() else np.inf for *_, e in cands]
    low = min(score)
    return next(c[2] for c, e in zip(cands, score) if e <= low * TIE + 1e-12)


def _held_out_errors(
    x: np.ndarray, t: np.ndarray, w: np.ndarray, ro: FitOptions, kmax: int, cuts: Sequence[float]
) -> np.ndarray:
    """[size, K - 1]: median |log(pred / t)| of each trusted size left out of the partition
    into K segments under options ro (NaN: an outlier size, or no such partition)."""
    sizes = np.unique(x[w > TINY])
    errs = np.full((len(sizes), kmax), np.nan)
    for i, s in enumerate(sizes):
        out = x == s
        mine = out & (w > TINY)
        if np.mean(w[out]) < TRUSTED:
            continue  # an outlier size scores no partition
        for k, lines in enumerate(_lines(x[~out], t[~out], w[~out], ro, cuts)[:kmax]):
            if lines:
                pred = max(predict_segments(lines, s), TINY)
                errs[i, k] = median(np.abs(np.log(pred / t[mine])))
    return errs


def op_regimes(
    items: list[LinkPoints], opts: FitOptions
) -> tuple[list[LinkPoints], dict[str, list[Line]]]:
    """Each op's regimes, chosen on held-out error from its longest series (most sizes, then
    the largest group), and the items with that series' weights from regime_weights (its
    two-size regimes kept); the op's other series keep their own fit's weights (remaking
    every series' tripled the link table's time on 800 series)."""
    items = list(items)
    regimes = {}
    for op in {it[0].op for it in items}:
        i = max(
            (i for i, it in enumerate(items) if it[0].op == op),
            key=lambda i: (len(np.unique(items[i][1])), items[i][0].group_size),
        )
        key, x, t, _, segs = items[i]
        w = regime_weights(x, t, opts)
        items[i] = (key, x, t, w, segs)
        regimes[op] = held_out_regimes(x, t, w, opts, segs)
    return items, regimes
