"""A calibration's lines: the piecewise alpha-beta segments of one measured series (with its
measured residuals), and a link's alpha-beta under a named algorithm model (Thakur,
Rabenseifner & Gropp 2005). predict() picks one; this module evaluates it."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from commbench.calibration.costmodels import coefficients, model_time
from commbench.calibration.series_key import SeriesKey


@dataclass(frozen=True)
class Line:
    """One segment as predict() needs it."""

    bytes_min: int
    bytes_max: int
    alpha_s: float
    beta_s_per_byte: float


class SegmentLike(Protocol):
    """What predict_segments reads of a segment (a fitted Segment or a loaded calibration line)."""

    @property
    def bytes_min(self) -> int: ...
    @property
    def bytes_max(self) -> int: ...
    @property
    def alpha_s(self) -> float: ...
    @property
    def beta_s_per_byte(self) -> float: ...


def predict_segments(segments: Sequence[SegmentLike], nbytes: float) -> float:
    """Seconds at nbytes from a series' segments: the line of segment_for(nbytes)."""
    seg = segment_for(segments, nbytes)
    return float(seg.alpha_s + seg.beta_s_per_byte * nbytes)


def residual_ratio(knots: Sequence[tuple[int, float]], nbytes: float) -> float:
    """measured / line at nbytes, from a series' knots ((bytes, ratio) at each trusted
    measured size, ascending): log-log interpolation between the two sizes around nbytes, the
    nearest knot's ratio outside them, 1 with none. The line gives the shape between two
    measured sizes, their measurements the level: inside the measured range this is never
    further from the neighbours' medians than interpolating them (bench/fit_accuracy.py)."""
    if not knots:
        return 1.0
    i = bisect_left([b for b, _ in knots], nbytes)
    if i == 0 or i == len(knots):
        return knots[min(i, len(knots) - 1)][1]
    (b0, r0), (b1, r1) = knots[i - 1], knots[i]
    if b0 <= 0:
        return r1
    f = math.log(nbytes / b0) / math.log(b1 / b0)
    return math.exp((1 - f) * math.log(r0) + f * math.log(r1))


def segment_for(segments: Sequence[SegmentLike], nbytes: float) -> SegmentLike:
    """The segment holding nbytes; in a gap between two segments the boundary is the geometric
    mean of their neighbouring measured sizes; outside the measured range the nearest segment
    (the caller decides if allowed)."""
    seg = segments[0]
    for k, s in enumerate(segments):
        if nbytes <= s.bytes_max:
            seg = s
            if nbytes < s.bytes_min and k > 0:
                prev = segments[k - 1]
                cut = math.sqrt(max(prev.bytes_max, 1) * max(s.bytes_min, 1))
                seg = prev if nbytes < cut else s
            break
        seg = s
    return seg


@dataclass(frozen=True)
class SeriesModel:
    key: SeriesKey
    bytes_min: int
    bytes_max: int
    segments: tuple[Line, ...]
    shapes: tuple[tuple[int, int], ...] = ()  # (nodes, ranks per node) measured
    knots: tuple[tuple[int, float], ...] = ()  # (bytes, measured / line) per measured size

    def at(self, nbytes: float) -> float:
        """The line at nbytes times the measured residual there (residual_ratio)."""
        return predict_segments(list(self.segments), nbytes) * residual_ratio(self.knots, nbytes)

    def covers(self, nbytes: float) -> bool:
        return self.bytes_min <= nbytes <= self.bytes_max


@dataclass(frozen=True, kw_only=True)
class LinkModel:
    """A link's best model: per-op terms (one (alpha, beta) per size regime, fit/links.py) for
    the ops measured on it, the shared (alpha, beta) for the others; `library`, when the
    library's algorithm choice is known, the same under that choice."""

    backend: str
    link_class: str
    timing: str
    best_model: str
    alpha_s: float
    beta_s_per_byte: float
    group_sizes: tuple[int, ...]
    note: str | None = None
    terms: Mapping[str, tuple[Line, ...]] = field(default_factory=dict)
    # the same link fitted under its library's algorithm choice (best_model = the library)
    library: LinkModel | None = None

    def terms_at(self, op: str, nbytes: float) -> tuple[float, float] | None:
        """(alpha, beta) of op's regime holding nbytes, None when op has no terms."""
        lines = self.terms.get(op)
        if not lines:
            return None
        seg = segment_for(lines, nbytes)
        return seg.alpha_s, seg.beta_s_per_byte

    def time(self, op: str, p: int, nbytes: float) -> float:
        lines = self.terms.get(op)
        if not lines:
            return model_time(self.best_model, op, p, nbytes, self.alpha_s, self.beta_s_per_byte)
        a, b = coefficients(self.best_model, op, p, nbytes)
        scaled = [
            Line(x.bytes_min, x.bytes_max, x.alpha_s * a, x.beta_s_per_byte * b) for x in lines
        ]
        return predict_segments(scaled, nbytes)


def _link_fields(e: dict, model: str, m: dict) -> dict:
    """LinkModel fields of link table entry e under one of its models (m: that model's fit)."""
    return {
        "backend": e["backend"],
        "link_class": e["link_class"],
        "timing": e["timing"],
        "best_model": model,
        "alpha_s": m["alpha_s"],
        "beta_s_per_byte": m["beta_s_per_byte"],
        "group_sizes": tuple(e.get("group_sizes", ())),
        "note": e.get("note"),
        "terms": {
            op: tuple(
                Line(g["bytes_min"], g["bytes_max"], g["alpha_s"], g["beta_s_per_byte"])
                for g in lines
            )
            for op, lines in (m.get("terms") or {}).items()
        },
    }


def link_model(e: dict) -> LinkModel:
    """The LinkModel of a calibration's link table entry: its best model, and its library's
    algorithm choice when the entry has one."""
    lib = e.get("library")
    if lib:  # only the ops it prices (fit/links.py: those it fits as well as the best)
        lib = {**lib, "terms": {o: t for o, t in lib["terms"].items() if o in lib["priced_ops"]}}
    return LinkModel(
        **_link_fields(e, e["best_model"], e["models"][e["best_model"]]),
        library=LinkModel(**_link_fields(e, lib["name"], lib)) if lib else None,
    )
