"""Piecewise alpha-beta fits of one series: time = alpha + beta * bytes, segment by segment.

A measured curve is a lower envelope of alpha-beta lines (NCCL switches LL/LL128/Simple and
Ring/Tree, MPI switches eager/rendezvous; DESIGN.md section 5), so the fit is piecewise:

- each segment minimises sum w_i ((t_i - alpha - beta x_i) / t_i)^2, weighted least squares on
  the *relative* error so 8-byte and 1-GiB points count alike, with alpha >= 0 and beta >= 0
  (closed form on the 2x2 normal equations, active set on the boundary);
- breakpoints are found by exact segmentation (dynamic programming over contiguous runs of
  message sizes, jumps between segments allowed, no forced continuity), the number of segments
  K chosen by a robust BIC, 2 sum rho(r / s) + penalty (3K - 1) log n with Huber's rho and the
  scale s of the most flexible partition (Yao 1988; Machado 1993; Bai & Perron 1998); the
  default penalty 2 keeps false segments on synthetic 1-10% noise to about 5%;
- outliers are handled by iteratively reweighted least squares (Huber 1964, then Tukey's
  bisquare, Beaton & Tukey 1974; scale 1.4826 MAD): the weights come from the most flexible
  segmentation, so they do not depend on K, then the chosen segments are refitted with their
  own bisquare weights; points whose final weight is 0 are counted as outliers;
- diagnostics per segment: points, R^2 on log-time, median and max relative error,
  leave-one-size-out error (segmentation held fixed) and residual-bootstrap 95% intervals.

numpy only: every segment cost comes from prefix sums, so a series of m sizes costs O(K m^2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# bisquare weights below this are treated as zero (an outlier)
_TINY = 1e-12
# a segment needs min_sizes sizes whose mean robust weight is at least this, so that it cannot
# be two trusted points and a down-weighted one fitted exactly
TRUSTED = 0.5


@dataclass(frozen=True)
class FitOptions:
    """Knobs of the series fit; the defaults are what `commbench fit` uses."""

    min_sizes: int = 3  # distinct message sizes a segment (and a series) needs
    max_segments: int = 5
    penalty: float = 2.0  # multiplies the BIC parameter term
    noise_floor: float = 1e-3  # relative error below which extra segments buy nothing
    robust: bool = True
    huber_k: float = 1.345
    tukey_c: float = 4.685
    min_scale: float = 0.005  # floor of the robust residual scale (relative)
    bootstrap: int = 200
    seed: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
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

    def predict(self, nbytes):
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

    @property
    def outliers(self) -> int:
        return int(np.count_nonzero(self.weights <= _TINY))


def _median(a: np.ndarray) -> float:
    """np.median without its per-call overhead (this runs a dozen times per series)."""
    n = a.size
    k = n // 2
    part = np.partition(a, (k - 1, k) if n % 2 == 0 else k)
    return float(part[k]) if n % 2 else 0.5 * float(part[k - 1] + part[k])


# ---------------------------------------------------------------------------------------------
# the 2x2 problem: minimise sum w (1 - a f1 - b f2)^2 with f1 = 1/t, f2 = x/t, a, b >= 0


def _solve(s0, r1, r2, s11, s12, s22):
    """Constrained weighted LS from sufficient statistics (arrays of one shape).

    Returns (a, b, rss). The unconstrained optimum when it is in the quadrant, else the better
    of the two axis solutions (the optimum of a convex quadratic on a quadrant lies on an axis
    when it is not inside)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        det = s11 * s22 - s12 * s12
        a = (s22 * r1 - s12 * r2) / det
        b = (s11 * r2 - s12 * r1) / det
        rss = s0 - (a * r1 + b * r2)
        inside = (det > 1e-12 * s11 * s22) & (a >= 0) & (b >= 0)
        b_ax = np.where(s22 > 0, r2 / s22, 0.0)  # a = 0
        a_ax = np.where(s11 > 0, r1 / s11, 0.0)  # b = 0
    rss_b = s0 - r2 * b_ax
    rss_a = s0 - r1 * a_ax
    use_b = rss_b < rss_a
    a = np.where(inside, a, np.where(use_b, 0.0, a_ax))
    b = np.where(inside, b, np.where(use_b, b_ax, 0.0))
    rss = np.where(inside, rss, np.where(use_b, rss_b, rss_a))
    return a, b, np.maximum(rss, 0.0)


def _stats(w, f1, f2, axis=-1):
    """The six sufficient statistics of `_solve` summed along `axis` (one reduction)."""
    wf1, wf2 = w * f1, w * f2
    w = np.broadcast_to(w, wf1.shape)
    return tuple(np.stack((w, wf1, wf2, wf1 * f1, wf1 * f2, wf2 * f2)).sum(axis=axis))


# ---------------------------------------------------------------------------------------------
# exact segmentation


@dataclass
class _Prepared:
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


def _prepare(x: np.ndarray, t: np.ndarray) -> tuple[_Prepared, np.ndarray]:
    order = np.argsort(x, kind="stable")
    xs, ts = x[order], t[order]
    positive = xs[xs > 0]
    x_scale = _median(positive) if positive.size else 1.0
    t_scale = _median(ts)
    xs, ts = xs / x_scale, ts / t_scale
    change = np.flatnonzero(np.diff(xs) > 0) + 1
    starts = np.concatenate(([0], change, [len(xs)]))
    return _Prepared(xs, ts, starts, xs[starts[:-1]], x_scale, t_scale), order


def _cost_matrix(prep: _Prepared, w: np.ndarray, min_sizes: int, trusted: float = TRUSTED):
    """C[i, j] = weighted relative RSS of one line over sizes i..j-1 (inf where not allowed),
    plus the line's (a, b) for each (i, j)."""
    per_size = np.add.reduceat(_point_stats(prep, w), prep.starts[:-1], axis=1)
    live = np.add.reduceat(w, prep.starts[:-1])[None, :] >= trusted * np.diff(prep.starts)
    cums = np.zeros((7, prep.m + 1))
    np.cumsum(np.concatenate((per_size, live)), axis=1, out=cums[:, 1:])
    diff = cums[:, None, :] - cums[:, :, None]  # [k, i, j] = sum over sizes i..j-1
    a, b, rss = _solve(*diff[:6])
    m = prep.m
    i, j = np.indices((m + 1, m + 1))
    ok = (j > i) & (diff[6] >= min_sizes - 0.5)
    return np.where(ok, rss, np.inf), a, b


def _walk_back(backs: list[np.ndarray], k: int, m: int) -> list[int]:
    """Boundaries (size indices 0 = b_0 < ... < b_k = m) of the best k-segment partition."""
    bounds, j = [m], m
    for kk in range(k, 1, -1):
        j = int(backs[kk - 2][j])
        bounds.append(j)
    bounds.append(0)
    return bounds[::-1]


def _dp(prep: _Prepared, w: np.ndarray, opts: FitOptions):
    """Least weighted RSS of every K = 1..kmax by dynamic programming over the sizes.

    Returns (rss per K, back-pointers, the line (a, b) of every candidate segment). When the
    robust weights leave fewer than min_sizes trusted sizes in the whole series, every size
    counts (a short series with an outlier still gets its one line)."""
    m = prep.m
    C, A, B = _cost_matrix(prep, w, opts.min_sizes)
    if not np.isfinite(C[0, m]):
        C, A, B = _cost_matrix(prep, w, opts.min_sizes, trusted=0.0)
    kmax = max(1, min(opts.max_segments, m // opts.min_sizes))
    E = C[0].copy()  # best RSS of sizes 0..j-1 in k segments
    backs, rss = [], [float(E[m])]
    for _ in range(2, kmax + 1):
        total = E[:, None] + C
        back = np.argmin(total, axis=0)
        E = total[back, np.arange(m + 1)]
        backs.append(back)
        rss.append(float(E[m]))
    return rss, backs, A, B


def _partition(prep: _Prepared, dp, k: int):
    """Boundaries and lines of the best k-segment partition from `_dp`'s output."""
    _, backs, A, B = dp
    bounds = _walk_back(backs, k, prep.m)
    return bounds, [(float(A[i, j]), float(B[i, j])) for i, j in zip(bounds[:-1], bounds[1:])]


def _flexible_k(rss: list[float], n: int) -> int:
    """The most segments the noise scale is measured with: as many as the DP allows while
    keeping at least half the points as residual degrees of freedom (a partition with nearly
    as many parameters as points fits the noise too and makes it look small)."""
    ks = [k for k, r in enumerate(rss, 1) if np.isfinite(r) and 3 * k - 1 <= n / 2]
    return ks[-1] if ks else 1


def _choose_k(prep: _Prepared, dp, opts: FitOptions) -> tuple[int, list[float]]:
    """K minimising a robust BIC over the DP's best partition of each K (Machado 1993):
    2 sum rho(r / s) + penalty (3K - 1) log n, rho Huber's loss, r the relative residuals,
    s the robust scale of the most flexible partition that keeps half the points as degrees
    of freedom (dof-corrected 1.4826 MAD, floored at noise_floor), 3K - 1 parameters = 2 per
    line + K - 1 breakpoints. Timing noise is heavy-tailed: with a plain RSS a few slow
    iterations decide the number of segments. Fewer segments win ties."""
    rss = dp[0]
    ks = [k for k, r in enumerate(rss, 1) if np.isfinite(r)]
    n = prep.t.size
    resid = {}
    for k in ks:
        bounds, lines = _partition(prep, dp, k)
        resid[k] = 1.0 - _predict_points(prep, bounds, lines) / prep.t
    kflex = _flexible_k(rss, n)
    dof = max(n - (3 * kflex - 1), 1)
    s = max(1.4826 * _median(np.abs(resid[kflex])) * np.sqrt(n / dof), opts.noise_floor)
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


def _predict_points(prep: _Prepared, bounds, lines) -> np.ndarray:
    pred = np.empty_like(prep.t)
    for (i, j), (a, b) in zip(zip(bounds[:-1], bounds[1:]), lines):
        lo, hi = prep.starts[i], prep.starts[j]
        pred[lo:hi] = a + b * prep.x[lo:hi]
    return pred


def _robust_weights(r: np.ndarray, kind: str, opts: FitOptions) -> np.ndarray:
    """Huber or Tukey-bisquare weights of relative residuals, scale = 1.4826 MAD (floored)."""
    scale = max(1.4826 * _median(np.abs(r)), opts.min_scale)
    u = np.abs(r) / scale
    if kind == "huber":
        return np.minimum(1.0, opts.huber_k / np.maximum(u, _TINY))
    v = u / opts.tukey_c
    return np.where(v < 1.0, (1.0 - v * v) ** 2, 0.0)


def fit_series(x, t, opts: FitOptions | None = None) -> SeriesFitResult:
    """Fit time = alpha + beta x piecewise to one series (x bytes, t seconds; t > 0).

    The series needs at least `opts.min_sizes` distinct sizes (the caller checks and reports)."""
    opts = opts or FitOptions()
    x = np.asarray(x, dtype=float)
    t = np.asarray(t, dtype=float)
    assert x.shape == t.shape and x.ndim == 1
    assert np.all(t > 0) and np.all(x >= 0)
    prep, order = _prepare(x, t)
    assert prep.m >= opts.min_sizes, "series too short: check before fitting"
    w = np.ones_like(prep.t)
    if opts.robust:
        # robust weights from the most flexible segmentation, so that they do not depend on
        # the number of segments about to be chosen (an outlier cannot pass for structure)
        for kind in ("huber", "tukey"):
            dp = _dp(prep, w, opts)
            bounds, lines = _partition(prep, dp, _flexible_k(dp[0], prep.t.size))
            w = _robust_weights(1.0 - _predict_points(prep, bounds, lines) / prep.t, kind, opts)
    dp = _dp(prep, w, opts)
    k, bics = _choose_k(prep, dp, opts)
    bounds, lines = _partition(prep, dp, k)
    if opts.robust:  # final weights and lines from the chosen segments (boundaries fixed)
        for _ in range(2):
            w = _robust_weights(1.0 - _predict_points(prep, bounds, lines) / prep.t, "tukey", opts)
            lines = _refit_lines(prep, bounds, lines, w)
    pred = _predict_points(prep, bounds, lines)
    r = 1.0 - pred / prep.t
    rel = np.abs(pred - prep.t) / prep.t
    segments, loso = _diagnostics(prep, bounds, lines, w, r, rel, opts)
    # back to the caller's order
    inv = np.empty_like(order)
    inv[order] = np.arange(len(order))
    return SeriesFitResult(segments, w[inv], rel[inv], loso, bics)


def _point_stats(prep: _Prepared, w: np.ndarray) -> np.ndarray:
    """(6, n): each point's contribution to the sufficient statistics of `_solve`."""
    f1 = 1.0 / prep.t
    f2 = prep.x * f1
    wf1, wf2 = w * f1, w * f2
    return np.stack((w, wf1, wf2, wf1 * f1, wf1 * f2, wf2 * f2))


def _refit_lines(prep, bounds, lines, w):
    """Refit each segment's line with weights w; a segment left with fewer than 2 sizes of
    positive weight keeps its line (a degenerate fit would be arbitrary)."""
    pstart = prep.starts[np.asarray(bounds)]
    seg = np.add.reduceat(_point_stats(prep, w), pstart[:-1], axis=1)
    live = np.add.reduceat(np.add.reduceat(w, prep.starts[:-1]) > _TINY, bounds[:-1])
    a, b, _ = _solve(*seg)
    return [(float(a[k]), float(b[k])) if live[k] >= 2 else line for k, line in enumerate(lines)]


def _diagnostics(prep, bounds, lines, w, r, rel, opts: FitOptions):
    """Per-segment diagnostics in real units, and each size's leave-one-size-out error;
    vectorised over segments (reduceat on segment boundaries)."""
    K = len(lines)
    bounds = np.asarray(bounds)
    pstart = prep.starts[bounds]  # point index where each segment starts (+ n)
    seg_pt = np.repeat(np.arange(K), np.diff(pstart))
    size_pt = np.repeat(np.arange(prep.m), np.diff(prep.starts))
    a = np.array([ln[0] for ln in lines])
    b = np.array([ln[1] for ln in lines])
    x, t = prep.x, prep.t
    pred = a[seg_pt] + b[seg_pt] * x
    inl = w > _TINY
    fin = inl.astype(float)
    cut = pstart[:-1]
    # R^2 on log-time over the points the fit kept
    lt = np.log(t)
    lp = np.log(np.maximum(pred, _TINY))
    n_in = np.add.reduceat(fin, cut)
    s1 = np.add.reduceat(fin * lt, cut)
    ss_tot = np.add.reduceat(fin * lt * lt, cut) - s1 * s1 / np.maximum(n_in, 1)
    ss_res = np.add.reduceat(fin * (lt - lp) ** 2, cut)
    bad = np.add.reduceat(fin * (pred <= 0), cut) > 0
    # leave one size out: subtract the size's sums from its segment's, refit, predict it
    per_size = np.add.reduceat(_point_stats(prep, w), prep.starts[:-1], axis=1)
    seg_tot = np.add.reduceat(per_size, bounds[:-1], axis=1)
    seg_size = np.repeat(np.arange(K), np.diff(bounds))
    la, lb, _ = _solve(*(seg_tot[:, seg_size] - per_size))
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
        tb = np.maximum(pred, _TINY)[None, :] / (1.0 - np.minimum(rs, 0.999))
        g1 = 1.0 / tb
        g2 = x[None, :] * g1
        wg1, wg2 = w * g1, w * g2
        stats = np.stack((np.broadcast_to(w, g1.shape), wg1, wg2, wg1 * g1, wg1 * g2, wg2 * g2))
        ba, bb, _ = _solve(*np.add.reduceat(stats, cut, axis=2))  # (B, K) each
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
                median_rel_err=_median(seg_rel),
                max_rel_err=float(seg_rel[seg_in].max() if seg_in.any() else seg_rel.max()),
                loso_median_rel_err=_median(errs) if errs.size else None,
                loso_max_rel_err=float(errs.max()) if errs.size else None,
                alpha_ci95=(float(ci[0][0, k]) * ts, float(ci[0][1, k]) * ts) if ci else None,
                beta_ci95=(float(ci[1][0, k]) * ts / xs, float(ci[1][1, k]) * ts / xs)
                if ci
                else None,
            )
        )
    return segs, loso


def predict_segments(segments: list[Segment], nbytes: float) -> float:
    """Seconds at nbytes from a series' segments: the segment holding nbytes; in a gap between
    two segments the boundary is the geometric mean of their neighbouring measured sizes;
    outside the measured range the nearest segment's line (the caller decides if allowed)."""
    seg = segments[0]
    for k, s in enumerate(segments):
        if nbytes <= s.bytes_max:
            seg = s
            if nbytes < s.bytes_min and k > 0:
                prev = segments[k - 1]
                cut = np.sqrt(max(prev.bytes_max, 1) * max(s.bytes_min, 1))
                seg = prev if nbytes < cut else s
            break
        seg = s
    return float(seg.alpha_s + seg.beta_s_per_byte * nbytes)
