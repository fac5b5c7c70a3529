"""ZeRO / FSDP sharded data parallelism (Rajbhandari et al. 2020, "ZeRO"; PyTorch FSDP).

Stage 1 (optimizer states sharded): reduce-scatter the gradients once per step, all-gather
the updated parameters once. Stage 2 (+ gradients sharded): the reduce-scatter runs every
micro-batch (DeepSpeed reduces partitioned gradients each backward). Stage 3 (+ parameters
sharded, FSDP): per layer unit, all-gather the parameters in forward, again in backward,
reduce-scatter the gradients, every micro-batch: about 3P moved per step against DDP's 2P.
Shards span the dp x cp ranks (dense) and the edp ranks (experts), as Megatron's
distributed optimizer; flat buffers are padded to a multiple of the group size. Under
framework torchtitan stage 3 is FSDP2 as torchtitan wraps it (torchtitan/distributed/fsdp.py
apply_fsdp_to_decoder): the [final norm, output] unit is not resharded after forward, so it
is not gathered again in backward, and with pp > 1 no unit is (reshard_after_forward False).
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.dtypes import dtype_size
from commbench.errors import UsageError
from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import (
    FrameworkOptions,
    buckets,
    check,
    check_choice,
    dp_axis,
    dp_size,
    pad_bytes,
)
from commbench.traffic.program import Program, Step

NAME = "zero"
MiB = 1 << 20


@dataclass(frozen=True)
class Options(FrameworkOptions):
    """ZeRO stage (1-3), gradient dtype of the reduce-scatter, bucket size (MiB, stages 1-2).
    `dtype` is the parameter dtype the all-gathers move."""

    stage: int = 3
    grad_dtype: str = "bfloat16"
    bucket_mb: float = 25.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("stage", self.stage, (1, 2, 3))
        if not self.bucket_mb > 0:
            raise UsageError("bucket_mb must be positive")


def units(layout: ParallelLayout, model: ModelShape) -> list[tuple[str, float, float]]:
    """FSDP wrapping units of the busiest stage: (label, dense params, expert params) per rank
    - the embedding, each transformer layer, the output head."""
    pp, tp, ep = layout.pp, layout.tp, layout.ep
    stage = model.busiest_stage(pp, tp, ep)
    out: list[tuple[str, float, float]] = []
    if stage == 0:
        out.append(("embedding", model.embedding_params() / tp, 0.0))
    for i in model.stage_layers(pp, stage):
        d, e = model.layer_params(i)
        norms = 2 * model.hidden + (model.hidden * model.experts if model.is_moe_layer(i) else 0)
        out.append(("moe layer" if e else "layer", (d - norms) / tp + norms, e / (tp * ep)))
    if stage == pp - 1:
        head = model.head_params() - model.hidden
        if model.tied_embeddings and pp > 1:
            head += model.embedding_params()
        out.append(("output head", head / tp + model.hidden, 0.0))
    return out


def _flat(
    total_params: float, axis: str, p: int, options: Options, reps: int, what: str
) -> list[Step]:
    """Stage 1-2: bucketed reduce-scatter of grads and all-gather of params over `axis`."""
    out = []
    for op, dt, phase, count in (
        ("reduce_scatter", options.grad_dtype, "backward", reps),
        ("allgather", options.dtype, "optimizer", 1),
    ):
        total = pad_bytes(total_params * dtype_size(dt), p, dt)
        cap = pad_bytes(options.bucket_mb * MiB, p, dt)
        for size, n, which in buckets(total, cap):
            label = f"{what} {'grads' if op == 'reduce_scatter' else 'params'} ({which})"
            out.append(
                Step(
                    op=op,
                    nbytes=pad_bytes(size, p, dt),
                    axis=axis,
                    repeat=n * count,
                    phase=phase,
                    dtype=dt,
                    label=label,
                )
            )
    return out


def _per_unit(
    us: list[tuple[str, float]], axis: str, p: int, options: Options, m: int, pp: int = 1
) -> list[Step]:
    """Stage 3: per unit all-gather forward, all-gather backward (not for a unit FSDP2 keeps
    unsharded under torchtitan), reduce-scatter grads."""
    titan = options.framework == "torchtitan"
    sizes: dict[tuple[str, int, int], int] = {}
    for label, params in us:
        if params <= 0:
            continue
        ag = pad_bytes(params * options.elem, p, options.dtype)
        rs = pad_bytes(params * dtype_size(options.grad_dtype), p, options.grad_dtype)
        key = (label, ag, rs)
        sizes[key] = sizes.get(key, 0) + 1
    out = []
    for (label, ag, rs), n in sizes.items():
        # parameters gathered before the forward and again before the backward (ZeRO-3)
        out += [
            Step(
                op="allgather",
                nbytes=ag,
                axis=axis,
                repeat=n * m,
                phase=phase,
                dtype=options.dtype,
                label=f"{label} params",
            )
            for phase in ("forward", "backward")
            if phase == "forward" or not (titan and (pp > 1 or label.endswith("output head")))
        ]
        out.append(
            Step(
                op="reduce_scatter",
                nbytes=rs,
                axis=axis,
                repeat=n * m,
                phase="backward",
                dtype=options.grad_dtype,
                label=f"{label} grads",
            )
        )
    return out


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """ZeRO traffic of one step for the busiest rank."""
    check(layout, model, options.seq(model))
    us = units(layout, model)
    dense = sum(d for _, d, _ in us)
    expert = sum(e for _, _, e in us)
    m = options.micro_batches
    groups = [(dp_axis(layout), dp_size(layout), 1)]
    if expert and layout.edp > 1:
        groups.append((Axis.EDP, layout.edp, 2))
    steps: list[Step] = []
    for axis, p, which in groups:
        if p == 1:
            continue
        what = "expert" if which == 2 else "dense"
        if options.stage == 3:
            part = [(f"{what} {lab}", d if which == 1 else e) for lab, d, e in us]
            steps += _per_unit(part, axis, p, options, m, layout.pp)
        else:
            reps = m if options.stage == 2 else 1
            steps += _flat(dense if which == 1 else expert, axis, p, options, reps, what)
    meta = {"stage": options.stage, "dense_params": dense, "expert_params": expert}
    return Program(NAME, tuple(steps), meta)
