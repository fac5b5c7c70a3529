"""Uneven pipeline stages as Megatron-Core splits them (traffic/pipeline_split.py): the split
rule, the pp schedule's per-stage compute, memory of the busiest stage, the search's split for
depths that do not divide the layers, and the bad-input messages."""

import dataclasses
import subprocess
import sys

import pytest

from commbench.errors import UsageError
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.memory import activation_bytes, training_memory
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import pp, tp
from commbench.traffic.patterns.base import violations
from commbench.traffic.pipeline_split import (
    PipelineSplit,
    megatron_split,
    stage_counts,
    stage_weights,
)
from commbench.traffic.presets import get_model

TINY = ModelShape(name="tiny10", layers=10, hidden=256, ffn_hidden=512, heads=4, vocab=1000)


def test_megatron_rules_by_hand():
    # even
    assert stage_counts(80, 4) == (20, 20, 20, 20)
    # decoder_first/last: the middle stages share the rest (126 - 14 = 112 over 14 -> 8)
    assert stage_counts(126, 16, PipelineSplit(7, 7)) == (7,) + (8,) * 14 + (7,)
    assert stage_counts(61, 16, PipelineSplit(None, 1)) == (4,) * 15 + (1,)
    assert stage_counts(10, 2, PipelineSplit(4, 6)) == (4, 6)
    # embedding and loss counted as a layer: (126 + 2) / 16 = 8 slots, 7 on first and last
    both = PipelineSplit(account_for_embedding_in_pipeline_split=True,
                         account_for_loss_in_pipeline_split=True)  # fmt: skip
    assert stage_counts(126, 16, both) == (7,) + (8,) * 14 + (7,)
    assert stage_counts(9, 5, PipelineSplit(account_for_loss_in_pipeline_split=True)) == (
        2, 2, 2, 2, 1,
    )  # fmt: skip
    # one stage: all layers, the settings unused
    assert stage_counts(61, 1, PipelineSplit(3, 2)) == (61,)


def test_weights_count_the_accounted_embedding_and_loss():
    both = PipelineSplit(account_for_embedding_in_pipeline_split=True,
                         account_for_loss_in_pipeline_split=True)  # fmt: skip
    assert stage_weights(126, 16, both) == pytest.approx((1.0,) * 16)  # Megatron's premise
    w = stage_weights(126, 16, PipelineSplit(7, 7))
    assert w[0] == pytest.approx(7 / (126 / 16)) and w[1] == pytest.approx(8 / (126 / 16))


@pytest.mark.parametrize(
    "layers,p,want",
    [(126, 16, (None, None, True, True)), (61, 16, (3, 2, False, False)),
     (10, 4, (None, None, True, True)), (7, 2, (None, None, False, True)),
     (11, 4, (None, None, False, True)), (13, 4, (3, 2, False, False)),
     (80, 8, (None, None, False, False))],
)  # fmt: skip
def test_the_search_split(layers, p, want):
    split = megatron_split(layers, p)
    assert dataclasses.astuple(split) == want
    counts = stage_counts(layers, p, split)
    assert sum(counts) == layers and min(counts) >= 1
    assert max(counts) == -(-layers // p)  # the busiest stage as light as any split allows


@pytest.mark.parametrize(
    "layers,p,split,match",
    [
        (10, 4, PipelineSplit(0, None), "decoder_first_pipeline_num_layers=0 leaves"),
        (11, 4, PipelineSplit(3, 3), "5 layers left do not split evenly over 2"),
        (10, 4, PipelineSplit(5, 5), "0 layers left"),
        (10, 2, PipelineSplit(3, 3), "hold 6 of the 10 layers"),
        (10, 3, PipelineSplit(), "pp=3 does not divide the 10 layers"),
        (126, 128, PipelineSplit(), "pp=128 is more stages than the 126 layers"),
        (3, 5, PipelineSplit(account_for_embedding_in_pipeline_split=True,
                             account_for_loss_in_pipeline_split=True), "without layers"),
    ],
)  # fmt: skip
def test_bad_splits_name_the_value(layers, p, split, match):
    with pytest.raises(UsageError, match=match):
        stage_counts(layers, p, split)


def test_pp_program_scales_each_stage_compute_by_its_layers():
    """llama3.1-405b on 16 stages (7, 8 x 14, 7): stage i's forward is its layers / (126/16)
    of compute_ms; every stage still sends m activations (2 (p-1) m messages in all), and with
    free messages the makespan is the busiest stage's (m + p - 1) slots less what the lighter
    first and last stages save (they are 1/8 lighter: each saves 1/8 of its slots off the
    critical path)."""
    model = ModelShape.from_dict(
        {"preset": "llama3.1-405b", "decoder_first_pipeline_num_layers": 7,
         "decoder_last_pipeline_num_layers": 7}
    )  # fmt: skip
    assert model.stage_counts(16) == (7,) + (8,) * 14 + (7,)
    lay = ParallelLayout(16, pp=16)
    prog = pp.build(lay, model, pp.Options(seq_len=1024, micro_batches=16, compute_ms=1.0))
    (step,) = prog.steps
    assert "first=7,last=7" in step.label and prog.meta["stage_layers"][0] == 7
    fwd = [next(a.seconds for a in acts if a.kind == "compute") for acts in step.schedule]
    assert fwd[0] == pytest.approx(1e-3 * 7 * 16 / 126)
    assert fwd[5] == pytest.approx(1e-3 * 8 * 16 / 126)
    sends = sum(a.kind == "send" for acts in step.schedule for a in acts)
    assert sends == 2 * 15 * 16
    makespan, _ = pp.simulate(step.schedule)
    slot = 3e-3 * 8 * 16 / 126  # forward + backward of a full stage
    assert (16 + 16 - 1 - 2) * slot < makespan <= (16 + 16 - 1) * slot + 1e-12


def test_in_layer_traffic_follows_the_busiest_stage():
    model = get_model("llama3.1-405b", "t").for_pipeline(16)
    prog = tp.build(ParallelLayout(128, tp=8, pp=16), model, tp.Options(seq_len=1024))
    assert prog.meta["layers"] == 8


def test_memory_is_the_busiest_stage():
    """With 7, 8, ..., 8, 7 stage 1 holds 8 layers x 15 in-flight micro-batches, more than
    stage 0's 7 x 16 (+ the embedding's): the busiest stage decides."""
    model = get_model("llama3.1-405b", "t").for_pipeline(16)
    kw = dict(seq=8192, tp=8, pp=16, micro_batches=64, sequence_parallel=True)
    a0 = activation_bytes(model, stage=0, **kw)
    a1 = activation_bytes(model, stage=1, **kw)
    assert a1 > a0
    mem = training_memory(model, dp=64, zero_stage=1, **kw)
    assert mem.activations == pytest.approx(a1)


def test_violations_and_the_planner_split():
    model = get_model("llama3.1-405b", "t")
    lay = ParallelLayout(128, tp=8, pp=16)
    (why,) = [w for _, w in violations(lay, model, 8192)]
    assert "pp=16 does not divide the 126 layers" in why
    assert violations(lay, model.for_pipeline(16), 8192) == []
    bad = ModelShape.from_dict({"preset": "llama3.1-405b", "decoder_first_pipeline_num_layers": 9})
    assert (
        "llama3.1-405b: pp=16 with decoder_first/last_pipeline_num_layers=9/None: the 117 layers left"
        in violations(lay, bad, 8192)[0][1]
    )
    with pytest.raises(UsageError, match="decoder_last_pipeline_num_layers=0 leaves the last"):
        ModelShape.from_dict({"preset": "llama3.1-405b", "decoder_last_pipeline_num_layers": 0})
    with pytest.raises(UsageError, match="cannot be used together"):
        ModelShape.from_dict({"preset": "llama3.1-405b", "decoder_last_pipeline_num_layers": 7,
                              "account_for_loss_in_pipeline_split": True})  # fmt: skip


def test_cli_bad_split_exits_2():
    """`suite pp` with a split leaving a stage without layers: one message, exit 2."""
    out = subprocess.run(
        [sys.executable, "-m", "commbench", "plan", "--model",
         "llama3.1-405b:decoder_first_pipeline_num_layers=0", "--gpus", "128",
         "--explain", "tp8-pp16"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert "decoder_first_pipeline_num_layers=0" in out.stderr
    assert "Traceback" not in out.stderr
