"""The link table's records (fit/links.py fits them): one algorithm model's fit over a link's
points, and the row of one (backend, link class, timing) with every model's fit and, where the
library's algorithm choice is known, the ops it prices."""

from __future__ import annotations

from dataclasses import dataclass, field

from commbench.calibration.algorithms import LIBRARIES
from commbench.calibration.lines import Term

# the library model prices an op whose median error is at most LIBRARY_RATIO x the best fixed
# model's + LIBRARY_MARGIN: the two differ only in latency rounds at one group size unless the
# library's algorithm switch is not what the times follow (then 3x and more)
LIBRARY_RATIO, LIBRARY_MARGIN = 1.25, 0.02


@dataclass(kw_only=True)
class ModelFit:
    """One algorithm model's fit over a link's points: per-op terms and the shared line."""

    alpha_s: float  # the shared line (all ops), for ops with no terms
    beta_s_per_byte: float
    points: int
    outliers: int  # left out by the series fits (weight 0)
    below_latency: int  # rejected: faster than LATENCY_SHARE x the p2p latency
    median_rel_err: float  # of the per-op terms' predictions, over the points they fit
    max_rel_err: float
    r2_log: float | None
    shared_median_rel_err: float
    per_op_median_rel_err: dict[str, float]
    per_op_large_median_rel_err: dict[str, float]
    terms: dict[str, list[Term]] = field(default_factory=dict)

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
            "below_latency": self.below_latency,
            "median_rel_err": self.median_rel_err,
            "max_rel_err": self.max_rel_err,
            "r2_log": self.r2_log,
            "shared_median_rel_err": self.shared_median_rel_err,
            "per_op_median_rel_err": self.per_op_median_rel_err,
            "per_op_large_median_rel_err": self.per_op_large_median_rel_err,
            "terms": {
                op: [
                    {
                        "bytes_min": ln.bytes_min,
                        "bytes_max": ln.bytes_max,
                        "alpha_s": ln.alpha_s,
                        "beta_s_per_byte": ln.beta_s_per_byte,
                        **({"bytes_offset": ln.bytes_offset} if ln.bytes_offset else {}),
                    }
                    for ln in lines
                ]
                for op, lines in self.terms.items()
            },
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
    library: str | None = None  # calibration.algorithms: whose algorithm choice was modelled
    library_fit: ModelFit | None = None  # the per-op terms under that library's choice
    library_version: str | None = None  # the release the runs name (meta.json `libraries`)

    def library_ops(self) -> list[str]:
        """The ops the library model prices: those whose points it fits about as well as the
        best fixed model (LIBRARY_RATIO, LIBRARY_MARGIN), over all sizes and from 64 KiB up.
        Where it fits worse its byte counts are not what the time follows (on shared memory a
        reduce + scatter costs copies and reductions, not 3x the link bytes of a butterfly),
        so the fixed model keeps them."""
        assert self.library_fit is not None
        best, mine = self.models[self.best_model], self.library_fit

        def as_well(op: str, errs: dict[str, float], best_errs: dict[str, float]) -> bool:
            return (
                op not in errs
                or errs[op] <= LIBRARY_RATIO * best_errs.get(op, 0.0) + LIBRARY_MARGIN
            )

        # over all sizes and from LARGE up, where a step's time is: over all sizes alone, a
        # 2-rank reduce_scatter at 12.8% from 64 KiB against the ring's 3.6% was priced
        return sorted(
            op
            for op in mine.per_op_median_rel_err
            if as_well(op, mine.per_op_median_rel_err, best.per_op_median_rel_err)
            and as_well(op, mine.per_op_large_median_rel_err, best.per_op_large_median_rel_err)
        )

    def as_dict(self) -> dict:
        best = self.models[self.best_model]
        lib = {}
        if self.library and self.library_fit:
            lib = {
                "library": {
                    "name": self.library,
                    **({"version": self.library_version} if self.library_version else {}),
                    "rules": LIBRARIES[self.library],
                    "priced_ops": self.library_ops(),
                    **self.library_fit.as_dict(),
                }
            }
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
            **lib,
        }
