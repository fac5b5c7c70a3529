"""Piecewise alpha-beta fits of one series: time = alpha + beta * bytes, segment by segment.

A measured curve is a lower envelope of alpha-beta lines (Hockney 1994's model; NCCL switches
LL/LL128/Simple and Ring/Tree, MPI switches eager/rendezvous), so the fit is piecewise:

- each segment minimises sum w_i ((t_i - alpha - beta x_i) / t_i)^2, weighted least squares on
  the *relative* error so 8-byte and 1-GiB points count alike, with alpha >= 0 and beta >= 0
  (closed form on the 2x2 normal equations, active set on the boundary);
- breakpoints are found by exact segmentation (dynamic programming over contiguous runs of
  message sizes, jumps between segments allowed, no forced continuity), the number of segments
  K chosen by a robust BIC, 2 sum rho(r / s) + penalty (3K - 1) log n with Huber's rho of
  r = log(pred / t) and the scale s of the most flexible partition (Yao 1988; Machado 1993;
  Bai & Perron 1998); the default penalty 2 keeps false segments on synthetic 1-10% noise to
  about 5%;
- outliers are handled by iteratively reweighted least squares (Huber 1964, then Tukey's
  bisquare, Beaton & Tukey 1974; scale 1.4826 MAD): the weights come from the most flexible
  segmentation, so they do not depend on K, then the chosen segments are refitted with their
  own bisquare weights; points whose final weight is 0 are counted as outliers. A point is an
  outlier only if its neighbours disagree (neighbour_checked): a run of sizes deviating the
  same way keeps its weight, and at the top of the series two such sizes may form a segment;
- diagnostics per segment: points, R^2 on log-time, median and max relative error (both over
  every point, outliers included, so the median is never above the max),
  leave-one-size-out error (segmentation held fixed) and residual-bootstrap 95% intervals.

Where the records say which NCCL algorithm/protocol each size ran in (an import's tuning lines),
no segment spans a switch between two regimes of min_sizes sizes or more: the segments follow
the regimes NCCL was seen to run (calibrate.regime_cuts), the BIC still splits within one.

The line fit and reweighting live in fit/wls.py, the segmentation and BIC in fit/segments.py;
numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from commbench.fit.options import FitOptions
from commbench.fit.segments import (
    EDGE,
    TRUSTED,
    Lines,
    Prepared,
    best_partitions,
    choose_k,
    flexible_k,
    partition,
    point_stats,
    predict_points,
    prepare,
)
from commbench.fit.wls import TINY, median, robust_weights, solve


@dataclass(kw_only=True)
class Segment:
    """One alpha-beta line over the measured sizes [bytes_min, bytes_max], with diagnostics."""

    bytes_min: int
    bytes_max: int
    alpha_s: float
    beta_s_per_byte: float
    points: int
    sizes: int
    outliers: int
    r2_log: float | None
    median_rel_err: float
    max_rel_err: float
    loso_median_rel_err: float | None
    loso_max_rel_err: float | None
    alpha_ci95: tuple[float, float] | None
    beta_ci95: tuple[float, float] | None

    def predict(self, nbytes: ArrayLike) -> np.ndarray:
        """Seconds at nbytes (scalar or array) on this segment's line."""
        return self.alpha_s + self.beta_s_per_byte * np.asarray(nbytes, dtype=float)

    @property
    def bandwidth_GBps(self) -> float | None:
        """Asymptotic algorithm bandwidth S / (beta S) = 1 / beta, in GB/s (1e9)."""
        return 1.0 / self.beta_s_per_byte / 1e9 if self.beta_s_per_byte > 0 else None

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        for k in ("alpha_ci95", "beta_ci95"):
            d[k] = list(d[k]) if d[k] is not None else None
        return d


@dataclass
class SeriesFitResult:
    """The segments of one series plus the per-point weights and residuals they came from."""

    segments: list[Segment]
    weights: np.ndarray  # final robust weight of each point (0 = outlier)
    rel_err: np.ndarray  # |pred - t| / t of each point
    loso_rel_err: np.ndarray  # per distinct size: mean leave-one-size-out error of its points
    bic: list[float] = field(default_factory=list)  # criterion of K = 1.. segments
    # (bytes, median measured seconds) at each measured size (calibration.lines)
    knots: list[tuple[int, float]] = field(default_factory=list)

    @property
    def outliers(self) -> int:
        return int(np.count_nonzero(self.weights <= TINY))


def fit_series(
    x: ArrayLike, t: ArrayLike, opts: FitOptions | None = None, cuts: Sequence[float] = ()
) -> SeriesFitResult:
    """Fit time = alpha + beta x piecewise to one series (x bytes, t seconds; t > 0).

    The series needs at least `opts.min_sizes` distinct sizes (the caller checks and reports).
    No segment spans one of `cuts` (bytes between two sizes: where the log says NCCL switched
    algorithm or protocol, regime_cuts); each side of one must hold min_sizes sizes."""
    opts = opts or FitOptions()
    x = np.asarray(x, dtype=float)
    t = np.asarray(t, dtype=float)
    assert x.shape == t.shape and x.ndim == 1
    assert np.all(t > 0) and np.all(x >= 0)
    prep, order = prepare(x, t)
    assert prep.m >= opts.min_sizes, "series too short: check before fitting"
    w = np.ones_like(prep.t)
    edge: int | None = None
    if opts.robust:
        # robust weights from the most flexible segmentation, so that they do not depend on
        # the number of segments about to be chosen (an outlier cannot pass for structure)
        for kind in ("huber", "tukey"):
            dp = best_partitions(prep, w, opts, edge, cuts)
            bounds, lines = partition(prep, dp, flexible_k(dp.rss, prep.t.size))
            r = 1.0 - predict_points(prep, bounds, lines) / prep.t
            w, found = neighbour_checked(prep, r, robust_weights(r, kind, opts), opts.min_sizes)
            edge = edge if found is None else found  # once fitted, the cliff looks normal
    dp = best_partitions(prep, w, opts, edge, cuts)
    k, bics = choose_k(prep, dp, opts)
    bounds, lines = partition(prep, dp, k)
    if opts.robust:  # final weights and lines from the chosen segments (boundaries fixed)
        for _ in range(2):
            r = 1.0 - predict_points(prep, bounds, lines) / prep.t
            w, _ = neighbour_checked(prep, r, robust_weights(r, "tukey", opts), opts.min_sizes)
            lines = _refit_lines(prep, bounds, lines, w)
    pred = predict_points(prep, bounds, lines)
    r = 1.0 - pred / prep.t
    rel = np.abs(pred - prep.t) / prep.t
    segments, loso = _diagnostics(prep, bounds, lines, w, r, rel, opts)
    # back to the caller's order
    inv = np.empty_like(order)
    inv[order] = np.arange(len(order))
    return SeriesFitResult(segments, w[inv], rel[inv], loso, bics, _knots(prep))


def _knots(prep: Prepared) -> list[tuple[int, float]]:
    """Per measured size: (bytes, median measured seconds), the sizes the line's weights doubt
    included: a size's median over its points is already robust, and on six factor-2 sweeps
    here knots at trusted sizes only lost to log-log interpolation of the neighbours once
    (9.2% against 8.7%) where knots at every size did not (bench/fit_accuracy.py)."""
    return [
        (int(round(prep.x[i] * prep.x_scale)), float(median(prep.t[i:j]) * prep.t_scale))
        for i, j in zip(prep.starts[:-1], prep.starts[1:])
    ]


def neighbour_checked(
    prep: Prepared, r: np.ndarray, w: np.ndarray, min_sizes: int
) -> tuple[np.ndarray, int | None]:
    """Robust weights w with structure given back: a point is an outlier only if its neighbours
    disagree with it. A down-weighted size (mean weight below TRUSTED) is structure when it sits
    in a run of adjacent sizes that deviate the same way, each by at least half as much, and the
    run is long enough for a segment of its own (min_sizes, or EDGE sizes at the top of the
    series): a bandwidth cliff at the largest sizes (last-level cache, protocol switch) is a
    change of the curve, not bad points. Its points that deviate like the size does get full
    weight back; a lone slow size, a two-size bump in the middle, or one slow repeat among its
    size's points stays an outlier. Also returns the first size of a confirmed run at the top
    too short for min_sizes (the segmentation may give it a segment of its own), else None."""
    size_r = np.array([median(r[a:b]) for a, b in zip(prep.starts[:-1], prep.starts[1:])])
    size_w = np.add.reduceat(w, prep.starts[:-1]) / np.diff(prep.starts)
    out = w.copy()
    edge_from: int | None = None
    for i in map(int, np.flatnonzero(size_w < TRUSTED)):
        sign, half = np.sign(size_r[i]), 0.5 * abs(size_r[i])
        lo = hi = i
        while lo > 0 and np.sign(size_r[lo - 1]) == sign and abs(size_r[lo - 1]) >= half:
            lo -= 1
        while hi + 1 < prep.m and np.sign(size_r[hi + 1]) == sign and abs(size_r[hi + 1]) >= half:
            hi += 1
        run = hi - lo + 1
        at_top = run >= EDGE and hi == prep.m - 1
        if run >= min_sizes or at_top:
            a, b = prep.starts[i], prep.starts[i + 1]
            same = np.sign(r[a:b]) == sign
            out[a:b] = np.where(same, 1.0, w[a:b])
            if at_top and run < min_sizes:
                edge_from = lo if edge_from is None else min(edge_from, lo)
    return out, edge_from


def _refit_lines(prep: Prepared, bounds: list[int], lines: Lines, w: np.ndarray) -> Lines:
    """Refit each segment's line with weights w; a segment left with fewer than 2 sizes of
    positive weight keeps its line (a degenerate fit would be arbitrary)."""
    pstart = prep.starts[np.asarray(bounds)]
    seg = np.add.reduceat(point_stats(prep, w), pstart[:-1], axis=1)
    live = np.add.reduceat(np.add.reduceat(w, prep.starts[:-1]) > TINY, bounds[:-1])
    a, b, _ = solve(*seg)
    return [(float(a[k]), float(b[k])) if live[k] >= 2 else line for k, line in enumerate(lines)]


def _diagnostics(
    prep: Prepared,
    bounds: list[int],
    lines: Lines,
    w: np.ndarray,
    r: np.ndarray,
    rel: np.ndarray,
    opts: FitOptions,
) -> tuple[list[Segment], np.ndarray]:
    """Per-segment diagnostics in real units, and each size's leave-one-size-out error;
    vectorised over segments (reduceat on segment boundaries)."""
    K = len(lines)
    pstart = prep.starts[bounds]  # point index where each segment starts (+ n)
    seg_pt = np.repeat(np.arange(K), np.diff(pstart))
    size_pt = np.repeat(np.arange(prep.m), np.diff(prep.starts))
    a = np.array([ln[0] for ln in lines])
    b = np.array([ln[1] for ln in lines])
    x, t = prep.x, prep.t
    pred = a[seg_pt] + b[seg_pt] * x
    inl = w > TINY
    fin = inl.astype(float)
    cut = pstart[:-1]
    # R^2 on log-time over the points the fit kept
    lt = np.log(t)
    lp = np.log(np.maximum(pred, TINY))
    n_in = np.add.reduceat(fin, cut)
    s1 = np.add.reduceat(fin * lt, cut)
    ss_tot = np.add.reduceat(fin * lt * lt, cut) - s1 * s1 / np.maximum(n_in, 1)
    ss_res = np.add.reduceat(fin * (lt - lp) ** 2, cut)
    bad = np.add.reduceat(fin * (pred <= 0), cut) > 0
    # leave one size out: subtract the size's sums from its segment's, refit, predict it
    per_size = np.add.reduceat(point_stats(prep, w), prep.starts[:-1], axis=1)
    seg_tot = np.add.reduceat(per_size, bounds[:-1], axis=1)
    seg_size = np.repeat(np.arange(K), np.diff(bounds))
    la, lb, _ = solve(*(seg_tot[:, seg_size] - per_size))
    e_pt = np.abs(la[size_pt] + lb[size_pt] * x - t) / t
    kept = np.add.reduceat(fin, prep.starts[:-1])
    with np.errstate(invalid="ignore", divide="ignore"):
        loso = np.where(kept > 0, np.add.reduceat(fin * e_pt, prep.starts[:-1]) / kept, np.nan)
    # residual bootstrap over the whole series: t* = pred / (1 - r*), refit every segment
    ci = None
    pool = r[inl]
    if opts.bootstrap > 0 and pool.size >= 2:
        dof = pool.size - 2 * K
        if dof > 0:
            pool = pool * np.sqrt(pool.size / dof)  # leverage correction
        rng = np.random.default_rng(opts.seed)
        rs = rng.choice(pool, size=(opts.bootstrap, x.size), replace=True)
        tb = np.maximum(pred, TINY)[None, :] / (1.0 - np.minimum(rs, 0.999))
        g1 = 1.0 / tb
        g2 = x[None, :] * g1
        wg1, wg2 = w * g1, w * g2
        stats = np.stack((np.broadcast_to(w, g1.shape), wg1, wg2, wg1 * g1, wg1 * g2, wg2 * g2))
        ba, bb, _ = solve(*np.add.reduceat(stats, cut, axis=2))  # (B, K) each
        lo_i = int(0.025 * (opts.bootstrap - 1))
        hi_i = int(np.ceil(0.975 * (opts.bootstrap - 1)))
        ci = (np.sort(ba, axis=0)[[lo_i, hi_i]], np.sort(bb, axis=0)[[lo_i, hi_i]])
    xs, ts = prep.x_scale, prep.t_scale
    segs: list[Segment] = []
    for k in range(K):
        lo, hi = pstart[k], pstart[k + 1]
        seg_in = inl[lo:hi]
        seg_rel = rel[lo:hi]
        errs = loso[bounds[k] : bounds[k + 1]]
        errs = errs[np.isfinite(errs)]
        r2 = None
        if n_in[k] >= 2 and not bad[k] and ss_tot[k] > 1e-18:
            r2 = 1.0 - float(ss_res[k] / ss_tot[k])
        segs.append(
            Segment(
                bytes_min=int(round(prep.sizes[bounds[k]] * xs)),
                bytes_max=int(round(prep.sizes[bounds[k + 1] - 1] * xs)),
                alpha_s=float(a[k]) * ts,
                beta_s_per_byte=float(b[k]) * ts / xs,
                points=int(hi - lo),
                sizes=int(bounds[k + 1] - bounds[k]),
                outliers=int(np.count_nonzero(~seg_in)),
                r2_log=r2,
                median_rel_err=median(seg_rel),
                max_rel_err=float(seg_rel.max()),  # median and max over the same (all) points
                loso_median_rel_err=median(errs) if errs.size else None,
                loso_max_rel_err=float(errs.max()) if errs.size else None,
                alpha_ci95=(float(ci[0][0, k]) * ts, float(ci[0][1, k]) * ts) if ci else None,
                beta_ci95=(float(ci[1][0, k]) * ts / xs, float(ci[1][1, k]) * ts / xs)
                if ci
                else None,
            )
        )
    return segs, loso
