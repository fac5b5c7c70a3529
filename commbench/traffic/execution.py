"""From a Program to what actually runs: identical steps measured once, 16-bit reductions the
backend cannot do moved as float32 (same bytes), and steps whose buffers exceed the per-rank
`--max-bytes` shrunk to a measured chunk whose time is scaled by the count (`extrapolated`);
pipeline schedules instead split each message into pieces, so every byte still moves.
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.ops import OPS, bus_factor, record_bytes, round_bytes, supports
from commbench.ops.spec import Fit
from commbench.traffic import bounds
from commbench.traffic.layout import GroupInfo, ParallelLayout
from commbench.traffic.patterns.base import resolve_axis
from commbench.traffic.program import Program, Step


@dataclass(frozen=True, kw_only=True)
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


def fit_budget(step: Step, p: int, max_bytes: int | None) -> Fit:
    """(step to run, time scale, chunks, extrapolated) so send + receive buffers fit in
    max_bytes per rank; how a step shrinks is its op's (OpSpec.fit)."""
    return OPS[step.op].fit(step, p, max_bytes)


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
        bounds.check_pieces(chunks, first, max_bytes)
        if extrap:
            note = ", ".join(filter(None, [note, f"1/{chunks} measured, x{scale:.4g}"]))
        elif chunks > 1:
            note = ", ".join(filter(None, [note, f"messages in {chunks} pieces"]))
        out.append(
            Measured(
                step=step,
                info=info,
                indices=tuple(idx),
                repeat=sum(program.steps[i].repeat for i in idx),
                scale=scale * dtype_scale,
                chunks=chunks,
                extrapolated=extrap,
                note=note,
            )
        )
    return out


def bus_bytes(step: Step, p: int) -> float:
    """S x busbw factor: the bytes a step puts on the busiest link (nccl-tests busbw)."""
    return record_bytes(step) * bus_factor(step.op, p)
