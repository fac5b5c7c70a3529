"""The whole step as one timed Program (AICB's whole-iteration replay, Alibaba 2024): every
step of a Program issued in its order on this rank's groups, every axis and every group at
once, and the iteration timed as a whole. Measured op by op (Runner.measure: a barrier before
every op), a step has no skew between axes; replayed, a rank that finishes its TP all-reduce
early waits inside its next op for the peers that have not, so contention and skew between
axes are in the time. The pipeline's own compute stand-ins (pattern pp's compute_ms) run as
part of its schedule; compute stand-ins between the other ops (and so the exposed part of the
communication, and DDP's overlap of gradients with backward) are not replayed yet.

Each op was checked exactly when the point was measured op by op; the replay reuses the same
bindings and buffers and does not check again. A step that runs as a chunk (over the byte
budget) is issued repeat x scale times, rounded, and its time scaled back.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from commbench.measure.bind import bind
from commbench.measure.runner import Runner
from commbench.traffic.execution import Measured
from commbench.traffic.program import Program


@dataclass(frozen=True)
class Replayed:
    """One replayed Program on world rank 0: the whole step (median over iterations of the
    slowest rank's time) and each Program step's share (median over iterations of the
    slowest rank's time from the end of the previous op to the end of this one), seconds."""

    step_s: float
    op_s: tuple[float, ...]
    iters: int


def replay(
    runner: Runner,
    program: Program,
    plan: list[Measured],
    iters: int = 3,
    warmup: int = 1,
) -> Replayed | None:
    """Collective on the world: replay `program` (executed as `plan`, execution.plan's
    measurements of it) `warmup` + `iters` times. Returns the result on world rank 0, else
    None."""
    world = runner.world
    of = {i: m for m in plan for i in m.indices}
    issued = []  # (fn, sync, runs) per program step, in program order
    factor = []  # program time / issued time per step
    for i, st in enumerate(program.steps):
        m = of[i]
        sub = runner.group(m.info)  # collective, the same order on every rank
        assert sub is not None, f"rank {world.rank} is in no group of axis {m.info.axis}"
        bound = bind(sub, m.step, runner.pool)
        want = st.repeat * m.scale
        runs = max(1, math.floor(want + 0.5))
        issued.append((bound.fn, sub.sync, runs))
        factor.append(want / runs * bound.time_scale)
    clock = time.perf_counter
    stamps = np.zeros((iters, len(issued) + 1))
    for it in range(warmup + iters):
        world.barrier()
        t0 = clock()
        marks = [t0]
        for fn, sync, runs in issued:
            for _ in range(runs):
                fn()
            sync()
            marks.append(clock())
        if it >= warmup:
            stamps[it - warmup] = np.array(marks) - t0
    issued_s = stamps[:, 1:] - stamps[:, :-1]
    ops = issued_s * np.array(factor)
    whole = stamps[:, -1] + (ops - issued_s).sum(axis=1)  # chunks scaled back, skew kept
    gathered = world.gather_obj((whole, ops), root=0)
    if gathered is None:
        return None
    step = np.max(np.vstack([w for w, _ in gathered]), axis=0)  # per iteration, slowest rank
    per_op = np.max(np.stack([o for _, o in gathered]), axis=0)
    return Replayed(
        step_s=float(np.median(step)),
        op_s=tuple(float(x) for x in np.median(per_op, axis=0)),
        iters=iters,
    )
