"""Calibration JSON: the versioned alpha-beta model planners call, validated on load.

    cal = commbench.calibration.load("calibration.json")
    seconds = cal.predict("allreduce", 32 << 20, 8, "intra", dtype="bfloat16")

Layout (schema: commbench/schemas/calibration.schema.json): schema_version, kind ("measured":
fitted from records by `commbench fit`; "reference": stated from published anchor numbers,
never to be taken for a measurement), created, provenance (runs with hosts, backend and library
versions, env such as NCCL_ALGO/NCCL_PROTO; or sources for a reference), fit_options, series
(one per backend/op/link class/group size/dtype/timing/placement, with piecewise segments
{bytes_min, bytes_max, alpha_s, beta_s_per_byte} and their diagnostics), skipped series,
ignored record counts, and the link table (per backend/link class/timing: alpha and beta under
the ring, tree, rabenseifner and pairwise models, and which fits best).

predict() rule. Strict (extrapolate=False): a series must match op (alltoallv may use an
alltoall series: both take S = the busiest rank's send buffer), link class, group size, dtype
and backend (either may be omitted when the calibration has only one), preferring per-iteration
over pipelined timing and out-of-place over in-place unless asked; nbytes must lie within the
series' measured sizes; the segment holding nbytes is used (between two segments, the cut is
the geometric mean of their neighbouring sizes). A group of 1 costs 0 s. Anything else raises
UsageError saying what is missing and what the calibration covers. With extrapolate=True, in
this order: (1) bytes outside the range use the nearest segment's line; (2) a dtype not
measured uses the same op/link/group size in another dtype, same element size first, priced by
bytes; (3) a group size not measured scales the series of the nearest measured group size q
(in log2 distance, ties to the larger) by the link table's best model:
t(p, S) = t_q(S) * M(op, p, S) / M(op, q, S) with M = alpha A(op, p) + beta B(op, p) S
(Thakur, Rabenseifner & Gropp 2005); (4) an op never measured on that link uses M directly.
A link class with nothing measured (no series, no link table) is refused even then. On a
reference calibration the link table is the statement itself, so (3)-(4) need no extrapolate.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from commbench.calibration.costmodels import MODELLED_OPS, model_time
from commbench.dtypes import DTYPE_SIZES
from commbench.errors import UsageError
from commbench.fit.collect import SeriesKey, canonical_dtype_name, canonical_op
from commbench.fit.series import predict_segments
from commbench.ops import OPS
from commbench.sizes import format_size

SCHEMA_VERSION = 1
KINDS = ("measured", "reference")
TIMING_PREFERENCE = ("per-iteration", "pipelined")
PLACEMENT_PREFERENCE = ("out-of-place", "in-place")


def schema() -> dict:
    """The JSON Schema shipped in the package (commbench/schemas/calibration.schema.json)."""
    text = resources.files("commbench").joinpath("schemas/calibration.schema.json").read_text()
    return json.loads(text)


@functools.lru_cache(maxsize=1)
def _validator():
    """A validator for the shipped schema with its local `$ref`s inlined (same meaning, no
    recursion in this schema): reference resolution per item made validating a large
    calibration several times slower."""
    import jsonschema

    full = schema()
    defs = full.get("$defs", {})

    def inline(node):
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                target = inline(defs[ref.rsplit("/", 1)[1]])
                return {"allOf": [target, inline(rest)]} if rest else target
            return {k: inline(v) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return jsonschema.Draft202012Validator(inline(full))


def _pointer(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _non_finite(doc: Any) -> tuple | None:
    """The JSON path of the first NaN or infinite number in `doc` (walked without recursion)."""
    stack: list[tuple[tuple, Any]] = [((), doc)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return path
        if isinstance(node, dict):
            stack += [((*path, k), v) for k, v in reversed(node.items())]
        elif isinstance(node, list):
            stack += [((*path, i), v) for i, v in reversed(list(enumerate(node)))]
    return None


def validate(doc: Any, source: str = "calibration") -> None:
    """Schema plus consistency checks; a UsageError names the file and the JSON path."""
    import jsonschema

    if not isinstance(doc, dict):
        raise UsageError(f"{source}: a calibration must be a JSON object")
    if doc.get("schema_version") not in (None, SCHEMA_VERSION):
        raise UsageError(
            f"{source}: schema_version {doc.get('schema_version')!r} is not {SCHEMA_VERSION} "
            "(made by another commbench version?)"
        )
    validator = _validator()
    if validator.is_valid(doc):
        error = None
    else:
        error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is not None:
        raise UsageError(
            f"{source}: calibration fails its schema at {_pointer(error.absolute_path)}: "
            f"{error.message}"
        )
    bad = _non_finite(doc)
    if bad is not None:  # Python reads and writes NaN/Infinity; JSON Schema lets them pass
        raise UsageError(f"{source}: {_pointer(bad)} is not a finite number")
    seen = set()
    for i, s in enumerate(doc["series"]):
        where = f"{source}: series[{i}]"
        key = SeriesKey.from_dict(s)
        if key in seen:
            raise UsageError(f"{where}: a second series for {key.label()}")
        seen.add(key)
        segs = s["segments"]
        for k, g in enumerate(segs):
            if g["bytes_min"] > g["bytes_max"]:
                raise UsageError(f"{where}.segments[{k}]: bytes_min > bytes_max")
            if k and g["bytes_min"] <= segs[k - 1]["bytes_max"]:
                raise UsageError(f"{where}.segments[{k}]: overlaps or precedes the segment before")
        if segs[0]["bytes_min"] != s["bytes_min"] or segs[-1]["bytes_max"] != s["bytes_max"]:
            raise UsageError(f"{where}: bytes_min/bytes_max disagree with its segments")
    for i, link in enumerate(doc["link_table"]):
        if link["best_model"] not in link["models"]:
            raise UsageError(
                f"{source}: link_table[{i}]: best_model {link['best_model']} has no fit in models"
            )


def load(path: str | Path, kind: str | None = None) -> Calibration:
    """Read and validate a calibration file; `kind` refuses the other kind (measured/reference)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise UsageError(f"cannot read calibration {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not a JSON text file (byte {e.start} is not UTF-8)") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    except RecursionError:
        raise UsageError(f"{path}: not valid JSON (nested too deeply)") from None
    validate(doc, str(path))
    cal = Calibration(doc, str(path))
    if kind is not None and cal.kind != kind:
        raise UsageError(f"{path} is a {cal.kind} calibration, not {kind}")
    return cal


def save(doc: dict, path: str | Path) -> Path:
    """Validate and write a calibration atomically."""
    from commbench.results.rundir import write_json_atomic

    path = Path(path)
    validate(doc, str(path))
    if path.is_dir():
        raise UsageError(f"cannot write calibration {path}: it is a directory (give a file name)")
    try:
        if path.parent and not path.parent.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, doc)
    except OSError as e:
        raise UsageError(f"cannot write calibration {path}: {e.strerror or e}") from None
    return path


@dataclass(frozen=True)
class Line:
    """One segment as predict() needs it."""

    bytes_min: int
    bytes_max: int
    alpha_s: float
    beta_s_per_byte: float


@dataclass(frozen=True)
class SeriesModel:
    key: SeriesKey
    bytes_min: int
    bytes_max: int
    segments: tuple[Line, ...]

    def at(self, nbytes: float) -> float:
        return predict_segments(list(self.segments), nbytes)

    def covers(self, nbytes: float) -> bool:
        return self.bytes_min <= nbytes <= self.bytes_max


@dataclass(frozen=True)
class LinkModel:
    backend: str
    link_class: str
    timing: str
    best_model: str
    alpha_s: float
    beta_s_per_byte: float
    group_sizes: tuple[int, ...]
    note: str | None = None

    def time(self, op: str, p: int, nbytes: float) -> float:
        return model_time(self.best_model, op, p, nbytes, self.alpha_s, self.beta_s_per_byte)


@dataclass
class Prediction:
    """A predicted time and how it was obtained."""

    seconds: float
    method: str
    extrapolated: bool = False
    series: SeriesKey | None = None
    model: str | None = None
    kind: str = "measured"
    notes: list[str] = field(default_factory=list)


def _rank(value: str, order: tuple) -> tuple:
    return (order.index(value) if value in order else len(order), value)


def _prefer(cands: list[SeriesModel]) -> list[SeriesModel]:
    """Candidates sorted best first: per-iteration before pipelined timing, out-of-place
    before in-place placement, then by name (so the choice is deterministic)."""
    return sorted(
        cands,
        key=lambda s: (
            _rank(s.key.timing, TIMING_PREFERENCE),
            _rank(s.key.placement, PLACEMENT_PREFERENCE),
        ),
    )


class Calibration:
    """A loaded calibration: predict(), explain() and what it covers."""

    def __init__(self, doc: dict, source: str = "calibration") -> None:
        self.doc = doc
        self.source = source
        self.kind: str = doc["kind"]
        self.series: list[SeriesModel] = [
            SeriesModel(
                SeriesKey.from_dict(s),
                s["bytes_min"],
                s["bytes_max"],
                tuple(
                    Line(g["bytes_min"], g["bytes_max"], g["alpha_s"], g["beta_s_per_byte"])
                    for g in s["segments"]
                ),
            )
            for s in doc["series"]
        ]
        self.links: list[LinkModel] = []
        for e in doc["link_table"]:
            m = e["models"][e["best_model"]]
            self.links.append(
                LinkModel(
                    e["backend"],
                    e["link_class"],
                    e["timing"],
                    e["best_model"],
                    m["alpha_s"],
                    m["beta_s_per_byte"],
                    tuple(e.get("group_sizes", ())),
                    e.get("note"),
                )
            )

    # ---- what it covers ----------------------------------------------------------------
    def coverage(self) -> list[dict]:
        """One row per series: its key and measured byte range (for listings and errors)."""
        return [
            {**s.key.as_dict(), "bytes_min": s.bytes_min, "bytes_max": s.bytes_max}
            for s in sorted(self.series, key=lambda s: s.key)
        ]

    @property
    def ops(self) -> list[str]:
        return sorted({s.key.op for s in self.series})

    @property
    def link_classes(self) -> list[str]:
        return sorted({s.key.link_class for s in self.series} | {x.link_class for x in self.links})

    @property
    def backends(self) -> list[str]:
        return sorted({s.key.backend for s in self.series} | {x.backend for x in self.links})

    def describe(self, op: str | None = None, link_class: str | None = None) -> str:
        """Compact text of what is covered, e.g. `allreduce intra p=4 float32 8 B..4 MiB`."""
        groups: dict[tuple, list[SeriesModel]] = {}
        for s in self.series:
            k = s.key
            if (op and k.op != op) or (link_class and k.link_class != link_class):
                continue
            groups.setdefault((k.op, k.link_class, k.dtype, k.backend), []).append(s)
        parts = []
        for (o, link, dt, be), ss in sorted(groups.items()):
            ps = ",".join(str(p) for p in sorted({s.key.group_size for s in ss}))
            lo = format_size(min(s.bytes_min for s in ss))
            hi = format_size(max(s.bytes_max for s in ss))
            parts.append(f"{o} {link} p={ps} {dt} {be} {lo}..{hi}")
        links = [
            f"link table {x.backend}/{x.link_class}/{x.timing} ({x.best_model})"
            for x in self.links
            if not link_class or x.link_class == link_class
        ]
        return "; ".join(parts + links) or "nothing"

    # ---- prediction --------------------------------------------------------------------
    def predict(
        self,
        op: str,
        nbytes: float,
        group_size: int,
        link_class: str,
        dtype: str | None = None,
        backend: str | None = None,
        extrapolate: bool = False,
        timing: str | None = None,
        placement: str | None = None,
    ) -> float:
        """Seconds for one `op` of S = nbytes on a group of group_size over link_class."""
        return self.explain(
            op, nbytes, group_size, link_class, dtype, backend, extrapolate, timing, placement
        ).seconds

    def explain(
        self,
        op: str,
        nbytes: float,
        group_size: int,
        link_class: str,
        dtype: str | None = None,
        backend: str | None = None,
        extrapolate: bool = False,
        timing: str | None = None,
        placement: str | None = None,
    ) -> Prediction:
        """predict() with the method used (see the module docstring for the rule)."""
        got = self._explain(
            op, nbytes, group_size, link_class, dtype, backend, extrapolate, timing, placement
        )
        if not math.isfinite(got.seconds):  # finite but absurd alpha/beta overflowed
            raise UsageError(
                f"{self.source}: {op} of {format_size(nbytes)} on {link_class} links, group "
                f"size {group_size}: the {got.method} gives {got.seconds} s (alpha/beta out "
                "of range)"
            )
        return got

    def _explain(
        self,
        op: str,
        nbytes: float,
        group_size: int,
        link_class: str,
        dtype: str | None,
        backend: str | None,
        extrapolate: bool,
        timing: str | None,
        placement: str | None,
    ) -> Prediction:
        op = canonical_op(op)
        if op not in OPS:
            raise UsageError(f"unknown op {op!r}: choose from {', '.join(OPS)}")
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or not nbytes >= 0:
            raise UsageError(f"nbytes must be a non-negative number of bytes, got {nbytes!r}")
        if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
            raise UsageError(f"group_size must be a positive integer, got {group_size!r}")
        if group_size == 1:
            return Prediction(0.0, "group of 1: no communication", kind=self.kind)
        dtype = canonical_dtype_name(dtype) if dtype else None
        want = (
            f"{op} of {format_size(nbytes)} on {link_class} links, group size {group_size}"
            + (f", dtype {dtype}" if dtype else "")
            + (f", backend {backend}" if backend else "")
        )
        ops = [op, "alltoall"] if op == "alltoallv" else [op]
        on_link = [
            s
            for s in self.series
            if s.key.link_class == link_class
            and (backend is None or s.key.backend == backend)
            and s.key.op in ops
        ]
        backend = self._resolve_backend(on_link, backend, link_class, want)
        on_link = [s for s in on_link if s.key.backend == backend] if backend else on_link
        if op == "alltoallv" and any(s.key.op == op for s in on_link):
            on_link = [s for s in on_link if s.key.op == op]
        if timing is not None:
            on_link = [s for s in on_link if s.key.timing == timing]
        if placement is not None:
            on_link = [s for s in on_link if s.key.placement == placement]
        same_p = [s for s in on_link if s.key.group_size == group_size]
        if dtype is None:
            dtypes = sorted({s.key.dtype for s in same_p})
            if len(dtypes) > 1:
                raise UsageError(
                    f"{want}: {self.source} has it in several dtypes ({', '.join(dtypes)}): "
                    "pass dtype="
                )
        exact = _prefer([s for s in same_p if dtype is None or s.key.dtype == dtype])
        if exact:
            s = exact[0]
            if s.covers(nbytes):
                return Prediction(s.at(nbytes), "measured segment", False, s.key, kind=self.kind)
            if not extrapolate:
                raise UsageError(
                    f"{want}: {format_size(nbytes)} is outside the measured sizes "
                    f"{format_size(s.bytes_min)}..{format_size(s.bytes_max)} of {s.key.label()} "
                    f"in {self.source} (pass extrapolate=True to use the nearest segment)"
                )
            return Prediction(
                s.at(nbytes),
                "nearest segment (bytes outside the measured range)",
                True,
                s.key,
                kind=self.kind,
            )
        reference = self.kind == "reference"
        if not extrapolate and not reference:
            raise UsageError(
                f"{want}: not measured in {self.source} (it covers: "
                f"{self.describe(op=ops[-1] if op == 'alltoallv' else op)}); pass "
                "extrapolate=True to scale from the link table"
            )
        return self._extrapolate(op, nbytes, group_size, link_class, dtype, backend, on_link, want)

    def _resolve_backend(self, cands, backend, link_class, want) -> str | None:
        if backend is not None:
            return backend
        names = sorted({s.key.backend for s in cands})
        if not names:
            names = sorted({x.backend for x in self.links if x.link_class == link_class})
        if len(names) > 1:
            raise UsageError(
                f"{want}: {self.source} has several backends ({', '.join(names)}): pass backend="
            )
        return names[0] if names else None

    def _link(self, backend, link_class, timing=None) -> LinkModel | None:
        links = [x for x in self.links if x.link_class == link_class]
        if backend:
            links = [x for x in links if x.backend == backend]
        if timing:
            same = [x for x in links if x.timing == timing]
            links = same or links
        links.sort(
            key=lambda x: TIMING_PREFERENCE.index(x.timing) if x.timing in TIMING_PREFERENCE else 9
        )
        return links[0] if links else None

    def _extrapolate(self, op, nbytes, p, link_class, dtype, backend, on_link, want) -> Prediction:
        kind = self.kind
        same_p = _prefer([s for s in on_link if s.key.group_size == p])
        if same_p:  # (2) another dtype, same element size first
            size = DTYPE_SIZES.get(dtype or "", 0)
            s = min(same_p, key=lambda s: DTYPE_SIZES.get(s.key.dtype, -1) != size)
            where = "" if s.covers(nbytes) else ", nearest segment"
            return Prediction(
                s.at(nbytes),
                f"dtype {s.key.dtype} measured, priced by bytes{where}",
                True,
                s.key,
                kind=kind,
            )
        if op not in MODELLED_OPS:
            raise UsageError(
                f"{want}: no algorithm model prices {op}, so it cannot be extrapolated"
            )
        if on_link:  # (3) scale the nearest measured group size by the link model
            pref = _prefer([s for s in on_link if dtype is None or s.key.dtype == dtype] or on_link)
            q = min(
                {s.key.group_size for s in pref},
                key=lambda g: (abs(math.log2(g) - math.log2(p)), -g),
            )
            s = next(s for s in pref if s.key.group_size == q)
            link = self._link(s.key.backend, link_class, s.key.timing)
            if link is not None:
                base = link.time(op, q, nbytes)
                target = link.time(op, p, nbytes)
                if base > 0:
                    return Prediction(
                        s.at(nbytes) * target / base,
                        f"scaled from group size {q} by the {link.best_model} model",
                        True,
                        s.key,
                        link.best_model,
                        kind=kind,
                        notes=[link.note] if link.note else [],
                    )
        link = self._link(backend, link_class)
        if link is None:  # (5)
            raise UsageError(
                f"{want}: nothing was measured on {link_class} links in {self.source} (it "
                f"covers link classes: {', '.join(self.link_classes) or 'none'}), so there is "
                "no link model to extrapolate from"
            )
        return Prediction(  # (4) the link model itself
            link.time(op, p, nbytes),
            f"{'reference' if kind == 'reference' else 'link'} {link.best_model} model",
            kind != "reference",
            None,
            link.best_model,
            kind=kind,
            notes=[link.note] if link.note else [],
        )
