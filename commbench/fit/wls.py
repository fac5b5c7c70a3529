"""Relative-error weighted least squares of one alpha-beta line, and robust reweighting.

A line minimises sum w_i ((t_i - alpha - beta x_i) / t_i)^2, least squares on the *relative*
error so 8-byte and 1-GiB points count alike, with alpha >= 0 and beta >= 0: closed form on the
2x2 normal equations, active set on the boundary. Outliers are down-weighted by iteratively
reweighted least squares (Huber 1964, then Tukey's bisquare, Beaton & Tukey 1974; scale
1.4826 MAD). The series fits (fit/series.py) and the link table (fit/links.py) share these.
"""

from __future__ import annotations

import numpy as np

from commbench.fit.options import FitOptions

# bisquare weights below this are treated as zero (an outlier)
TINY = 1e-12


def median(a: np.ndarray) -> float:
    """np.median without its per-call overhead (this runs a dozen times per series)."""
    n = a.size
    k = n // 2
    part = np.partition(a, (k - 1, k) if n % 2 == 0 else k)
    return float(part[k]) if n % 2 else 0.5 * float(part[k - 1] + part[k])


# the 2x2 problem: minimise sum w (1 - a f1 - b f2)^2 with f1 = 1/t, f2 = x/t, a, b >= 0
def solve(
    s0: np.ndarray,
    r1: np.ndarray,
    r2: np.ndarray,
    s11: np.ndarray,
    s12: np.ndarray,
    s22: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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


def stats(w: np.ndarray, f1: np.ndarray, f2: np.ndarray, axis: int = -1) -> tuple[np.ndarray, ...]:
    """The six sufficient statistics of `solve` summed along `axis` (one reduction)."""
    wf1, wf2 = w * f1, w * f2
    w = np.broadcast_to(w, wf1.shape)
    return tuple(np.stack((w, wf1, wf2, wf1 * f1, wf1 * f2, wf2 * f2)).sum(axis=axis))


def robust_weights(r: np.ndarray, kind: str, opts: FitOptions) -> np.ndarray:
    """Huber or Tukey-bisquare weights of relative residuals, scale = 1.4826 MAD (floored)."""
    scale = max(1.4826 * median(np.abs(r)), opts.min_scale)
    u = np.abs(r) / scale
    if kind == "huber":
        return np.minimum(1.0, opts.huber_k / np.maximum(u, TINY))
    v = u / opts.tukey_c
    return np.where(v < 1.0, (1.0 - v * v) ** 2, 0.0)
