"""p2p_schedule: per-position lists of send/recv/compute actions (pipeline schedules such as
1F1B), issued as NCCL requires: each run of sends and the receives right after them is one
fused group, posted together and waited together (`batch_isend_irecv`, as Megatron-LM's
`send_forward_recv_backward`), with no tags; compute is a sleep. NCCL has no tags and its
unfused send/recv block, so an unfused 1F1B deadlocks there; `nccl_deadlock` replays a
schedule under those rules (the tests run it over every schedule the pp pattern builds).
The same groups run on gloo and MPI, so every backend measures the same thing. Built by pp."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from commbench.dtypes import dtype_size
from commbench.ops.checkdata import Fill, count_wrong_fill, fill
from commbench.ops.spec import Binding, Fit, InlineCheck, OpSpec, Views, one

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator
    from commbench.traffic.program import Action, Step

Schedule = tuple[tuple["Action", ...], ...]
Group = tuple["Action", ...]  # one compute, or sends and receives posted and waited together


def schedule_of(step: Step) -> Schedule:
    """The step's action lists (Step guarantees them for this op)."""
    assert step.schedule is not None, step
    return step.schedule


def fused_groups(actions: Sequence[Action]) -> tuple[Group, ...]:
    """One position's actions as they are issued: a compute alone; otherwise a run of sends
    and the receives that follow them, fused. A send after a receive starts a new group, since
    it may forward what was received (a stage sends on only what it got)."""
    out: list[Group] = []
    cur: list[Action] = []
    for a in actions:
        if a.kind == "compute" or (a.kind == "send" and any(c.kind == "recv" for c in cur)):
            if cur:
                out.append(tuple(cur))
            cur = []
        if a.kind == "compute":
            out.append((a,))
        else:
            cur.append(a)
    if cur:
        out.append(tuple(cur))
    return tuple(out)


def unfused_groups(actions: Sequence[Action]) -> tuple[Group, ...]:
    """Every action on its own: unbatched isend and blocking recv, which NCCL runs as one
    blocking kernel each (the order the schedule was once issued in; the tests' bad case)."""
    return tuple((a,) for a in actions)


def nccl_deadlock(groups: Sequence[Sequence[Group]]) -> str | None:
    """Why `groups` (per position) cannot complete under NCCL's point-to-point rules, or None.

    The rules (NCCL's group calls; torch's batch_isend_irecv): there are no tags, so the k-th
    send from a to b meets the k-th receive at b from a, in issue order; a group's operations
    are posted together and the group completes once each one's counterpart is posted too; a
    position issues its next group only when the last has completed; compute always completes.
    Matched messages must agree on bytes and tag (the pairing the schedule meant).
    """
    p = len(groups)
    where: dict[tuple[str, int, int, int], int] = {}  # (kind, src, dst, k) -> group index
    seen: dict[tuple[str, int, int], list[Action]] = {}  # (kind, src, dst) -> in issue order
    for i, gs in enumerate(groups):
        for g, group in enumerate(gs):
            for a in group:
                if a.kind == "compute":
                    continue
                j = i + a.peer
                if not 0 <= j < p:
                    return f"position {i} {a.kind}s to/from position {j}, outside 0..{p - 1}"
                src, dst = (i, j) if a.kind == "send" else (j, i)
                order = seen.setdefault((a.kind, src, dst), [])
                where[(a.kind, src, dst, len(order))] = g
                order.append(a)
    for (kind, src, dst), sends in seen.items():
        if kind != "send":
            continue
        recvs = seen.get(("recv", src, dst), [])
        for k, (s, r) in enumerate(zip(sends, recvs)):
            if (s.nbytes, s.tag) != (r.nbytes, r.tag):
                return (
                    f"send {k} from {src} to {dst} ({s.nbytes} B, tag {s.tag}) meets a "
                    f"receive of {r.nbytes} B, tag {r.tag}"
                )
    for (kind, src, dst), acts in seen.items():
        other = seen.get(("recv" if kind == "send" else "send", src, dst), [])
        if len(acts) != len(other):
            return f"{len(acts)} {kind}(s) from {src} to {dst} against {len(other)}"
    pos = [0] * p
    counted: list[list[list[tuple[str, int, int, int]]]] = [[] for _ in range(p)]
    for i, gs in enumerate(groups):
        index: dict[tuple[str, int, int], int] = {}
        for group in gs:
            partners = []
            for a in group:
                if a.kind == "compute":
                    continue
                j = i + a.peer
                src, dst = (i, j) if a.kind == "send" else (j, i)
                k = index.get((a.kind, src, dst), 0)
                index[(a.kind, src, dst)] = k + 1
                partners.append(("recv" if a.kind == "send" else "send", src, dst, k))
            counted[i].append(partners)
    moved = True
    while moved:
        moved = False
        for i in range(p):
            while pos[i] < len(groups[i]) and all(
                where[key] <= pos[key[2] if key[0] == "recv" else key[1]]
                for key in counted[i][pos[i]]
            ):
                pos[i] += 1
                moved = True
    if any(pos[i] < len(groups[i]) for i in range(p)):
        stuck = ", ".join(f"{i}@{pos[i]}" for i in range(p) if pos[i] < len(groups[i]))
        return f"deadlock: positions stuck at groups {stuck} (position@group)"
    return None


def buffers(step: Step, p: int) -> tuple[int, int]:
    """The largest message to send; the largest group's receives, side by side."""
    sched = schedule_of(step)
    send = max((a.nbytes for acts in sched for a in acts if a.kind == "send"), default=0)
    recv = max(
        (
            sum(a.nbytes for a in g if a.kind == "recv")
            for acts in sched
            for g in fused_groups(acts)
        ),
        default=0,
    )
    return send, recv


def schedule_bytes(step: Step) -> int:
    """Bytes the busiest position of a p2p schedule sends."""
    return max(sum(a.nbytes for a in acts if a.kind == "send") for acts in schedule_of(step))


def record_bytes(step: Step) -> int:
    """The busiest position's sent bytes (at least 1)."""
    return max(schedule_bytes(step), 1)


def split_schedule(step: Step, piece: int) -> tuple[Step, int]:
    """Each send/recv of more than `piece` bytes becomes several messages (tags stay unique),
    side by side in the same fused group: the send buffer shrinks to a piece, the receive
    buffer still holds a group's messages whole (they are in flight together)."""
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
    """This position's fused groups as one closure. A group's receives land side by side at
    the front of the receive buffer and are checked once the group completes (the next group
    reuses the space)."""
    r, dt, el = comm.rank, step.dtype, dtype_size(step.dtype)
    schedule = schedule_of(step)
    actions = schedule[r] if r < len(schedule) else ()
    most = max((a.nbytes for a in actions if a.kind == "send"), default=0)
    send_all = views.send(max(most, el))
    check = InlineCheck()
    plan: list[tuple[Any, list[tuple[Any, Fill]], float]] = []  # (group fn, checks, compute)
    for group in fused_groups(actions):
        if group[0].kind == "compute":
            plan.append((None, [], group[0].seconds))
            continue
        ops: list[tuple[str, Any, int]] = []
        checks: list[tuple[Any, Fill]] = []
        offset = 0
        for a in group:
            peer = r + a.peer
            assert 0 <= peer < comm.size, (r, a)
            if a.kind == "send":
                ops.append(("send", views.send(a.nbytes), peer))
            else:
                view = views.recv(a.nbytes, offset)
                offset += a.nbytes
                ops.append(("recv", view, peer))
                checks.append((view, fill(peer, a.nbytes // el, dt)))
        plan.append((comm.p2p(ops), checks, 0.0))
    compute = comm.compute

    def fn() -> None:
        for run, checks, seconds in plan:
            if run is None:
                compute(seconds)
                continue
            run()
            if check.checking:
                for view, expected in checks:
                    check.wrong += count_wrong_fill(comm, view, expected)

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
