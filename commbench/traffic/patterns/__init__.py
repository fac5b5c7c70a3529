"""Strategy traffic as data: one module per parallel strategy, each `build(layout, model,
options) -> Program`, pure (no transport), plus the registry the suite command, `commbench
list`, validation and the planner use.

    from commbench.traffic import patterns
    prog = patterns.build("tp", ParallelLayout(16, tp=4), get_model("llama-7b"),
                          {"sequence_parallel": True})
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from commbench.errors import UsageError
from commbench.traffic.layout import Axis, ParallelLayout, parse_order
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import (
    collectives,
    cp,
    decode,
    dp,
    ep,
    framework,
    pp,
    prefill,
    step,
    tp,
    zero,
)
from commbench.traffic.patterns.base import (
    Fact,
    Role,
    TrafficOptions,
    option_fields,
    options_from_dict,
    resolve_axis,
    violations,
)
from commbench.traffic.program import Program

__all__ = [
    "PATTERNS",
    "Fact",
    "Role",
    "PatternSpec",
    "TrafficOptions",
    "build",
    "get",
    "make_options",
    "rebuild",
    "resolve_axis",
    "training_step",
    "violations",
]


@dataclass(frozen=True, kw_only=True)
class PatternSpec:
    """A registered pattern: its Options class, build function, the degree it exercises
    (None: the collectives sweep), its role in a training step and whether it needs a model /
    an MoE model. Everything outside traffic/patterns asks these, never a pattern's name."""

    name: str
    module: ModuleType
    axis: Axis | None
    role: Role
    needs_model: bool = True
    needs_moe: bool = False
    sequence_parallel_option: bool = False
    # tokens are always split over tp (Megatron-Core MoE runs with sequence parallelism)
    always_sequence_parallel: bool = False

    @property
    def Options(self) -> type:  # noqa: N802 - the class
        return self.module.Options

    @property
    def build(self) -> Callable[[ParallelLayout, ModelShape | None, Any], Program]:
        """The module's build; the model is None only for a pattern that needs none."""
        return self.module.build

    @property
    def doc(self) -> str:
        para = " ".join((self.module.__doc__ or "").strip().split("\n\n")[0].split())
        return para.split(": ")[0]

    def options(self) -> list[tuple[str, str, Any]]:
        """(name, type, default) of each option."""
        return option_fields(self.Options)

    def point_facts(self, meta: dict, time_s: float) -> list[Fact]:
        """What this pattern says about a measured point beyond time and bytes (the module's
        `point_facts(meta, time_s)`, if it has one), from its Program's meta."""
        facts = getattr(self.module, "point_facts", None)
        return facts(meta, time_s) if facts is not None else []


PATTERNS: dict[str, PatternSpec] = {
    s.name: s
    for s in (
        PatternSpec(name="dp", module=dp, axis=Axis.DP, role=Role.GRADIENT),
        PatternSpec(name="zero", module=zero, axis=Axis.DP, role=Role.GRADIENT),
        PatternSpec(
            name="tp", module=tp, axis=Axis.TP, role=Role.IN_LAYER, sequence_parallel_option=True
        ),
        PatternSpec(
            name="pp", module=pp, axis=Axis.PP, role=Role.PIPELINE, sequence_parallel_option=True
        ),
        PatternSpec(name="cp", module=cp, axis=Axis.CP, role=Role.IN_LAYER),
        PatternSpec(
            name="ep",
            module=ep,
            axis=Axis.EP,
            role=Role.IN_LAYER,
            needs_moe=True,
            always_sequence_parallel=True,
        ),
        # the step's ops outside the per-layer strategies (embedding, LM head, loss, ...)
        PatternSpec(
            name="framework",
            module=framework,
            axis=Axis.TP,
            role=Role.IN_LAYER,
            sequence_parallel_option=True,
        ),
        PatternSpec(
            name="collectives", module=collectives, axis=None, role=Role.SWEEP, needs_model=False
        ),
        # every axis at once; tp is the degree their points are swept by first
        PatternSpec(name="prefill", module=prefill, axis=Axis.TP, role=Role.PREFILL),
        PatternSpec(name="decode", module=decode, axis=Axis.TP, role=Role.DECODE),
        PatternSpec(
            name="step", module=step, axis=Axis.TP, role=Role.STEP, sequence_parallel_option=True
        ),
    )
}


def get(name: str, where: str = "pattern") -> PatternSpec:
    """The registered pattern; unknown names are a UsageError listing the patterns."""
    if not isinstance(name, str) or name not in PATTERNS:
        raise UsageError(f"{where}: unknown pattern {name!r}; choose from {', '.join(PATTERNS)}")
    return PATTERNS[name]


def make_options(name: str, data: dict | Any | None = None, where: str = "options") -> Any:
    """The pattern's Options from a mapping (validated, naming the field) or as given."""
    spec = get(name)
    if isinstance(data, spec.Options):
        return data
    return options_from_dict(spec.Options, data, where)


def build(
    name: str, layout: ParallelLayout, model: ModelShape | None, options: dict | Any = None
) -> Program:
    """Build pattern `name`'s Program of one training step."""
    spec = get(name)
    if spec.needs_model and model is None:
        raise UsageError(f"pattern {name} needs a model")
    return spec.build(layout, model, make_options(name, options))


def rebuild(point: dict) -> tuple[ParallelLayout, ModelShape | None, Any, Program]:
    """Rebuild the exact Program of a suite `point` record (for validate / predict)."""
    cfg = point["config"]
    layout = ParallelLayout(
        cfg["world"],
        tp=cfg["tp"],
        cp=cfg["cp"],
        ep=cfg["ep"],
        dp=cfg["dp"],
        pp=cfg["pp"],
        order=parse_order(cfg["order"], "config.order"),
    )
    shape = point.get("model_shape")
    model = ModelShape.from_dict(shape, "model_shape") if shape else None
    options = make_options(point["pattern"], point["options"], "options")
    return layout, model, options, build(point["pattern"], layout, model, options)


def training_step(
    layout: ParallelLayout,
    model: ModelShape,
    workload: dict | None = None,
    zero_stage: int = 0,
    options: dict[str, dict] | None = None,
) -> dict[str, Program]:
    """Every strategy's Program for one training step of `layout`: tp (tp > 1), cp (cp > 1),
    pp (pp > 1), ep (ep > 1), the gradient traffic, dp (zero_stage 0) or zero (1-3),
    when dp x cp > 1 (pattern step adds framework's embedding / LM head / loss ops and runs
    them all in order); under framework megatron (the default) dp is Megatron-Core's DDP.
    `workload` keys (seq_len, micro_batch, micro_batches, dtype, sequence_parallel, ...) go to
    every pattern that has them; `options[name]` to one."""
    import dataclasses

    workload, options = workload or {}, options or {}
    used = {
        "tp": layout.tp > 1,
        "cp": layout.cp > 1,
        "pp": layout.pp > 1,
        "ep": layout.ep > 1 and model.is_moe,
        "dp": zero_stage == 0 and layout.dp * layout.cp > 1,
        "zero": zero_stage > 0 and layout.dp * layout.cp > 1,
    }
    out = {}
    for name, on in used.items():
        if not on:
            continue
        fields = {f.name for f in dataclasses.fields(get(name).Options)}
        opts = {k: v for k, v in workload.items() if k in fields}
        if name == "zero":
            opts["stage"] = zero_stage
        if name == "dp" and opts.get("framework", "megatron") == "megatron":
            opts["ddp"] = "megatron"  # Megatron-Core's step reduces with its own DDP
        opts.update(options.get(name, {}))
        out[name] = build(name, layout, model, make_options(name, opts, f"options.{name}"))
    return out
