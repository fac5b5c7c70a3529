"""Is each number good? Expected bandwidths from a thresholds file or a calibration (pure).

A thresholds file (YAML or JSON) states what the hardware should reach, the way cluster health
checks hard-code "expected >= N GB/s", but per op, link class and size:

    min_pct: 80                  # fail below this % of expected (default 80, or --min-pct)
    expect:
      - {op: sendrecv, link_class: inter, GBps: 0.0496}             # pairs: one direction
      - {op: allreduce, link_class: intra, bytes: 4M, GBps: 2.0, min_pct: 60}   # busbw

The most specific entry that matches a result wins (bytes, group_size, link_class each count);
a calibration (`commbench fit`'s, or the shipped reference) prices the rest: expected busbw =
S x bus factor / predicted time (calibration/predict, extrapolating where it must, marked).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.check.schedule import CHECK_OPS
from commbench.errors import UsageError
from commbench.ops import bus_factor, canonical_op
from commbench.sizes import parse_size

if TYPE_CHECKING:
    from commbench.calibration import Calibration

DEFAULT_MIN_PCT = 80.0
ENTRY_KEYS = {"op", "link_class", "bytes", "group_size", "GBps", "min_pct"}
LINK_CLASSES = ("intra", "inter")


@dataclass(frozen=True)
class Threshold:
    """One entry of a thresholds file."""

    op: str
    GBps: float
    min_pct: float
    link_class: str | None = None
    bytes: int | None = None
    group_size: int | None = None
    where: str = ""

    def matches(self, op: str, nbytes: int, p: int, link_class: str) -> bool:
        return (
            self.op == op
            and self.link_class in (None, link_class)
            and self.bytes in (None, nbytes)
            and self.group_size in (None, p)
        )

    @property
    def specificity(self) -> int:
        return sum(v is not None for v in (self.link_class, self.bytes, self.group_size))


def _number(v: Any, where: str) -> float:
    """A positive number; a numeric string too (PyYAML reads `1e-6`, without a dot, as one)."""
    try:
        x = float(v) if isinstance(v, str) else v
    except ValueError:
        x = None
    if isinstance(x, bool) or not isinstance(x, int | float) or not 0 < x < float("inf"):
        raise UsageError(f"{where} must be a positive number, not {v!r}")
    return float(x)


def parse_thresholds(doc: Any, source: str, min_pct: float | None = None) -> list[Threshold]:
    """The entries of a thresholds document; every mistake is a UsageError naming its place."""
    if not isinstance(doc, dict) or not isinstance(doc.get("expect"), list) or not doc["expect"]:
        raise UsageError(f"{source}: needs `expect:`, a list of {{op, GBps, ...}} entries")
    extra = set(doc) - {"expect", "min_pct"}
    if extra:
        raise UsageError(f"{source}: unknown key(s) {', '.join(sorted(extra))} (expect, min_pct)")
    default = DEFAULT_MIN_PCT if min_pct is None else min_pct  # --min-pct over the file's
    if "min_pct" in doc:
        file_pct = _number(doc["min_pct"], f"{source}: min_pct")
        default = file_pct if min_pct is None else min_pct
    out: list[Threshold] = []
    seen: dict[tuple, str] = {}
    for i, e in enumerate(doc["expect"]):
        where = f"{source}: expect[{i}]"
        if not isinstance(e, dict):
            raise UsageError(f"{where} must be a mapping, not {e!r}")
        if set(e) - ENTRY_KEYS:
            raise UsageError(
                f"{where}: unknown key(s) {', '.join(sorted(set(e) - ENTRY_KEYS))} "
                f"(one of {', '.join(sorted(ENTRY_KEYS))})"
            )
        if "op" not in e or "GBps" not in e:
            raise UsageError(f"{where}: needs op and GBps")
        op = canonical_op(str(e["op"]))
        if op not in CHECK_OPS:
            raise UsageError(f"{where}: op {e['op']!r}: check measures {', '.join(CHECK_OPS)}")
        lc = e.get("link_class")
        if lc is not None and lc not in LINK_CLASSES:
            raise UsageError(f"{where}: link_class must be intra or inter, not {lc!r}")
        p = e.get("group_size")
        if p is not None and (isinstance(p, bool) or not isinstance(p, int) or p < 2):
            raise UsageError(f"{where}: group_size must be an integer >= 2, not {p!r}")
        t = Threshold(
            op=op,
            GBps=_number(e["GBps"], f"{where}: GBps"),
            min_pct=_number(e.get("min_pct", default), f"{where}: min_pct"),
            link_class=lc,
            bytes=parse_size(e["bytes"], f"{where}: bytes") if "bytes" in e else None,
            group_size=p,
            where=f"{source} expect[{i}]",
        )
        key = (t.op, t.link_class, t.bytes, t.group_size)
        if key in seen:
            raise UsageError(
                f"{where}: the same op, link_class, bytes and group_size as {seen[key]}"
            )
        seen[key] = f"expect[{i}]"
        out.append(t)
    return out


def load_thresholds(path: Path, min_pct: float | None = None) -> list[Threshold]:
    """Read a thresholds file (YAML; JSON is YAML too)."""
    from commbench.textfile import loads_json, loads_yaml, read_text

    is_json = path.suffix == ".json"
    text = read_text(path, "--thresholds", comment=None if is_json else "#")
    where = f"--thresholds {path}"
    doc = loads_json(text, where) if is_json else loads_yaml(text, where)
    return parse_thresholds(doc, str(path), min_pct)


@dataclass(frozen=True)
class Expected:
    """What a result should reach, and who says so."""

    GBps: float
    min_pct: float
    source: str


def expected(
    op: str,
    nbytes: int,
    p: int,
    link_class: str,
    thresholds: list[Threshold],
    cal: Calibration | None,
    min_pct: float,
) -> tuple[Expected | None, str]:
    """(expectation or None, why none) for one result: the most specific threshold, else the
    calibration's prediction."""
    hits = [t for t in thresholds if t.matches(op, nbytes, p, link_class)]
    if hits:
        t = max(hits, key=lambda t: t.specificity)
        return Expected(t.GBps, t.min_pct, t.where), ""
    if cal is None:
        return None, "no threshold matches and no calibration given"
    try:
        got = cal.explain(op, nbytes, p, link_class, extrapolate=True)
    except UsageError as e:
        return None, f"{cal.source} cannot price it: {e}"
    gbps = nbytes * bus_factor(op, p) / got.seconds / 1e9
    how = f"{cal.source} [{cal.kind}{', extrapolated' if got.extrapolated else ''}]"
    return Expected(gbps, min_pct, how), ""
