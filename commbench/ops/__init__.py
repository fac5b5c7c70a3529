"""The communication ops: one module per op behind one seam (nccl-tests keeps one file per
collective). Each module in MODULES defines `SPEC`, an `OpSpec` (commbench.ops.spec); adding an
op is adding its module here. Byte counts and bus factors follow nccl-tests PERFORMANCE.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.errors import UsageError
from commbench.ops import (
    allgather,
    allgatherv,
    allreduce,
    alltoall,
    alltoallv,
    barrier,
    bibw,
    broadcast,
    bw,
    gather,
    iallreduce,
    p2p_schedule,
    pingpong,
    reduce,
    reduce_scatter,
    scatter,
    sendrecv,
)
from commbench.ops.spec import OpSpec

if TYPE_CHECKING:
    from commbench.traffic.program import Step

MODULES = (
    allreduce,
    allgather,
    reduce_scatter,
    alltoall,
    alltoallv,
    broadcast,
    reduce,
    sendrecv,
    pingpong,
    bw,
    bibw,
    barrier,
    gather,
    scatter,
    allgatherv,
    iallreduce,
    p2p_schedule,
)
OPS: dict[str, OpSpec] = {m.SPEC.name: m.SPEC for m in MODULES}
OP_ALIASES: dict[str, str] = {a: s.name for s in OPS.values() for a in s.aliases}
SWEEP_OPS = tuple(name for name, s in OPS.items() if s.built_by is None)  # `commbench run` ops


def op_spec(name: str) -> OpSpec:
    """The OpSpec of an op name or alias; unknown names are a UsageError listing the ops."""
    key = OP_ALIASES.get(name.lower(), name.lower())
    if key not in OPS:
        raise UsageError(f"unknown op {name!r}: choose from {', '.join(OPS)}")
    return OPS[key]


def canonical_op(name: str) -> str:
    """Records' op names, aliases resolved; a name commbench does not know is kept (lower-cased)."""
    key = str(name).lower()
    return OP_ALIASES.get(key, key)


def bus_factor(op: str, p: int) -> float:
    """nccl-tests bus-bandwidth factor of `op` in a group of p ranks."""
    return op_spec(op).bus_factor(p)


def round_bytes(op: str, nbytes: int, p: int, dtype: str) -> int:
    """S rounded down to what `op` can move in a group of p (OpSpec.round_bytes)."""
    return op_spec(op).round_bytes(nbytes, p, dtype)


def step_buffer_bytes(step: Step, p: int) -> tuple[int, int]:
    """(send, receive) bytes a rank needs for `step` in a group of p."""
    return OPS[step.op].buffers(step, p)


def record_bytes(step: Step) -> int:
    """S of a step as records report it (alltoallv: the largest send buffer)."""
    return OPS[step.op].record_bytes(step)


def supports(backend: str, op: str, dtype: str) -> str | None:
    """None if `backend` can run `op` on `dtype`, else a sentence saying why not.

    Data, not a transport query, so planners and validation can ask without importing one."""
    spec = OPS[op]
    if spec.backends is not None and backend not in spec.backends:
        return f"{op} runs on the {', '.join(spec.backends)} backend only, not {backend}"
    if backend == "mpi" and spec.reduces and dtype in ("float16", "bfloat16"):
        return (
            f"MPI has no {dtype} reduction, so {op} cannot run in {dtype} on the mpi "
            "backend: use float32, or --backend gloo/nccl"
        )
    return None
