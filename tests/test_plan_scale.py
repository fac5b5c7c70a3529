"""The planner at scale: the 1F1B extension from short simulations, placement worked out
without listing groups, partial --explain configs, and the KV-cache dtype."""

from __future__ import annotations

import pytest

from commbench import calibration
from commbench.calibration import reference
from commbench.plan import Config, Planner, PlanRequest
from commbench.plan.planner import PP_BASE
from commbench.traffic import presets as models


@pytest.fixture(scope="module")
def ref():
    return calibration.load(reference.shipped_path(), kind="reference")


def config(tp=1, cp=1, ep=1, dp=1, pp=1, b=1, m=1, z=0) -> Config:
    return Config(tp=tp, cp=cp, ep=ep, dp=dp, pp=pp, micro_batch=b, micro_batches=m, zero_stage=z)


def req(model="llama-7b", gpus=8, **kw) -> PlanRequest:
    kw.setdefault("gpus_per_node", 8)
    kw.setdefault("peak_tflops", 989.4)
    return PlanRequest(model=models.get_model(model), gpus=gpus, **kw)


# ---- the 1F1B extension ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("gpus", "gpn", "cfg", "base"),
    [
        (16, 1, config(pp=16, m=96), PP_BASE),  # every stage pair inter: from PP_BASE
        (32, 8, config(tp=2, pp=16, m=200), 16),  # intra and inter pairs: from p
        (8, 4, config(dp=2, pp=4, m=70), 4),  # pp4 over 2 nodes: intra, inter, intra
    ],
)
def test_short_simulations_extend_to_the_full_schedule(ref, gpus, gpn, cfg, base):
    """Extended from 3 simulations of ~`base` micro-batches, the 1F1B makespan and its
    messages on the critical path equal the full schedule's."""
    r = req("llama-7b", gpus, gpus_per_node=gpn, zero_stages=(0,))
    fast, exact = Planner(r, ref), Planner(r, ref, exact=True)
    a, b = fast.evaluate(cfg), exact.evaluate(cfg)
    step = a.estimates["pp"].steps[0]
    assert f"simulated at m={base},{base + 1},{base + 2}, extended by period 1" in step.method
    assert a.estimates["pp"].total_s == pytest.approx(b.estimates["pp"].total_s, rel=1e-9)
    assert a.estimates["pp"].comm_s == pytest.approx(b.estimates["pp"].comm_s, rel=1e-9)
    assert a.step_s == pytest.approx(b.step_s, rel=1e-9)
