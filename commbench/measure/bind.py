"""Bind a Step to buffers on one group: the op closure, its check inputs and expected outputs.

Backend-agnostic: it computes counts, displacements and the exact expected values
(commbench.ops.checkdata) and asks the Communicator for a bound op. Each rank's input is the
pattern seeded by its group position, so a misplaced chunk is caught as well as a wrong sum. Inputs
and expected values are lazy `Fill`s, written and compared a chunk at a time, so binding
costs no memory and checking a point costs a few MB whatever its size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from commbench.measure.transport.base import Communicator, Fn
from commbench.ops.checkdata import Fill, concat, count_wrong, fill, fill_sum, fill_zeros
from commbench.traffic.program import Step, dtype_size

POISON = 1000  # seed of the junk written into receive buffers before a check


class BufferPool:
    """One send and one receive buffer per run, sized for the largest step and reused as views."""

    def __init__(self, comm: Communicator) -> None:
        self.comm = comm
        self.send: Any = comm.alloc(0)
        self.recv: Any = comm.alloc(0)
        self.capacity = (0, 0)

    def reserve(self, send_bytes: int, recv_bytes: int) -> None:
        """Grow (never shrink) so both buffers hold at least these many bytes."""
        s, r = self.capacity
        if send_bytes > s:
            self.send = self.comm.alloc(send_bytes)
        if recv_bytes > r:
            self.recv = self.comm.alloc(recv_bytes)
        self.capacity = (max(s, send_bytes), max(r, recv_bytes))


def write_fill(comm: Communicator, view: Any, values: Fill) -> None:
    """Write `values` into `view` a chunk at a time."""
    for a, chunk in values.chunks():
        comm.write(view[a : a + len(chunk)], chunk)


def count_wrong_fill(comm: Communicator, view: Any, expected: Fill) -> int:
    """Elements of `view` that differ from `expected`, read back a chunk at a time."""
    assert len(view) == expected.n, (len(view), expected.n)
    return sum(
        count_wrong(comm.read(view[a : a + len(chunk)]), chunk) for a, chunk in expected.chunks()
    )


@dataclass
class Bound:
    """A step ready to run: `fn` is timed; prepare/verify/reset bracket one checked call."""

    fn: Fn
    comm: Communicator
    inputs: list[tuple[Any, Fill]] = field(default_factory=list)
    expected: list[tuple[Any, Fill]] = field(default_factory=list)
    zero_after: list[tuple[Any, Fill]] = field(default_factory=list)
    time_scale: float = 1.0  # pingpong reports half the round trip
    schedule_state: dict | None = None

    def prepare(self) -> None:
        """Write inputs (and poison receive buffers) before the checked call."""
        for view, values in self.inputs:
            write_fill(self.comm, view, values)
        if self.schedule_state is not None:
            self.schedule_state.update(checking=True, wrong=0)
        self.comm.sync()

    def verify(self) -> int:
        """Elements that differ from the exact expected result on this rank."""
        wrong = sum(count_wrong_fill(self.comm, v, e) for v, e in self.expected)
        if self.schedule_state is not None:
            wrong += self.schedule_state["wrong"]
            self.schedule_state["checking"] = False
        return wrong

    def reset(self) -> None:
        """Zero buffers that in-place reductions keep growing, so timed values stay finite."""
        for view, zeros in self.zero_after:
            write_fill(self.comm, view, zeros)
        self.comm.sync()


def bind(comm: Communicator, step: Step, pool: BufferPool) -> Bound:
    """Bind `step` on group `comm` (this rank's group) using the pool's buffers."""
    p, r, dt, el = comm.size, comm.rank, step.dtype, dtype_size(step.dtype)
    S, n = step.nbytes, step.nbytes // el

    def sview(nbytes: int) -> Any:
        return comm.view(pool.send, nbytes, dt)

    def rview(nbytes: int) -> Any:
        return comm.view(pool.recv, nbytes, dt)

    op = step.op
    if op == "allreduce":
        s, rv = sview(S), rview(S)
        mine = fill(r, n, dt)
        return Bound(
            comm.allreduce(s, rv),
            comm,
            [(s, mine), (rv, mine)],
            [(rv, fill_sum(range(p), n, dt))],
            [(rv, fill_zeros(n, dt))],
        )
    if op == "reduce":
        s, rv = sview(S), rview(S)
        mine = fill(r, n, dt)
        exp = [(rv, fill_sum(range(p), n, dt))] if r == 0 else []
        return Bound(
            comm.reduce(s, rv, 0), comm, [(s, mine), (rv, mine)], exp, [(rv, fill_zeros(n, dt))]
        )
    if op == "allgather":
        c = n // p
        s, rv = sview(c * el), rview(S)
        exp = concat(fill(q, c, dt) for q in range(p))
        return Bound(
            comm.allgather(s, rv),
            comm,
            [(s, fill(r, c, dt)), (rv, fill(POISON, n, dt))],
            [(rv, exp)],
        )
    if op == "reduce_scatter":
        c = n // p
        s, rv = sview(S), rview(c * el)
        return Bound(
            comm.reduce_scatter(s, rv),
            comm,
            [(s, fill(r, n, dt)), (rv, fill(POISON, c, dt))],
            [(rv, fill_sum(range(p), c, dt, start=r * c))],
        )
    if op == "alltoall":
        c = n // p
        s, rv = sview(S), rview(S)
        exp = concat(fill(q, c, dt, start=r * c) for q in range(p))
        return Bound(
            comm.alltoall(s, rv),
            comm,
            [(s, fill(r, n, dt)), (rv, fill(POISON, n, dt))],
            [(rv, exp)],
        )
    if op == "alltoallv":
        counts = [[b // el for b in row] for row in step.split]
        assert len(counts) == p, (len(counts), p)
        scounts = counts[r]
        rcounts = [counts[q][r] for q in range(p)]
        sdispls = list(np.cumsum([0] + scounts[:-1]))
        rdispls = list(np.cumsum([0] + rcounts[:-1]))
        ns, nr = sum(scounts), sum(rcounts)
        s, rv = sview(max(ns, 1) * el), rview(max(nr, 1) * el)
        exp = concat(fill(q, rcounts[q], dt, start=int(np.sum(counts[q][:r]))) for q in range(p))
        fn = comm.alltoallv(
            s, scounts, [int(x) for x in sdispls], rv, rcounts, [int(x) for x in rdispls]
        )
        return Bound(
            fn,
            comm,
            [(s, fill(r, max(ns, 1), dt)), (rv, fill(POISON, max(nr, 1), dt))],
            [(rview(nr * el), exp)] if nr else [],
        )
    if op == "broadcast":
        buf = rview(S)
        first = fill(0, n, dt) if r == 0 else fill(POISON + r, n, dt)
        return Bound(comm.broadcast(buf, 0), comm, [(buf, first)], [(buf, fill(0, n, dt))])
    if op == "sendrecv":
        k = step.peer
        if step.ring:
            dest, source = (r + k) % p, (r - k) % p
        else:
            dest = r + k if 0 <= r + k < p else None
            source = r - k if 0 <= r - k < p else None
        s, rv = sview(S), rview(S)
        exp = [(rv, fill(source, n, dt))] if source is not None else []
        return Bound(
            comm.sendrecv(s, dest, rv, source),
            comm,
            [(s, fill(r, n, dt)), (rv, fill(POISON, n, dt))],
            exp,
        )
    if op == "pingpong":
        assert p == 2, p
        buf = rview(S)
        first = fill(0, n, dt) if r == 0 else fill(POISON, n, dt)
        return Bound(
            comm.pingpong(buf, 1 - r, r == 0),
            comm,
            [(buf, first)],
            [(buf, fill(0, n, dt))],
            time_scale=0.5,
        )
    if op == "p2p_schedule":
        return _bind_schedule(comm, step, pool)
    raise AssertionError(op)


def _bind_schedule(comm: Communicator, step: Step, pool: BufferPool) -> Bound:
    """Run this position's action list: sends are non-blocking (waited at the end), receives
    block, compute sleeps. Non-blocking sends make any 1F1B-style order deadlock-free."""
    r, dt, el = comm.rank, step.dtype, dtype_size(step.dtype)
    actions = step.schedule[r] if r < len(step.schedule) else ()
    most = max((a.nbytes for a in actions), default=0)
    send_all = comm.view(pool.send, max(most, el), dt)
    state = {"checking": False, "wrong": 0}
    plan = []
    for a in actions:
        if a.kind == "compute":
            plan.append((0, a.seconds, None, 0, None))
            continue
        peer = r + a.peer
        assert 0 <= peer < comm.size, (r, a)
        n = a.nbytes // el
        if a.kind == "send":
            plan.append((1, peer, comm.view(pool.send, a.nbytes, dt), a.tag, None))
        else:
            plan.append((2, peer, comm.view(pool.recv, a.nbytes, dt), a.tag, fill(peer, n, dt)))
    isend, recv, waitall, compute = comm.isend, comm.recv, comm.waitall, comm.compute

    def fn() -> None:
        pending = []
        for kind, peer, view, tag, expected in plan:
            if kind == 1:
                pending.append(isend(view, peer, tag))
            elif kind == 2:
                recv(view, peer, tag)
                if state["checking"]:
                    state["wrong"] += count_wrong_fill(comm, view, expected)
            else:
                compute(peer)
        waitall(pending)

    return Bound(fn, comm, [(send_all, fill(r, max(most, el) // el, dt))], [], schedule_state=state)
