"""Exact segmentation of one series into alpha-beta lines, and the choice of their number.

Breakpoints are found by dynamic programming over contiguous runs of message sizes (jumps
between segments allowed, no forced continuity); with `secants`, a segment above the first may
have a negative intercept, the secant of a cache transition whose cost per byte rises with S
(2-rank all-to-all on this host: 199 us at 4 MiB, 743 at 8, 2258 at 16), provided it is no
faster at its lower cut than the size below it was measured. The number of segments K is
chosen by a robust BIC, 2 sum rho(r / s) + penalty (3K - 1) log n with Huber's rho of
r = log(pred / t) and the scale s of the most flexible partition (Yao 1988; Machado 1993; Bai &
Perron 1998). A segment needs min_sizes trusted sizes, except a top segment of EDGE trusted
sizes where the robust pass confirmed a cliff. Every segment cost comes from prefix sums, so a series of m sizes costs
O(K m^2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from commbench.fit.options import FitOptions
from commbench.fit.wls import median, solve

# a segment needs min_sizes sizes whose mean robust weight is at least this, so that it cannot
# be two trusted points and a down-weighted one fitted exactly
TRUSTED = 0.5

# sizes a confirmed cliff's top segment needs (past the last cache level it spans few sizes)
EDGE = 2

Lines = list[tuple[float, float]]  # (alpha, beta) of each segment, in the scaled units


@dataclass
class Prepared:
    """A series sorted by size, scaled to O(1) numbers, with per-size boundaries."""

    x: np.ndarray  # scaled bytes, sorted
    t: np.ndarray  # scaled seconds
    starts: np.ndarray  # index of the first point of each distinct size (+ n at the end)
    sizes: np.ndarray  # distinct sizes (scaled)
    x_scale: float
    t_scale: float

    @property
    def m(self) -> int:
        return len(self.sizes)


def prepare(x: np.ndarray, t: np.ndarray) -> tuple[Prepared, np.ndarray]:
    order = np.argsort(x, kind="stable")
    xs, ts = x[order], t[order]
    positive = xs[xs > 0]
    x_scale = median(positive) if positive.size else 1.0
    t_scale = median(ts)
    xs, ts = xs / x_scale, ts / t_scale
    change = np.flatnonzero(np.diff(xs) > 0) + 1
    starts = np.concatenate(([0], change, [len(xs)]))
    return Prepared(xs, ts, starts, xs[starts[:-1]], x_scale, t_scale), order


def point_stats(prep: Prepared, w: np.ndarray) -> np.ndarray:
    """(6, n): each point's contribution to the sufficient statistics of `solve`."""
    f1 = 1.0 / prep.t
    f2 = prep.x * f1
    wf1, wf2 = w * f1, w * f2
    return np.stack((w, wf1, wf2, wf1 * f1, wf1 * f2, wf2 * f2))


def _cost_matrix(
    prep: Prepared,
    w: np.ndarray,
    min_sizes: int,
    trusted: float = TRUSTED,
    edge_from: int | None = None,
    secants: bool = False,
    cuts: Sequence[float] = (),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """C[i, j] = weighted relative RSS of one line over sizes i..j-1 (inf where not allowed),
    plus the line's (a, b) for each (i, j). With edge_from, a top segment of EDGE or more
    trusted sizes (and no others) may start at or above that size: the robust pass found a cliff
    there that its neighbours confirm (series.neighbour_checked). With secants, see _secants.
    No segment spans one of `cuts` (scaled bytes between two sizes)."""
    per_size = np.add.reduceat(point_stats(prep, w), prep.starts[:-1], axis=1)
    live = np.add.reduceat(w, prep.starts[:-1])[None, :] >= trusted * np.diff(prep.starts)
    cums = np.zeros((7, prep.m + 1))
    np.cumsum(np.concatenate((per_size, live)), axis=1, out=cums[:, 1:])
    diff = cums[:, None, :] - cums[:, :, None]  # [k, i, j] = sum over sizes i..j-1
    a, b, rss = solve(*diff[:6])
    m = prep.m
    i, j = np.indices((m + 1, m + 1))
    ok = (j > i) & (diff[6] >= min_sizes - 0.5)
    if edge_from is not None:
        ok |= (j == m) & (i >= max(edge_from, 1)) & (j - i >= EDGE) & (diff[6] >= j - i - 0.5)
    for c in cuts:  # the first and last size of a segment on one side of every cut
        ok &= ~((prep.sizes[np.minimum(i, m - 1)] < c) & (prep.sizes[np.maximum(j - 1, 0)] > c))
    if secants:
        a, b, rss = _secants(prep, w, diff[:6], a, b, rss)
    return np.where(ok, rss, np.inf), a, b


def _secants(
    prep: Prepared, w: np.ndarray, sums: np.ndarray, a: np.ndarray, b: np.ndarray, rss: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Segments i..j-1 above the first whose unconstrained line has a negative intercept take
    it, where that line at the lower cut (the geometric mean of sizes i - 1 and i) is at least
    the weighted mean time measured at size i - 1: time never falls as S grows."""
    s0, r1, r2, s11, s12, s22 = sums
    m = prep.m
    i = np.arange(m + 1)[:, None]
    below = np.clip(i - 1, 0, m - 1)
    cut = np.sqrt(prep.sizes[below] * prep.sizes[np.clip(i, 0, m - 1)])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        det = s11 * s22 - s12 * s12
        ua = (s22 * r1 - s12 * r2) / det
        ub = (s11 * r2 - s12 * r1) / det
        at_size = np.add.reduceat(w * prep.t, prep.starts[:-1]) / np.add.reduceat(
            w, prep.starts[:-1]
        )
        use = (
            (i > 0)
            & (i < m)
            & (det > 1e-12 * s11 * s22)
            & (ua < 0)
            & (ub > 0)
            & (ua + ub * cut >= at_size[below])
        )
        urss = np.maximum(s0 - (ua * r1 + ub * r2), 0.0)
    return np.where(use, ua, a), np.where(use, ub, b), np.where(use, urss, rss)


def _walk_back(backs: list[np.ndarray], k: int, m: int) -> list[int]:
    """Boundaries (size indices 0 = b_0 < ... < b_k = m) of the best k-segment partition."""
    bounds, j = [m], m
    for kk in range(k, 1, -1):
        j = int(backs[kk - 2][j])
        bounds.append(j)
    bounds.append(0)
    return bounds[::-1]


@dataclass(frozen=True)
class Partitions:
    """The DP's answer: least RSS per K = 1..kmax, its back-pointers, and the line (a, b) of
    every candidate segment of sizes i..j-1."""

    rss: list[float]
    backs: list[np.ndarray]
    a: np.ndarray
    b: np.ndarray


def best_partitions(
    prep: Prepared,
    w: np.ndarray,
    opts: FitOptions,
    edge_from: int | None = None,
    cuts: Sequence[float] = (),
) -> Partitions:
    """Least weighted RSS of every K = 1..kmax by dynamic programming over the sizes.

    When the robust weights leave fewer than min_sizes trusted sizes in the whole series, every
    size counts (a short series with an outlier still gets its one line). edge_from, cuts (in
    bytes): see _cost_matrix."""
    m = prep.m
    scaled = [c / prep.x_scale for c in cuts]
    C, A, B = _cost_matrix(
        prep, w, opts.min_sizes, edge_from=edge_from, secants=opts.secants, cuts=scaled
    )
    if not np.isfinite(C[0, m]):
        C, A, B = _cost_matrix(
            prep, w, opts.min_sizes, trusted=0.0, secants=opts.secants, cuts=scaled
        )
    kmax = max(1, min(opts.max_segments, m // opts.min_sizes))
    E = C[0].copy()  # best RSS of sizes 0..j-1 in k segments
    backs: list[np.ndarray] = []
    rss = [float(E[m])]
    for _ in range(2, kmax + 1):
        total = E[:, None] + C
        back = np.argmin(total, axis=0)
        E = total[back, np.arange(m + 1)]
        backs.append(back)
        rss.append(float(E[m]))
    return Partitions(rss, backs, A, B)


def partition(prep: Prepared, parts: Partitions, k: int) -> tuple[list[int], Lines]:
    """Boundaries (size indices) and lines of the best k-segment partition."""
    bounds = _walk_back(parts.backs, k, prep.m)
    pairs = zip(bounds[:-1], bounds[1:])
    return bounds, [(float(parts.a[i, j]), float(parts.b[i, j])) for i, j in pairs]


def flexible_k(rss: list[float], n: int) -> int:
    """The most segments the noise scale is measured with: as many as the DP allows while
    keeping at least half the points as residual degrees of freedom (a partition with nearly
    as many parameters as points fits the noise too and makes it look small)."""
    ks = [k for k, r in enumerate(rss, 1) if np.isfinite(r) and 3 * k - 1 <= n / 2]
    if ks:
        return ks[-1]
    # the fewest segments the DP allows (1, unless cuts ask for more)
    return next((k for k, r in enumerate(rss, 1) if np.isfinite(r)), 1)


def choose_k(prep: Prepared, parts: Partitions, opts: FitOptions) -> tuple[int, list[float]]:
    """K minimising a robust BIC over the DP's best partition of each K (Machado 1993):
    2 sum rho(r / s) + penalty (3K - 1) log n, rho Huber's loss, r = log(pred / t) (with
    1 - pred / t a point under-predicted 10x cost at most 1 and one over-predicted 10x cost 9,
    so a point down-weighted at a regime change decided K),
    s the robust scale of the most flexible partition that keeps half the points as degrees
    of freedom (dof-corrected 1.4826 MAD, floored at noise_floor), 3K - 1 parameters = 2 per
    line + K - 1 breakpoints. Timing noise is heavy-tailed: with a plain RSS a few slow
    iterations decide the number of segments. Fewer segments win ties."""
    rss = parts.rss
    ks = [k for k, r in enumerate(rss, 1) if np.isfinite(r)]
    n = prep.t.size
    resid = {}
    for k in ks:  # symmetric residuals: k times too fast costs what k times too slow does
        bounds, lines = partition(prep, parts, k)
        resid[k] = np.log(np.maximum(predict_points(prep, bounds, lines), 1e-300) / prep.t)
    kflex = flexible_k(rss, n)
    dof = max(n - (3 * kflex - 1), 1)
    s = max(1.4826 * median(np.abs(resid[kflex])) * np.sqrt(n / dof), opts.noise_floor)
    c = opts.huber_k
    crit = []
    for k in range(1, len(rss) + 1):
        if k not in resid:
            crit.append(float("inf"))
            continue
        u = np.abs(resid[k]) / s
        rho = np.where(u <= c, 0.5 * u * u, c * u - 0.5 * c * c)
        crit.append(float(2 * rho.sum() + opts.penalty * (3 * k - 1) * np.log(n)))
    return int(np.argmin(crit)) + 1, crit


def predict_points(prep: Prepared, bounds: list[int], lines: Lines) -> np.ndarray:
    """Each point's time on its segment's line (scaled units)."""
    pred = np.empty_like(prep.t)
    for (i, j), (a, b) in zip(zip(bounds[:-1], bounds[1:]), lines):
        lo, hi = prep.starts[i], prep.starts[j]
        pred[lo:hi] = a + b * prep.x[lo:hi]
    return pred
