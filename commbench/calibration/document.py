"""The calibration file: its JSON Schema, validation, load and atomic save.

Layout (schema: commbench/schemas/calibration.schema.json): schema_version, kind ("measured":
fitted from records by `commbench fit`; "reference": stated from published anchor numbers,
never to be taken for a measurement), created, provenance (runs with hosts, backend and library
versions, env such as NCCL_ALGO/NCCL_PROTO; or sources for a reference), fit_options, series
(one per backend/op/link class/group size/dtype/timing/placement, with piecewise segments
{bytes_min, bytes_max, alpha_s, beta_s_per_byte} and their diagnostics), skipped series,
ignored record counts, and the link table (per backend/link class/timing: alpha and beta under
the ring, tree, rabenseifner and pairwise models, and which fits best).
"""

from __future__ import annotations

import functools
import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

from commbench.calibration.predict import Calibration
from commbench.calibration.series_key import SeriesKey
from commbench.errors import UsageError

SCHEMA_VERSION = 1
KINDS = ("measured", "reference")


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
        sizes = [k["bytes"] for k in s.get("knots", ())]
        if sizes != sorted(set(sizes)):
            raise UsageError(f"{where}.knots: sizes not strictly ascending")
    for i, link in enumerate(doc["link_table"]):
        if link["best_model"] not in link["models"]:
            raise UsageError(
                f"{source}: link_table[{i}]: best_model {link['best_model']} has no fit in models"
            )


def load(path: str | Path, kind: str | None = None) -> Calibration:
    """Read and validate a calibration file; `kind` refuses the other kind (measured/reference)."""
    from commbench.textfile import loads_json, read_text

    path = Path(path)
    doc = loads_json(read_text(path, "calibration"), str(path))
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


def fitted_from(doc: dict, runs: list) -> list[str]:
    """Run ids of the `runs` (results.Run) that are among the calibration's own inputs (its
    provenance: the same directory, or a copy with the same run id and start time): checked
    against such a run, a calibration is in-sample, its errors say how well it fits, not how
    well it predicts (a series' knots reproduce their own points: +0.0%)."""
    inputs = doc.get("provenance", {}).get("runs", [])
    paths = {str(Path(r["path"]).resolve()) for r in inputs if r.get("path")}
    starts = {(r.get("run_id"), r.get("start_time_iso")) for r in inputs if r.get("start_time_iso")}
    out = []
    for run in runs:
        start = (run.run_id, run.meta.get("start_time_iso"))
        if str(Path(run.path).resolve()) in paths or (start[1] and start in starts):
            out.append(start[0])
    return out
