"""The records of records.jsonl, typed: one dataclass per kind the project writes and reads.

Writers build a record and write `to_json()`; readers take `from_json(d)`, which checks every
field's type and raises a UsageError naming the field. A dataclass's fields are the record's
keys in the order they are written, so the JSON stays what it has always been; the writer
adds `schema_version` and `run_id` (they belong to the run). The JSON Schema of these records
is commbench/schemas/record.schema.json; results/README.md documents every field.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Self

from commbench.errors import UsageError

# Fields every record carries, whatever made it (the writer adds the first two).
REQUIRED_FIELDS = (
    "schema_version",
    "run_id",
    "kind",
    "op",
    "backend",
    "dtype",
    "bytes",
    "group_size",
    "time_us",
)
# Fields of a measured op (a sweep, a suite step or an imported row).
MEASURED_FIELDS = REQUIRED_FIELDS + (
    "count",
    "world_size",
    "link_class",
    "iters",
    "warmup",
    "time_mean_us",
    "time_min_us",
    "time_p95_us",
    "algbw_GBps",
    "busbw_GBps",
    "wrong",
    "timing",
)


class JsonRecord:
    """to_json/from_json for a dataclass whose fields are JSON keys (nested records too)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    # optional fields left out of the JSON when None (older writers never wrote them)
    OMIT_NONE: ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in self.OMIT_NONE:
                continue
            out[f.name] = _dump(value)
        return out

    @classmethod
    def from_json(cls, d: Any, where: str = "record") -> Self:
        """The record of a JSON object; keys it does not know (schema_version, run_id) are
        skipped; a missing or mistyped field is a UsageError naming it."""
        if not isinstance(d, dict):
            raise UsageError(f"{where} must be a JSON object, not {d!r}")
        hints = _hints(cls)
        values = {}
        for f in dataclasses.fields(cls):
            if f.name in d:
                values[f.name] = _load(hints[f.name], d[f.name], where, f.name)
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise UsageError(f"{where} lacks field {f.name}")
        return cls(**values)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved field annotations of a record class (resolved once)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _dump(value: Any) -> Any:
    if isinstance(value, JsonRecord):
        return value.to_json()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    return value


_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def _load(tp: Any, value: Any, where: str, name: str) -> Any:
    """`value` checked against the annotation `tp` (nested records become dataclasses)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        (inner,) = (a for a in args if a is not type(None))
        return _load(inner, value, where, name)
    if origin is Literal:
        if value not in args:
            raise UsageError(
                f"{where}: {name} must be {' or '.join(map(repr, args))}, not {value!r}"
            )
        return value
    if origin is list or tp is list:
        if not isinstance(value, list):
            raise UsageError(f"{where}: {name} must be a list, not {value!r}")
        item = args[0] if args else Any
        return [_load(item, v, where, f"{name}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise UsageError(f"{where}: {name} must be an object, not {value!r}")
        item = args[1] if args else Any
        return {k: _load(item, v, where, f"{name}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if isinstance(tp, type) and issubclass(tp, JsonRecord):
        return tp.from_json(value, f"{where}: {name}")
    ok = {
        bool: lambda v: type(v) is bool,
        int: lambda v: type(v) is int,
        float: lambda v: type(v) in (int, float),
        str: lambda v: isinstance(v, str),  # an Axis (StrEnum) is a string
    }[tp]
    if not ok(value):
        raise UsageError(f"{where}: {name} must be {_NAMES[tp]}, not {value!r}")
    return value


def fields_of(record: Any) -> dict[str, Any]:
    """A dataclass's fields by name, unconverted (to build a larger record from a smaller one)."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


# ---- measured ops ---------------------------------------------------------------------------
@dataclass(kw_only=True)
class Measurement(JsonRecord):
    """One op timed on every group of one axis, as the runner reduces it: the fields every
    measured record (sweep or suite step) starts with."""

    # fields runs written before them lack: read back as None, and not written when None
    OMIT_NONE: ClassVar[tuple[str, ...]] = (
        "buffers",
        "time_max_us",
        "slowest_rank",
        "rank_min_us",
        "rank_avg_us",
        "rank_max_us",
        "overall_us",
        "compute_us",
        "overlap_pct",
        "ack",
        "algorithm",
        "protocol",
        "forced",
    )

    op: str
    dtype: str
    bytes: int  # S, nccl-tests convention
    count: int  # elements of dtype in S
    axis: str
    group_size: int
    groups: int
    stride: int  # rank distance between neighbours, -1 when not uniform
    hosts_spanned: int
    link_class: str  # intra | inter
    world_size: int
    iters: int
    warmup: int
    time_us: float  # median over iterations of the max over ranks (and groups)
    time_mean_us: float
    time_min_us: float
    time_p95_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: int  # elements the check found wrong
    checked: bool
    timing: str  # per-iteration | pipelined
    loop: str  # which loop timed it (or "mixed")
    isolated: bool  # one group at a time instead of all at once
    # host pages (hugepage | plain | torch), "+off-cache" when caches were flushed; None in runs
    # written before it was recorded (the fitter reads those as hugepage, the old default)
    buffers: str | None = None
    per_group_us: list[float]  # median time of each group
    time_max_us: float | None = None  # slowest iteration (absent in runs before it was kept)
    slowest_rank: int | None = None  # world rank whose own longest iteration was the longest
    # each rank's mean over iterations, then the min, mean and max over ranks (OSU -f's
    # Min/Avg/Max Latency, IMB's t_min/t_avg/t_max)
    rank_min_us: float | None = None
    rank_avg_us: float | None = None
    rank_max_us: float | None = None
    # non-blocking ops (iallreduce): with a compute stand-in as long as the op (osu_iallreduce)
    overall_us: float | None = None  # median time of start + compute + wait
    compute_us: float | None = None  # the compute stand-in's length
    overlap_pct: float | None = None  # share of the op's time hidden behind the compute
    # rooted ops: the zero-byte acknowledgement the timed call ended with (`to-root`: the
    # broadcast root waits for every receiver; `from-root`: reduce's senders wait for the root),
    # so the time is the op's completion at its last rank; None where none (runs before it)
    ack: str | None = None
    # the NCCL algorithm / protocol the run's NCCL_ALGO / NCCL_PROTO pinned for the op, and
    # which of them (`forced`, as imported records say it): the fitter's series key
    algorithm: str | None = None
    protocol: str | None = None
    forced: list[str] | None = None


@dataclass(kw_only=True)
class SweepRecord(Measurement):
    """A point of `commbench run`: one size of one op."""

    OMIT_NONE = (*Measurement.OMIT_NONE, "requested_bytes")

    kind: Literal["collective"] = "collective"
    backend: str
    label: str
    # the sizes asked for that this S stands for, when any differs from it (rounded to whole
    # elements or p chunks, merged, or scaled by --per-rank-size); absent when S is as asked
    requested_bytes: list[int] | None = None


@dataclass(kw_only=True)
class LayoutConfig(JsonRecord):
    """A suite point's parallel layout (the `config` of step and point records)."""

    world: int
    tp: int
    cp: int
    ep: int
    dp: int
    pp: int
    edp: int
    order: str  # e.g. tp-cp-ep-dp-pp
    label: str


@dataclass(kw_only=True)
class StepRecord(Measurement):
    """A measured step of a suite point: the runner's fields, plus which Program steps it
    stands for and how the measured op relates to them (chunks, scale)."""

    kind: Literal["step"] = "step"
    backend: str
    suite: str
    run: str
    point: int
    pattern: str
    model: str | None
    config: LayoutConfig
    label: str
    phases: list[str]
    program_steps: list[int]  # indices of the Program steps it stands for
    program_bytes: int
    program_dtype: str
    repeat: float
    chunks: int
    scale: float  # program bytes / measured bytes
    extrapolated: bool
    note: str
    time_total_us: float  # time_us x scale x repeat: the steps' share of the point


# ---- suite points ---------------------------------------------------------------------------
@dataclass(kw_only=True)
class OpShare(JsonRecord):
    """One op@axis of a point's breakdown (summed over its Program steps)."""

    time_us: float = 0.0
    bytes: float = 0
    ops: float = 0


@dataclass(kw_only=True)
class PointStep(JsonRecord):
    """One Program step of a point: what it is and what it cost as measured."""

    index: int
    op: str
    axis: str
    phase: str
    label: str
    dtype: str
    bytes: int
    repeat: float
    group_size: int
    link_class: str
    time_us: float  # per op (measured time x scale)
    total_us: float  # time_us x repeat
    measured_bytes: int
    measured_dtype: str
    chunks: int
    scale: float
    extrapolated: bool


@dataclass(kw_only=True)
class PointTotals:
    """A point's totals over its measured steps."""

    time_us: float  # sum over steps of time per op x repeat
    bytes: int  # sum of S x repeat per rank
    algbw_GBps: float
    busbw_GBps: float
    wrong: int
    extrapolated: bool
    breakdown: dict[str, OpShare]  # op@axis -> share
    steps: list[PointStep]


@dataclass(kw_only=True)
class PointRecord(JsonRecord):
    """A suite point: enough to rebuild its Program (patterns.rebuild) and its totals."""

    # pattern facts (PatternSpec.point_facts) the record keeps as fields, absent when the
    # pattern has no such fact
    FACT_FIELDS: ClassVar[tuple[str, ...]] = ("bubble_measured",)
    OMIT_NONE = FACT_FIELDS

    kind: Literal["point"] = "point"
    op: Literal["program"] = "program"
    backend: str
    dtype: str  # the Program's most common dtype
    group_size: int  # the world
    world_size: int
    suite: str
    run: str
    point: int
    pattern: str
    model: str | None
    model_shape: dict[str, Any] | None
    config: LayoutConfig
    options: dict[str, Any]
    swept: dict[str, Any]
    link_classes: dict[str, str]  # axis -> link class
    meta: dict[str, Any]  # the Program's facts (bubble, expert load, ...)
    time_us: float
    bytes: int
    algbw_GBps: float
    busbw_GBps: float
    wrong: int
    extrapolated: bool
    breakdown: dict[str, OpShare]
    steps: list[PointStep]
    bubble_measured: float | None = None  # pp points: measured bubble fraction
    steps_total: int
    measured_steps: int
