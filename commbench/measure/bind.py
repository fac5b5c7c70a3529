"""Bind a Step to buffers on one group: the op closure, its check inputs and expected outputs.

Backend-agnostic: the step's op (commbench.ops) computes counts, displacements and the exact
expected values and asks the Communicator for a bound op. Each rank's input is the pattern
seeded by its group position, so a misplaced chunk is caught as well as a wrong sum. Inputs
and expected values are lazy `Fill`s, written and compared a chunk at a time, so binding
costs no memory and checking a point costs a few MB whatever its size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from commbench.measure.transport.base import HUGEPAGE, Communicator, Fn
from commbench.ops import OPS
from commbench.ops.checkdata import count_wrong_fill, write_fill
from commbench.ops.spec import Binding, Views
from commbench.traffic.program import Step


class BufferPool:
    """One send and one receive buffer per run, sized for the largest step and reused as views;
    `pages` is the --buffers mode (transport.base HUGEPAGE or PLAIN) where the backend allocates."""

    def __init__(self, comm: Communicator, pages: str = HUGEPAGE) -> None:
        self.comm = comm
        self.pages = pages
        self.send: Any = comm.alloc(0, pages)
        self.recv: Any = comm.alloc(0, pages)
        self.capacity = (0, 0)

    def reserve(self, send_bytes: int, recv_bytes: int) -> None:
        """Grow (never shrink) so both buffers hold at least these many bytes."""
        s, r = self.capacity
        if send_bytes > s:
            self.send = self.comm.alloc(send_bytes, self.pages)
        if recv_bytes > r:
            self.recv = self.comm.alloc(recv_bytes, self.pages)
        self.capacity = (max(s, send_bytes), max(r, recv_bytes))


@dataclass
class Bound:
    """A step ready to run: `fn` is timed; prepare/verify/reset bracket one checked call."""

    comm: Communicator
    binding: Binding

    @property
    def fn(self) -> Fn:
        return self.binding.fn

    @property
    def time_scale(self) -> float:
        return self.binding.time_scale

    def checked(self) -> None:
        """The call the check brackets: the timed one, unless the op checks another way."""
        (self.binding.checked_fn or self.binding.fn)()

    def prepare(self) -> None:
        """Write inputs (and poison receive buffers) before the checked call."""
        for view, values in self.binding.inputs:
            write_fill(self.comm, view, values)
        if self.binding.inline is not None:
            self.binding.inline.checking, self.binding.inline.wrong = True, 0
        self.comm.sync()

    def verify(self) -> int:
        """Elements that differ from the exact expected result on this rank."""
        wrong = sum(count_wrong_fill(self.comm, v, e) for v, e in self.binding.expected)
        if self.binding.inline is not None:
            wrong += self.binding.inline.wrong
            self.binding.inline.checking = False
        return wrong

    def reset(self) -> None:
        """Zero buffers that in-place reductions keep growing, so timed values stay finite."""
        for view, zeros in self.binding.zero_after:
            write_fill(self.comm, view, zeros)
        self.comm.sync()


def bind(comm: Communicator, step: Step, pool: BufferPool) -> Bound:
    """Bind `step` on group `comm` (this rank's group) using the pool's buffers."""
    views = Views(comm, pool.send, pool.recv, step.dtype)
    return Bound(comm, OPS[step.op].bind(comm, step, views))
