"""Inference decode, one output token for every sequence of the batch (the batch size b is
the axis that matters): per layer 2 TP all-reduces of only b h; EP's all-to-all moves b k
token copies (latency-bound at small b unless requests are merged); PP sends b h per token
and stage; CP keeps the context's KV cache split and exchanges each rank's partial attention
output and log-sum-exp for the new token, an all-gather of c b (n/t)(d_v + 1) fp32 values
merged locally (the online-softmax rescaling of Milakov & Gimelshein 2018, as ring-attention
decoding does).
"""

from __future__ import annotations

from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import check
from commbench.traffic.patterns.infer import Options, forward_pass, stage_layers
from commbench.traffic.program import Program, Step

NAME = "decode"
__all__ = ["NAME", "Options", "build"]
PARTIAL_BYTES = 4  # partial outputs and their log-sum-exp travel in fp32


def partial_bytes(layout: ParallelLayout, model: ModelShape, batch: int) -> int:
    """One rank's partial attention result for the new tokens: b x local heads x (d_v + 1)."""
    return batch * (model.heads // layout.tp) * (model.v_head_dim + 1) * PARTIAL_BYTES


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """One decode step of `micro_batches` x `micro_batch` sequences at context seq_len."""
    check(layout, model, options.seq(model))
    b = options.micro_batch
    layers, _ = stage_layers(layout, model)
    steps = []
    if layout.cp > 1:
        steps.append(
            Step(
                op="allgather",
                nbytes=layout.cp * partial_bytes(layout, model, b),
                axis=Axis.CP,
                repeat=layers * options.micro_batches,
                dtype="float32",
                label="partial attention + LSE",
            )
        )
    meta = {"batch": b * options.micro_batches, "context": options.seq(model)}
    return forward_pass(NAME, layout, model, options, b, steps, meta)
