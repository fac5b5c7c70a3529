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
    a_fit, beta = mine
    a_intra, _ = other

    def steps(ranks: int, nodes: int) -> tuple[float, float, float]:
        a_all, b_all = coefficients(model, op, ranks, nbytes)
        a_nodes = coefficients(model, op, nodes, nbytes)[0] if nodes > 1 else 0.0
        return a_all - a_nodes, a_nodes, b_all

    intra_q, inter_q, b_q = steps(q, nq)
    if inter_q <= 0:
        return None
    a_inter = max((a_fit * (intra_q + inter_q) - a_intra * intra_q) / inter_q, 0.0)
    intra_p, inter_p, b_p = steps(p, n)
    base = a_intra * intra_q + a_inter * inter_q + beta * b_q * nbytes
    target = a_intra * intra_p + a_inter * inter_p + beta * b_p * nbytes
    return target / base if base > 0 else None
