"""Suite files: which patterns, models, degrees and options `commbench suite NAME` runs.

A suite is YAML (commbench/traffic/suites/*.yaml, or any path): `description`, `timing` defaults,
`max_bytes`, `include` (other suites' runs) and `runs`, each with a `pattern`, `models`
(preset names or shape mappings), `degrees` (tp/cp/pp/ep: an int, a list, `auto` = every
divisor >= 2 of the world the model allows, `max` = the largest such, or {min, max}),
fixed `options`, `sweep` (option: [values]) and an optional `quick` replacement. dp is
always world / (tp cp pp), so one suite adapts to the world it runs on. Everything is
validated before the first collective; errors name the file and field. traffic/points.py
expands a loaded suite into the points one world measures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commbench.errors import UsageError
from commbench.traffic import bounds, patterns, suitecache
from commbench.traffic.layout import DEFAULT_ORDER, Axis, parse_order
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import field_path
from commbench.traffic.presets import get_model

SUITES_DIR = Path(__file__).resolve().parent / "suites"
DEGREE_AXES = (Axis.TP, Axis.CP, Axis.PP, Axis.EP)
SUITE_KEYS = ("description", "timing", "max_bytes", "include", "runs", "quick")
RUN_KEYS = ("pattern", "name", "models", "degrees", "options", "sweep", "order", "quick")
TIMING_KEYS = {"budget": float, "iters": int, "warmup": int, "min_iters": int, "max_iters": int}


# ---- degrees ----
@dataclass(frozen=True)
class DegreeSpec:
    """How one degree is chosen: explicit values, `auto` (divisors of the world in
    [lo, hi] the model allows) or `max` (the largest of those)."""

    kind: str  # "values" | "auto" | "max"
    values: tuple[int, ...] = ()
    lo: int = 2
    hi: int | None = None

    @property
    def explicit(self) -> bool:
        return self.kind == "values"

    def candidates(self, world: int) -> list[int]:
        if self.explicit:
            return list(self.values)
        return [
            d
            for d in range(1, world + 1)
            if world % d == 0 and d >= self.lo and (self.hi is None or d <= self.hi)
        ]


ONE = DegreeSpec("values", (1,))


def parse_degree(value: Any, where: str) -> DegreeSpec:
    """int | [int, ...] | "auto" | "max" | {min: int, max: int} (CLI: "2,4" too)."""
    if isinstance(value, str):
        if value in ("auto", "max"):
            return DegreeSpec(value, lo=2 if value == "auto" else 1)
        try:
            value = [int(v) for v in value.split(",")]
        except ValueError:
            raise UsageError(
                f"{where}: {value!r} is not a degree: give an integer, a list, auto, max or "
                "{min: N, max: N}"
            ) from None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, list):
        if not value or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise UsageError(f"{where}: expected a non-empty list of integers, got {value!r}")
        if any(v < 1 for v in value):
            raise UsageError(f"{where}: degrees must be at least 1, got {value!r}")
        return DegreeSpec("values", tuple(dict.fromkeys(value)))
    if isinstance(value, dict):
        unknown = set(value) - {"min", "max"}
        if unknown:
            raise UsageError(
                f"{field_path(where, sorted(map(str, unknown))[0])}: unknown key; use min and max"
            )
        for k, v in value.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise UsageError(f"{field_path(where, k)}: expected a positive integer, got {v!r}")
        return DegreeSpec("auto", lo=value.get("min", 2), hi=value.get("max"))
    raise UsageError(
        f"{where}: expected an integer, a list, auto, max or {{min: N, max: N}}, got {value!r}"
    )


# ---- runs and suites ----
@dataclass(frozen=True, eq=False, kw_only=True)
class RunSpec:
    """One validated `runs:` entry of a suite file."""

    where: str
    pattern: str
    name: str
    models: tuple[ModelShape, ...]
    degrees: dict[str, DegreeSpec]
    options: dict[str, Any]
    sweep: dict[str, tuple]
    order: tuple[Axis, ...]
    timing: dict[str, Any]
    max_bytes: int | None


@dataclass(frozen=True)
class Suite:
    """A loaded suite: its runs (included suites' runs spliced in order)."""

    name: str
    path: Path
    description: str
    runs: tuple[RunSpec, ...]
    timing: dict[str, Any] = field(default_factory=dict)
    max_bytes: int | None = None


def suite_names() -> list[str]:
    """The built-in suites."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))


def display(path: Path) -> str:
    """suites/tp.yaml for built-in suites, else the path as given."""
    try:
        return f"suites/{path.relative_to(SUITES_DIR)}"
    except ValueError:
        return str(path)


def find_suite(ref: str, base: Path | None = None) -> Path:
    """A suite name (suites/NAME.yaml) or a path to a YAML file."""
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        path = Path(ref)
        if not path.is_absolute() and base is not None and not path.exists():
            path = base / ref
        if not path.is_file():
            raise UsageError(f"suite file {ref}: no such file")
        return path
    path = SUITES_DIR / f"{ref}.yaml"
    if not path.is_file():
        raise UsageError(
            f"unknown suite {ref!r}: choose from {', '.join(suite_names())} or give a path "
            "to a YAML file"
        )
    return path


def _read_yaml(path: Path) -> Any:
    from commbench.textfile import read_text

    text = read_text(path, "suite", comment="#")
    if path.parent != SUITES_DIR:  # the cache keeps the built-in suites only (suitecache)
        return _parse_yaml(text, path)
    return suitecache.load(path, text, lambda t: _parse_yaml(t, path))


def _parse_yaml(text: str, path: Path) -> Any:
    from commbench.textfile import loads_yaml

    return loads_yaml(text, display(path))


def _mapping(value: Any, where: str, keys: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise UsageError(f"{where}: expected a mapping, got {type(value).__name__}")
    for k in value:
        if k not in keys:
            raise UsageError(
                f"{field_path(where, k)}: unknown key; expected one of {', '.join(keys)}"
            )
    return value


def _timing(value: Any, where: str) -> dict[str, Any]:
    value = _mapping(value, where, tuple(TIMING_KEYS))
    out = {}
    for k, v in value.items():
        want = TIMING_KEYS[k]
        ok = isinstance(v, int | float) if want is float else isinstance(v, int)
        if not ok or isinstance(v, bool) or v < (0 if k == "warmup" else 1e-9):
            raise UsageError(
                f"{field_path(where, k)}: expected a positive {want.__name__}, got {v!r}"
            )
        out[k] = want(v)
    return out


def _model(value: Any, where: str) -> ModelShape:
    if isinstance(value, str):
        return get_model(value, where)
    return ModelShape.from_dict(value, where)


def _run(raw: Any, where: str, quick: bool, timing: dict, max_bytes: int | None) -> RunSpec:
    raw = dict(_mapping(raw, where, RUN_KEYS))
    if quick and "quick" in raw:
        q = _mapping(raw["quick"], f"{where}.quick", RUN_KEYS[1:-1])
        for k, v in q.items():
            if k in ("options", "sweep", "degrees") and isinstance(raw.get(k), dict):
                if not isinstance(v or {}, dict):
                    raise UsageError(f"{where}.quick.{k}: expected a mapping")
                raw[k] = {**raw[k], **(v or {})}
            else:
                raw[k] = v
    raw.pop("quick", None)
    if "pattern" not in raw:
        raise UsageError(f"{where}: missing pattern ({', '.join(patterns.PATTERNS)})")
    spec = patterns.get(raw["pattern"], f"{where}.pattern")
    models: tuple[ModelShape, ...] = ()
    if spec.needs_model:
        value = raw.get("models")
        if value is None:
            raise UsageError(f"{where}.models: pattern {spec.name} needs a list of models")
        if not isinstance(value, list) or not value:
            raise UsageError(f"{where}.models: expected a non-empty list of models")
        models = tuple(_model(m, f"{where}.models[{j}]") for j, m in enumerate(value))
        if spec.needs_moe:
            for j, m in enumerate(models):
                if not m.is_moe:
                    raise UsageError(
                        f"{where}.models[{j}]: pattern {spec.name} needs an MoE model; "
                        f"{m.name} has no experts"
                    )
    elif raw.get("models") is not None:
        raise UsageError(f"{where}.models: pattern {spec.name} takes no models")
    degrees = {}
    for axis, value in _mapping(
        raw.get("degrees") or {}, f"{where}.degrees", DEGREE_AXES + (Axis.DP,)
    ).items():
        if axis == Axis.DP:
            raise UsageError(f"{where}.degrees.dp: dp is derived as world / (tp*cp*pp)")
        if spec.axis is None:
            raise UsageError(f"{where}.degrees: pattern {spec.name} takes no degrees")
        degrees[axis] = parse_degree(value, f"{where}.degrees.{axis}")
    options = raw.get("options") or {}
    opts = patterns.make_options(spec.name, options, f"{where}.options")
    bounds.check_options(opts, f"{where}.options")
    sweep = {}
    for key, values in _mapping(
        raw.get("sweep") or {}, f"{where}.sweep", option_names(spec)
    ).items():
        if not isinstance(values, list) or not values:
            raise UsageError(f"{where}.sweep.{key}: expected a non-empty list of values")
        for v in values:
            swept = patterns.make_options(spec.name, {**options, key: v}, f"{where}.sweep")
            bounds.check_options(swept, f"{where}.sweep")
        sweep[key] = tuple(values)
    bounds.check_sweep(sweep, where)
    order = parse_order(raw.get("order", DEFAULT_ORDER), f"{where}.order:")
    name = raw.get("name", spec.name)
    if not isinstance(name, str):
        raise UsageError(f"{where}.name: expected a string")
    return RunSpec(
        where=where,
        pattern=spec.name,
        name=name,
        models=models,
        degrees=degrees,
        options=dict(options),
        sweep=sweep,
        order=order,
        timing=timing,
        max_bytes=max_bytes,
    )


def option_names(spec: patterns.PatternSpec) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(spec.Options))


def load_suite(ref: str | Path, quick: bool = False, _seen: tuple = (), _base=None) -> Suite:
    """Load and validate a suite by name or path (`quick` applies its quick sections)."""
    path = find_suite(str(ref), _base).resolve()
    if path in _seen:
        raise UsageError(f"{display(path)}: includes itself (via {display(_seen[-1])})")
    bounds.check_suite_file(path, display(path), len(_seen), display(_seen[0]) if _seen else None)
    raw = _read_yaml(path)
    where = display(path)
    raw = dict(_mapping(raw if raw is not None else {}, where, SUITE_KEYS))
    if quick and "quick" in raw:
        q = _mapping(raw["quick"], f"{where}.quick", ("timing", "max_bytes", "description"))
        for k, v in q.items():
            if k == "timing":  # both must be timing mappings before they merge
                v = {
                    **_timing(raw.get(k) or {}, f"{where}.timing"),
                    **_timing(v or {}, f"{where}.quick.timing"),
                }
            raw[k] = v
    timing = _timing(raw.get("timing") or {}, f"{where}.timing")
    max_bytes = None
    if raw.get("max_bytes") is not None:
        max_bytes = bounds.parse_max_bytes(raw["max_bytes"], f"{where}.max_bytes")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise UsageError(f"{where}.description: expected a string")
    runs: list[RunSpec] = []
    include = raw.get("include") or []
    if not isinstance(include, list) or not all(isinstance(i, str) for i in include):
        raise UsageError(f"{where}.include: expected a list of suite names or paths")
    for ref_i in include:
        sub = load_suite(ref_i, quick, _seen + (path,), path.parent)
        runs += list(sub.runs)
    raw_runs = raw.get("runs") or []
    if not isinstance(raw_runs, list):
        raise UsageError(f"{where}.runs: expected a list of runs")
    for i, r in enumerate(raw_runs):
        runs.append(_run(r, f"{where}: runs[{i}]", quick, timing, max_bytes))
    if not runs:
        raise UsageError(f"{where}: no runs (give runs: or include:)")
    return Suite(path.stem, path, description, tuple(runs), timing, max_bytes)
