"""What every pattern shares: the workload options, degree checks, byte helpers, axis lookup.

A pattern is pure: (ParallelLayout, ModelShape, Options) -> Program. One training step is
`micro_batches` micro-batches of `micro_batch` sequences of `seq_len` tokens per data-parallel
replica, so the patterns' Programs add up to one step's traffic and a planner can sum them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import sys
import types
import typing
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from commbench.dtypes import canonical_dtype, dtype_size
from commbench.errors import UsageError
from commbench.sizes import parse_size
from commbench.traffic.layout import Axis, GroupInfo, ParallelLayout, sweep_mesh
from commbench.traffic.model import ModelShape
from commbench.traffic.pipeline_split import split_error


class Role(StrEnum):
    """Where a pattern's time goes in a training step; the planner's step time combines the
    patterns by role (Megatron-LM's schedule: in-layer traffic inside every micro-batch, the
    pipeline around it, gradient reduction after the backward pass). The inference roles are
    whole passes: `plan --mode infer` prices prefill latency and time per output token from
    them."""

    IN_LAYER = "in-layer"  # inside each micro-batch's forward/backward (tp, cp, ep)
    PIPELINE = "pipeline"  # the 1F1B schedule, its compute and bubble included (pp)
    GRADIENT = "gradient"  # after, or overlapped with, the backward pass (dp, zero)
    SWEEP = "sweep"  # a primitive sweep, no part of a training step (collectives)
    PREFILL = "prefill"  # inference: one forward pass over the prompts, every axis at once
    DECODE = "decode"  # inference: one output token per sequence, every axis at once
    STEP = "step"  # a whole training step, every axis at once, in the framework's order


@dataclass(frozen=True)
class Fact:
    """A pattern-specific number about one measured point (the pipeline bubble, the MoE
    imbalance): `key` names it in the point record, `label` and `fmt` print it."""

    key: str
    label: str
    value: float
    fmt: str = ".4g"

    def text(self) -> str:
        return f"{self.label} {self.value:{self.fmt}}"


@dataclass(frozen=True)
class TrafficOptions:
    """The workload every pattern sees: sequence length (None: the model's), micro-batch size,
    micro-batches per step (gradient accumulation / pipeline) and the activation dtype."""

    seq_len: int | None = None
    micro_batch: int = 1
    micro_batches: int = 1
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        for name in ("micro_batch", "micro_batches"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.seq_len is not None and self.seq_len < 1:
            raise UsageError(f"seq_len must be at least 1, got {self.seq_len}")
        for f in dataclasses.fields(self):
            if f.name == "dtype" or f.name.endswith("_dtype"):
                object.__setattr__(self, f.name, canonical_dtype(getattr(self, f.name)))

    def seq(self, model: ModelShape) -> int:
        """The sequence length in effect."""
        return self.seq_len or model.seq_len

    @property
    def elem(self) -> int:
        """Bytes per activation element."""
        return dtype_size(self.dtype)

    def to_dict(self) -> dict[str, Any]:
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()
        }


FRAMEWORKS = ("megatron", "torchtitan")


@dataclass(frozen=True)
class FrameworkOptions(TrafficOptions):
    """The workload and the framework whose traffic is modelled: Megatron-Core's (the
    default) or PyTorch's own parallelism as torchtitan applies it (docs/frameworks.md)."""

    framework: str = "megatron"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("framework", self.framework, FRAMEWORKS)


def check_choice(name: str, value: Any, choices: tuple) -> None:
    """UsageError naming the option when `value` is not one of `choices`."""
    if value not in choices:
        raise UsageError(f"{name} {value!r}: choose from {', '.join(map(str, choices))}")


# ---- degrees vs the model ----
def violations(
    layout: ParallelLayout,
    model: ModelShape,
    seq: int,
    sequence_parallel: bool = False,
) -> list[tuple[Axis, str]]:
    """(degree, reason) for every degree that does not divide the dimension it splits, as
    Megatron-LM requires: heads, K/V groups and MLP width by tp; layers by pp; experts by ep;
    the sequence by cp (and by tp*cp with sequence parallel)."""
    out: list[tuple[Axis, str]] = []
    t, c, p, e = layout.tp, layout.cp, layout.pp, layout.ep
    if model.heads % t:
        out.append((Axis.TP, f"tp={t} does not divide the {model.heads} heads of {model.name}"))
    elif model.kv_heads % t:
        out.append(
            (Axis.TP, f"tp={t} does not divide the {model.kv_heads} KV heads of {model.name}")
        )
    elif model.ffn_hidden % t or model.moe_ffn_hidden % t:
        out.append((Axis.TP, f"tp={t} does not divide the MLP width of {model.name}"))
    if p > 1 and (bad := split_error(model.layers, p, model.split)):
        why = f"{bad} of {model.name}" if bad.endswith("layers") else f"{model.name}: {bad}"
        out.append((Axis.PP, why))
    if e > 1 and not model.is_moe:
        out.append((Axis.EP, f"ep={e} needs an MoE model; {model.name} is dense"))
    elif e > 1 and model.experts % e:
        out.append((Axis.EP, f"ep={e} does not divide the {model.experts} experts of {model.name}"))
    if seq % c:
        out.append((Axis.CP, f"cp={c} does not divide the sequence length {seq}"))
    elif sequence_parallel and (seq // c) % t:
        out.append((Axis.TP, f"tp={t} does not divide the {seq // c} tokens per cp rank (SP)"))
    return out


def check(layout: ParallelLayout, model: ModelShape, seq: int, sp: bool = False) -> None:
    """Raise the first violation as a UsageError naming the degree."""
    bad = violations(layout, model, seq, sp)
    if bad:
        raise UsageError(f"{bad[0][0]}: {bad[0][1]}")


# ---- sizes ----
def pad_bytes(nbytes: float, p: int, dtype: str) -> int:
    """Round up to whole elements split evenly over p ranks (FSDP / ZeRO pad flat params so
    every rank holds an equal shard)."""
    unit = dtype_size(dtype) * p
    return max(unit, math.ceil(nbytes / unit) * unit)


def buckets(total: int, cap: int) -> list[tuple[int, int, str]]:
    """`total` bytes in buckets of `cap`, the remainder last (zero's stage 1-2 `bucket_mb`):
    (bytes, count, "full" | "last"), equal sizes merged. DDP's smaller first bucket is
    bucketed over whole tensors instead: patterns/tensors.ddp_buckets."""
    if total <= 0:
        return []
    out = []
    if total >= cap:
        out.append((cap, total // cap, "full"))
    if total % cap:
        out.append((total % cap, 1, "last"))
    return out


def dp_axis(layout: ParallelLayout) -> str:
    """The gradient-reduction axis of dense parameters: dp, or dp-cp when cp > 1 (Megatron
    reduces gradients over the data-parallel x context-parallel ranks)."""
    return f"{Axis.DP}-{Axis.CP}" if layout.cp > 1 else Axis.DP


def dp_size(layout: ParallelLayout) -> int:
    return layout.dp * layout.cp


# ---- axes ----
_SWEEP_AXIS = re.compile(r"^(contig|strided)(\d+)$")


def sweep_axis(placement: str, size: int) -> str:
    """Axis name of a primitive-sweep group: `contig4` (consecutive ranks), `strided4`."""
    return f"{'contig' if placement == 'contiguous' else 'strided'}{size}"


def resolve_axis(layout: ParallelLayout, axis: str) -> GroupInfo:
    """Groups of a Step's axis: a layout axis (tp, dp-cp, ep, ...) or a sweep group."""
    m = _SWEEP_AXIS.match(axis)
    if m:
        return _sweep_info(layout.world, axis, layout.nodes)
    return layout.info(axis)


@functools.lru_cache(maxsize=256)
def _sweep_info(world: int, axis: str, nodes: tuple[int, ...]) -> GroupInfo:
    """A sweep axis's groups, once per world and axis (every step of a sweep asks)."""
    m = _SWEEP_AXIS.match(axis)
    assert m, axis
    placement = "contiguous" if m.group(1) == "contig" else "strided"
    info = sweep_mesh(world, int(m.group(2)), placement, nodes).info(Axis.GROUP)
    return dataclasses.replace(info, axis=axis)


# ---- options from suite files and flags ----
def _accepts(tp: Any, value: Any, name: str) -> tuple[bool, Any]:
    """(ok, converted) for a value against a dataclass field type."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arm in typing.get_args(tp):
            ok, conv = _accepts(arm, value, name)
            if ok:
                return True, conv
        return False, value
    if tp is type(None):
        return value is None, value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            return False, value
        (item, _) = typing.get_args(tp)
        conv = []
        for v in value:
            ok, c = _accepts(item, v, name)
            if not ok:
                return False, value
            conv.append(c)
        return True, tuple(conv)
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        if name.endswith("_bytes") and isinstance(value, str):
            return True, parse_size(value, name)
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e9 (no dot, no sign) as a string
            try:
                parsed = float(value)
            except ValueError:
                parsed = math.nan
            if math.isfinite(parsed):
                value = parsed
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if tp is str:
        return isinstance(value, str), value
    raise AssertionError(tp)


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    return "null" if tp is type(None) else tp.__name__


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """An Options class's resolved annotations, once per class (a suite builds one per run),
    as typing.get_type_hints gives them, base classes first; but each distinct annotation
    text is evaluated once per module: get_type_hints compiled all 126 of the patterns'
    option annotations, 8 distinct texts, ~4 ms a rank before the first collective."""
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for name, text in vars(klass).get("__annotations__", {}).items():
            hints[name] = _annotation(text, klass.__module__) if isinstance(text, str) else text
    return hints


@functools.cache
def _annotation(text: str, module: str) -> Any:
    """A string annotation evaluated in its module's namespace, as get_type_hints does."""
    return eval(text, vars(sys.modules[module]))


def options_from_dict(cls: type, data: dict | None, where: str) -> Any:
    """Build a pattern's Options from a mapping, naming the field of any unknown key, wrong
    type or invalid value (`runs[0].options.router: ...`)."""
    data = data or {}
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping of option: value")
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    values = {}
    for key, value in data.items():
        if key not in names:
            raise UsageError(
                f"{field_path(where, key)}: unknown option; choose from {', '.join(names)}"
            )
        ok, conv = _accepts(hints[key], value, key)
        if not ok:
            raise UsageError(
                f"{field_path(where, key)}: expected {_type_name(hints[key])}, got {value!r}"
            )
        values[key] = conv
    try:
        return cls(**values)
    except UsageError as e:
        raise UsageError(f"{where}: {e}") from None


def option_fields(cls: type) -> list[tuple[str, str, Any]]:
    """(name, type, default) of each option, for `commbench list patterns`."""
    hints = typing.get_type_hints(cls)
    return [(f.name, _type_name(hints[f.name]), f.default) for f in dataclasses.fields(cls)]


SHORT_OPTIONS = {
    "sequence_parallel": "sp",
    "micro_batches": "m",
    "seq_len": "seq",
    "capacity_factor": "cf",
}


def field_path(where: str, key: Any) -> str:
    """`where.key` for error messages; a key that is not a plain name (a YAML key can be any
    text, newlines included) is quoted so the message stays one line."""
    plain = isinstance(key, str) and re.fullmatch(r"[\w.+-]+", key) is not None
    return f"{where}.{key if plain else repr(key)}"


def options_label(swept: dict | None) -> str:
    """The swept options of a suite point, short (`sp=True m=8`), as tables and plots show it."""
    parts = [
        f"{SHORT_OPTIONS.get(k, k)}={'-' if v is None else v}" for k, v in (swept or {}).items()
    ]
    return " ".join(parts) or "-"
