"""Inference prefill, one forward pass over the prompts (compute-dense; TP and CP speed it
up): per layer 2 TP all-reduces of b (s/c) h, CP's ring passes the prompt's K/V blocks
(c-1 sends, Liu et al. 2023), EP dispatches and combines the prompt's top-k token copies,
and PP sends each micro-batch's b (s/c) h activation on to the next stage.
"""

from __future__ import annotations

from commbench.traffic.layout import ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import cp
from commbench.traffic.patterns.base import check
from commbench.traffic.patterns.infer import Options, forward_pass, stage_layers
from commbench.traffic.program import Program

NAME = "prefill"
__all__ = ["NAME", "Options", "build"]


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """The prefill of `micro_batches` x `micro_batch` prompts of seq_len tokens."""
    seq = options.seq(model)
    check(layout, model, seq)
    tokens = options.micro_batch * seq // layout.cp
    layers, _ = stage_layers(layout, model)
    steps = []
    unit = cp.kv_unit_bytes(layout, model, options)
    if layout.cp > 1:
        steps.append(
            cp.ring_forward(unit, layout.cp, layers * options.micro_batches, options.dtype)
        )
    meta = {
        "prompt_tokens": options.micro_batch * seq * options.micro_batches,
        "kv_unit_bytes": unit,
    }
    return forward_pass(NAME, layout, model, options, tokens, steps, meta)
