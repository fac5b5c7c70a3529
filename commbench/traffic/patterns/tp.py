"""Tensor parallelism (Megatron-LM, Shoeybi et al. 2019; sequence parallel, Korthikanti et al.
2022): per layer 2 all-reduces forward and 2 backward of b (s/c) h elements; with sequence
parallel, forward 2 all-gathers + 2 reduce-scatters and backward 4 all-gathers (2 of them
re-gather the input for the weight gradient) + 2 reduce-scatters, each of full size b (s/c) h.
Under framework torchtitan (DTensor's SequenceParallel / PrepareModuleInput, torch's
distributed/tensor/parallel/style.py) autograd keeps the gathered input, so backward issues
2 all-gathers, not 4 (checked against real DTensor TP on gloo, tests/pytorch_jobs).
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import FrameworkOptions, check
from commbench.traffic.program import Program, Step

NAME = "tp"
AXIS = Axis.TP


@dataclass(frozen=True)
class Options(FrameworkOptions):
    """TP traffic of one step; `sequence_parallel` swaps each all-reduce for AG/RS pairs."""

    sequence_parallel: bool = False


def layer_allreduce(
    nbytes: int,
    passes: float,
    dtype: str,
    phase: str = "forward",
    label: str = "attn/mlp row-parallel output",
) -> Step:
    """The 2 all-reduces of S bytes a layer pass ends its attention and MLP with (forward:
    the row-parallel outputs; backward: the column-parallel inputs' gradients), `passes`
    layer passes: the per-layer part training and inference share."""
    return Step(
        op="allreduce", nbytes=nbytes, axis=AXIS, repeat=2 * passes, phase=phase, dtype=dtype,
        label=label,
    )  # fmt: skip


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """The TP collectives of one step on the busiest pipeline stage (L/pp layers x m)."""
    seq = options.seq(model)
    check(layout, model, seq, options.sequence_parallel)
    tokens = options.micro_batch * seq // layout.cp
    S = tokens * model.hidden * options.elem  # b (s/c) h elements, full (un-sharded) size
    layers = max(model.stage_counts(layout.pp))  # the busiest stage's
    n = layers * options.micro_batches  # layer passes per step
    meta = {"tokens": tokens, "layers": layers, "bytes_per_op": S}
    if layout.tp == 1:
        return Program(NAME, (), meta)
    dt = options.dtype
    steps: tuple[Step, ...]
    if not options.sequence_parallel:
        steps = (
            layer_allreduce(S, n, dt),
            layer_allreduce(S, n, dt, "backward", "attn/mlp column-parallel input"),
        )
    else:
        steps = (
            Step(
                op="allgather",
                nbytes=S,
                axis=AXIS,
                repeat=2 * n,
                phase="forward",
                dtype=dt,
                label="SP gather before attn/mlp",
            ),
            Step(
                op="reduce_scatter",
                nbytes=S,
                axis=AXIS,
                repeat=2 * n,
                phase="forward",
                dtype=dt,
                label="SP scatter after attn/mlp",
            ),
            Step(
                op="allgather",
                nbytes=S,
                axis=AXIS,
                repeat=(2 if options.framework == "torchtitan" else 4) * n,
                phase="backward",
                dtype=dt,
                label="SP grad gather"
                + ("" if options.framework == "torchtitan" else " + input re-gather"),
            ),
            Step(
                op="reduce_scatter",
                nbytes=S,
                axis=AXIS,
                repeat=2 * n,
                phase="backward",
                dtype=dt,
                label="SP grad scatter",
            ),
        )
    return Program(NAME, steps, meta)
