"""allgather: S is the gathered output (p shards); each rank sends one shard of S/p."""

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
    """Rank q's shard is pattern q; the output is the shards in rank order."""
    p, n, dt = comm.size, step.count, step.dtype
    c = n // p
    s, rv = views.send(c * dtype_size(dt)), views.recv(step.nbytes)
    return Binding(
        fn=comm.allgather(s, rv),
        inputs=[(s, fill(comm.rank, c, dt)), (rv, fill(POISON, n, dt))],
        expected=[(rv, concat(fill(q, c, dt) for q in range(p)))],
    )


SPEC = OpSpec(
    name="allgather",
    doc="S = gathered output (p x shard)",
    aliases=("all_gather",),
    chunks=True,
    per_rank=True,  # osu_allgather and IMB Allgather: the message one rank sends (to each peer)
    bus_formula="(p-1)/p",
    bus_factor=frac,
    costs=SHARD_COSTS,
    buffers=buffers,
    bind=bind,
)
