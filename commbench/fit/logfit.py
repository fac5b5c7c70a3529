"""A line alpha A + beta B S fitted on the log of the time ratio, robust and symmetric.

The link table's objective. Relative least squares, sum (1 - pred / t)^2, is lopsided: a point
over-predicted k times costs (k - 1)^2, without bound, while one under-predicted costs at most
1, so two sub-microsecond broadcast points (a root's eager send returning at once) pulled a
shared alpha to 0. Here each point costs rho(r / s) of r = log(pred / t), the same for k times too slow or too
fast: Huber's rho (Huber 1964; s = 1.4826 MAD of r, floored), then from that optimum Tukey's
bisquare at Huber's scale (Beaton & Tukey 1974), so a point preempted by the scheduler (100x
slow) ends with weight 0. Minimised by Gauss-Newton on the linearised log (log pred ~ log
pred0 + pred / pred0 - 1) with the loss's weights each round (iteratively reweighted least
squares), alpha, beta >= 0 by the active set as in wls.solve (alpha free in sign for a
secant, fit/regimes.py), a step halved until the objective falls; started from the per-series
fits.
"""

from __future__ import annotations

import numpy as np

from commbench.fit.options import FitOptions
from commbench.fit.wls import median

ROUNDS = 40
TOL = 1e-7


def _rho(u: np.ndarray, kind: str, opts: FitOptions) -> np.ndarray:
    """Huber's or Tukey's bisquare loss of scaled residuals u."""
    a = np.abs(u)
    if kind == "huber":
        k = opts.huber_k
        return np.where(a <= k, 0.5 * a * a, k * a - 0.5 * k * k)
    c = opts.tukey_c
    v = np.minimum(a / c, 1.0)
    return c * c / 6 * (1 - (1 - v * v) ** 3)


def _weight(u: np.ndarray, kind: str, opts: FitOptions) -> np.ndarray:
    a = np.abs(u)
    if kind == "huber":
        return np.minimum(1.0, opts.huber_k / np.maximum(a, 1e-12))
    v = a / opts.tukey_c
    return np.where(v < 1.0, (1.0 - v * v) ** 2, 0.0)


def fit_log_line(
    A: np.ndarray,
    BS: np.ndarray,
    t: np.ndarray,
    w0: np.ndarray,
    start: tuple[float, float],
    opts: FitOptions,
    free_alpha: bool = False,
) -> tuple[float, float, np.ndarray]:
    """(alpha, beta, final weights) minimising sum w0 rho(log((alpha A + beta BS) / t) / s).

    A and BS are each point's latency and byte coefficients (B times S), t its seconds, w0
    its prior weight (0 leaves it out); free_alpha lets alpha be negative. Units are scaled
    inside so the 2x2 problem is O(1)."""
    ts = float(median(t[w0 > 0])) if np.any(w0 > 0) else 1.0
    bs_scale = float(median(BS[BS > 0])) if np.any(BS > 0) else 1.0
    y = t / ts
    f1 = A.astype(float)
    f2 = BS / bs_scale
    a = start[0] / ts if free_alpha else max(start[0] / ts, 1e-12)
    b = max(start[1] * bs_scale / ts, 1e-12)
    if not np.any(w0 > 0):
        return start[0], start[1], w0.copy()

    def residual(a: float, b: float) -> np.ndarray:
        pred = np.maximum(a * f1 + b * f2, 1e-300)
        return np.log(pred / y)

    def scale(r: np.ndarray) -> float:
        live = w0 > 0
        return max(1.4826 * median(np.abs(r[live])), opts.min_scale)

    for kind in ("huber", "tukey") if opts.robust else ("huber",):
        a, b, r, s = _descend(kind, a, b, residual, scale, f1, f2, w0, opts, free_alpha)
    w = w0 * _weight(r / s, kind, opts)
    return a * ts, b * ts / bs_scale, w


def _solve2(
    r1: float, r2: float, s11: float, s12: float, s22: float, free_a: bool = False
) -> tuple[float, float]:
    """min sum w (c - a g1 - b g2)^2 over a, b >= 0 (a of any sign with free_a) from its sums
    (wls.solve for two scalars, without numpy's per-call cost: this runs a few thousand times
    per calibration)."""
    det = s11 * s22 - s12 * s12
    if det > 1e-12 * s11 * s22:
        a, b = (s22 * r1 - s12 * r2) / det, (s11 * r2 - s12 * r1) / det
        if (a >= 0 or free_a) and b >= 0:
            return float(a), float(b)
    if free_a and s11 > 0:  # b = 0
        return float(r1 / s11), 0.0
    a_ax = max(r1 / s11, 0.0) if s11 > 0 else 0.0  # b = 0
    b_ax = max(r2 / s22, 0.0) if s22 > 0 else 0.0  # a = 0
    # the better axis: the one that removes more of the sum of squares
    return (float(a_ax), 0.0) if r1 * a_ax >= r2 * b_ax else (0.0, float(b_ax))


def _descend(kind, a, b, residual, scale, f1, f2, w0, opts, free_a=False):
    """Gauss-Newton rounds under one loss until the objective and the scale settle."""
    r = residual(a, b)
    s = scale(r)
    cost = float(np.sum(w0 * _rho(r / s, kind, opts)))
    for _ in range(ROUNDS):
        w = w0 * _weight(r / s, kind, opts)
        pred0 = a * f1 + b * f2
        g1, g2 = f1 / pred0, f2 / pred0
        c = 1.0 - r  # target of the linearised problem: pred / pred0 ~ 1 - r
        M = np.stack((c, g1, g2)) * np.sqrt(w)
        G = M @ M.T  # the six sums of the 2x2 problem in one product
        na, nb = _solve2(G[0, 1], G[0, 2], G[1, 1], G[1, 2], G[2, 2], free_a)
        step = 1.0
        while True:  # halve the step until the objective does not grow
            ta, tb = a + step * (na - a), b + step * (nb - b)
            # a free alpha must keep every point's time positive; else a line is not all zero
            pred = ta * f1 + tb * f2
            if np.all(pred > 0) if free_a else pred.max() > 0:
                rt = residual(ta, tb)
                ct = float(np.sum(w0 * _rho(rt / s, kind, opts)))
                if ct <= cost or step < 1e-3:
                    break
            elif step < 1e-3:  # no positive step: stay
                ta, tb, rt, ct = a, b, r, cost
                break
            step /= 2
        done = abs(ct - cost) <= TOL * max(cost, 1e-12)
        a, b, r = ta, tb, rt
        s_new = scale(r) if kind == "huber" else s  # the bisquare keeps Huber's scale
        if done and abs(s_new - s) <= 1e-6 * s:
            break
        s = s_new
        cost = float(np.sum(w0 * _rho(r / s, kind, opts)))
    return a, b, r, s
