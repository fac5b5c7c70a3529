"""Data parallelism as PyTorch DDP does it (Li et al. 2020, "PyTorch Distributed"): the local
gradients, P / (tp x pp) parameters in the grad dtype, all-reduced in buckets of whole
tensors in gradient-ready order, 25 MiB each after a first bucket of 1 MiB (torch's
_DEFAULT_FIRST_BUCKET_BYTES, used only at the default cap; patterns/tensors.py has the rule);
under framework torchtitan 100 MiB (torchtitan's apply_ddp, bucket_cap_mb=100). With
`ddp: megatron`, Megatron-Core's DDP instead (the step's under framework megatron): one
bucket per grad buffer, or with overlap_grad_reduce buckets of max(4e7, 1e6 x dp x cp)
elements, whole tensors in reverse registration order (patterns/tensors.py). With cp > 1
the dense gradients reduce over the dp x cp ranks (Megatron-LM); MoE expert gradients reduce
over the expert-data-parallel ranks (edp = dp x cp / ep). Once per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.dtypes import dtype_size
from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import tensors
from commbench.traffic.patterns.base import (
    FrameworkOptions,
    check,
    check_choice,
    dp_axis,
    dp_size,
)
from commbench.traffic.program import Program, Step

NAME = "dp"
MiB = 1 << 20
DDPS = ("torch", "megatron")


@dataclass(frozen=True)
class Options(FrameworkOptions):
    """Gradient all-reduce of one step: grad dtype, whose DDP (torch or megatron) and its
    bucket caps (MiB; None: the framework's, torch DDP 25 or torchtitan's 100, the first
    bucket by DDP's rule; Megatron one bucket per buffer, or its 4e7-element rule with
    overlap_grad_reduce)."""

    grad_dtype: str = "float32"
    bucket_mb: float | None = None
    first_bucket_mb: float | None = None
    ddp: str = "torch"
    overlap_grad_reduce: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        from commbench.errors import UsageError

        for name in ("bucket_mb", "first_bucket_mb"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise UsageError(f"{name} must be positive, got {value}")
        check_choice("ddp", self.ddp, DDPS)
        if self.ddp == "megatron" and self.framework == "torchtitan":
            raise UsageError("ddp megatron is Megatron-Core's; framework torchtitan uses torch's")
        if self.overlap_grad_reduce and self.ddp != "megatron":
            raise UsageError(
                "overlap_grad_reduce is Megatron-Core's DDP option (framework megatron); "
                "torch's DDP always overlaps its buckets"
            )
        if self.first_bucket_mb is not None and self.ddp == "megatron":
            raise UsageError("first_bucket_mb is torch DDP's; Megatron-Core's has no first bucket")

    def megatron_bucket(self, layout: ParallelLayout) -> int | None:
        """Megatron's bucket_size in elements: bucket_mb's, or max(4e7, 1e6 dp cp) with
        overlap_grad_reduce, else None (one bucket per buffer)."""
        if self.bucket_mb is not None:
            return max(1, int(self.bucket_mb * MiB) // dtype_size(self.grad_dtype))
        if self.overlap_grad_reduce:
            return max(40_000_000, 1_000_000 * dp_size(layout))
        return None

    @property
    def cap_mb(self) -> float:
        """The bucket cap in effect."""
        if self.bucket_mb is not None:
            return self.bucket_mb
        return 100.0 if self.framework == "torchtitan" else tensors.DDP_DEFAULT_CAP_MB


def grad_bytes(layout: ParallelLayout, model: ModelShape, grad_dtype: str) -> tuple[int, int]:
    """(dense, expert) gradient bytes on one rank of the busiest pipeline stage."""
    stage = model.stage_params(layout.pp, model.busiest_stage(layout.pp, layout.tp, layout.ep))
    el = dtype_size(grad_dtype)
    dense = round(stage.dense_per_rank(layout.tp)) * el
    expert = round(stage.expert_per_rank(layout.tp, layout.ep)) * el
    return dense, expert


def bucket_steps(
    sizes: list[int],
    axis: str,
    options: Options,
    what: str,
    phase: str = "backward",
    megatron_bucket: int | None = None,
) -> list[Step]:
    """All-reduce Steps of DDP's buckets over tensors of `sizes` elements (equal buckets
    merged, in the order they run): torch's, or with options.ddp megatron Megatron's of
    `megatron_bucket` elements."""
    el = dtype_size(options.grad_dtype)
    if options.ddp == "megatron":
        made = [n * el for n in tensors.megatron_buckets(sizes, megatron_bucket)]
    else:
        first, cap = tensors.ddp_caps(options.cap_mb, options.first_bucket_mb)
        made = tensors.ddp_buckets([n * el for n in sizes], first, cap)
    counts: dict[int, int] = {}
    for b in made:
        counts[b] = counts.get(b, 0) + 1
    return [
        Step(
            op="allreduce",
            nbytes=size,
            axis=axis,
            repeat=n,
            phase=phase,
            dtype=options.grad_dtype,
            label=f"{what} ({n} of {size} B)",
        )  # fmt: skip
        for size, n in counts.items()
    ]


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """DDP gradient buckets of the busiest rank; expert gradients on edp for MoE models."""
    check(layout, model, options.seq(model))
    dense, expert = grad_bytes(layout, model, options.grad_dtype)
    mega = options.ddp == "megatron"
    listing = tensors.megatron_tensors if mega else tensors.grad_tensors
    dense_t, expert_t = listing(layout, model)
    size = options.megatron_bucket(layout) if mega else None
    steps: list[Step] = []
    if dp_size(layout) > 1:
        steps += bucket_steps(
            dense_t, dp_axis(layout), options, "grad bucket", megatron_bucket=size
        )
    if expert and layout.edp > 1:
        steps += bucket_steps(
            expert_t, Axis.EDP, options, "expert grad bucket", megatron_bucket=size
        )
    meta = {"grad_bytes": dense, "expert_grad_bytes": expert, "params": model.params}
    return Program(NAME, tuple(steps), meta)
