"""alltoallv: per-peer byte counts `split[src][dst]` (MoE dispatch/combine); S is the largest
send buffer. Priced and modelled as alltoall, whose series take S = one rank's send buffer."""

from __future__ import annotations

from itertools import accumulate
from typing import TYPE_CHECKING

from commbench.dtypes import dtype_size
from commbench.ops import alltoall
from commbench.ops.checkdata import concat, fill
from commbench.ops.spec import POISON, Binding, Fit, OpSpec, Views, frac

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Step

Split = tuple[tuple[int, ...], ...]


def split_of(step: Step) -> Split:
    """The step's split (Step guarantees it for this op)."""
    assert step.split is not None, step
    return step.split


def buffers(step: Step, p: int) -> tuple[int, int]:
    """The largest row (send) and column (receive) totals over the ranks."""
    split = split_of(step)
    return max(sum(r) for r in split), max(sum(c) for c in zip(*split))


def record_bytes(step: Step) -> int:
    """The largest send buffer."""
    return max(sum(row) for row in split_of(step))


def priced_bytes(step: Step) -> int:
    """The busiest rank's bytes: the largest of any rank's send or receive total (the rank
    that finishes last under router skew)."""
    return max(buffers(step, len(split_of(step))))


def shrink_split(split: Split, k: int, el: int) -> Split:
    """An all-to-all-v split with every entry divided by k (whole elements, kept non-empty)."""
    return tuple(tuple(max(el, b // k // el * el) if b else 0 for b in row) for row in split)


def shrink(step: Step, p: int, max_bytes: int, k: int) -> Fit:
    """Every entry divided by k (growing k until it fits); time scales by the bytes ratio."""
    el, split = dtype_size(step.dtype), split_of(step)
    while True:
        small = shrink_split(split, k, el)
        new = step.with_(split=small, nbytes=max(sum(r) for r in small))
        s, r = buffers(new, p)
        if s + r <= max_bytes or all(b <= el for row in small for b in row):
            break
        k += 1
    return new, sum(map(sum, split)) / sum(map(sum, small)), k, True


def valid(step: Step) -> bool:
    """A square split."""
    return step.split is not None and all(len(r) == len(step.split) for r in step.split)


def sweep_fields(nbytes: int, p: int, peer: int) -> dict[str, Split]:
    """`commbench run` sweeps the even split; EP suites bring the skew."""
    return {"split": tuple(tuple([nbytes // p] * p) for _ in range(p))}


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """Rank r receives from q the elements of q's pattern that q's row places at r."""
    p, r, dt, el = comm.size, comm.rank, step.dtype, dtype_size(step.dtype)
    counts = [[b // el for b in row] for row in split_of(step)]
    assert len(counts) == p, (len(counts), p)
    scounts = counts[r]
    rcounts = [counts[q][r] for q in range(p)]
    sdispls = list(accumulate([0] + scounts[:-1]))
    rdispls = list(accumulate([0] + rcounts[:-1]))
    ns, nr = sum(scounts), sum(rcounts)
    s, rv = views.send(max(ns, 1) * el), views.recv(max(nr, 1) * el)
    exp = concat(fill(q, rcounts[q], dt, start=sum(counts[q][:r])) for q in range(p))
    return Binding(
        fn=comm.alltoallv(s, scounts, sdispls, rv, rcounts, rdispls),
        inputs=[(s, fill(r, max(ns, 1), dt)), (rv, fill(POISON, max(nr, 1), dt))],
        expected=[(views.recv(nr * el), exp)] if nr else [],
    )


SPEC = OpSpec(
    name="alltoallv",
    doc="per-peer byte counts (MoE dispatch/combine); S = the largest send buffer",
    aliases=("alltoall_v",),
    chunks=True,
    bus_formula="(p-1)/p",
    bus_factor=frac,
    costs=alltoall.SPEC.costs,
    buffers=buffers,
    record_bytes=record_bytes,
    priced_bytes=priced_bytes,
    priced_from=("alltoall",),
    shrink=shrink,
    valid=valid,
    sweep_fields=sweep_fields,
    bind=bind,
)
