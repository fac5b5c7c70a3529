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
- `a2a+p2p` (Megatron's hierarchical CP with `hierarchical_context_parallel_sizes` [a, r],
  a r = c; TE AttnFuncWithCPAndKVP2P with a list of two cp groups, Megatron parallel_state
  create_hierarchical_groups): Q, K, V all-to-all inside blocks of a consecutive cp ranks
  (axis cp_in<a>), then the p2p ring over the r ranks a apart (cp_out<a>) with the K,V unit
  of the plain ring (a times the sequence, 1/a of the heads), O all-to-all back; backward:
  O and dO all-to-all (TE re-lays out the saved output too), the ring's 2(r-1) units, dQ,
  dK, dV all-to-all.
A permute by all-to-all moves the whole buffer to the next rank (an all-to-all-v whose only
nonzero split is that one).
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.errors import UsageError
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
    hierarchical_context_parallel_sizes: tuple[int, ...] | None = None  # a2a+p2p: [a2a, p2p]

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cp_comm_type is not None:
            check_choice("cp_comm_type", self.cp_comm_type, CP_COMM_TYPES)
        check_hierarchical(self.cp_comm_type, self.hierarchical_context_parallel_sizes)

    @property
    def comm_type(self) -> str:
        """The form in effect."""
        if self.cp_comm_type is not None:
            return self.cp_comm_type
        return "torch_allgather" if self.framework == "torchtitan" else "p2p"


def check_hierarchical(comm_type: str | None, sizes: tuple[int, ...] | None) -> None:
    """hierarchical_context_parallel_sizes goes with a2a+p2p, both or neither, two sizes."""
    if (sizes is not None) != (comm_type == "a2a+p2p"):
        raise UsageError(
            "cp_comm_type a2a+p2p takes hierarchical_context_parallel_sizes [a2a, p2p] "
            "(whose product is cp), and only it"
        )
    if sizes is not None and (len(sizes) != 2 or min(sizes) < 1):
        raise UsageError(
            f"hierarchical_context_parallel_sizes {list(sizes)}: give two positive sizes "
            "[a2a, p2p] (TransformerEngine's a2a+p2p has two levels)"
        )


CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "a2a+p2p", "torch_allgather", "torch_alltoall")
# the forms each framework implements (its default first)
FRAMEWORK_COMM_TYPES = {
    "megatron": ("p2p", "all_gather", "a2a", "a2a+p2p"),
    "torchtitan": ("torch_allgather", "torch_alltoall"),
}


def a2a_violation(layout: ParallelLayout, model: ModelShape, comm_type: str) -> str | None:
    """Why Ulysses' all-to-all cannot split this layout's heads, or None: TE's a2a form needs
    cp to divide the heads and KV heads of a TP rank (AttnFuncWithCPAndQKVOA2A's head split)."""
    if comm_type != "a2a" or layout.cp == 1:
        return None
    heads, kv = model.heads // layout.tp, model.kv_heads // layout.tp
    if heads % layout.cp or kv % layout.cp:
        return (
            f"cp={layout.cp} does not divide the {heads} heads and {kv} KV heads of a TP rank "
            "(cp_comm_type a2a splits them)"
        )
    return None


def node_hierarchy(layout: ParallelLayout, model: ModelShape, gpus_per_node: int) -> list[int]:
    """hierarchical_context_parallel_sizes [a, cp / a] that keep a2a+p2p's all-to-all inside a
    node: a the largest divisor of cp with tp x a within the node that divides a TP rank's
    heads and KV heads (Megatron: a2a inside the node, p2p between nodes)."""
    heads, kv = model.heads // layout.tp, model.kv_heads // layout.tp
    a = max(
        d
        for d in range(1, layout.cp + 1)
        if layout.cp % d == 0 and layout.tp * d <= max(gpus_per_node, layout.tp)
        and heads % d == 0 and kv % d == 0
    )  # fmt: skip
    return [a, layout.cp // a]


def kv_unit_bytes(layout: ParallelLayout, model: ModelShape, options: TrafficOptions) -> int:
    """K and V of one sequence chunk on one rank: 2 b (s/c) (n_kv/t) d_head x bytes (K and V
    heads of their own widths with MLA, whose ring moves the up-projected K and V as
    Megatron-Core's does)."""
    seq = options.seq(model)
    width = (model.kv_width + model.v_width) // layout.tp
    return options.micro_batch * (seq // layout.cp) * width * options.elem


def ring_forward(unit: int, c: int, passes: float, dtype: str, axis: str = AXIS) -> Step:
    """The forward ring of `passes` layer passes: c-1 K/V send/recv steps each (the per-layer
    part training and prefill share)."""
    return Step(
        op="sendrecv", nbytes=unit, axis=axis, repeat=(c - 1) * passes, phase="forward",
        dtype=dtype, label="K,V ring step",
    )  # fmt: skip


def ring_backward(unit: int, c: int, passes: float, dtype: str, axis: str = AXIS) -> list[Step]:
    """The backward ring of `passes` layer passes: K,V first and dK,dV last (2 units), K,V with
    the accumulated dK,dV on the c-2 middle hops."""
    steps = [
        Step(
            op="sendrecv", nbytes=unit, axis=axis, repeat=2 * passes, phase="backward",
            dtype=dtype, label="K,V first / dK,dV last step",
        )
    ]  # fmt: skip
    if c > 2:
        steps.append(
            Step(
                op="sendrecv", nbytes=2 * unit, axis=axis, repeat=(c - 2) * passes,
                phase="backward", dtype=dtype, label="K,V + dK,dV ring step",
            )
        )  # fmt: skip
    return steps


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """Ring K/V exchange of every layer of the busiest stage, every micro-batch."""
    check(layout, model, options.seq(model))
    if why := a2a_violation(layout, model, options.comm_type):
        raise UsageError(why)
    c = layout.cp
    unit = kv_unit_bytes(layout, model, options)
    n = max(model.stage_counts(layout.pp)) * options.micro_batches  # the busiest stage
    meta: dict[str, int | str] = {
        "kv_unit_bytes": unit,
        "forward_units": c - 1,
        "backward_units": 2 * (c - 1),
    }
    sizes = hierarchical_sizes(layout, model, options)
    if c == 1:
        return Program(NAME, (), meta)
    dt = options.dtype
    if sizes is not None:
        meta["cp_comm_type"] = options.comm_type
        meta["hierarchical_context_parallel_sizes"] = "x".join(map(str, sizes))
        meta["forward_units"], meta["backward_units"] = sizes[1] - 1, 2 * (sizes[1] - 1)
        return Program(NAME, tuple(hierarchical(layout, model, options, unit, n, sizes)), meta)
    if options.comm_type != "p2p":
        meta["cp_comm_type"] = options.comm_type
        return Program(NAME, tuple(other_forms(layout, model, options, unit, n)), meta)
    steps = [ring_forward(unit, c, n, dt), *ring_backward(unit, c, n, dt)]
    return Program(NAME, tuple(steps), meta)


def hierarchical_sizes(
    layout: ParallelLayout, model: ModelShape, options: Options
) -> tuple[int, int] | None:
    """(a2a, p2p) sizes of a2a+p2p, checked against the layout: a x r = cp, and the a2a size
    divides the heads (and KV heads) of a TP rank, as TE's head split needs; None otherwise."""
    sizes = options.hierarchical_context_parallel_sizes
    if sizes is None:
        return None
    a, r = sizes
    if a * r != layout.cp:
        raise UsageError(
            f"hierarchical_context_parallel_sizes [{a}, {r}]: {a} x {r} = {a * r}, "
            f"not cp = {layout.cp}"
        )
    heads, kv = model.heads // layout.tp, model.kv_heads // layout.tp
    if heads % a or kv % a:
        raise UsageError(
            f"hierarchical_context_parallel_sizes [{a}, {r}]: the a2a size {a} must divide "
            f"the {heads} heads and {kv} KV heads of a TP rank"
        )
    return a, r


def a2a_bytes(layout: ParallelLayout, model: ModelShape, options: Options) -> tuple[int, ...]:
    """(Q, K, O) bytes of one rank's local tensors, b (s/c) heads/t d_head each: the all-to-all
    S of Ulysses' exchanges (V as K)."""
    c = layout.cp
    local = options.micro_batch * (options.seq(model) // c) * options.elem // layout.tp
    return tuple(local * w for w in (model.q_width, model.kv_width, model.out_width))


def hierarchical(
    layout: ParallelLayout,
    model: ModelShape,
    options: Options,
    unit: int,
    n: int,
    sizes: tuple[int, int],
) -> list[Step]:
    """a2a+p2p over `n` layer passes: the a2a exchanges inside the blocks of a (cp_in<a>), the
    ring over the r ranks a apart (cp_out<a>); a level of size 1 is left out, and the other
    level runs on cp itself."""
    a, r = sizes
    dt = options.dtype
    inner = AXIS if r == 1 else f"{AXIS}_in{a}"
    outer = AXIS if a == 1 else f"{AXIS}_out{a}"
    q, kv, o = a2a_bytes(layout, model, options)

    def a2a(nbytes: int, repeat: float, phase: str, label: str) -> Step:
        return Step(op="alltoall", nbytes=nbytes, axis=inner, repeat=repeat, phase=phase,
                    dtype=dt, label=label)  # fmt: skip

    fwd, bwd = [], []
    if a > 1:
        fwd += [a2a(q, n, "forward", "Q a2a"), a2a(kv, 2 * n, "forward", "K, V a2a")]
        bwd += [a2a(o, 2 * n, "backward", "O, dO a2a")]
    if r > 1:
        fwd.append(ring_forward(unit, r, n, dt, outer))
        bwd += ring_backward(unit, r, n, dt, outer)
    if a > 1:
        fwd.append(a2a(o, n, "forward", "O a2a"))
        bwd += [a2a(q, n, "backward", "dQ a2a"), a2a(kv, 2 * n, "backward", "dK, dV a2a")]
    return fwd + bwd


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
        q, kv, o = a2a_bytes(layout, model, options)
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
