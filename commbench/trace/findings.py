"""What to change, as the seed article's checklist reads a profiled step: `# finding:` lines,
each naming the numbers it rests on, and each op's time against a calibration.

Rules (thresholds are the article's and the cited papers'):
  * communication above 30% of the step, and the axis that carries most of it;
  * a TP group spanning nodes (Megatron-LM keeps TP inside a node: Shoeybi et al. 2019);
  * a pipeline bubble: 1F1B idles (p-1)/(m+p-1) of the step with m micro-batches on p
    stages (Narayanan et al. 2021), flagged when it exceeds 20% (m < 4(p-1));
  * gradient traffic (dp, edp) exposed: more than half its time not hidden under compute,
    and at least 5% of the step;
  * EP all-to-alls latency-bound: under 256 KiB a peer, or, with a calibration, doubling the
    size would cost less than 1.5x the time (the alpha term dominates);
  * collectives far below their calibrated speed: slower than 2x the calibrated prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from commbench.calibration import Calibration
from commbench.calibration.choice import asked_regime, regimes_of
from commbench.errors import UsageError
from commbench.sizes import format_size
from commbench.trace.ops import P2P, CommOp
from commbench.trace.stats import Stats
from commbench.traffic.patterns.pp import bubble_fraction

COMM_SHARE = 0.30
BUBBLE = 0.20
EXPOSED_FRACTION = 0.5
EXPOSED_STEP_SHARE = 0.05
LATENCY_PEER_BYTES = 256 << 10
SLOW_FACTOR = 2.0
GRADIENT_AXES = ("dp", "edp")


@dataclass
class Context:
    stats: Stats
    ops: list[CommOp]
    pp: int  # pipeline stages of the layout
    nodes: tuple[int, ...]  # node index per rank (empty: unknown, taken as one node)
    calibration: Calibration | None


def link_class(op: CommOp, nodes: tuple[int, ...]) -> str:
    if not nodes or not op.group_ranks:
        return "intra"
    return "intra" if len({nodes[r] for r in op.group_ranks if r < len(nodes)}) <= 1 else "inter"


def predict_us(op: CommOp, cal: Calibration, nodes: tuple[int, ...]) -> float | None:
    """The calibration's time for the same op, size, group size and placement, or None."""
    if op.bytes is None or not op.group_ranks:
        return None
    link = link_class(op, nodes)
    try:
        # the series of the regime its kernel ran in, where the calibration pinned that one
        ran = {"algorithm": op.algorithm, "protocol": op.protocol}
        algorithm, protocol = asked_regime(ran, regimes_of(cal.series, op.op, link), "trace")
        got = cal.explain(op.op, op.bytes, len(op.group_ranks), link, op.dtype,
                          extrapolate=True, algorithm=algorithm, protocol=protocol)  # fmt: skip
    except (UsageError, ValueError, KeyError):
        return None
    return got.seconds * 1e6


def calibrate(ops: list[CommOp], cal: Calibration, nodes: tuple[int, ...]) -> None:
    """Set each op's predicted_us (its time as % of it is then duration / predicted)."""
    for op in ops:
        op.predicted_us = predict_us(op, cal, nodes)


def findings(ctx: Context) -> list[str]:
    st, out = ctx.stats, []
    share = st.comm_share
    if share is not None and share > COMM_SHARE and st.axes:
        axis, tot = max(st.axes.items(), key=lambda kv: kv[1].time_us)
        total = sum(t.time_us for t in st.axes.values())
        out.append(
            f"communication is {100 * share:.0f}% of the step (> {100 * COMM_SHARE:.0f}%; "
            f"exposed {100 * (st.exposed_share or 0):.0f}%): axis {axis} carries "
            f"{100 * tot.time_us / total:.0f}% of it ({tot.count} ops, "
            f"{tot.time_us / 1e3:.1f} ms): "
            + ("change that split first" if axis != "unknown" else
               "the trace names no process groups (older PyTorch), so no axis")
        )  # fmt: skip
    if ctx.nodes:
        spans = [o for o in ctx.ops if o.axis == "tp" and link_class(o, ctx.nodes) == "inter"]
        if spans:
            g = spans[0].group_ranks or ()
            hosts = sorted({ctx.nodes[r] for r in g})
            out.append(
                f"TP groups span nodes: group {list(g)} sits on nodes {hosts} "
                f"({len(spans)} tp ops cross nodes): keep tp within a node"
            )
    out += _bubble(ctx)
    for axis in GRADIENT_AXES:
        grad = st.axes.get(axis)
        if grad is None:
            continue
        if grad.time_us > 0 and st.step_us > 0:
            frac, of_step = grad.exposed_us / grad.time_us, grad.exposed_us / st.step_us
            if frac > EXPOSED_FRACTION and of_step > EXPOSED_STEP_SHARE:
                out.append(
                    f"gradient traffic exposed: {100 * frac:.0f}% of {axis}'s "
                    f"{grad.time_us / 1e3:.1f} ms runs with no compute beside it "
                    f"({100 * of_step:.0f}% of the step): overlap it with backward "
                    "(bucketing, FSDP prefetch) or shrink dp"
                )
    out += _latency_bound(ctx)
    out += _slow(ctx)
    return out


def _bubble(ctx: Context) -> list[str]:
    if ctx.pp <= 1:
        return []
    per: dict[tuple[int, int | None], int] = {}
    for o in ctx.ops:
        if o.axis == "pp" and o.op == P2P:
            per[(o.rank, o.step)] = per.get((o.rank, o.step), 0) + 1
    if not per:
        return []
    m = max(1, min(per.values()) // 2)  # the first and last stage send m and receive m
    p = ctx.pp
    bubble = bubble_fraction(p, m)
    if bubble <= BUBBLE:
        return []
    return [
        f"pipeline bubble: {m} micro-batches on {p} stages idles (p-1)/(m+p-1) = "
        f"{100 * bubble:.0f}% of the step (1F1B): raise micro-batches to >= {4 * (p - 1)}"
    ]


def _latency_bound(ctx: Context) -> list[str]:
    a2a = [o for o in ctx.ops if o.axis == "ep" and o.op in ("alltoall", "alltoallv") and o.bytes]
    if not a2a:
        return []
    small = []
    for o in a2a:
        p = len(o.group_ranks or ()) or 1
        per_peer = (o.bytes or 0) / p
        if ctx.calibration is not None:
            t1 = predict_us(o, ctx.calibration, ctx.nodes)
            t2 = predict_us(replace(o, bytes=2 * (o.bytes or 0)), ctx.calibration, ctx.nodes)
            if t1 and t2 and t2 < 1.5 * t1:
                small.append((o, per_peer))
        elif per_peer < LATENCY_PEER_BYTES:
            small.append((o, per_peer))
    if not small:
        return []
    o, per_peer = small[0]
    why = (
        "doubling it costs < 1.5x by the calibration"
        if ctx.calibration
        else (f"< {format_size(LATENCY_PEER_BYTES)} a peer")
    )
    return [
        f"EP all-to-alls latency-bound: {len(small)} of {len(a2a)} move "
        f"{format_size(o.bytes or 0)} ({format_size(int(per_peer))} a peer; {why}): "
        "raise the tokens per expert (micro-batch) or shrink ep"
    ]


def _slow(ctx: Context) -> list[str]:
    rated = [(o, o.predicted_us) for o in ctx.ops if o.predicted_us]
    slow = [(o, p) for o, p in rated if o.duration_us > SLOW_FACTOR * p]
    if not slow:
        return []
    o, p = max(slow, key=lambda x: x[0].duration_us / x[1])
    return [
        f"collectives far below their calibrated speed: {len(slow)} of {len(rated)} ops take "
        f"> {SLOW_FACTOR:.0f}x the calibration's time (worst: rank {o.rank} {o.op} "
        f"{format_size(o.bytes or 0)} on {o.axis}, {o.duration_us:.0f} us against "
        f"{p:.0f} us, {100 * o.duration_us / p:.0f}%): contention, interference or a slow link"
    ]
