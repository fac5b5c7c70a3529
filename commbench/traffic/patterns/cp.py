"""Context parallelism as ring attention (Liu et al. 2023, "Ring Attention"; Megatron-LM's
p2p context parallel): each layer's forward passes K and V around the cp ring in c-1
send/recv steps of 2 b (s/c) (n_kv/t) d_head elements (grouped-query attention sends only
the KV heads); the backward moves 2(c-1) such units: K,V first, then K,V plus dK,dV, then
dK,dV on the last step.

`cp_comm_type` picks the other forms (None: the framework's, p2p for Megatron, torch's
all-gather rotation for torchtitan):
- `all_gather` (Megatron / TransformerEngine AttnFuncWithCPAndKVAllGather): K and V each
  all-gathered over cp per layer in forward, again in backward, dK and dV reduce-scattered;
- `a2a` (Ulysses; TE AttnFuncWithCPAndQKVOA2A): Q, K, V all-to-all before attention and O
  after, mirrored in backward (dO, then dQ, dK, dV), each one rank's local tensor;
- `torch_allgather` (torch's context_parallel, rotate method allgather, torch/distributed/
  tensor/experimental/_context_parallel/_attention.py): one all-gather of K and V together
  per layer in forward and one in backward, and dK,dV passed on by all-to-all c times in fp32
  (convert_to_f32: backward bytes 1.5x p2p's at cp 2 in fp32, 2.5x in bf16);
- `torch_alltoall` (rotate method alltoall): K,V passed on by all-to-all c-1 times forward
  and backward, dK,dV as above.
A permute by all-to-all moves the whole buffer to the next rank (an all-to-all-v whose only
nonzero split is that one). Megatron's hierarchical a2a+p2p needs its per-level sizes and is
not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import FrameworkOptions, TrafficOptions, check, check_choice
from commbench.traffic.program import Program, Step

NAME = "cp"
AXIS = Axis.CP


@dataclass(frozen=True)
class Options(FrameworkOptions):
    """Context-parallel attention traffic of one step, in the form cp_comm_type names."""

    cp_comm_type: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cp_comm_type is not None:
            check_choice("cp_comm_type", self.cp_comm_type, CP_COMM_TYPES)

    @property
    def comm_type(self) -> str:
        """The form in effect."""
        if self.cp_comm_type is not None:
            return self.cp_comm_type
        return "torch_allgather" if self.framework == "torchtitan" else "p2p"


CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "torch_allgather", "torch_alltoall")


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
    meta: dict[str, int | str] = {
        "kv_unit_bytes": unit,
        "forward_units": c - 1,
        "backward_units": 2 * (c - 1),
    }
    if c == 1:
        return Program(NAME, (), meta)
    dt = options.dtype
    if options.comm_type != "p2p":
        meta["cp_comm_type"] = options.comm_type
        return Program(NAME, tuple(other_forms(layout, model, options, unit, n)), meta)
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


def _permute(nbytes: int, c: int, repeat: float, phase: str, dt: str, label: str) -> Step:
    """torch's permute_tensor: an all-to-all whose one nonzero split goes to the next rank."""
    split = tuple(tuple(nbytes if d == (i + 1) % c else 0 for d in range(c)) for i in range(c))
    return Step(
        op="alltoallv", nbytes=nbytes, axis=AXIS, repeat=repeat, phase=phase, dtype=dt,
        label=label, split=split,
    )  # fmt: skip


def other_forms(
    layout: ParallelLayout, model: ModelShape, options: Options, unit: int, n: int
) -> list[Step]:
    """The all-gather, all-to-all and torch forms of `n` layer passes (K,V unit bytes)."""
    c, dt, form = layout.cp, options.dtype, options.comm_type

    def step(op: str, nbytes: int, repeat: float, phase: str, label: str, d: str = dt) -> Step:
        return Step(op=op, nbytes=nbytes, axis=AXIS, repeat=repeat, phase=phase, dtype=d,
                    label=label)  # fmt: skip

    if form == "all_gather":
        half = c * unit // 2
        return [
            step("allgather", half, 2 * n, "forward", "K, V all-gather"),
            step("allgather", half, 2 * n, "backward", "K, V re-gather"),
            step("reduce_scatter", half, 2 * n, "backward", "dK, dV reduce-scatter"),
        ]
    if form == "a2a":
        local = options.micro_batch * (options.seq(model) // c) * options.elem // layout.tp
        q, kv, o = (local * w for w in (model.q_width, model.kv_width, model.out_width))
        return [
            step("alltoall", q, n, "forward", "Q a2a"),
            step("alltoall", kv, 2 * n, "forward", "K, V a2a"),
            step("alltoall", o, n, "forward", "O a2a"),
            step("alltoall", o, n, "backward", "dO a2a"),
            step("alltoall", q, n, "backward", "dQ a2a"),
            step("alltoall", kv, 2 * n, "backward", "dK, dV a2a"),
        ]
    fp32_unit = unit // options.elem * 4
    dkv = _permute(fp32_unit, c, c * n, "backward", "float32", "dK,dV all-to-all (fp32)")
    if form == "torch_allgather":
        return [
            step("allgather", c * unit, n, "forward", "K,V all-gather"),
            step("allgather", c * unit, n, "backward", "K,V all-gather"),
            dkv,
        ]
    return [
        _permute(unit, c, (c - 1) * n, "forward", dt, "K,V all-to-all"),
        _permute(unit, c, (c - 1) * n, "backward", dt, "K,V all-to-all"),
        dkv,
    ]
