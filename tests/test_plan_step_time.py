"""The step-time formula (plan.step_time) on hand-computed numbers, and the grouping of a step's
estimates by pattern role."""

from __future__ import annotations

import pytest

from commbench.calibration.pricing import ProgramEstimate, StepEstimate
from commbench.plan.step_time import RoleTimes, step_time


def roles(in_layer=None, pipeline=None, gradient=0.0) -> RoleTimes:
    makespan, pp_comm = pipeline if pipeline is not None else (None, 0.0)
    return RoleTimes(
        in_layer=in_layer or {},
        pipeline_s=makespan,
        pipeline_comm_s=pp_comm,
        gradient_s=gradient,
    )


def test_pp1_is_compute_plus_every_transfer():
    # no pipeline: makespan = compute 10; stretch (m+p-1)/m = 1; nothing hidden
    t = step_time(
        roles({"tp": 0.2, "cp": 0.3}, gradient=0.5),
        compute_s=10.0,
        pp=1,
        micro_batches=8,
        overlap_dp=False,
    )
    assert t.step == pytest.approx(10 + 0.2 + 0.3 + 0.5)
    assert t.comm == pytest.approx(1.0)
    assert t.comm_share == pytest.approx(1.0 / 11.0)
    assert t.bubble == pytest.approx(0.0)
    assert t.parts() == pytest.approx(
        {
            "compute": 10.0,
            "bubble": 0.0,
            "tp": 0.2,
            "cp": 0.3,
            "ep": 0.0,
            "pp": 0.0,
            "dp": 0.5,
            "dp_exposed": 0.5,
        }  # fmt: skip
    )


def test_without_compute_there_is_no_share():
    t = step_time(roles({"tp": 0.2}, gradient=0.5), compute_s=None, pp=1, micro_batches=4,
                  overlap_dp=True)  # fmt: skip
    # nothing to hide the gradient behind: all of it is exposed; the step is communication
    assert t.step == pytest.approx(0.7) and t.comm == pytest.approx(0.7)
    assert t.gradient_exposed == 0.5 and t.comm_share is None and t.compute is None
    assert t.bubble == pytest.approx(0.0)


def test_pipeline_stretches_the_in_layer_traffic():
    # p = 4, m = 8: stretch (8+4-1)/8 = 1.375; 1F1B makespan 14 s of which 0.25 s messages
    t = step_time(
        roles({"tp": 0.4, "cp": 0.1}, pipeline=(14.0, 0.25), gradient=1.0),
        compute_s=10.0,
        pp=4,
        micro_batches=8,
        overlap_dp=False,
    )
    assert t.step == pytest.approx(14.0 + 0.5 * 1.375 + 1.0)  # 15.6875
    assert t.comm == pytest.approx(0.5 + 0.25 + 1.0)  # 1.75
    assert t.comm_share == pytest.approx(1.75 / 15.6875)
    # idle: 14 - 0.25 - 10 = 3.75 in the schedule, plus the stretch 0.5 x 0.375 = 0.1875
    assert t.bubble == pytest.approx(3.9375)
    assert t.pipeline == 0.25 and t.in_layer == {"tp": 0.4, "cp": 0.1}
    assert t.step == pytest.approx(t.compute + t.bubble + t.comm)


def test_overlap_dp_hides_gradients_behind_two_thirds_of_compute():
    def exposed(gradient: float, compute: float) -> float:
        t = step_time(roles(gradient=gradient), compute_s=compute, pp=1, micro_batches=1,
                      overlap_dp=True)  # fmt: skip
        assert t.gradient == gradient
        assert t.step == pytest.approx(compute + t.gradient_exposed)
        return t.gradient_exposed

    assert exposed(2.5, 3.0) == pytest.approx(0.5)  # 2/3 x 3 = 2 s hidden
    assert exposed(1.5, 3.0) == 0.0  # all hidden
    no = step_time(roles(gradient=2.5), compute_s=3.0, pp=1, micro_batches=1, overlap_dp=False)
    assert no.gradient_exposed == 2.5 and no.step == pytest.approx(5.5)


def _estimate(pattern: str, total: float | None, comm: float | None) -> ProgramEstimate:
    step = StepEstimate(
        index=0, op="allreduce", axis=pattern, phase="backward", label=pattern,
        dtype="float32", nbytes=1, repeat=1, group_size=2, link_class="intra", per_op_s=total,
        total_s=total, comm_s=comm, method="stated", error=None if total is not None else "no",
    )  # fmt: skip
    return ProgramEstimate(pattern, [step])


def test_estimates_are_grouped_by_role():
    r = RoleTimes.of(
        {
            "tp": _estimate("tp", 0.3, 0.3),
            "pp": _estimate("pp", 12.0, 0.2),  # a 1F1B makespan: compute included
            "ep": _estimate("ep", None, None),  # unpriced counts 0
            "zero": _estimate("zero", 0.7, 0.7),
        }
    )
    assert r.in_layer == {"tp": 0.3, "ep": 0.0}
    assert (r.pipeline_s, r.pipeline_comm_s, r.gradient_s) == (12.0, 0.2, 0.7)
    unpriced = RoleTimes.of({"pp": _estimate("pp", None, None)})
    assert unpriced.pipeline_s is None and unpriced.pipeline_comm_s == 0.0
