"""Named algorithm cost models: time = alpha * A(op, p) + beta * B(op, p) * S.

Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH"
(IJHPCA 2005), with S the nccl-tests byte count and p the group size. A is the number of
latency terms (message rounds), B the bytes each rank puts on its link per byte of S; each op
module states its own (commbench.ops, OpSpec.costs). The fitter fits one (alpha, beta) per model
jointly over ops and group sizes; the calibration uses the best model to scale measured series
to group sizes it did not measure.
"""

from __future__ import annotations

from commbench.calibration.algorithms import LIBRARIES, library_coefficients
from commbench.ops import OPS
from commbench.ops.spec import MODELS

__all__ = ["MODELLED_OPS", "MODELS", "coefficients", "model_time"]

# Ops a model can price; p2p_schedule is a pipeline, priced step by step by the planner.
MODELLED_OPS = tuple(name for name, spec in OPS.items() if spec.costs)


def coefficients(model: str, op: str, p: int, nbytes: float | None = None) -> tuple[float, float]:
    """(A, B) of `op` on p ranks under `model`: time = alpha * A + beta * B * S. A library's
    model (calibration.algorithms) depends on S too, so it needs nbytes."""
    assert op in MODELLED_OPS, f"{op} is not modelled"
    if model in LIBRARIES:
        assert nbytes is not None, f"the {model} model needs the bytes"
        return library_coefficients(model, op, p, nbytes)
    assert model in MODELS, model
    return OPS[op].cost(model, p)


def model_time(model: str, op: str, p: int, nbytes: float, alpha: float, beta: float) -> float:
    """Seconds for `op` of S = nbytes on p ranks under `model` with link (alpha, beta)."""
    a, b = coefficients(model, op, p, nbytes)
    return alpha * a + beta * b * nbytes
