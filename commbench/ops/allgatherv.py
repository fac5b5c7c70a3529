"""allgatherv: allgather through MPI_Allgatherv with equal counts, as osu_allgatherv and IMB
Allgatherv time it; S is the gathered output. The displacements are reversed (position q's
shard lands at slot p-1-q), so the check catches displacements ignored as well as wrong data."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.dtypes import dtype_size
from commbench.ops.checkdata import concat, fill
from commbench.ops.spec import POISON, SHARD_COSTS, Binding, OpSpec, Views, frac

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def buffers(step: Step, p: int) -> tuple[int, int]:
    """One shard out, S in."""
    return step.nbytes // p, step.nbytes


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Position q sends pattern q into slot p-1-q of every output."""
    p, r, n, dt = comm.size, comm.rank, step.count, step.dtype
    c = n // p
    s, rv = views.send(c * dtype_size(dt)), views.recv(step.nbytes)
    displs = [(p - 1 - q) * c for q in range(p)]
    return Binding(
        fn=comm.allgatherv(s, rv, [c] * p, displs),
        inputs=[(s, fill(r, c, dt)), (rv, fill(POISON, n, dt))],
        expected=[(rv, concat(fill(p - 1 - j, c, dt) for j in range(p)))],
    )


SPEC = OpSpec(
    name="allgatherv",
    doc="osu_allgatherv / IMB Allgatherv: equal counts, S = gathered output",
    chunks=True,
    per_rank=True,  # osu_allgatherv and IMB Allgatherv: the shard one rank sends
    bus_formula="(p-1)/p",  # as allgather (nccl-tests PERFORMANCE.md)
    bus_factor=frac,
    costs=SHARD_COSTS,
    buffers=buffers,
    backends=("mpi",),
    bind=bind,
)
