"""gather: every position's shard of S/p to position 0; S is the gathered output (p shards),
as allgather's, so osu_gather's per-rank size is S/p (--per-rank-size)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.dtypes import dtype_size
from commbench.ops.checkdata import concat, fill
from commbench.ops.spec import POISON, SHARD_COSTS, Binding, OpSpec, Views, frac

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def buffers(step: Step, p: int) -> tuple[int, int]:
    """One shard out, S in (used at the root)."""
    return step.nbytes // p, step.nbytes


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Position q sends pattern q; the root must hold the shards in position order."""
    p, r, n, dt = comm.size, comm.rank, step.count, step.dtype
    c = n // p
    s, rv = views.send(c * dtype_size(dt)), views.recv(step.nbytes)
    return Binding(
        fn=comm.gather(s, rv, 0),
        inputs=[(s, fill(r, c, dt)), (rv, fill(POISON, n, dt))],
        expected=[(rv, concat(fill(q, c, dt) for q in range(p)))] if r == 0 else [],
    )


SPEC = OpSpec(
    name="gather",
    doc="osu_gather / IMB Gather: S = gathered output at position 0 (p x shard)",
    chunks=True,
    per_rank=True,  # osu_gather and IMB Gather: the shard one rank sends
    rooted=True,
    bus_formula="(p-1)/p",  # the root's link carries all shards but its own
    bus_factor=frac,
    costs=SHARD_COSTS,
    buffers=buffers,
    backends=("mpi",),
    bind=bind,
)
