"""Traffic as data: the ops, their byte conventions, and the Step / Program a pattern builds.

Byte counts and bus-bandwidth factors follow nccl-tests (doc/PERFORMANCE.md) so numbers
compare directly: `nbytes` S is the larger of one rank's input and output buffer, and
busbw = algbw x factor(p) with p the size of the *group*. A Program is what one training
step sends; the runner executes it to measure it, the calibration evaluates it to predict it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from commbench.errors import UsageError

DTYPE_SIZES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "float64": 8,
}
DTYPE_ALIASES = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "int": "int32",
    "fp64": "float64",
}


def dtype_size(dtype: str) -> int:
    """Bytes per element of a dtype name."""
    return DTYPE_SIZES[dtype]


def canonical_dtype(name: str) -> str:
    """`bf16` -> `bfloat16`; unknown names are a UsageError listing the choices."""
    name = DTYPE_ALIASES.get(name.lower(), name.lower())
    if name not in DTYPE_SIZES:
        raise UsageError(f"unknown dtype {name!r}: choose from {', '.join(DTYPE_SIZES)}")
    return name


@dataclass(frozen=True)
class OpSpec:
    """One communication op: how its S relates to the buffers, and its bus-bandwidth factor."""

    name: str
    bus_factor: Callable[[int], float]
    reduces: bool  # needs an arithmetic reduction (no fp16/bf16 on plain MPI)
    chunks: bool  # S must split evenly into p pieces (allgather, reduce_scatter, alltoall)
    doc: str
    min_group: int = 1
    max_group: int | None = None

    def send_recv_bytes(self, nbytes: int, p: int) -> tuple[int, int]:
        """(send buffer, receive buffer) bytes on one rank for S = nbytes in a group of p."""
        if self.name == "allgather":
            return nbytes // p, nbytes
        if self.name == "reduce_scatter":
            return nbytes, nbytes // p
        return nbytes, nbytes


def _ring(p: int) -> float:
    return 2.0 * (p - 1) / p


def _gather(p: int) -> float:
    return (p - 1) / p


def _one(p: int) -> float:
    return 1.0


OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec("allreduce", _ring, True, False, "sum over the group, every rank gets the result"),
        OpSpec("allgather", _gather, False, True, "S = gathered output (p x shard)"),
        OpSpec("reduce_scatter", _gather, True, True, "S = input (p x shard), sum, shard out"),
        OpSpec("alltoall", _gather, False, True, "S = one rank's send buffer, equal split"),
        OpSpec(
            "alltoallv",
            _gather,
            False,
            True,
            "per-peer byte counts (MoE dispatch/combine); S = the largest send buffer",
        ),
        OpSpec("broadcast", _one, False, False, "root = group position 0"),
        OpSpec("reduce", _one, True, False, "sum to group position 0"),
        OpSpec(
            "sendrecv",
            _one,
            False,
            False,
            "send to position+peer, receive from position-peer (ring, as nccl-tests)",
        ),
        OpSpec(
            "pingpong",
            _one,
            False,
            False,
            "OSU latency: half the round trip between 2 ranks",
            min_group=2,
            max_group=2,
        ),
        OpSpec(
            "p2p_schedule",
            _one,
            False,
            False,
            "per-position list of send/recv/compute actions (pipeline schedules)",
        ),
    )
}
OP_ALIASES = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reducescatter": "reduce_scatter",
    "reduce-scatter": "reduce_scatter",
    "all_to_all": "alltoall",
    "alltoall_v": "alltoallv",
    "bcast": "broadcast",
    "send_recv": "sendrecv",
    "latency": "pingpong",
}


def op_spec(name: str) -> OpSpec:
    """The OpSpec of an op name or alias; unknown names are a UsageError listing the ops."""
    key = OP_ALIASES.get(name.lower(), name.lower())
    if key not in OPS:
        raise UsageError(f"unknown op {name!r}: choose from {', '.join(OPS)}")
    return OPS[key]


def supports(backend: str, op: str, dtype: str) -> str | None:
    """None if `backend` can run `op` on `dtype`, else a sentence saying why not.

    Data, not a transport query, so planners and validation can ask without importing one."""
    if backend == "mpi" and OPS[op].reduces and dtype in ("float16", "bfloat16"):
        return (
            f"MPI has no {dtype} reduction, so {op} cannot run in {dtype} on the mpi "
            "backend: use float32, or --backend gloo/nccl"
        )
    return None


def bus_factor(op: str, p: int) -> float:
    """nccl-tests bus-bandwidth factor of `op` in a group of p ranks."""
    return op_spec(op).bus_factor(p)


def round_bytes(op: str, nbytes: int, p: int, dtype: str) -> int:
    """Round S down to what the op can move: whole elements, and p equal chunks where needed.

    nccl-tests does the same (count = S / wordsize / p * p). Never below one element (chunk).
    """
    unit = dtype_size(dtype) * (p if op_spec(op).chunks else 1)
    return max(unit, nbytes // unit * unit)


@dataclass(frozen=True)
class Action:
    """One entry of a p2p schedule: send to / receive from position+peer, or compute."""

    kind: str  # "send" | "recv" | "compute"
    peer: int = 0  # offset along the axis (+1 = next stage)
    nbytes: int = 0
    seconds: float = 0.0
    tag: int = 0

    def __post_init__(self) -> None:
        assert self.kind in ("send", "recv", "compute"), self.kind


@dataclass(frozen=True)
class Step:
    """One communication op of a training step, executed `repeat` times on the groups of `axis`.

    `nbytes` is S per rank in the nccl-tests convention. `split[src][dst]` gives the bytes of an
    all-to-all-v within a group (group positions); `peer` is the send/recv offset; `schedule`
    holds per-position action lists for op `p2p_schedule` (e.g. a 1F1B pipeline).
    """

    op: str
    nbytes: int
    axis: str = "world"
    repeat: float = 1
    phase: str = "forward"
    dtype: str = "bfloat16"
    label: str = ""
    split: tuple[tuple[int, ...], ...] | None = None
    peer: int = 1
    ring: bool = True
    schedule: tuple[tuple[Action, ...], ...] | None = None
    extrapolated: bool = False

    def __post_init__(self) -> None:
        assert self.op in OPS, self.op
        assert self.nbytes > 0, self.nbytes
        assert self.repeat > 0, self.repeat
        if self.op == "alltoallv":
            assert self.split is not None and all(len(r) == len(self.split) for r in self.split)
        if self.op == "p2p_schedule":
            assert self.schedule is not None

    @property
    def count(self) -> int:
        """Elements in the S-sized buffer."""
        return self.nbytes // dtype_size(self.dtype)

    @property
    def total_bytes(self) -> float:
        """S x repeat: the bytes this step accounts for in one training step."""
        return self.nbytes * self.repeat

    def with_(self, **changes) -> Step:
        """A copy with some fields changed (dataclasses.replace)."""
        return replace(self, **changes)


@dataclass(frozen=True)
class Program:
    """The ordered steps one training step produces, with the layout-independent context."""

    pattern: str
    steps: tuple[Step, ...]
    meta: dict = field(default_factory=dict)

    @property
    def total_bytes(self) -> float:
        """Sum of S x repeat over the steps."""
        return sum(s.total_bytes for s in self.steps)

    def axes(self) -> list[str]:
        """Axes used, in first-use order."""
        return list(dict.fromkeys(s.axis for s in self.steps))


def step_buffer_bytes(step: Step, p: int) -> tuple[int, int]:
    """(send, receive) bytes a rank needs for `step` in a group of p."""
    if step.op == "alltoallv":
        rows = [sum(r) for r in step.split]
        cols = [sum(c) for c in zip(*step.split)]
        return max(rows), max(cols)
    if step.op == "p2p_schedule":
        most = max((a.nbytes for acts in step.schedule for a in acts), default=0)
        return most, most
    return OPS[step.op].send_recv_bytes(step.nbytes, p)


def schedule_bytes(step: Step) -> int:
    """Bytes the busiest position of a p2p schedule sends."""
    return max(sum(a.nbytes for a in acts if a.kind == "send") for acts in step.schedule)


def record_bytes(step: Step) -> int:
    """S of a step as records report it (alltoallv: the largest send buffer)."""
    if step.op == "alltoallv":
        return max(sum(row) for row in step.split)
    if step.op == "p2p_schedule":
        return max(schedule_bytes(step), 1)
    return step.nbytes
