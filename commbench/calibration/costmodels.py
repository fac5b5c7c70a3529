"""Named algorithm cost models: time = alpha * A(op, p) + beta * B(op, p) * S.

Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH"
(IJHPCA 2005), with S the nccl-tests byte count of DESIGN.md section 4 and p the group size.
A is the number of latency terms (message rounds), B the bytes each rank puts on its link per
byte of S. The fitter fits one (alpha, beta) per model jointly over ops and group sizes; the
calibration uses the best model to scale measured series to group sizes it did not measure.
"""

from __future__ import annotations

import math

MODELS = ("ring", "tree", "rabenseifner", "pairwise")
# Ops a model can price; p2p_schedule is a pipeline, priced step by step by the planner.
MODELLED_OPS = (
    "allreduce",
    "allgather",
    "reduce_scatter",
    "alltoall",
    "alltoallv",
    "broadcast",
    "reduce",
    "sendrecv",
    "pingpong",
)


def lg(p: int) -> float:
    """ceil(log2 p): rounds of a recursive-doubling or binomial algorithm (0 for p = 1)."""
    return float(math.ceil(math.log2(p))) if p > 1 else 0.0


def coefficients(model: str, op: str, p: int) -> tuple[float, float]:
    """(A, B) of `op` on p ranks under `model`: time = alpha * A + beta * B * S."""
    assert model in MODELS, model
    if op in ("sendrecv", "pingpong"):
        return 1.0, 1.0  # Hockney: one message of S bytes
    if p <= 1:
        return 0.0, 0.0
    frac = (p - 1) / p
    L = lg(p)
    if op == "alltoallv":
        op = "alltoall"  # S is the busiest rank's send buffer
    table = {
        "ring": {
            "allreduce": (2 * (p - 1), 2 * frac),
            "allgather": (p - 1, frac),
            "reduce_scatter": (p - 1, frac),
            "alltoall": (p - 1, frac),
            "broadcast": (p - 1, 1.0),
            "reduce": (p - 1, 1.0),
        },
        "tree": {
            "allreduce": (L, L),
            "allgather": (L, frac),
            "reduce_scatter": (L, frac),
            "alltoall": (L, L / 2),
            "broadcast": (L, L),
            "reduce": (L, L),
        },
        "rabenseifner": {
            "allreduce": (2 * L, 2 * frac),
            "allgather": (L, frac),
            "reduce_scatter": (L, frac),
            "alltoall": (p - 1, frac),
            "broadcast": (2 * L, 2 * frac),
            "reduce": (2 * L, 2 * frac),
        },
        "pairwise": {
            "allreduce": (2 * (p - 1), 2 * frac),
            "allgather": (p - 1, frac),
            "reduce_scatter": (p - 1, frac),
            "alltoall": (p - 1, frac),
            "broadcast": (p - 1, float(p - 1)),
            "reduce": (p - 1, float(p - 1)),
        },
    }[model]
    assert op in table, f"{op} is not modelled"
    a, b = table[op]
    return float(a), float(b)


def model_time(model: str, op: str, p: int, nbytes: float, alpha: float, beta: float) -> float:
    """Seconds for `op` of S = nbytes on p ranks under `model` with link (alpha, beta)."""
    a, b = coefficients(model, op, p)
    return alpha * a + beta * b * nbytes
