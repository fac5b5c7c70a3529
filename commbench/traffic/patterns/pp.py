"""Pipeline parallelism with the 1F1B schedule (PipeDream-Flush, Narayanan et al. 2021; the
non-interleaved schedule of Megatron-LM): stage i runs min(p-i-1, m) warm-up forwards, then
alternates one forward and one backward, then drains the remaining backwards. Each forward
sends an activation of b (s/c) h elements (/t with sequence parallel) to the next stage,
each backward its gradient to the previous one. Optional synthetic compute per micro-batch
lets the bubble (p-1)/(m+p-1) be measured rather than assumed.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

from commbench.errors import UsageError
from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import Fact, TrafficOptions, check
from commbench.traffic.program import Action, Program, Step

NAME = "pp"
AXIS = Axis.PP
FWD, BWD = 0, 1


@dataclass(frozen=True)
class Options(TrafficOptions):
    """1F1B over `micro_batches`; compute_ms of forward per micro-batch and stage (backward =
    backward_factor x forward) stands in for the layers' compute so the bubble shows."""

    micro_batches: int = 8
    sequence_parallel: bool = False
    compute_ms: float = 0.0
    backward_factor: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compute_ms < 0 or self.backward_factor < 0:
            raise UsageError("compute_ms and backward_factor must be 0 or more")


def bubble_fraction(p: int, m: int) -> float:
    """Idle fraction of a 1F1B (or GPipe) pipeline with equal stages: (p-1)/(m+p-1)."""
    return (p - 1) / (m + p - 1)


def warmup_forwards(p: int, stage: int, m: int) -> int:
    """Forwards stage `stage` runs before its first backward: min(p - stage - 1, m)."""
    return min(p - stage - 1, m)


def one_f_one_b(p: int, m: int) -> list[list[tuple[int, int]]]:
    """Per stage, the ordered (FWD|BWD, micro-batch) passes of the 1F1B schedule."""
    order = []
    for i in range(p):
        w = warmup_forwards(p, i, m)
        passes = [(FWD, j) for j in range(w)]
        for j in range(m - w):
            passes += [(FWD, w + j), (BWD, j)]
        passes += [(BWD, j) for j in range(m - w, m)]
        order.append(passes)
    return order


def tag(direction: int, micro_batch: int) -> int:
    """Message tag: unique per direction and micro-batch, so matching never depends on order."""
    return 2 * micro_batch + direction


def schedule(
    p: int, m: int, nbytes: int, forward_s: float = 0.0, backward_s: float = 0.0
) -> tuple[tuple[Action, ...], ...]:
    """Per-stage action lists of 1F1B: a forward receives from the previous stage, computes,
    sends to the next; a backward receives from the next, computes, sends to the previous."""
    out = []
    for i, passes in enumerate(one_f_one_b(p, m)):
        acts: list[Action] = []
        for d, j in passes:
            src, dst = (-1, +1) if d == FWD else (+1, -1)
            if 0 <= i + src < p:
                acts.append(Action("recv", src, nbytes, tag=tag(d, j)))
            seconds = forward_s if d == FWD else backward_s
            if seconds > 0:
                acts.append(Action("compute", seconds=seconds))
            if 0 <= i + dst < p:
                acts.append(Action("send", dst, nbytes, tag=tag(d, j)))
        out.append(tuple(acts))
    return tuple(out)


def forward_schedule(
    p: int, m: int, nbytes: int, forward_s: float = 0.0
) -> tuple[tuple[Action, ...], ...]:
    """Per-stage action lists of an inference pipeline: each of m micro-batches is received
    from the previous stage, computed and sent to the next (1F1B's forward passes alone)."""
    out = []
    for i in range(p):
        acts: list[Action] = []
        for j in range(m):
            if i > 0:
                acts.append(Action("recv", -1, nbytes, tag=tag(FWD, j)))
            if forward_s > 0:
                acts.append(Action("compute", seconds=forward_s))
            if i < p - 1:
                acts.append(Action("send", +1, nbytes, tag=tag(FWD, j)))
        out.append(tuple(acts))
    return tuple(out)


def stage_links(groups: tuple[tuple[int, ...], ...], nodes: tuple[int, ...]) -> tuple[str, ...]:
    """Link class between stage i and i+1, for each i: `inter` where any pipeline's two ranks
    sit on different nodes (the pipelines run at once, so the slowest pair sets the pace),
    else `intra`. With tp and dp inside a node, pp=4 on 2 nodes is intra, inter, intra."""
    p = len(groups[0])
    if not nodes:
        return ("intra",) * (p - 1)
    return tuple(
        "inter" if any(nodes[g[i]] != nodes[g[i + 1]] for g in groups) else "intra"
        for i in range(p - 1)
    )


def simulate(
    sched: tuple[tuple[Action, ...], ...],
    message_s: float | Callable[[int, int, int], float] = 0.0,
    on_compute: Callable[[int, int, float, float], None] | None = None,
    half_duplex: frozenset[int] = frozenset(),
) -> tuple[float, list[float]]:
    """Makespan and per-stage finish times of a schedule run as the runner runs it: each
    position issues its fused groups in turn (p2p_schedule.fused_groups: a run of sends and
    the receives after them, posted together, as Megatron's batched send_forward_recv_backward),
    a message takes `message_s` (or `message_s(src, dst, nbytes)`: the stages and size of that
    message, so a pipeline is priced per stage pair) from its post, or from when the previous
    message in the same direction between the same stages arrived (one at a time; in either
    direction for the pairs (i, i+1) whose i is in `half_duplex`: a transport whose two
    directions take turns), and a group completes when its sends are delivered and its
    receives have arrived, compute taking its seconds. Sends held until delivered matter:
    with sends that never blocked, the makespan of 1F1B on 2 emulated nodes came out 20%
    under the measured one (pp=4, m=8: 0.346 s against 0.432 s; with them 0.433 s). Groups
    run in the order of their start times, so links are taken in time order. `on_compute(stage,
    action index, start, end)` sees every compute (the report's timeline). Raises
    RuntimeError on a deadlock or an unmatched message (for tests and planners)."""
    from commbench.ops.p2p_schedule import fused_groups

    cost = message_s if callable(message_s) else (lambda src, dst, nbytes: message_s)
    p = len(sched)
    groups = [fused_groups(acts) for acts in sched]
    # index in sched[i] of each group's first action (for on_compute): running sums, so the
    # whole simulation stays linear in its events (summing every earlier group's length again
    # for each group made llama-70b on 2,048 GPUs spend 55 s here)
    first = [list(accumulate((len(g) for g in gs[:-1]), initial=0)) for gs in groups]
    pos, clock = [0] * p, [0.0] * p
    done_at: list[float | None] = [None] * p  # the current group's sends delivered, once posted
    sent: dict[tuple[int, int, int], deque[float]] = {}  # (src, dst, tag) -> arrival times
    heap = [(0.0, i) for i in range(p)]
    blocked: dict[tuple[int, int, int], int] = {}
    free: dict[tuple[int, int], float] = {}  # link (direction) -> when it is idle

    def link(src: int, dst: int) -> tuple[int, int]:
        lo = min(src, dst)
        return (lo, lo + 1) if lo in half_duplex else (src, dst)

    while heap:
        _, i = heapq.heappop(heap)
        if pos[i] == len(groups[i]):
            continue
        group = groups[i][pos[i]]
        if group[0].kind == "compute":
            seconds = group[0].seconds
            if on_compute is not None:
                on_compute(i, first[i][pos[i]], clock[i], clock[i] + seconds)
            clock[i] += seconds
            pos[i] += 1
            heapq.heappush(heap, (clock[i], i))
            continue
        if done_at[i] is None:  # post the group's sends (once, even if a receive waits)
            end = clock[i]
            for a in group:
                if a.kind != "send":
                    continue
                key, wire = (i, i + a.peer, a.tag), link(i, i + a.peer)
                start = max(clock[i], free.get(wire, 0.0))
                arrival = free[wire] = start + cost(i, i + a.peer, a.nbytes)
                sent.setdefault(key, deque()).append(arrival)
                end = max(end, arrival)
                if key in blocked:
                    j = blocked.pop(key)
                    heapq.heappush(heap, (clock[j], j))
            done_at[i] = end
        waiting = next(
            (k for a in group if a.kind == "recv" and not sent.get(k := (i + a.peer, i, a.tag))),
            None,
        )
        if waiting is not None:
            blocked[waiting] = i  # pushed again when that message is sent
            continue
        delivered = done_at[i]
        assert delivered is not None  # posted above
        end = delivered
        for a in group:
            if a.kind == "recv":
                end = max(end, sent[(i + a.peer, i, a.tag)].popleft())
        clock[i], done_at[i] = end, None
        pos[i] += 1
        heapq.heappush(heap, (clock[i], i))
    if any(pos[i] < len(groups[i]) for i in range(p)):
        raise RuntimeError(f"schedule deadlocks at groups {pos}")
    if any(v for v in sent.values()):
        raise RuntimeError("a message was sent but never received")
    return max(clock), clock


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """One step's 1F1B schedule on the pp axis (all pipelines at once)."""
    seq = options.seq(model)
    check(layout, model, seq, options.sequence_parallel)
    p, m = layout.pp, options.micro_batches
    act = options.micro_batch * seq // layout.cp * model.hidden * options.elem
    if options.sequence_parallel:
        act //= layout.tp
    fwd = options.compute_ms / 1e3
    bwd = fwd * options.backward_factor
    meta = {
        "activation_bytes": act,
        "micro_batches": m,
        "bubble_fraction": bubble_fraction(p, m),
        "compute_s": m * (fwd + bwd),
        "forward_s": fwd,
        "backward_s": bwd,
    }
    if p == 1:
        return Program(NAME, (), meta)
    step = Step(
        op="p2p_schedule",
        nbytes=act,
        axis=AXIS,
        repeat=1,
        phase="forward+backward",
        dtype=options.dtype,
        label=f"1F1B p={p} m={m}",
        schedule=schedule(p, m, act, fwd, bwd),
        ring=False,
    )
    return Program(NAME, (step,), meta)


def point_facts(meta: dict, time_s: float) -> list[Fact]:
    """The measured bubble of a point (1 - synthetic compute / measured step time) beside
    (p-1)/(m+p-1); none for a point without compute (pp = 1 or compute_ms = 0)."""
    compute = meta.get("compute_s") or 0.0
    if not compute:
        return []
    measured = max(0.0, 1 - compute / time_s) if time_s > 0 else 0.0
    return [
        Fact("synthetic_compute_ms", "time includes synthetic compute (ms)", compute * 1e3),
        Fact("bubble_measured", "bubble measured", measured, ".1%"),
        Fact("bubble_theory", "bubble (p-1)/(m+p-1)", meta["bubble_fraction"], ".1%"),
    ]
