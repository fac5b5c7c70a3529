"""scatter: position 0's S split into p shards, shard q to position q; S is the root's send
buffer, so osu_scatter's per-rank size is S/p (--per-rank-size)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.dtypes import dtype_size
from commbench.ops.checkdata import concat, fill
from commbench.ops.spec import POISON, SHARD_COSTS, Binding, OpSpec, Views, frac

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def buffers(step: Step, p: int) -> tuple[int, int]:
    """S out (used at the root), one shard in."""
    return step.nbytes, step.nbytes // p


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """The root sends shard q = pattern q; position q must receive exactly it."""
    p, r, n, dt = comm.size, comm.rank, step.count, step.dtype
    c = n // p
    s, rv = views.send(step.nbytes), views.recv(c * dtype_size(dt))
    root_in = [(s, concat(fill(q, c, dt) for q in range(p)))] if r == 0 else []
    return Binding(
        fn=comm.scatter(s, rv, 0),
        inputs=[*root_in, (rv, fill(POISON, c, dt))],
        expected=[(rv, fill(r, c, dt))],
    )


SPEC = OpSpec(
    name="scatter",
    doc="osu_scatter / IMB Scatter: S = position 0's send buffer (p x shard)",
    chunks=True,
    per_rank=True,  # osu_scatter and IMB Scatter: the shard one rank receives
    rooted=True,
    bus_formula="(p-1)/p",  # the root's link carries all shards but its own
    bus_factor=frac,
    costs=SHARD_COSTS,
    buffers=buffers,
    backends=("mpi",),
    bind=bind,
)
