"""Pipeline parallelism with the 1F1B schedule (PipeDream-Flush, Narayanan et al. 2021; the
non-interleaved schedule of Megatron-LM): stage i runs min(p-i-1, m) warm-up forwards, then
alternates one forward and one backward, then drains the remaining backwards. Each forward
sends an activation of b (s/c) h elements (/t with sequence parallel) to the next stage,
each backward its gradient to the previous one. Optional synthetic compute per micro-batch
lets the bubble (p-1)/(m+p-1) be measured rather than assumed.

Under `framework: torchtitan`, `pp_schedule` names torch.distributed.pipelining's schedule
class (torch/distributed/pipelining/schedules.py): `Schedule1F1B` (the order above),
`ScheduleInterleaved1F1B` (virtual_stages > 1: pp_interleaved's order, which torch's
follows), `ScheduleGPipe` (each stage runs all m forwards, receiving and sending each, then
all m backwards in micro-batch order: the same messages as 1F1B in another order, the same
bubble (p-1)/(m+p-1), and every micro-batch's activations held at once).
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
from commbench.traffic.patterns import pp_interleaved
from commbench.traffic.patterns.base import Fact, FrameworkOptions, check, check_choice
from commbench.traffic.pipeline_split import stage_weights, virtual_error
from commbench.traffic.program import Action, Program, Step

NAME = "pp"
AXIS = Axis.PP
FWD, BWD = 0, 1


GPIPE = "ScheduleGPipe"  # torch's schedule class with all forwards first
PP_SCHEDULES = (GPIPE, "Schedule1F1B", "ScheduleInterleaved1F1B")


@dataclass(frozen=True)
class Options(FrameworkOptions):
    """1F1B over `micro_batches`; compute_ms of forward per micro-batch and stage (backward =
    backward_factor x forward) stands in for the layers' compute so the bubble shows;
    pp_schedule: torch's schedule class under torchtitan (None: 1F1B, interleaved with
    virtual_stages > 1)."""

    micro_batches: int = 8
    sequence_parallel: bool = False
    compute_ms: float = 0.0
    backward_factor: float = 2.0
    virtual_stages: int = (
        1  # > 1: interleaved 1F1B (Megatron's virtual_pipeline_model_parallel_size)
    )
    pp_schedule: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compute_ms < 0 or self.backward_factor < 0:
            raise UsageError("compute_ms and backward_factor must be 0 or more")
        if isinstance(self.virtual_stages, bool) or not isinstance(self.virtual_stages, int):
            raise UsageError(f"virtual_stages {self.virtual_stages!r}: give a positive integer")
        if self.virtual_stages < 1:
            raise UsageError(f"virtual_stages={self.virtual_stages}: give 1 or more")
        check_schedule(self.pp_schedule, self.framework, self.virtual_stages)


def check_schedule(name: str | None, framework: str, virtual_stages: int) -> None:
    """pp_schedule is torch's class name, under torchtitan only, interleaved exactly when
    virtual_stages > 1; a UsageError naming the value otherwise."""
    if name is None:
        return
    check_choice("pp_schedule", name, PP_SCHEDULES)
    if framework != "torchtitan":
        raise UsageError(
            f"pp_schedule {name} is torch.distributed.pipelining's: set framework torchtitan "
            "(Megatron runs 1F1B, interleaved with virtual_stages > 1)"
        )
    interleaved = name == "ScheduleInterleaved1F1B"
    if interleaved != (virtual_stages > 1):
        raise UsageError(
            f"pp_schedule {name} with virtual_stages={virtual_stages}: "
            + ("give virtual_stages of 2 or more" if interleaved else "it runs one stage a rank")
        )


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


def gpipe(p: int, m: int) -> list[list[tuple[int, int]]]:
    """Per stage, the passes of torch's ScheduleGPipe: all m forwards, then all m backwards in
    micro-batch order (ScheduleGPipe._step_microbatches)."""
    return [[(FWD, j) for j in range(m)] + [(BWD, j) for j in range(m)] for _ in range(p)]


def tag(direction: int, micro_batch: int) -> int:
    """Message tag: unique per direction and micro-batch, so matching never depends on order."""
    return 2 * micro_batch + direction


def schedule(
    p: int,
    m: int,
    nbytes: int,
    forward_s: float = 0.0,
    backward_s: float = 0.0,
    weights: tuple[float, ...] | None = None,
    order: Callable[[int, int], list[list[tuple[int, int]]]] = one_f_one_b,
) -> tuple[tuple[Action, ...], ...]:
    """Per-stage action lists of 1F1B (or `order`'s passes, e.g. gpipe): a forward receives
    from the previous stage, computes, sends to the next; a backward receives from the next,
    computes, sends to the previous. Stage i's compute is `weights[i]` x forward_s /
    backward_s (uneven stages; default 1)."""
    out = []
    for i, passes in enumerate(order(p, m)):
        acts: list[Action] = []
        w = 1.0 if weights is None else weights[i]
        for d, j in passes:
            src, dst = (-1, +1) if d == FWD else (+1, -1)
            if 0 <= i + src < p:
                acts.append(Action("recv", src, nbytes, tag=tag(d, j)))
            seconds = w * (forward_s if d == FWD else backward_s)
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
    """Link class between stage i and i+1, for each i, then (p > 2) between the last stage
    and the first (interleaved 1F1B's ring): `inter` where any pipeline's two ranks sit on
    different nodes (the pipelines run at once, so the slowest pair sets the pace), else
    `intra`. With tp and dp inside a node, pp=4 on 2 nodes is intra, inter, intra, inter."""
    p = len(groups[0])
    pairs = [(i, i + 1) for i in range(p - 1)] + ([(p - 1, 0)] if p > 2 else [])
    if not nodes:
        return ("intra",) * len(pairs)
    return tuple(
        "inter" if any(nodes[g[a]] != nodes[g[b]] for g in groups) else "intra" for a, b in pairs
    )


def pair_index(src: int, dst: int) -> int:
    """Index in stage_links of the stage pair a message crosses (neighbours i, i+1: i; the
    ring's last-to-first pair: the last index, p - 1)."""
    return min(src, dst) if abs(src - dst) == 1 else max(src, dst)


def used_links(sched: tuple[tuple[Action, ...], ...], links: tuple[str, ...]) -> tuple[str, ...]:
    """The stage_links a schedule's messages cross: the ring pair only where some message
    wraps from the last stage to the first (interleaved), so plain 1F1B never prices it."""
    wraps = any(abs(a.peer) > 1 for acts in sched for a in acts if a.kind != "compute")
    return links if wraps else links[: max(0, len(sched) - 1)]


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
    direction for the pairs whose pair_index is in `half_duplex`: a transport whose two
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
        pair = pair_index(src, dst)
        return (pair, -1) if pair in half_duplex else (src, dst)

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
    """One step's 1F1B schedule on the pp axis (all pipelines at once); with uneven stages
    (the model's Megatron split) each stage's compute stand-in scales with its layers."""
    seq = options.seq(model)
    check(layout, model, seq, options.sequence_parallel)
    p, m = layout.pp, options.micro_batches
    act = options.micro_batch * seq // layout.cp * model.hidden * options.elem
    if options.sequence_parallel:
        act //= layout.tp
    fwd = options.compute_ms / 1e3
    bwd = fwd * options.backward_factor
    weights = stage_weights(model.layers, p, model.split)
    v = options.virtual_stages if p > 1 else 1
    bad = virtual_error(model.layers, p, model.split, v)
    if bad:
        raise UsageError(f"{model.name}: {bad}")
    pp_interleaved.check(p, m, v)
    meta = {
        "activation_bytes": act,
        "micro_batches": m,
        "virtual_stages": v,
        "stage_layers": model.stage_counts(p),
        "bubble_fraction": bubble_fraction(p, m)
        if v == 1
        else pp_interleaved.bubble_fraction(p, m, v),
        "compute_s": m * (fwd + bwd),
        "forward_s": fwd,
        "backward_s": bwd,
    }
    if p == 1:
        return Program(NAME, (), meta)
    even = len(set(weights)) == 1
    is_gpipe = options.pp_schedule == GPIPE
    meta["pp_schedule"] = options.pp_schedule or ("1F1B" if v == 1 else "interleaved 1F1B")
    name = "GPipe" if is_gpipe else "1F1B" if v == 1 else f"interleaved 1F1B v={v}"
    step = Step(
        op="p2p_schedule",
        nbytes=act,
        axis=AXIS,
        repeat=1,
        phase="forward+backward",
        dtype=options.dtype,
        label=f"{name} p={p} m={m}" + ("" if even else f" {model.split.describe()}"),
        schedule=schedule(
            p, m, act, fwd, bwd, None if even else weights, gpipe if is_gpipe else one_f_one_b
        )
        if v == 1
        else pp_interleaved.schedule(p, m, v, act, fwd, bwd, None if even else weights),
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
    v = meta.get("virtual_stages", 1)
    theory = "bubble (p-1)/(m+p-1)" if v == 1 else f"bubble (p-1)/(v m+p-1), v={v}"
    return [
        Fact("synthetic_compute_ms", "time includes synthetic compute (ms)", compute * 1e3),
        Fact("bubble_measured", "bubble measured", measured, ".1%"),
        Fact("bubble_theory", theory, meta["bubble_fraction"], ".1%"),
    ]
