"""From a Program to what actually runs: identical steps measured once, 16-bit reductions the
backend cannot do moved as float32 (same bytes), and steps whose buffers exceed the per-rank
`--max-bytes` shrunk to a measured chunk whose time is scaled by the count (`extrapolated`);
pipeline schedules instead split each message into pieces, so every byte still moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commbench.traffic.layout import GroupInfo, ParallelLayout
from commbench.traffic.patterns.base import resolve_axis
from commbench.traffic.program import (
    Action,
    Program,
    Step,
    dtype_size,
    record_bytes,
    round_bytes,
    step_buffer_bytes,
    supports,
)


@dataclass(frozen=True)
class Measured:
    """One step to measure, standing for program steps `indices` (identical but for phase
    and label); its median time x scale x repeat is their share of the step's time."""

    step: Step
    info: GroupInfo
    indices: tuple[int, ...]
    repeat: float  # sum of the repeats of the program steps it stands for
    scale: float  # program bytes / measured bytes (1 unless extrapolated)
    chunks: int  # pieces the program step was split into (1 = as built)
    extrapolated: bool
    note: str  # why the measured step differs from the program's, if it does


def step_key(step: Step) -> tuple:
    """What makes two steps the same measurement (phase, label and repeat do not)."""
    return (step.op, step.nbytes, step.axis, step.dtype, step.split, step.peer, step.ring,
            step.schedule)  # fmt: skip


def substitute_dtype(step: Step, p: int, backend: str) -> tuple[Step, str]:
    """MPI has no 16-bit reductions: move the same bytes as float32 (rounded to what fits)."""
    if supports(backend, step.op, step.dtype) is None:
        return step, ""
    nbytes = round_bytes(step.op, step.nbytes, p, "float32")
    return step.with_(dtype="float32", nbytes=nbytes), f"{step.dtype} as float32 on {backend}"


def split_schedule(step: Step, piece: int) -> tuple[Step, int]:
    """Each send/recv of more than `piece` bytes becomes several messages (tags stay unique)."""
    el = dtype_size(step.dtype)
    piece = max(el, piece // el * el)
    k = max(math.ceil(a.nbytes / piece) for acts in step.schedule for a in acts)
    out = []
    for acts in step.schedule:
        new: list[Action] = []
        for a in acts:
            if a.kind == "compute":
                new.append(a)
                continue
            n, left = math.ceil(a.nbytes / piece), a.nbytes
            for i in range(n):
                size = min(piece, left)
                left -= size
                new.append(Action(a.kind, a.peer, size, tag=a.tag * k + i))
        out.append(tuple(new))
    most = max((a.nbytes for acts in out for a in acts if a.kind != "compute"), default=el)
    return step.with_(schedule=tuple(out), nbytes=most), k


def shrink_split(split: tuple[tuple[int, ...], ...], k: int, el: int) -> tuple:
    """An all-to-all-v split with every entry divided by k (whole elements, kept non-empty)."""
    return tuple(tuple(max(el, b // k // el * el) if b else 0 for b in row) for row in split)


def fit_budget(step: Step, p: int, max_bytes: int | None) -> tuple[Step, float, int, bool]:
    """(step to run, time scale, chunks, extrapolated) so send + receive buffers fit in
    max_bytes per rank."""
    send, recv = step_buffer_bytes(step, p)
    if not max_bytes or send + recv <= max_bytes:
        return step, 1.0, 1, False
    k = math.ceil((send + recv) / max_bytes)
    if step.op == "p2p_schedule":
        new, k = split_schedule(step, max_bytes // 2)
        return new, 1.0, k, False
    el = dtype_size(step.dtype)
    if step.op == "alltoallv":
        while True:
            split = shrink_split(step.split, k, el)
            new = step.with_(split=split, nbytes=max(sum(r) for r in split))
            s, r = step_buffer_bytes(new, p)
            if s + r <= max_bytes or all(b <= el for row in split for b in row):
                break
            k += 1
        scale = sum(map(sum, step.split)) / sum(map(sum, split))
        return new, scale, k, True
    while True:
        nbytes = round_bytes(step.op, step.nbytes // k, p, step.dtype)
        new = step.with_(nbytes=nbytes)
        s, r = step_buffer_bytes(new, p)
        if s + r <= max_bytes or nbytes <= el * p:
            break
        k += 1
    return new, step.nbytes / nbytes, k, True


def plan(
    program: Program, layout: ParallelLayout, backend: str, max_bytes: int | None
) -> list[Measured]:
    """The distinct measurements of `program` on `layout` with this backend and budget."""
    order: list[tuple] = []
    members: dict[tuple, list[int]] = {}
    for i, st in enumerate(program.steps):
        key = step_key(st)
        if key not in members:
            order.append(key)
            members[key] = []
        members[key].append(i)
    out = []
    for key in order:
        idx = members[key]
        first = program.steps[idx[0]]
        info = resolve_axis(layout, first.axis)
        step, note = substitute_dtype(first, info.size, backend)
        dtype_scale = first.nbytes / step.nbytes
        step, scale, chunks, extrap = fit_budget(step, info.size, max_bytes)
        if extrap:
            note = ", ".join(filter(None, [note, f"1/{chunks} measured, x{scale:.4g}"]))
        elif chunks > 1:
            note = ", ".join(filter(None, [note, f"messages in {chunks} pieces"]))
        out.append(
            Measured(
                step,
                info,
                tuple(idx),
                sum(program.steps[i].repeat for i in idx),
                scale * dtype_scale,
                chunks,
                extrap,
                note,
            )
        )
    return out


def bus_bytes(step: Step, p: int) -> float:
    """S x busbw factor: the bytes a step puts on the busiest link (nccl-tests busbw)."""
    from commbench.traffic.program import bus_factor

    return record_bytes(step) * bus_factor(step.op, p)
