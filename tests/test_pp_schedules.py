"""torch.distributed.pipelining's schedules by their class names under framework torchtitan
(pattern pp's `pp_schedule`): GPipe's own send/recv order (all forwards, then all backwards
in micro-batch order), deadlock-free under NCCL's point-to-point rules, its bubble and its
activations of all m micro-batches; the Megatron default unchanged."""

from __future__ import annotations

import pytest

from commbench import calibration
from commbench.calibration import reference
from commbench.errors import UsageError
from commbench.plan import Planner
from commbench.plan.request import PlanRequest
from commbench.plan.search import Config
from commbench.results.rundir import read_run
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.memory import activation_bytes, in_flight_micro_batches
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import pp
from commbench.traffic.presets import get_model

from conftest import run_checked_step, run_single

TINY = ModelShape(name="tiny", layers=12, hidden=128, ffn_hidden=256, heads=4, kv_heads=2,
                  vocab=512)  # fmt: skip
TITAN = {"framework": "torchtitan", "seq_len": 64}


def gpipe_step(p: int, m: int, **extra):
    opts = pp.Options(micro_batches=m, pp_schedule="ScheduleGPipe", **TITAN, **extra)
    prog = pp.build(ParallelLayout(p, pp=p), TINY, opts)
    (step,) = prog.steps
    return prog, step


def test_gpipe_order_is_all_forwards_then_all_backwards():
    """Stage 1 of 3, m 3: receive / send each forward in micro-batch order, then each
    backward in micro-batch order (ScheduleGPipe._step_microbatches), not 1F1B's."""
    _, step = gpipe_step(3, 3)
    got = [(a.kind, a.peer, a.tag) for a in step.schedule[1]]
    fwd = [x for j in range(3) for x in (("recv", -1, 2 * j), ("send", 1, 2 * j))]
    bwd = [x for j in range(3) for x in (("recv", 1, 2 * j + 1), ("send", -1, 2 * j + 1))]
    assert got == fwd + bwd
    assert step.label == "GPipe p=3 m=3"
    one = pp.build(ParallelLayout(3, pp=3), TINY, pp.Options(micro_batches=3, **TITAN))
    assert [a.tag for a in one.steps[0].schedule[1]] != [a.tag for a in step.schedule[1]]
    # the same messages as 1F1B: only the order differs
    assert sorted(map(repr, one.steps[0].schedule[1])) == sorted(map(repr, step.schedule[1]))


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (3, 1), (6, 5)])
def test_gpipe_makespan_and_bubble(p, m):
    """Free messages, forward f = 1, backward b = 2: the last stage's m forwards end at
    (m+p-1) f, its backwards start the chain back, stage 0's last backward ends at
    (m+p-1)(f+b): the bubble (p-1)/(m+p-1), as 1F1B's, which holds the same time."""
    sched = pp.schedule(p, m, 64, 1.0, 2.0, order=pp.gpipe)
    makespan, _ = pp.simulate(sched)
    assert makespan == pytest.approx((m + p - 1) * 3.0)
    assert 1 - m * 3.0 / makespan == pytest.approx(pp.bubble_fraction(p, m))
    assert pp.simulate(pp.schedule(p, m, 64, 1.0, 2.0))[0] == pytest.approx(makespan)


def test_gpipe_activations_hold_every_micro_batch():
    """pp 4, m 8: a 1F1B first stage holds min(4, 8) = 4 micro-batches, GPipe's all 8; the
    last stage holds the output layer's logits once under 1F1B, 8 times under GPipe."""
    assert (in_flight_micro_batches(4, 8), in_flight_micro_batches(4, 8, gpipe=True)) == (4, 8)
    assert in_flight_micro_batches(1, 8, gpipe=True) == 1  # no pipeline, no schedule
    model = get_model("llama-7b")
    one = activation_bytes(model, 2048, pp=4, micro_batches=1)
    assert activation_bytes(model, 2048, pp=4, micro_batches=8, gpipe=True) == pytest.approx(
        8 * one
    )
    assert activation_bytes(model, 2048, pp=4, micro_batches=8) == pytest.approx(4 * one)
    last = activation_bytes(model, 2048, pp=4, micro_batches=1, stage=3)
    assert activation_bytes(model, 2048, pp=4, micro_batches=8, stage=3, gpipe=True) == (
        pytest.approx(8 * last)
    )


def test_torch_schedule_names_and_their_errors():
    """Schedule1F1B is the default order; ScheduleInterleaved1F1B is virtual_stages' order;
    torch's names under Megatron, an interleaved name without virtual stages, a one-stage
    name with them, an unknown name: one UsageError each."""
    lay = ParallelLayout(4, pp=4)
    default = pp.build(lay, TINY, pp.Options(micro_batches=8, **TITAN))
    named = pp.build(lay, TINY, pp.Options(micro_batches=8, pp_schedule="Schedule1F1B", **TITAN))
    assert named.steps == default.steps
    inter = pp.Options(micro_batches=8, virtual_stages=3, **TITAN)
    assert (
        pp.build(lay, TINY, inter).steps
        == pp.build(
            lay,
            TINY,
            pp.Options(
                micro_batches=8, virtual_stages=3, pp_schedule="ScheduleInterleaved1F1B", **TITAN
            ),
        ).steps
    )
    megatron = pp.build(lay, TINY, pp.Options(micro_batches=8, seq_len=64))
    assert megatron.steps == default.steps and megatron.meta["pp_schedule"] == "1F1B"
    cases = [
        ({"pp_schedule": "ScheduleGPipe", "seq_len": 64}, "set framework torchtitan"),
        ({"pp_schedule": "ScheduleInterleaved1F1B", **TITAN}, "give virtual_stages of 2"),
        ({"pp_schedule": "ScheduleGPipe", "virtual_stages": 2, **TITAN}, "one stage a rank"),
        ({"pp_schedule": "ScheduleZBV", **TITAN}, "pp_schedule 'ScheduleZBV': choose from"),
    ]
    for opts, message in cases:
        with pytest.raises(UsageError, match=message):
            pp.Options(**opts)


def test_gpipe_step_runs_under_mpirun_with_correct_data(tmp_path):
    """A torchtitan step at pp 3 with ScheduleGPipe and 1 ms of synthetic forward compute on
    3 ranks: data checked, the pipeline's time at least GPipe's (m+p-1)(f+b) = 18 ms."""
    suite = run_checked_step(
        tmp_path, 3, {"pp": 3},
        {"micro_batches": 4, "framework": "torchtitan", "pp_schedule": "ScheduleGPipe",
         "compute_ms": 1},
        layers=3,
    )  # fmt: skip
    (rec,) = [r for r in read_run(tmp_path / "s").records
              if r.get("kind") == "step" and r["op"] == "p2p_schedule"]  # fmt: skip
    assert rec["label"] == "GPipe p=3 m=4" and rec["time_us"] >= 18_000
    bad = run_single("suite", str(suite), "--dry-run", "--world", "3", "--set",
                     "framework=megatron")  # fmt: skip
    assert bad.returncode == 2 and "set framework torchtitan" in bad.output


def test_planner_prices_gpipe_bubble_and_memory():
    """plan --framework torchtitan --pp-schedule ScheduleGPipe: the pipeline simulated with
    GPipe's order (all m micro-batches: no 1F1B steady state to extend), its bubble
    (p-1)/(m+p-1) and its activations of all m micro-batches (2x 1F1B's at pp 4, m 8 on the
    first stage's layers); under Megatron the flag is one usage error, exit 2."""
    ref = calibration.load(reference.shipped_path(), kind="reference")
    model = get_model("llama-7b")

    def evaluate(**kw):
        req = PlanRequest(model=model, gpus=8, gpus_per_node=8, peak_tflops=989.4,
                          zero_stages=(0,), framework="torchtitan", **kw)  # fmt: skip
        cfg = Config(tp=1, cp=1, ep=1, dp=2, pp=4, micro_batch=1, micro_batches=64, zero_stage=0)
        planner = Planner(req, ref)
        return planner, planner.evaluate(cfg), cfg

    gp, g, cfg = evaluate(pp_schedule="ScheduleGPipe")
    _, o, _ = evaluate()
    assert gp.pp_simulated(cfg) == 64
    assert "GPipe p=4 m=64" in {s.label for s in g.estimates["pp"].steps}
    free = g.times["compute"] + g.times["bubble"]
    assert g.times["bubble"] / free == pytest.approx(3 / 67, rel=1e-3)
    assert g.memory["activations"] > 10 * o.memory["activations"]
    bad = run_single("plan", "--model", "llama-7b", "--gpus", "8", "--pp-schedule",
                     "ScheduleGPipe")  # fmt: skip
    assert bad.returncode == 2 and "set framework torchtitan" in bad.output
