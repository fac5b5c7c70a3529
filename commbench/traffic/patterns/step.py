"""One whole training step of a parallel config, every axis at once, as Megatron-Core issues
it (AICB's whole-iteration replay, Alibaba 2024, with commbench's byte counts and checks):
the batch broadcast and embedding, each layer's TP / CP / EP traffic (with the MoE token
counts and expert-TP gathers), the LM head, cross entropy and loss, the 1F1B pipeline, the
backward of all of them, the layernorm grads, the gradient reduction (DDP buckets, ZeRO, or
Megatron's distributed optimizer: fp32 grad reduce-scatter + bf16 param all-gather) and the
grad norm. The parts are the patterns' own Programs (patterns.training_step, which the
planner prices) and pattern framework's ops, so the step is their sum, not a copy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from commbench.errors import UsageError
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import cp, framework, pp
from commbench.traffic.patterns.base import check
from commbench.traffic.program import Program, Step

NAME = "step"
MiB = 1 << 20


@dataclass(frozen=True)
class Options(framework.Options):
    """The step's workload (micro_batches per step through the pipeline), sequence parallel,
    the gradient reduction (zero_stage 0: the framework's DDP, Megatron-Core's buffers with
    overlap_grad_reduce's buckets or torch's, bucket_mb if given; 1-3: ZeRO;
    distributed_optimizer: Megatron's), grad dtype, EP routing as pattern ep's, compute_ms
    of forward per micro-batch and stage in the pipeline (backward = backward_factor x) and
    virtual_stages (interleaved 1F1B)."""

    micro_batches: int = 4
    zero_stage: int = 0
    grad_dtype: str = "float32"
    bucket_mb: float | None = None
    overlap_grad_reduce: bool = False
    cp_comm_type: str | None = None
    hierarchical_context_parallel_sizes: tuple[int, ...] | None = None  # a2a+p2p's [a2a, p2p]
    compute_ms: float = 0.0
    backward_factor: float = 2.0
    virtual_stages: int = 1  # > 1: interleaved 1F1B, as pattern pp's
    pp_schedule: str | None = None  # torchtitan: torch's schedule class, as pattern pp's

    def __post_init__(self) -> None:
        super().__post_init__()
        cp.check_hierarchical(self.cp_comm_type, self.hierarchical_context_parallel_sizes)
        pp.check_schedule(self.pp_schedule, self.framework, self.virtual_stages)
        if self.zero_stage not in (0, 1, 2, 3):
            raise UsageError(f"zero_stage {self.zero_stage!r}: choose from 0, 1, 2, 3")
        if self.distributed_optimizer and self.zero_stage:
            raise UsageError("distributed_optimizer is ZeRO-1 already: leave zero_stage at 0")
        if self.distributed_optimizer and self.framework != "megatron":
            raise UsageError(
                "distributed_optimizer is Megatron-Core's; under framework "
                f"{self.framework} shard with zero_stage 3 (FSDP2)"
            )
        if self.overlap_grad_reduce and self.framework != "megatron":
            raise UsageError(
                f"overlap_grad_reduce is Megatron-Core's DDP option; framework "
                f"{self.framework} has none"
            )


def distopt_bucket_mb(layout: ParallelLayout) -> float:
    """Megatron's DDP bucket with the distributed optimizer: max(4e7, 1e6 dp) fp32 elements."""
    return max(40_000_000, 1_000_000 * layout.dp * layout.cp) * 4 / MiB


def parts(layout: ParallelLayout, model: ModelShape, options: Options) -> dict[str, Program]:
    """The step's Programs by pattern (patterns.training_step with this step's options)."""
    from commbench.traffic.patterns import training_step

    workload = {
        f.name: getattr(options, f.name)
        for f in dataclasses.fields(options)
        if f.name not in ("zero_stage", "distributed_optimizer", "overlap_grad_reduce")
        and getattr(options, f.name) is not None
    }
    zero = options.zero_stage
    per: dict[str, dict] = {}
    if options.overlap_grad_reduce:
        per["dp"] = {"overlap_grad_reduce": True}
    if options.distributed_optimizer:
        zero = 1
        per["zero"] = {"grad_dtype": "float32", "bucket_mb": distopt_bucket_mb(layout)}
    return training_step(layout, model, workload, zero, per)


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """The Program of one training step on the busiest rank, in Megatron-Core's order."""
    seq = options.seq(model)
    check(layout, model, seq, options.sequence_parallel or (model.is_moe and layout.ep > 1))
    sizes = options.hierarchical_context_parallel_sizes
    if sizes is not None and layout.cp == 1 and sizes != (1, 1):  # no cp Program to say so
        raise UsageError(f"hierarchical_context_parallel_sizes {list(sizes)} with cp = 1")
    progs = parts(layout, model, options)
    progs[framework.NAME] = framework.build(layout, model, options)
    extra = framework.parts(layout, model, options)

    def of(name: str, *phases: str) -> list[Step]:
        prog = progs.get(name)
        return [s for s in prog.steps if s.phase in phases] if prog else []

    gradient = [s for name in ("dp", "zero") for s in of(name, "forward", "backward")]
    ep_fwd, ep_bwd = of("ep", "forward"), of("ep", "backward")
    steps = (
        extra["input"]
        + of("tp", "forward")
        + of("cp", "forward")
        + extra["moe_counts"]
        + ep_fwd[:1]
        + extra["moe_forward"]
        + ep_fwd[1:]
        + extra["head"]
        + extra["loss"]
        + of("pp", "forward+backward")
        + extra["head_backward"]
        + of("tp", "backward")
        + of("cp", "backward")
        + ep_bwd[:1]
        + extra["moe_backward"]
        + ep_bwd[1:]
        + extra["input_backward"]
        + extra["grads"]
        + gradient
        + extra["optimizer"]
        + [s for name in ("dp", "zero") for s in of(name, "optimizer")]
    )
    assert sum(len(p.steps) for p in progs.values()) == len(steps), "a part's step was left out"
    meta = {
        "parts": {name: len(p.steps) for name, p in progs.items()},
        "compute_s": progs["pp"].meta["compute_s"] if "pp" in progs else 0.0,
        "zero_stage": 1 if options.distributed_optimizer else options.zero_stage,
    }
    return Program(NAME, tuple(steps), meta)
