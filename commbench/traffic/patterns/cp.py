"""Context parallelism as ring attention (Liu et al. 2023, "Ring Attention"; Megatron-LM's
p2p context parallel): each layer's forward passes K and V around the cp ring in c-1
send/recv steps of 2 b (s/c) (n_kv/t) d_head elements (grouped-query attention sends only
the KV heads); the backward moves 2(c-1) such units: K,V first, then K,V plus dK,dV, then
dK,dV on the last step.
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import TrafficOptions, check
from commbench.traffic.program import Program, Step

NAME = "cp"
AXIS = Axis.CP


@dataclass(frozen=True)
class Options(TrafficOptions):
    """Ring-attention traffic of one step."""


def kv_unit_bytes(layout: ParallelLayout, model: ModelShape, options: TrafficOptions) -> int:
    """K and V of one sequence chunk on one rank: 2 b (s/c) (n_kv/t) d_head x bytes (K and V
    heads of their own widths with MLA, whose ring moves the up-projected K and V as
    Megatron-Core's does)."""
    seq = options.seq(model)
    width = (model.kv_width + model.v_width) // layout.tp
    return options.micro_batch * (seq // layout.cp) * width * options.elem


def ring_forward(unit: int, c: int, passes: float, dtype: str) -> Step:
    """The forward ring of `passes` layer passes: c-1 K/V send/recv steps each (the per-layer
    part training and prefill share)."""
    return Step(
        op="sendrecv", nbytes=unit, axis=AXIS, repeat=(c - 1) * passes, phase="forward",
        dtype=dtype, label="K,V ring step",
    )  # fmt: skip


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """Ring K/V exchange of every layer of the busiest stage, every micro-batch."""
    check(layout, model, options.seq(model))
    c = layout.cp
    unit = kv_unit_bytes(layout, model, options)
    n = max(model.stage_counts(layout.pp)) * options.micro_batches  # the busiest stage
    meta = {"kv_unit_bytes": unit, "forward_units": c - 1, "backward_units": 2 * (c - 1)}
    if c == 1:
        return Program(NAME, (), meta)
    dt = options.dtype
    steps = [
        ring_forward(unit, c, n, dt),
        Step(
            op="sendrecv",
            nbytes=unit,
            axis=AXIS,
            repeat=2 * n,
            phase="backward",
            dtype=dt,
            label="K,V first / dK,dV last step",
        ),
    ]
    if c > 2:
        steps.append(
            Step(
                op="sendrecv",
                nbytes=2 * unit,
                axis=AXIS,
                repeat=(c - 2) * n,
                phase="backward",
                dtype=dt,
                label="K,V + dK,dV ring step",
            )
        )
    return Program(NAME, tuple(steps), meta)
