"""The derived link table: per (backend, link class, timing) and algorithm model, how time grows
with the group, per op and per size regime.

Under a model (costmodels, Thakur/Rabenseifner/Gropp 2005) an op of S bytes on p ranks takes
alpha A(op, p) + beta B(op, p) S. One (alpha, beta) per link cannot fit ops whose large-message
bus bandwidth differs 7x on one machine (an MPI broadcast or send/recv is a copy, a
reduce-scatter a copy plus a reduction, each with its own algorithm), nor the eager/rendezvous
and cache regimes inside one op. So each op measured on the link gets its own terms, one
(alpha, beta) per size regime (fit/regimes.py: chosen on held-out error from its longest
series, two sizes allowed per regime), fitted across every group
size it was measured at: the model carries the scaling in p, the terms the op's own rates. A
regime the held-out choice made a cache transition's secant is fitted as one (_secant,
calibration.lines.Term).
The shared (alpha, beta) of all ops together prices ops never measured on the link.

Every fit minimises Huber's rho of log(pred / t) (fit/logfit.py: symmetric, so a tiny time
cannot collapse alpha), started from the per-series fits, over the points the series fits kept
(weight > 0). A collective point faster than half the link's point-to-point latency (the
lowest median send/recv or pingpong time up to 1 KiB) had no synchronized start and is
rejected and counted. The model whose terms have the lowest median relative error is named
best; errors are over every point not rejected, outliers included (median and max), per op,
and per op at >= 64 KiB.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from commbench.calibration.algorithms import LIBRARIES
from commbench.calibration.costmodels import MODELLED_OPS, MODELS, coefficients
from commbench.calibration.lines import Line, SegmentLike, Term, predict_segments
from commbench.fit.linkentry import LinkEntry, ModelFit
from commbench.fit.logfit import fit_log_line
from commbench.fit.options import FitOptions
from commbench.fit.regimes import LinkPoints, op_regimes
from commbench.fit.wls import median

# models whose median error is within this factor of the lowest are ties
TIE = 1.01
P2P_OPS = ("sendrecv", "pingpong")
LATENCY_SHARE = 0.5  # a collective point below this share of the p2p latency is rejected
LATENCY_BYTES = 1024  # p2p sizes up to this are latency-bound
LARGE = 64 << 10  # per-op errors are also reported at sizes >= this (bandwidth regime)


def regime_index(lines: Sequence[SegmentLike], x: np.ndarray) -> np.ndarray:
    """Which regime holds each size: the cut between two regimes is the geometric mean of
    their neighbouring measured sizes (as calibration.lines.predict_segments)."""
    cuts = [math.sqrt(max(a.bytes_max, 1) * max(b.bytes_min, 1)) for a, b in zip(lines, lines[1:])]
    return np.searchsorted(np.asarray(cuts), x, side="right")


@dataclass
class _Points:
    """A link's points, flat, with each point's coefficients under one model."""

    ops: np.ndarray
    ps: np.ndarray
    x: np.ndarray
    t: np.ndarray
    w: np.ndarray
    A: np.ndarray
    B: np.ndarray


def _points(items: list[LinkPoints], model: str, keep: np.ndarray) -> _Points:
    ops = np.concatenate([np.full(len(x), k.op) for k, x, *_ in items])
    ps = np.concatenate([np.full(len(x), k.group_size) for k, x, *_ in items])
    x = np.concatenate([x for _, x, *_ in items])
    if model in LIBRARIES:  # the algorithm, so the coefficients, change with S
        keys = list(zip(ops.tolist(), ps.tolist(), x.tolist()))
        at = {k: coefficients(model, *k) for k in set(keys)}  # repeats share their sizes
        A = np.array([at[k][0] for k in keys])
        B = np.array([at[k][1] for k in keys])
    else:
        by = {(o, p): coefficients(model, o, p) for o, p in set(zip(ops.tolist(), ps.tolist()))}
        A = np.array([by[(o, p)][0] for o, p in zip(ops.tolist(), ps.tolist())])
        B = np.array([by[(o, p)][1] for o, p in zip(ops.tolist(), ps.tolist())])
    t = np.concatenate([t for _, _, t, *_ in items])
    w = np.concatenate([w for _, _, _, w, _ in items])
    return _Points(ops, ps, x, t, np.where(keep & (w > 0), 1.0, 0.0), A, B)


def _start(items: list[LinkPoints], model: str, nbytes: float | None) -> tuple[float, float]:
    """Alpha and beta of the model from the series fits: the median over series of the segment
    alpha / A and beta / B (the segment holding nbytes; None: first alpha, last beta), the
    coefficients taken where the segment is (a library's model changes with S)."""
    alphas, betas = [], []
    for key, *_, segs in items:
        if nbytes is None:
            first, last = segs[0], segs[-1]
        else:
            first = last = segs[int(regime_index(segs, np.array([nbytes]))[0])]
        a_coef = coefficients(model, key.op, key.group_size, max(first.bytes_min, 1))[0]
        b_coef = coefficients(model, key.op, key.group_size, max(last.bytes_max, 1))[1]
        if a_coef > 0:
            alphas.append(first.alpha_s / a_coef)
        if b_coef > 0:
            betas.append(last.beta_s_per_byte / b_coef)
    return (
        float(np.median(alphas)) if alphas else 0.0,
        float(np.median(betas)) if betas else 0.0,
    )


def _bandwidth_term(
    P: _Points, items: list[LinkPoints], model: str, alpha: float
) -> tuple[float, float]:
    """The shared line's beta where the log fit left it at 0 (noisy points that a flat line
    fits as well, seen on 4 ranks of a loaded 2-core box): the series' own bandwidth regime,
    the median over series of their last segment's beta / B, with alpha refitted under it
    (the median of (t - beta B S) / A over the points kept, at least 0). (alpha, 0) where no
    series has a segment whose time grows with its bytes: fit_link_table says so."""
    beta = _start(items, model, None)[1]
    used = (P.w > 0) & (P.A > 0)
    if not beta > 0 or not used.any():
        return alpha, 0.0
    rest = (P.t[used] - beta * P.B[used] * P.x[used]) / P.A[used]
    return max(float(np.median(rest)), 0.0), beta


def _fit_model(
    model: str,
    items: list[LinkPoints],
    keep: np.ndarray,
    opts: FitOptions,
    regimes: dict[str, list[Line]],
) -> ModelFit:
    """Per-op terms (one per regime in `regimes`) and the shared line of one model over a
    link's points."""
    P = _points(items, model, keep)
    alpha, beta, _ = fit_log_line(P.A, P.B * P.x, P.t, P.w, _start(items, model, None), opts)
    if not beta > 0:
        alpha, beta = _bandwidth_term(P, items, model, alpha)
    shared = alpha * P.A + beta * P.B * P.x
    pred = shared.copy()
    terms: dict[str, list[Term]] = {}
    for op in sorted(set(P.ops.tolist())):
        mine = [it for it in items if it[0].op == op]
        on = P.ops == op
        reg = regime_index(regimes[op], P.x)
        lines: list[Term] = []
        for k, seg in enumerate(regimes[op]):
            sel = on & (reg == k)
            if len(np.unique(P.x[sel & (P.w > 0)])) < 2:
                continue  # too few sizes left (points rejected): the neighbouring regime prices it
            mid = math.sqrt(max(seg.bytes_min, 1) * max(seg.bytes_max, 1))
            start = _start(mine, model, mid)
            a, b, _ = fit_log_line(P.A[sel], P.B[sel] * P.x[sel], P.t[sel], P.w[sel], start, opts)
            term = Term(seg.bytes_min, seg.bytes_max, a, b)
            if lines and seg.alpha_s < 0:  # held out, the regime is a cache transition's secant
                term = _secant(model, P, sel, lines[-1], seg, opts) or term
            lines.append(term)
        if not lines:
            continue
        terms[op] = lines
        for i in np.flatnonzero(on):
            pred[i] = predict_segments([ln.scaled(P.A[i], P.B[i]) for ln in lines], float(P.x[i]))
    used = P.w > 0
    rel = np.abs(pred - P.t) / P.t
    r2 = None
    if used.sum() >= 2 and np.all(pred[used] > 0):
        lt = np.log(P.t[used])
        ss = float(np.sum((lt - lt.mean()) ** 2))
        if ss > 1e-18:
            r2 = 1.0 - float(np.sum((lt - np.log(pred[used])) ** 2)) / ss
    # errors over every point not rejected below the latency, outliers included: a size the
    # fits left out still counts against the terms that price it
    per_op, large = {}, {}
    for o in sorted(set(P.ops.tolist())):
        sel = keep & (P.ops == o)
        if sel.any():
            per_op[o] = median(rel[sel])
        if (sel & (P.x >= LARGE)).any():
            large[o] = median(rel[sel & (P.x >= LARGE)])
    pool = rel[keep] if keep.any() else rel
    return ModelFit(
        alpha_s=alpha,
        beta_s_per_byte=beta,
        points=int(used.sum()),
        outliers=int(np.count_nonzero(keep & (P.w == 0))),
        below_latency=int(np.count_nonzero(~keep)),
        median_rel_err=median(pool),
        max_rel_err=float(pool.max()),
        r2_log=r2,
        shared_median_rel_err=median((np.abs(shared - P.t) / P.t)[keep] if keep.any() else rel),
        per_op_median_rel_err=per_op,
        per_op_large_median_rel_err=large,
        terms=terms,
    )


def _secant(
    model: str, P: _Points, sel: np.ndarray, under: Term, seg: Line, opts: FitOptions
) -> Term | None:
    """The regime `seg` of sel's points as a secant: alpha A + B (c + beta S) with alpha the
    regime below's (`under`: latency steps do not vanish in a cache transition) and c < 0
    (Term's bytes_offset = -c / beta); None where the fit has c >= 0, or where at its lower cut
    it is faster than the regime under it at that regime's largest size, as segments.py asks
    of the measurements, at each group size it was measured at, each regime under its own
    coefficients (a library's algorithm may switch between them). With alpha shared and a fixed
    model's coefficients, if it holds at one group size it holds at all."""
    rest = P.t[sel] - under.alpha_s * P.A[sel]
    w = np.where(rest > 0, P.w[sel], 0.0)
    rest = np.where(rest > 0, rest, P.t[sel])  # left out (w 0), kept positive for the log
    start = (0.0, float(np.median(rest / (P.B[sel] * P.x[sel]))))
    c, b, _ = fit_log_line(P.B[sel], P.B[sel] * P.x[sel], rest, w, start, opts, free_alpha=True)
    if not (c < 0 < b):
        return None
    offset = -c / b
    term = Term(seg.bytes_min, seg.bytes_max, under.alpha_s, b, offset)
    cut = math.sqrt(max(under.bytes_max, 1) * max(seg.bytes_min, 1))
    op, at = str(P.ops[sel][0]), under.bytes_max
    for p in {int(q) for q in P.ps[sel]}:
        low = predict_segments([under.scaled(*coefficients(model, op, p, at))], at)
        mine = coefficients(model, op, p, seg.bytes_min)  # its own algorithm's, at a switch
        if predict_segments([term.scaled(*mine)], cut) < low:
            return None
    return term


def latency_keep(items: list[LinkPoints]) -> np.ndarray:
    """False for collective points below LATENCY_SHARE x the link's p2p latency (the lowest
    median time of its send/recv or pingpong sizes up to LATENCY_BYTES: a preempted size only
    raises a median, so the lowest is the latency); all True without one."""
    p2p = [(x, t) for k, x, t, *_ in items if k.op in P2P_OPS]
    ops = np.concatenate([np.full(len(x), k.op) for k, x, *_ in items])
    t = np.concatenate([t for _, _, t, *_ in items])
    if not p2p:
        return np.ones(len(t), dtype=bool)
    xs = np.concatenate([x for x, _ in p2p])
    ts = np.concatenate([t for _, t in p2p])
    small = np.unique(xs[xs <= max(LATENCY_BYTES, xs.min())])
    floor = min(median(ts[xs == x]) for x in small)
    return np.isin(ops, P2P_OPS) | (t >= LATENCY_SHARE * floor)


def fit_link_table(
    points: list[LinkPoints],
    opts: FitOptions | None = None,
    libraries: dict[str, str] | None = None,
    versions: dict[str, str] | None = None,
) -> tuple[list[LinkEntry], list[dict]]:
    """Link table from (key, bytes, seconds, robust weights, segments) of every fitted series.

    `libraries` names, per backend, the library whose algorithm choice is known
    (calibration.algorithms): its links are also fitted under that choice (`library`), priced
    with the constants of the release `versions` names for the backend.
    Returns the entries and, for links that could not be fitted, {backend, link_class, timing,
    reason} rows (fewer than 3 points, or all from one size of one op)."""
    opts = opts or FitOptions()
    groups: dict[tuple, list[LinkPoints]] = {}
    for item in points:
        key = item[0]
        if key.op not in MODELLED_OPS or (key.group_size < 2 and key.op not in P2P_OPS):
            continue
        groups.setdefault((key.backend, key.link_class, key.timing), []).append(item)
    entries, skipped = [], []
    for (backend, link, timing), items in sorted(groups.items()):
        ops = [k.op for k, x, *_ in items for _ in x]
        ps = [k.group_size for k, x, *_ in items for _ in x]
        xs = [v for _, x, *_ in items for v in x.tolist()]
        distinct = len(set(zip(ops, ps, xs)))
        if distinct < 3:
            skipped.append(
                {
                    "backend": backend,
                    "link_class": link,
                    "timing": timing,
                    "reason": f"only {distinct} distinct (op, group size, bytes) points",
                }
            )
            continue
        keep = latency_keep(items)
        items, regimes = op_regimes(items, opts)
        models = {m: _fit_model(m, items, keep, opts, regimes) for m in MODELS}
        # the model within 1% of the lowest median error of the per-op terms; among those
        # the shared line's error decides (with one group size every model fits each op's
        # terms alike, but how latency steps compare across ops still tells them apart),
        # then the order ring, tree, rabenseifner, pairwise (ring: NCCL's default)
        low = min(f.median_rel_err for f in models.values())
        close = [m for m in MODELS if models[m].median_rel_err <= low * TIE + 1e-12]
        shared = min(models[m].shared_median_rel_err for m in close)
        best = next(m for m in close if models[m].shared_median_rel_err <= shared * TIE + 1e-12)
        ties = [m for m in close if m != best]
        combos = len(set(zip(ops, ps)))
        note = None
        if combos == 1:
            note = (
                "one (op, group size) only: the models cannot be told apart, so scaling to "
                "other group sizes rests on the default model"
            )
        elif len(set(ps)) == 1:
            note = (
                f"one group size ({ps[0]}) only: every model fits each op's terms alike; "
                "measure two group sizes to tell how time grows with the group"
            )
        if not models[best].beta_s_per_byte > 0:
            why = (
                "no bandwidth term (beta = 0): no series on this link has a size regime whose "
                "time grows with its bytes (every size in its latency regime); measure larger "
                "sizes to price bytes"
            )
            note = f"{note}; {why}" if note else why
        library = (libraries or {}).get(backend)
        if library and note:
            note += f"; {library}'s algorithm choice scales the ops it prices"
        entries.append(
            LinkEntry(
                library=library,
                library_fit=_fit_model(library, items, keep, opts, regimes) if library else None,
                library_version=(versions or {}).get(backend) if library else None,
                backend=backend,
                link_class=link,
                timing=timing,
                group_sizes=sorted({int(k.group_size) for k, *_ in items}),
                ops=sorted({k.op for k, *_ in items}),
                points=len(xs),
                best_model=best,
                ties=ties,
                models=models,
                note=note,
            )
        )
    return entries, skipped
