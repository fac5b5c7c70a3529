"""reduce_scatter: S is the input (p shards), summed over the group; rank r keeps shard r."""

from __future__ import annotations

from typing import TYPE_CHECKING

from commbench.dtypes import dtype_size
from commbench.ops.checkdata import fill, fill_sum
from commbench.ops.spec import POISON, SHARD_COSTS, Binding, OpSpec, Views, frac

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step


def buffers(step: Step, p: int) -> tuple[int, int]:
    """S in, one shard out."""
    return step.nbytes, step.nbytes // p


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Every rank sends its pattern; rank r expects the sum of elements [r c, (r+1) c)."""
    p, r, n, dt = comm.size, comm.rank, step.count, step.dtype
    c = n // p
    s, rv = views.send(step.nbytes), views.recv(c * dtype_size(dt))
    return Binding(
        fn=comm.reduce_scatter(s, rv),
        inputs=[(s, fill(r, n, dt)), (rv, fill(POISON, c, dt))],
        expected=[(rv, fill_sum(range(p), c, dt, start=r * c))],
    )


SPEC = OpSpec(
    name="reduce_scatter",
    doc="S = input (p x shard), sum, shard out",
    aliases=("reducescatter", "reduce-scatter"),
    reduces=True,
    chunks=True,
    bus_formula="(p-1)/p",
    bus_factor=frac,
    costs=SHARD_COSTS,
    buffers=buffers,
    bind=bind,
)
