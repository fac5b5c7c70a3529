"""The derived link table: one (alpha, beta) per (backend, link class, timing) and algorithm model.

Every measured point of that link, whatever its op and group size, is explained by
time = alpha A(op, p) + beta B(op, p) S (costmodels, Thakur/Rabenseifner/Gropp 2005), fitted
jointly by the same relative-error weighted least squares and Huber/Tukey reweighting as the
series fits. The model with the lowest median relative error is named best; bus bandwidth is
1/beta (GB/s = 1e9 B/s), the nccl-tests busbw a link sustains under that model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from commbench.calibration.costmodels import MODELLED_OPS, MODELS, coefficients
from commbench.calibration.series_key import SeriesKey
from commbench.fit.options import FitOptions
from commbench.fit.wls import robust_weights, solve, stats

# models whose median error is within this factor of the lowest are ties
TIE = 1.01


@dataclass(kw_only=True)
class ModelFit:
    """One algorithm model's joint fit over a link's points."""

    alpha_s: float
    beta_s_per_byte: float
    points: int
    outliers: int
    median_rel_err: float
    max_rel_err: float
    r2_log: float | None
    per_op_median_rel_err: dict[str, float]

    @property
    def busbw_GBps(self) -> float | None:
        return 1.0 / self.beta_s_per_byte / 1e9 if self.beta_s_per_byte > 0 else None

    def as_dict(self) -> dict:
        return {
            "alpha_s": self.alpha_s,
            "beta_s_per_byte": self.beta_s_per_byte,
            "busbw_GBps": self.busbw_GBps,
            "points": self.points,
            "outliers": self.outliers,
            "median_rel_err": self.median_rel_err,
            "max_rel_err": self.max_rel_err,
            "r2_log": self.r2_log,
            "per_op_median_rel_err": self.per_op_median_rel_err,
        }


@dataclass(kw_only=True)
class LinkEntry:
    """The link table row of one (backend, link class, timing)."""

    backend: str
    link_class: str
    timing: str
    group_sizes: list[int]
    ops: list[str]
    points: int
    best_model: str
    ties: list[str]
    models: dict[str, ModelFit] = field(default_factory=dict)
    note: str | None = None

    def as_dict(self) -> dict:
        best = self.models[self.best_model]
        return {
            "backend": self.backend,
            "link_class": self.link_class,
            "timing": self.timing,
            "group_sizes": self.group_sizes,
            "ops": self.ops,
            "points": self.points,
            "best_model": self.best_model,
            "ties": self.ties,
            "alpha_s": best.alpha_s,
            "busbw_GBps": best.busbw_GBps,
            "models": {m: f.as_dict() for m, f in self.models.items()},
            **({"note": self.note} if self.note else {}),
        }


def _fit_model(model, ops, ps, x, t, w0, opts: FitOptions):
    """Joint robust fit of one model to the link's points (x bytes, t seconds)."""
    coef = {(o, p): coefficients(model, o, p) for o, p in set(zip(ops, ps))}
    A = np.array([coef[(o, p)][0] for o, p in zip(ops, ps)])
    B = np.array([coef[(o, p)][1] for o, p in zip(ops, ps)])
    x_scale = float(np.median(x[x > 0])) if np.any(x > 0) else 1.0
    t_scale = float(np.median(t))
    ts = t / t_scale
    f1 = A / ts
    f2 = B * (x / x_scale) / ts
    w = w0.copy()
    for kind in ("huber", "tukey", "tukey") if opts.robust else ():
        a, b, _ = solve(*stats(w, f1, f2))
        r = 1.0 - (a * A + b * B * x / x_scale) / ts
        w = np.where(w0 > 0, robust_weights(r, kind, opts), 0.0)
    a, b, _ = solve(*stats(w, f1, f2))
    pred = (a * A + b * B * x / x_scale) * t_scale
    rel = np.abs(pred - t) / t
    inl = w > 1e-12
    r2 = None
    if inl.sum() >= 2 and np.all(pred[inl] > 0):
        lt = np.log(t[inl])
        ss = float(np.sum((lt - lt.mean()) ** 2))
        if ss > 1e-18:
            r2 = 1.0 - float(np.sum((lt - np.log(pred[inl])) ** 2)) / ss
    per_op = {o: float(np.median(rel[ops == o])) for o in sorted(set(ops.tolist()))}
    return ModelFit(
        alpha_s=float(a) * t_scale,
        beta_s_per_byte=float(b) * t_scale / x_scale,
        points=int(len(t)),
        outliers=int(np.count_nonzero(~inl)),
        median_rel_err=float(np.median(rel)),
        max_rel_err=float(np.max(rel[inl])) if inl.any() else float(np.max(rel)),
        r2_log=r2,
        per_op_median_rel_err=per_op,
    )


def fit_link_table(
    points: list[tuple[SeriesKey, np.ndarray, np.ndarray, np.ndarray]],
    opts: FitOptions | None = None,
) -> tuple[list[LinkEntry], list[dict]]:
    """Link table from (key, bytes, seconds, robust weights) of every fitted series.

    Returns the entries and, for links that could not be fitted, {backend, link_class, timing,
    reason} rows (fewer than 3 points, or all from one size of one op)."""
    opts = opts or FitOptions()
    groups: dict[tuple, list] = {}
    for key, x, t, w in points:
        if (
            key.op not in MODELLED_OPS
            or key.group_size < 2
            and key.op
            not in (
                "sendrecv",
                "pingpong",
            )
        ):
            continue
        groups.setdefault((key.backend, key.link_class, key.timing), []).append((key, x, t, w))
    entries, skipped = [], []
    for (backend, link, timing), items in sorted(groups.items()):
        ops = np.concatenate([np.full(len(x), k.op) for k, x, _, _ in items])
        ps = np.concatenate([np.full(len(x), k.group_size) for k, x, _, _ in items])
        x = np.concatenate([x for _, x, _, _ in items])
        t = np.concatenate([t for _, _, t, _ in items])
        w = np.concatenate([w for _, _, _, w in items])
        distinct = len(set(zip(ops.tolist(), ps.tolist(), x.tolist())))
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
        models = {m: _fit_model(m, ops, ps, x, t, w, opts) for m in MODELS}
        # the first model (ring, tree, rabenseifner, pairwise) within 1% of the lowest median
        # error: when the data cannot tell models apart, ring (NCCL's default) is named
        low = min(f.median_rel_err for f in models.values())
        close = [m for m in MODELS if models[m].median_rel_err <= low * TIE + 1e-12]
        best, ties = close[0], close[1:]
        combos = len(set(zip(ops.tolist(), ps.tolist())))
        note = None
        if combos == 1:
            note = (
                "one (op, group size) only: the models cannot be told apart, so scaling to "
                "other group sizes rests on the default model"
            )
        elif len(set(ps.tolist())) == 1:
            note = (
                f"one group size ({int(ps[0])}) only: the model is chosen by how ops compare, "
                "not by how time grows with the group; measure two group sizes to check it"
            )
        entries.append(
            LinkEntry(
                backend=backend,
                link_class=link,
                timing=timing,
                group_sizes=sorted({int(k.group_size) for k, *_ in items}),
                ops=sorted({k.op for k, *_ in items}),
                points=int(len(t)),
                best_model=best,
                ties=ties,
                models=models,
                note=note,
            )
        )
    return entries, skipped
