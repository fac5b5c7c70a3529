"""Interleaved 1F1B (virtual pipeline stages; Narayanan et al. 2021, section 2.2.2): each of
the p stages holds v model chunks (chunk c of stage i is virtual stage c p + i), so a
micro-batch passes the ring of stages v times and the bubble shrinks to (p-1)/(v m) of the
compute, for v times the point-to-point messages.

The order is Megatron-Core's `forward_backward_pipelining_with_interleaving` without p2p
overlap (megatron/core/pipeline_parallel/schedules.py), microbatch_group_size_per_vp_stage
= p: virtual micro-batch k runs chunk table[k] of micro-batch table[k] (groups of p
micro-batches through chunk 0, then chunk 1, ...; backwards walk the chunks in reverse);
stage i warms up with 2 (p-i-1) + (v-1) p forwards, then alternates one forward and one
backward, then drains; after each pass one fused group (batch_isend_irecv) sends what the
pass produced and posts the receive the next pass needs (`send_forward_recv_forward`,
`send_forward_backward_recv_forward_backward`, `send_backward_recv_backward`). The stage
that leads (the first in forward, the last in backward) receives what the trailing stage
sent p-1 virtual micro-batches earlier (`recv_tensor_from_previous_stage`). Neighbours are a
ring: stage 0 receives chunk c+1's input from stage p-1. Megatron needs p > 2 here (without
p2p overlap) and m a multiple of p.
"""

from __future__ import annotations

from commbench.errors import UsageError
from commbench.traffic.program import Action

FWD, BWD = 0, 1
MIN_STAGES = 3  # Megatron interleaves only from pp = 3 without p2p overlap


def error(p: int, m: int, v: int) -> str | None:
    """Why Megatron cannot run an interleaved schedule of p stages, m micro-batches and v
    virtual stages, naming the value; None when it can (or v = 1: not interleaved)."""
    if v < 2:
        return None
    if p < MIN_STAGES:
        return (
            f"virtual_stages={v} needs pp of {MIN_STAGES} or more (Megatron without p2p overlap), "
            f"got pp={p}"
        )
    if m % p:
        return (
            f"virtual_stages={v}: micro_batches={m} must be a multiple of pp={p} (Megatron's "
            "interleaved schedule)"
        )
    return None


def check(p: int, m: int, v: int) -> None:
    """error() as a UsageError."""
    bad = error(p, m, v)
    if bad:
        raise UsageError(bad)


def table(p: int, m: int, v: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each virtual micro-batch: Megatron's get_schedule_table with
    groups of p micro-batches."""
    out = []
    for lo in range(0, m, p):
        hi = m if lo + p >= m else lo + p
        out += [(j, c) for c in range(v) for j in range(lo, hi)]
    return out


def warmup(p: int, i: int, m: int, v: int) -> int:
    """Forwards stage i runs before its first backward: 2 (p-i-1) + (v-1) p, at most m v."""
    return min(2 * (p - i - 1) + (v - 1) * p, m * v)


def tag(direction: int, micro_batch: int, chunk: int, v: int) -> int:
    """Unique per direction, micro-batch and sending chunk."""
    return 2 * (micro_batch * v + chunk) + direction


def schedule(
    p: int,
    m: int,
    v: int,
    nbytes: int,
    forward_s: float = 0.0,
    backward_s: float = 0.0,
    weights: tuple[float, ...] | None = None,
) -> tuple[tuple[Action, ...], ...]:
    """Per-stage action lists of interleaved 1F1B (peers relative, wrapping between the last
    and first stage); each chunk pass computes weights[i]/v of the stage's forward_s or
    backward_s."""
    check(p, m, v)
    tab = table(p, m, v)
    total = m * v

    def chunk(k: int, d: int) -> int:
        c = tab[k % total][1]
        return c if d == FWD else v - 1 - c

    def step(i: int, d: int) -> int:  # relative peer of the next (FWD) or previous stage
        j = (i + 1) % p if d == FWD else (i - 1) % p
        return j - i

    def recv_for(i: int, k: int, d: int) -> Action | None:
        """The receive stage i posts after pass k in direction d (Megatron's
        recv_tensor_from_previous_stage): the input of pass k+1 of that direction."""
        leading = i == 0 if d == FWD else i == p - 1
        src = step(i, BWD if d == FWD else FWD)  # forward inputs come from the previous stage
        if leading:
            if k < p - 1:
                return None
            c = chunk(k - (p - 1), d)  # the trailing stage's chunk that was aligned with k
            if c == (v - 1 if d == FWD else 0):
                return None
            return Action("recv", src, nbytes, tag=tag(d, tab[k - (p - 1)][0], c, v))
        if k + 1 >= total:
            return None
        return Action("recv", src, nbytes, tag=tag(d, tab[k + 1][0], chunk(k + 1, d), v))

    def send_of(i: int, k: int, d: int) -> Action | None:
        c = chunk(k, d)
        if d == FWD and c == v - 1 and i == p - 1:
            return None  # the last virtual stage computes the loss
        if d == BWD and c == 0 and i == 0:
            return None
        return Action("send", step(i, d), nbytes, tag=tag(d, tab[k][0], c, v))

    def stage(i: int) -> tuple[Action, ...]:
        w = (1.0 if weights is None else weights[i]) / v
        fwd, bwd = w * forward_s, w * backward_s
        acts: list[Action] = []

        def group(*items: Action | None) -> None:
            sends = [a for a in items if a is not None and a.kind == "send"]
            acts.extend(sends + [a for a in items if a is not None and a.kind == "recv"])

        def compute(seconds: float, d: int, k: int) -> None:
            if seconds > 0:  # tagged with its pass (the report's timeline names it)
                acts.append(
                    Action("compute", seconds=seconds, tag=tag(d, tab[k][0], chunk(k, d), v))
                )

        w_i = warmup(p, i, m, v)
        rest = total - w_i
        if i != 0:  # the first pass's input
            acts.append(Action("recv", -1, nbytes, tag=tag(FWD, tab[0][0], 0, v)))
        for k in range(w_i):
            compute(fwd, FWD, k)
            recv_prev = recv_for(i, k, FWD) if k != total - 1 else None
            if k == w_i - 1 and rest:  # the last warm-up pass also asks for the first grad
                first = None if i == p - 1 else Action(
                    "recv", step(i, FWD), nbytes, tag=tag(BWD, tab[0][0], v - 1, v)
                )  # fmt: skip
                group(send_of(i, k, FWD), recv_prev, first)
            else:
                group(send_of(i, k, FWD), recv_prev)
        for k in range(rest):
            f = k + w_i
            compute(fwd, FWD, f)
            compute(bwd, BWD, k)
            recv_prev = recv_for(i, f, FWD) if k != rest - 1 else None
            group(send_of(i, f, FWD), send_of(i, k, BWD), recv_prev, recv_for(i, k, BWD))
        if not rest and i != p - 1:  # every pass was a warm-up one: ask for the first grad
            acts.append(Action("recv", step(i, FWD), nbytes, tag=tag(BWD, tab[0][0], v - 1, v)))
        for k in range(rest, total):
            compute(bwd, BWD, k)
            recv_next = recv_for(i, k, BWD) if k != total - 1 else None
            group(send_of(i, k, BWD), recv_next)
        return tuple(acts)

    return tuple(stage(i) for i in range(p))


def bubble_fraction(p: int, m: int, v: int) -> float:
    """Idle fraction of interleaved 1F1B with equal stages: (p-1)/(v m) of the compute,
    (p-1)/(v m + p - 1) of the makespan (Narayanan et al. 2021, eq. in 2.2.2)."""
    return (p - 1) / (v * m + p - 1)


def in_flight_chunks(p: int, i: int, m: int, v: int) -> int:
    """Chunk activations stage i holds at its peak: its warm-up forwards and the one before
    its first backward (Megatron's max_outstanding_backprops = warm-up + 1), at most m v."""
    return min(warmup(p, i, m, v) + 1, m * v)
