"""A calibration's lines: the piecewise alpha-beta segments of one measured series (with its
measured medians, the knots), and a link's alpha-beta under a named algorithm model (Thakur,
Rabenseifner & Gropp 2005). predict() picks one; this module evaluates it."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from commbench.calibration.costmodels import coefficients, model_time
from commbench.calibration.series_key import SeriesKey


@dataclass(frozen=True)
class Line:
    """One segment as predict() needs it."""

    bytes_min: int
    bytes_max: int
    alpha_s: float
    beta_s_per_byte: float


@dataclass(frozen=True)
class Term(Line):
    """One regime of an op's link-table terms (fit/links.py): alpha A(op, p) + beta B(op, p)
    (S - bytes_offset). A bytes_offset > 0 is the secant of a cache transition, whose cost per
    byte rises with S (fit/segments.py), with the alpha of the regime below; the offset scales
    with the bytes term, so at every group size time grows with S from its lower cut up."""

    bytes_offset: float = 0.0

    def scaled(self, a: float, b: float) -> Line:
        """The line of this regime under coefficients A = a, B = b."""
        beta = self.beta_s_per_byte * b
        return Line(
            self.bytes_min, self.bytes_max, self.alpha_s * a - beta * self.bytes_offset, beta
        )


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


Seg = TypeVar("Seg", bound=SegmentLike)


def predict_segments(segments: Sequence[SegmentLike], nbytes: float) -> float:
    """Seconds at nbytes from a series' segments: the line of segment_for(nbytes)."""
    seg = segment_for(segments, nbytes)
    return float(seg.alpha_s + seg.beta_s_per_byte * nbytes)


def predict_series(
    segments: Sequence[SegmentLike], knots: Sequence[tuple[int, float]], nbytes: float
) -> float:
    """Seconds at nbytes from a series' segments and knots ((bytes, median measured seconds)
    per measured size, ascending): the two measurements around nbytes interpolated log-log,
    times the curvature there of the line holding nbytes (its value over the same
    interpolation of its own values at the two sizes); beyond the ends, the line scaled to the
    nearest measurement; the line alone with no knots. A measured size gives its measurement;
    between two sizes the line's shape (the alpha knee) at the measurements' level, so inside
    the measured range a cache cliff the few segments cannot follow is still priced at its
    level (bench/fit_accuracy.py: leave-one-size-out, against log-log interpolation)."""
    seg = segment_for(segments, nbytes)

    def line(b: float) -> float:
        return seg.alpha_s + seg.beta_s_per_byte * b

    if not knots or line(nbytes) <= 0:
        return float(line(nbytes))
    i = bisect_left([b for b, _ in knots], nbytes)
    if i == 0 or i == len(knots) or knots[i - 1][0] <= 0:
        b, t = knots[min(i, len(knots) - 1)]
        return float(line(nbytes) * t / line(b)) if line(b) > 0 else float(line(nbytes))
    (b0, t0), (b1, t1) = knots[i - 1], knots[i]
    f = math.log(nbytes / b0) / math.log(b1 / b0)
    r0, r1 = t0 / line(b0), t1 / line(b1)
    return float(line(nbytes) * math.exp((1 - f) * math.log(r0) + f * math.log(r1)))


def segment_for(segments: Sequence[Seg], nbytes: float) -> Seg:
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
    knots: tuple[tuple[int, float], ...] = ()  # (bytes, median measured seconds) per size

    def at(self, nbytes: float) -> float:
        return predict_series(self.segments, self.knots, nbytes)

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
    terms: Mapping[str, tuple[Term, ...]] = field(default_factory=dict)
    # the same link fitted under its library's algorithm choice (best_model = the library)
    library: LinkModel | None = None
    # the release of that library its runs name (NCCL: its latency constants differ by release)
    library_version: str | None = None

    def terms_at(self, op: str, nbytes: float) -> Term | None:
        """op's regime holding nbytes, None when op has no terms."""
        lines = self.terms.get(op)
        if not lines:
            return None
        return segment_for(lines, nbytes)

    def time(self, op: str, p: int, nbytes: float) -> float:
        lines = self.terms.get(op)
        if not lines:
            return model_time(self.best_model, op, p, nbytes, self.alpha_s, self.beta_s_per_byte)
        a, b = coefficients(self.best_model, op, p, nbytes)
        return predict_segments([x.scaled(a, b) for x in lines], nbytes)


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
                Term(
                    g["bytes_min"],
                    g["bytes_max"],
                    g["alpha_s"],
                    g["beta_s_per_byte"],
                    g.get("bytes_offset", 0.0),
                )
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
    version = lib.get("version") if lib else None
    return LinkModel(
        **_link_fields(e, e["best_model"], e["models"][e["best_model"]]),
        library=LinkModel(**_link_fields(e, lib["name"], lib), library_version=version)
        if lib
        else None,
        library_version=version,
    )
