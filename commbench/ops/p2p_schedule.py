"""p2p_schedule: per-position lists of send/recv/compute actions (pipeline schedules such as
1F1B), run as written: sends non-blocking (waited at the end), receives blocking, compute as a
sleep. Non-blocking sends make any 1F1B-style order deadlock-free. Built by the pp pattern."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from commbench.dtypes import dtype_size
from commbench.ops.checkdata import Fill, count_wrong_fill, fill
from commbench.ops.spec import Binding, Fit, InlineCheck, OpSpec, Views, one

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Action, Step

Schedule = tuple[tuple["Action", ...], ...]
SEND, RECV, COMPUTE = 1, 2, 0


def schedule_of(step: Step) -> Schedule:
    """The step's action lists (Step guarantees them for this op)."""
    assert step.schedule is not None, step
    return step.schedule


def buffers(step: Step, p: int) -> tuple[int, int]:
    """The largest message, for both sends and receives."""
    most = max((a.nbytes for acts in schedule_of(step) for a in acts), default=0)
    return most, most


def schedule_bytes(step: Step) -> int:
    """Bytes the busiest position of a p2p schedule sends."""
    return max(sum(a.nbytes for a in acts if a.kind == "send") for acts in schedule_of(step))


def record_bytes(step: Step) -> int:
    """The busiest position's sent bytes (at least 1)."""
    return max(schedule_bytes(step), 1)


def split_schedule(step: Step, piece: int) -> tuple[Step, int]:
    """Each send/recv of more than `piece` bytes becomes several messages (tags stay unique)."""
    el = dtype_size(step.dtype)
    piece = max(el, piece // el * el)
    schedule = schedule_of(step)
    k = max(math.ceil(a.nbytes / piece) for acts in schedule for a in acts)
    out = []
    for acts in schedule:
        new: list[Action] = []
        for a in acts:
            if a.kind == "compute":
                new.append(a)
                continue
            n, left = math.ceil(a.nbytes / piece), a.nbytes
            for i in range(n):
                size = min(piece, left)
                left -= size
                new.append(replace(a, nbytes=size, seconds=0.0, tag=a.tag * k + i))
        out.append(tuple(new))
    most = max((a.nbytes for acts in out for a in acts if a.kind != "compute"), default=el)
    return step.with_(schedule=tuple(out), nbytes=most), k


def shrink(step: Step, p: int, max_bytes: int, k: int) -> Fit:
    """Messages split into pieces of max_bytes/2: every byte still moves, nothing scales."""
    new, pieces = split_schedule(step, max_bytes // 2)
    return new, 1.0, pieces, False


def valid(step: Step) -> bool:
    """Carries its action lists."""
    return step.schedule is not None


def bind(comm: Communicator, step: Step, views: Views) -> Binding:
    """This position's actions as one closure; each receive is checked as it lands, since
    every message reuses the front of the receive buffer."""
    r, dt, el = comm.rank, step.dtype, dtype_size(step.dtype)
    schedule = schedule_of(step)
    actions = schedule[r] if r < len(schedule) else ()
    most = max((a.nbytes for a in actions), default=0)
    send_all = views.send(max(most, el))
    check = InlineCheck()
    plan: list[tuple[int, int, Any, int, Fill | None, float]] = []
    for a in actions:
        if a.kind == "compute":
            plan.append((COMPUTE, 0, None, 0, None, a.seconds))
            continue
        peer = r + a.peer
        assert 0 <= peer < comm.size, (r, a)
        if a.kind == "send":
            plan.append((SEND, peer, views.send(a.nbytes), a.tag, None, 0.0))
        else:
            expected = fill(peer, a.nbytes // el, dt)
            plan.append((RECV, peer, views.recv(a.nbytes), a.tag, expected, 0.0))
    isend, recv, waitall, compute = comm.isend, comm.recv, comm.waitall, comm.compute

    def fn() -> None:
        pending = []
        for kind, peer, view, tag, expected, seconds in plan:
            if kind == SEND:
                pending.append(isend(view, peer, tag))
            elif kind == RECV:
                recv(view, peer, tag)
                if check.checking:
                    assert expected is not None
                    check.wrong += count_wrong_fill(comm, view, expected)
            else:
                compute(seconds)
        waitall(pending)

    return Binding(
        fn=fn, inputs=[(send_all, fill(r, max(most, el) // el, dt))], expected=[], inline=check
    )


SPEC = OpSpec(
    name="p2p_schedule",
    doc="per-position list of send/recv/compute actions (pipeline schedules)",
    bus_formula="1",
    bus_factor=one,
    buffers=buffers,
    record_bytes=record_bytes,
    priced_bytes=record_bytes,
    shrink=shrink,
    valid=valid,
    built_by="pp",
    scheduled=True,
    bind=bind,
)
