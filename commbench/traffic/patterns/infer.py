"""What prefill and decode share: the inference workload's options and the assembly of one
forward pass from the training patterns' per-layer parts (TP's all-reduce of the layer
output, CP's K/V ring, EP's dispatch and combine, PP's forward sends), so the training step
and inference are built from the same pieces.

Inference keeps no gradients and runs without sequence parallel: every TP layer ends in two
all-reduces (attention and MLP, Shoeybi et al. 2019). The EP ranks split their tokens over
the TP ranks as Megatron-Core's MoE layer does, at least one token each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commbench.errors import UsageError
from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import ep, pp, tp
from commbench.traffic.program import Program, Step


@dataclass(frozen=True)
class Options(ep.Options):
    """`micro_batch` sequences per micro-batch (the batch size: the axis that matters),
    `micro_batches` of them in the pipeline at once, `seq_len` the prompt (prefill) or the
    context so far (decode); compute_ms of forward compute per micro-batch and stage lets a
    measured pipeline show its fill; EP routing as pattern ep's."""

    compute_ms: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compute_ms < 0:
            raise UsageError("compute_ms must be 0 or more")


def stage_layers(layout: ParallelLayout, model: ModelShape) -> tuple[int, int]:
    """(layers, MoE layers) of the busiest pipeline stage."""
    moe = max(
        sum(model.is_moe_layer(i) for i in model.stage_layers(layout.pp, s))
        for s in range(layout.pp)
    )
    return max(model.stage_counts(layout.pp)), moe


def forward_pass(
    name: str,
    layout: ParallelLayout,
    model: ModelShape,
    options: Options,
    tokens: int,
    cp_steps: list[Step],
    meta: dict,
) -> Program:
    """One forward pass of `micro_batches` micro-batches of `tokens` tokens per rank (after
    CP's split) through the busiest stage: TP all-reduces, the given CP steps, EP's dispatch
    and combine, then the forward pipeline carrying each micro-batch to the next stage."""
    layers, moe_layers = stage_layers(layout, model)
    m, dt = options.micro_batches, options.dtype
    S = tokens * model.hidden * options.elem
    steps: list[Step] = []
    if layout.tp > 1:
        steps.append(tp.layer_allreduce(S, layers * m, dt))
    steps += cp_steps
    ep_meta: dict = {}
    if model.is_moe and layout.ep > 1 and moe_layers:
        T = math.ceil(tokens / layout.tp)
        split, comb, ep_meta = ep.routed(layout, model, options, T)
        steps.append(ep.a2a(split, moe_layers * m, "forward", "dispatch", dt))
        steps.append(ep.a2a(comb, moe_layers * m, "forward", "combine", dt))
    if layout.pp > 1:
        sched = pp.forward_schedule(layout.pp, m, S, options.compute_ms / 1e3)
        steps.append(
            Step(
                op="p2p_schedule",
                nbytes=S,
                axis=Axis.PP,
                dtype=dt,
                schedule=sched,
                ring=False,
                label=f"forward pipeline p={layout.pp} m={m}",
            )
        )
    meta = {
        **meta,
        "tokens": tokens,
        "layers": layers,
        "moe_layers": moe_layers,
        "bytes_per_op": S,
        "compute_s": m * options.compute_ms / 1e3,
        **{k: ep_meta[k] for k in ("imbalance", "dispatch_token_bytes") if k in ep_meta},
    }
    return Program(name, tuple(steps), meta)
