"""Data parallelism as PyTorch DDP does it (Li et al. 2020, "PyTorch Distributed"): the local
gradients, P / (tp x pp) parameters in the grad dtype, all-reduced in buckets of 25 MiB with
a small first bucket of 1 MiB (torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES). With cp > 1
the dense gradients reduce over the dp x cp ranks (Megatron-LM); MoE expert gradients reduce
over the expert-data-parallel ranks (edp = dp x cp / ep). Once per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.dtypes import dtype_size
from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import TrafficOptions, buckets, check, dp_axis, dp_size
from commbench.traffic.program import Program, Step

NAME = "dp"
MiB = 1 << 20


@dataclass(frozen=True)
class Options(TrafficOptions):
    """Gradient all-reduce of one step: grad dtype and DDP bucket sizes (MiB)."""

    grad_dtype: str = "float32"
    bucket_mb: float = 25.0
    first_bucket_mb: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        from commbench.errors import UsageError

        if not self.bucket_mb > 0 or not self.first_bucket_mb > 0:
            raise UsageError("bucket_mb and first_bucket_mb must be positive")


def grad_bytes(layout: ParallelLayout, model: ModelShape, grad_dtype: str) -> tuple[int, int]:
    """(dense, expert) gradient bytes on one rank of the busiest pipeline stage."""
    stage = model.stage_params(layout.pp, model.busiest_stage(layout.pp, layout.tp, layout.ep))
    el = dtype_size(grad_dtype)
    dense = round(stage.dense_per_rank(layout.tp)) * el
    expert = round(stage.expert_per_rank(layout.tp, layout.ep)) * el
    return dense, expert


def bucket_steps(
    total: int, axis: str, options: Options, what: str, phase: str = "backward"
) -> list[Step]:
    """All-reduce Steps of `total` gradient bytes in DDP buckets (equal buckets merged)."""
    el = dtype_size(options.grad_dtype)
    cap = max(el, int(options.bucket_mb * MiB) // el * el)
    first = max(el, int(options.first_bucket_mb * MiB) // el * el)
    return [
        Step(
            op="allreduce",
            nbytes=size,
            axis=axis,
            repeat=count,
            phase=phase,
            dtype=options.grad_dtype,
            label=f"{what} ({which})",
        )
        for size, count, which in buckets(total, first, cap)
    ]


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """DDP gradient buckets of the busiest rank; expert gradients on edp for MoE models."""
    check(layout, model, options.seq(model))
    dense, expert = grad_bytes(layout, model, options.grad_dtype)
    steps: list[Step] = []
    if dp_size(layout) > 1:
        steps += bucket_steps(dense, dp_axis(layout), options, "grad bucket")
    if expert and layout.edp > 1:
        steps += bucket_steps(expert, Axis.EDP, options, "expert grad bucket")
    meta = {"grad_bytes": dense, "expert_grad_bytes": expert, "params": model.params}
    return Program(NAME, tuple(steps), meta)
