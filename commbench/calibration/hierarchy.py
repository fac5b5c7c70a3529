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

from commbench.calibration.algorithms import NCCL, nccl_inter_latency, nccl_steps, nccl_time
from commbench.calibration.costmodels import coefficients
from commbench.calibration.lines import LinkModel


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


def nccl_ratio(
    intra: LinkModel | None,
    op: str,
    shape_from: tuple[int, int],
    shape_to: tuple[int, int],
    nbytes: float,
    measured: tuple[float, float],
) -> tuple[float, str, str] | None:
    """NCCL's time at shape_to over its time at shape_from = (q ranks, Nq nodes), each the
    faster of ring and tree (calibration.algorithms), and the algorithm of each; None where
    NCCL has no model of op. `measured` is the series' (seconds, beta per byte of S) at S: its
    bandwidth is that node count's (NCCL's own differs by node count), its time what the
    envelope must take at shape_from, which sets the inter-node step; intra-node steps at the
    intra link's alpha for op (else NCCL's default NVLink / network ratio)."""
    (q, nq), (p, n) = shape_from, shape_to
    if nccl_steps(op, "ring", q, nq) is None or n < 1 or p < n:
        return None
    seconds, beta_s = measured
    beta = beta_s / coefficients(NCCL, op, q, nbytes)[1]  # per byte of the ring's B(q) S
    other = intra.terms_at(op, nbytes) if intra is not None else None
    hop = other.alpha_s if other is not None else None
    step = nccl_inter_latency(op, shape_from, nbytes, seconds, hop, beta)
    base, alg_q = nccl_time(op, q, nq, nbytes, step, hop, beta)
    target, alg_p = nccl_time(op, p, n, nbytes, step, hop, beta)
    return (target / base, alg_q, alg_p) if base > 0 else None


def to_nodes(
    link: LinkModel,
    intra: LinkModel | None,
    op: str,
    shape_from: tuple[int, int],
    shape_to: tuple[int, int],
    nbytes: float,
    measured: tuple[float, float],
) -> tuple[float, str, list[str]] | None:
    """An inter series measured at shape_from = (q ranks, Nq nodes), `measured` its (seconds,
    beta per byte) at S, scaled to shape_to: on a link fitted under NCCL's model by nccl_ratio,
    else by hierarchical_ratio with the intra link's terms under the same model; (ratio,
    method, notes), or None."""
    (q, nq), (p, n) = shape_from, shape_to
    if intra is not None and intra.best_model != link.best_model:
        intra = intra.library  # both links priced under the same model
    notes = [link.note] if link.note else []
    if link.best_model == NCCL:
        got = nccl_ratio(intra, op, shape_from, shape_to, nbytes, measured)
        if got is not None:
            if nq <= 2 < n:
                notes.append(
                    f"NCCL prices up to 2 nodes with the intra-node graph's bandwidth "
                    f"(tuning.cc): the bus bandwidth measured on {nq} nodes need not hold on {n}"
                )
            hops = "the intra link's" if intra is not None else "NCCL's NVLink/network"
            method = (
                f"scaled from group size {q} on {nq} nodes ({got[1]}) to {p} on {n} "
                f"({got[2]}) by NCCL's ring/tree model, intra-node steps at {hops} latency"
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
