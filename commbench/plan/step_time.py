"""The step-time model: one training (or inference) step's time from its compute and the
communication of its Programs, grouped by the role each pattern plays in the step
(`patterns.get(name).role`). Pure arithmetic on plain numbers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from commbench.calibration.pricing import ProgramEstimate
from commbench.traffic import patterns
from commbench.traffic.patterns import Role

IN_LAYER_AXES = ("tp", "cp", "ep")  # the in-layer columns of a plan's time_s
BACKWARD_SHARE = 2.0 / 3.0  # backward = 2 x forward: 2/3 of a training step's compute


@dataclass(frozen=True, kw_only=True)
class RoleTimes:
    """One step's predicted communication by role, seconds; a Program that could not be priced
    counts 0 (its config is rejected as unpriced, or explained with the error)."""

    in_layer: dict[str, float]  # IN_LAYER: axis -> seconds per step (tp, cp, ep)
    pipeline_s: float | None  # PIPELINE: the 1F1B makespan, compute and bubble included
    pipeline_comm_s: float  # its messages on the critical path
    gradient_s: float  # GRADIENT: the DP all-reduce or ZeRO traffic

    @classmethod
    def of(cls, estimates: Mapping[str, ProgramEstimate], end: int | None = None) -> RoleTimes:
        """Group the estimates of a step's Programs (keyed by pattern name) by role; `end` 0
        or 1: each in-layer and gradient op with a band at its low or high end."""
        in_layer: dict[str, float] = {}
        pipeline: ProgramEstimate | None = None
        gradient = 0.0
        for name, est in estimates.items():
            spec = patterns.get(name)
            band = est.comm_band_s() if end is not None else None
            comm = band[end] if band is not None and end is not None else (est.comm_s or 0.0)
            if spec.role is Role.IN_LAYER:
                assert spec.axis is not None
                in_layer[spec.axis] = in_layer.get(spec.axis, 0.0) + comm
            elif spec.role is Role.PIPELINE:
                pipeline = est
            elif spec.role is Role.GRADIENT:
                gradient += comm
        priced = pipeline if pipeline is not None and pipeline.error is None else None
        return cls(
            in_layer=in_layer,
            pipeline_s=priced.total_s if priced else None,
            pipeline_comm_s=(priced.comm_s or 0.0) if priced else 0.0,
            gradient_s=gradient,
        )


@dataclass(frozen=True, kw_only=True)
class StepTime:
    """A step's time and its parts, seconds per step per GPU."""

    compute: float | None  # None: no compute model
    bubble: float  # idle pipeline time, the in-layer stretch included
    in_layer: dict[str, float]  # axis -> predicted communication (not stretched)
    pipeline: float  # pipeline messages on the 1F1B critical path
    gradient: float  # gradient traffic in all
    gradient_exposed: float  # the part not hidden behind the backward compute
    step: float
    comm: float  # communication on the critical path
    comm_share: float | None  # comm / step; None without a compute model

    def parts(self) -> dict[str, float | None]:
        """compute, bubble, tp, cp, ep, pp, dp, dp_exposed: a plan's time_s but the step."""
        return {
            "compute": self.compute,
            "bubble": self.bubble,
            **{a: self.in_layer.get(a, 0.0) for a in IN_LAYER_AXES},
            "pp": self.pipeline,
            "dp": self.gradient,
            "dp_exposed": self.gradient_exposed,
        }


def step_time(
    roles: RoleTimes,
    *,
    compute_s: float | None,
    pp: int,
    micro_batches: int,
    overlap_dp: bool,
) -> StepTime:
    """Step time with p = pp stages and m = micro_batches, no overlap by default:

        step = makespan(1F1B) + in_layer x (m+p-1)/m + gradient_exposed

    makespan(1F1B) is the pipeline Program's simulated schedule with forward and backward
    compute per micro-batch (backward = 2 x forward), so it holds compute, the bubble
    (p-1)/(m+p-1) and the pipeline messages left on the critical path (Megatron-LM's 1F1B,
    Narayanan et al. 2021); without a pipeline (p = 1) it is the compute alone. The in-layer
    traffic (TP, CP, EP) runs inside each micro-batch's slot, so the bubble stretches it by the
    same (m+p-1)/m. The gradient traffic (DP all-reduce or ZeRO) follows the pipeline, or with
    `overlap_dp` hides behind the backward compute, 2/3 of the compute (PyTorch DDP bucketing,
    Li et al. 2020): gradient_exposed = max(0, gradient - 2/3 compute).

    comm = in_layer + pipeline messages + gradient_exposed; comm_share = comm / step (a config
    is communication-bound above 30%, a common rule of thumb); bubble = makespan -
    pipeline messages - compute + in_layer x ((m+p-1)/m - 1), so step = compute + bubble + comm.
    """
    p, m = pp, micro_batches
    stretch = (m + p - 1) / m
    inlayer = sum(roles.in_layer.values(), 0.0)
    if roles.pipeline_s is not None:
        makespan, pp_comm = roles.pipeline_s, roles.pipeline_comm_s
    else:
        makespan, pp_comm = (compute_s or 0.0), 0.0
    exposed = roles.gradient_s
    if overlap_dp and compute_s is not None:
        exposed = max(0.0, roles.gradient_s - compute_s * BACKWARD_SHARE)
    step = makespan + inlayer * stretch + exposed
    comm = inlayer + pp_comm + exposed
    return StepTime(
        compute=compute_s,
        bubble=makespan - pp_comm - (compute_s or 0.0) + inlayer * (stretch - 1.0),
        in_layer=dict(roles.in_layer),
        pipeline=pp_comm,
        gradient=roles.gradient_s,
        gradient_exposed=exposed,
        step=step,
        comm=comm,
        comm_share=(comm / step) if compute_s is not None and step > 0 else None,
    )
