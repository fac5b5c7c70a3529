"""A group as nodes x ranks per node: latency steps inside a node and between nodes apart.

NCCL's own model (src/graph/tuning.cc) splits a ring's latency into intra-node and inter-node
steps: (steps - inter steps) x intra + inter steps x inter, the inter steps those a ring over
the nodes alone would make (2 (nNodes - 1) for an all-reduce). Here the same split is applied
to any algorithm model: a group of p ranks on N nodes takes A(op, N) inter-node steps and
A(op, p) - A(op, N) intra-node ones, and its bytes cross the slowest (inter) link:

    M(op, p, N, S) = alpha_intra (A(p) - A(N)) + alpha_inter A(N) + beta_inter B(p) S

The inter link's fitted alpha treated every step as inter (alpha_fit A(q) at the shape it was
measured, q ranks on Nq nodes); with the intra link's alpha for the op, alpha_inter is what
makes the two agree there: (alpha_fit A(q) - alpha_intra (A(q) - A(Nq))) / A(Nq), at least 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from commbench.calibration.algorithms import NCCL
from commbench.calibration.band import DEFAULT_PRIORS, BandTerms, Priors, band_terms
from commbench.calibration.costmodels import coefficients
from commbench.calibration.lines import LinkModel, SeriesModel, segment_for
from commbench.calibration.nccl_model import (
    NCCL_ALGORITHMS,
    NCCL_CHOICE,
    Tuner,
    nccl_inter_latency,
    nccl_steps,
    nccl_time,
)


def hierarchical_ratio(
    inter: LinkModel,
    intra: LinkModel,
    op: str,
    shape_from: tuple[int, int],
    shape_to: tuple[int, int],
    nbytes: float,
) -> float | None:
    """M(op, p, N, S) / M(op, q, Nq, S) for shape_from = (q, Nq) and shape_to = (p, N), or None
    when either link has no terms for op or the measured shape spans one node."""
    (q, nq), (p, n) = shape_from, shape_to
    mine, other = inter.terms_at(op, nbytes), intra.terms_at(op, nbytes)
    if mine is None or other is None or nq < 2 or n < 1:
        return None
    model = inter.best_model
    a_fit, beta, a_intra = mine.alpha_s, mine.beta_s_per_byte, other.alpha_s
    moved = nbytes - mine.bytes_offset  # a secant's bytes (calibration.lines.Term)

    def steps(ranks: int, nodes: int) -> tuple[float, float, float]:
        a_all, b_all = coefficients(model, op, ranks, nbytes)
        a_nodes = coefficients(model, op, nodes, nbytes)[0] if nodes > 1 else 0.0
        return a_all - a_nodes, a_nodes, b_all

    intra_q, inter_q, b_q = steps(q, nq)
    if inter_q <= 0:
        return None
    a_inter = max((a_fit * (intra_q + inter_q) - a_intra * intra_q) / inter_q, 0.0)
    intra_p, inter_p, b_p = steps(p, n)
    base = a_intra * intra_q + a_inter * inter_q + beta * b_q * moved
    target = a_intra * intra_p + a_inter * inter_p + beta * b_p * moved
    return target / base if base > 0 else None


# a series' (beta per byte of S at S, (bytes, seconds) of its latency regime): _measured
Measured = tuple[float, tuple[float, float]]


def nccl_tuner(link: LinkModel, s: SeriesModel, op: str) -> tuple[Tuner, str | None]:
    """NCCL's tuner for s's runs: the algorithm their NCCL_ALGO pinned (the series key's)
    where the model has it for op, else ring and tree, NCCL's choice; the constants of the
    release link's runs name; and a note where the pinned one is not modelled (NVLS, CollNet,
    PAT)."""
    alg, note = s.key.algorithm.lower(), None
    algorithms: tuple[str, ...] = NCCL_ALGORITHMS
    if alg in NCCL_ALGORITHMS and nccl_steps(op, alg, 2, 1) is not None:
        algorithms = (alg,)
    elif alg:
        note = (
            f"the runs pinned NCCL_ALGO {s.key.algorithm}, which commbench's NCCL model does "
            "not price: scaled as NCCL's ring or tree"
        )
    return Tuner.of(algorithms, link.library_version), note


def _nccl_terms(
    intra: LinkModel | None,
    op: str,
    shape_from: tuple[int, int],
    nbytes: float,
    measured: Measured,
    tuner: Tuner = NCCL_CHOICE,
) -> tuple[float, float | None, float] | None:
    """(inter-node step, intra-node hop, beta per byte of the ring's B S) of NCCL's model of
    op for a series measured at shape_from: beta its bandwidth there (NCCL's own differs by
    node count; all-to-all: per NIC byte), the step what its latency regime takes (the
    smallest sizes), intra-node steps at the intra link's alpha for op (None: the tuner's
    release's NVLink / network ratio); None where NCCL has no model of op."""
    steps_q = nccl_steps(op, "ring", *shape_from)
    if steps_q is None or steps_q[2] <= 0:
        return None
    beta_s, (small, t_small) = measured
    beta = beta_s / steps_q[2]
    other = intra.terms_at(op, nbytes) if intra is not None else None
    hop = other.alpha_s if other is not None else None
    return nccl_inter_latency(op, shape_from, small, t_small, hop, beta, tuner), hop, beta


def nccl_ratio(
    intra: LinkModel | None,
    op: str,
    shape_from: tuple[int, int],
    shape_to: tuple[int, int],
    nbytes: float,
    measured: Measured,
    bandwidth_scale: float = 1.0,
    tuner: Tuner = NCCL_CHOICE,
) -> tuple[float, str, str] | None:
    """NCCL's time at shape_to over its time at shape_from = (q ranks, Nq nodes), each the
    fastest of the tuner's algorithms (calibration.nccl_model; nccl_tuner), and the algorithm of
    each, on the terms _nccl_terms fits to the series; None where NCCL has no model of op.
    `bandwidth_scale`: shape_to's bus bandwidth over shape_from's (per_node_scale), 1 where it
    is the same."""
    (q, nq), (p, n) = shape_from, shape_to
    terms = _nccl_terms(intra, op, shape_from, nbytes, measured, tuner)
    if terms is None or n < 1 or p < n:
        return None
    step, hop, beta = terms
    base, alg_q = nccl_time(op, q, nq, nbytes, step, hop, beta, tuner)
    target, alg_p = nccl_time(op, p, n, nbytes, step, hop, beta / bandwidth_scale, tuner)
    return (target / base, alg_q, alg_p) if base > 0 else None


def to_nodes(
    link: LinkModel,
    intra: LinkModel | None,
    op: str,
    shape_from: tuple[int, int],
    shape_to: tuple[int, int],
    nbytes: float,
    s: SeriesModel,
    bandwidth_scale: float = 1.0,
) -> tuple[float, str, list[str]] | None:
    """An inter series s measured at shape_from = (q ranks, Nq nodes) scaled to shape_to: on a
    link fitted under NCCL's model, at the same per-peer chunk (chunk_ratio) where NCCL runs
    a ring there (all-gather, reduce-scatter, all-to-all; all-reduce where its model picks
    the ring over the tree, or the runs pinned it), else by nccl_ratio; on other links by
    hierarchical_ratio with the intra link's terms under the same model; (ratio, method,
    notes), or None."""
    (q, nq), (p, n) = shape_from, shape_to
    if intra is not None and intra.best_model != link.best_model:
        intra = intra.library  # both links priced under the same model
    notes = [link.note] if link.note else []
    if link.best_model == NCCL:
        tuner, unmodelled = nccl_tuner(link, s, op)
        notes += [unmodelled] if unmodelled else []
        measured = _measured(s, nbytes)
        got = nccl_ratio(intra, op, shape_from, shape_to, nbytes, measured, bandwidth_scale, tuner)
        chunked = chunk_ratio(s, op, shape_from, shape_to, nbytes)
        if chunked is not None and op != "allreduce":
            return chunked[0], chunked[1], notes
        if chunked is not None and got is not None and got[2] == "ring":
            pinned = tuner.algorithms == ("ring",)
            why = "NCCL_ALGO pinned the ring" if pinned else "NCCL's model runs the ring there"
            return chunked[0], f"{chunked[1]} ({why})", notes
        if got is not None:
            if nq <= 2 < n:
                notes.append(
                    f"NCCL prices up to 2 nodes with the intra-node graph's bandwidth "
                    f"(tuning.cc): the bus bandwidth measured on {nq} nodes need not hold on {n}"
                )
            hops = (
                "the intra link's" if intra is not None else f"{tuner.constants()} NVLink/network"
            )
            pinned = len(tuner.algorithms) == 1
            model = "model of the pinned algorithm" if pinned else "ring/tree model"
            method = (
                f"scaled from group size {q} on {nq} nodes ({got[1]}) to {p} on {n} "
                f"({got[2]}) by NCCL's {model}, intra-node steps at {hops} latency"
            )
            return got[0], method, notes
    if intra is None:
        return None
    ratio = hierarchical_ratio(link, intra, op, shape_from, shape_to, nbytes)
    if ratio is None:
        return None
    method = (
        f"scaled from group size {q} to {n} nodes by the {link.best_model} model, intra- and "
        "inter-node steps apart"
    )
    return ratio, method, notes


# ops whose steps each move S / p per rank: NCCL's ring (all-reduce's, where its tuner does not
# pick the tree) and all-to-all, which posts every peer at once
CHUNKED_OPS = frozenset({"allreduce", "allgather", "reduce_scatter", "alltoall", "alltoallv"})


def chunk_ratio(
    s: SeriesModel, op: str, shape_from: tuple[int, int], shape_to: tuple[int, int], nbytes: float
) -> tuple[float, str] | None:
    """A series measured at shape_from = (q ranks, Nq nodes) scaled to shape_to = (p, N) at the
    same per-peer chunk S / p: the measured time at S q / p times the bytes each rank puts on
    its bottleneck link at the target over those measured (B(p) p / B(q) q, nccl_steps' B:
    p - 1 chunks of a ring all-gather or reduce-scatter, p - g of an all-to-all across nodes).
    Each step's cost is a function of its chunk (NCCL picks protocol, channels and pipelining
    by it), so it is read where it was measured rather than modelled as alpha + beta x: on
    Polaris (2+8 -> 256/540 nodes) all-gather runs 3x faster at 1-16 MiB and 2x slower at
    256 MiB-1 GiB than a fitted ring's steps, and both are the 8-node times at S / 32 and
    S / 67.5. (ratio, method), or None: not such an op, another ranks-per-node shape, one
    node, or a time that is not positive."""
    (q, nq), (p, n) = shape_from, shape_to
    if op not in CHUNKED_OPS or nq < 2 or n < 2 or q * n != p * nq:
        return None
    got_q, got_p = nccl_steps(op, "ring", q, nq), nccl_steps(op, "ring", p, n)
    if got_q is None or got_p is None or got_q[2] <= 0:
        return None
    base, at_chunk = s.at(nbytes), s.at(nbytes * q / p)
    if base <= 0 or at_chunk <= 0:
        return None
    ratio = at_chunk * (got_p[2] * p) / (got_q[2] * q) / base
    method = (
        f"scaled from group size {q} on {nq} nodes to {p} on {n} at the same per-peer chunk: "
        f"the time measured at S x {q}/{p}, times the bytes per rank on the NICs"
    )
    return ratio, method


@dataclass(frozen=True)
class Scaled:
    """An inter series scaled to another node count: the ratio to its time, how, and the
    band's relative half-width (calibration.band)."""

    ratio: float
    method: str
    notes: list[str]
    band: float
    terms: BandTerms | None = None  # what band is made of (band.py), for scoring other priors


def _measured(s: SeriesModel, nbytes: float) -> Measured:
    """The beta per byte of S of s at S, and (bytes, seconds) of its latency regime: its
    smallest size > 0 (a size-0 row of nccl-tests launches nothing: never divided by)."""
    small = min((b for b, _ in s.knots if b > 0), default=max(s.bytes_min, 1))
    return segment_for(s.segments, nbytes).beta_s_per_byte, (small, s.at(small))


def _latency_share(
    intra: LinkModel | None,
    op: str,
    shape_from: tuple[int, int],
    shape_to: tuple[int, int],
    nbytes: float,
    s: SeriesModel,
    tuner: Tuner,
) -> float:
    """The share of NCCL's time at shape_to that is latency steps, not bytes (nccl_ratio's
    terms; 0 where NCCL has no model of op): where latency dominates, the steps were scaled
    furthest and the band is widest."""
    terms = _nccl_terms(intra, op, shape_from, nbytes, _measured(s, nbytes), tuner)
    if terms is None:
        return 0.0
    step, hop, beta = terms
    total, alg = nccl_time(op, *shape_to, nbytes, step, hop, beta, tuner)
    steps = nccl_steps(op, alg, *shape_to, nbytes)
    if steps is None or total <= 0:
        return 0.0
    return min(max(1.0 - beta * steps[2] * nbytes / total, 0.0), 1.0)


def per_node_scale(
    series: list[SeriesModel], s: SeriesModel, op: str, shape_to: tuple[int, int], nbytes: float
) -> tuple[float, str] | None:
    """Where s's family was measured at two or more GPUs per node on s's node count and the
    target asks another: the target's bus bandwidth over s's, from the trend of the measured
    ones in log(GPUs per node) (least squares; slope clamped to 0..1: a GPU adds at most its
    share), and a note. The bus bandwidth of an inter-node ring is the node's NICs' (each
    channel crosses the node once): on rail-optimised nodes with a NIC per GPU it doubles with
    the GPUs per node (H100 10 x 1 -> 10 x 2: 48.9 -> 98 GB/s), where one NIC per node holds it."""
    n_from, (p, n) = _one_count(s), shape_to
    if n_from is None or n != n_from or n_from < 2:
        return None
    family = replace(s.key, group_size=0)
    bw: dict[int, float] = {}  # GPUs per node -> bytes/s per byte of B S
    for x in series:
        if _one_count(x) != n_from or replace(x.key, group_size=0) != family:
            continue
        steps = nccl_steps(op, "ring", x.key.group_size, n_from)
        beta = segment_for(x.segments, nbytes).beta_s_per_byte
        if steps is not None and steps[2] > 0 and beta > 0:
            bw[x.key.group_size // n_from] = steps[2] / beta
    g_to, g_from = p // n, s.key.group_size // n_from
    if len(bw) < 2 or g_to in bw or g_from not in bw:
        return None
    xs, ys = [math.log(g) for g in bw], [math.log(b) for b in bw.values()]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)
    slope = min(max(slope, 0.0), 1.0)
    scale = (g_to / g_from) ** slope
    gs = "+".join(map(str, sorted(bw)))
    note = (
        f"bus bandwidth x{scale:.2f} from {g_from} to {g_to} GPUs per node: its trend in "
        f"log(GPUs per node) over {gs} measured on {n_from} nodes (slope {slope:.2f})"
    )
    return scale, note


def _one_count(s: SeriesModel) -> int | None:
    counts = {n for n, _ in s.shapes}
    return counts.pop() if len(counts) == 1 else None


def series_to_nodes(
    series: list[SeriesModel],
    link: LinkModel,
    intra: LinkModel | None,
    s: SeriesModel,
    op: str,
    shape_to: tuple[int, int],
    nbytes: float,
    priors: Priors = DEFAULT_PRIORS,
) -> Scaled | None:
    """An inter series s of one node count scaled to shape_to = (p ranks, N nodes) by
    to_nodes; its band from the same scaling started from each other node count measured in
    s's family (same key but the group size, same ranks per node), or from the reach alone."""
    n_from = _one_count(s)
    if n_from is None or link.link_class == "intra":
        return None
    if link.best_model != NCCL and link.library is not None and link.library.best_model == NCCL:
        link = link.library  # across node counts NCCL's own model, whichever fits group sizes
    per_node = per_node_scale(series, s, op, shape_to, nbytes) if link.best_model == NCCL else None
    scale = per_node[0] if per_node is not None else 1.0
    shape_from = (s.key.group_size, n_from)
    got = to_nodes(link, intra, op, shape_from, shape_to, nbytes, s, scale)
    if got is None:
        return None
    seconds = s.at(nbytes) * got[0]
    family = replace(s.key, group_size=0)  # same op, dtype, timing, ...: another group size
    ppn = {g for _, g in s.shapes}
    others = []
    for x in series:
        c = _one_count(x)
        if c in (None, n_from, 1) or replace(x.key, group_size=0) != family:
            continue
        if {g for _, g in x.shapes} != ppn:
            continue
        assert c is not None
        g = to_nodes(link, intra, op, (x.key.group_size, c), shape_to, nbytes, x)
        if g is not None:
            others.append((c, x.at(nbytes) * g[0]))
    if intra is not None and intra.best_model != link.best_model:
        intra = intra.library  # as to_nodes prices it
    share = (
        _latency_share(intra, op, shape_from, shape_to, nbytes, s, nccl_tuner(link, s, op)[0])
        if link.best_model == NCCL
        else 0.0  # NCCL's split only where NCCL's model priced it
    )
    if per_node is not None:  # the reach is in GPUs per node: its doublings
        g_from, g_to = s.key.group_size // n_from, shape_to[0] // shape_to[1]
        terms, why = band_terms(seconds, g_from, g_to, [], share, priors, "GPUs per node")
        method = f"{got[1]}; {per_node[1]}"
        return Scaled(got[0], method, [*got[2], why], terms.width(priors), terms)
    terms, why = band_terms(seconds, n_from, shape_to[1], others, share, priors)
    return Scaled(got[0], got[1], [*got[2], why], terms.width(priors), terms)
