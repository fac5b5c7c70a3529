"""Interleaved 1F1B (virtual pipeline stages, Megatron-Core's
forward_backward_pipelining_with_interleaving): the NCCL deadlock checker proves the order,
message counts and bubbles match the hand-computed ones, memory holds the in-flight chunks,
bad input exits 2, and `suite pp` / `suite step` run uneven and interleaved pipelines under
mpirun with every message checked."""

import textwrap
from dataclasses import replace

import pytest

from commbench.errors import UsageError
from commbench.ops.p2p_schedule import fused_groups, nccl_deadlock, split_schedule
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.memory import activation_bytes
from commbench.traffic.patterns import pp
from commbench.traffic.patterns import pp_interleaved as il
from commbench.traffic.presets import get_model
from commbench.traffic.program import Step

from conftest import run_mpi, run_single

GRID = [(p, m, v) for p in range(3, 7) for v in (2, 3, 4) for m in (p, 2 * p, 3 * p)]


@pytest.mark.parametrize("compute", [(0.0, 0.0), (1e-3, 2e-3)])
def test_every_interleaved_schedule_passes_the_nccl_checker(compute):
    """Every send meets the receive the schedule meant (bytes and tag, NCCL's in-order
    matching without tags) and no stage waits forever, as Megatron issues the groups."""
    for p, m, v in GRID:
        sched = il.schedule(p, m, v, 4096, *compute)
        assert nccl_deadlock([fused_groups(a) for a in sched]) is None, (p, m, v)
    split, k = split_schedule(Step(op="p2p_schedule", nbytes=4096,
                                   schedule=il.schedule(4, 8, 2, 4096)), 1024)  # fmt: skip
    assert k == 4 and nccl_deadlock([fused_groups(a) for a in split.schedule]) is None


def test_message_counts_by_hand():
    """p=4, m=8, v=2: a micro-batch crosses v p - 1 = 7 stage boundaries each way, so
    2 x 8 x 7 = 112 messages (1F1B: 2 x 8 x 3 = 48); each stage sends m v = 16 forwards but
    the last (its last chunk computes the loss: 8) and 16 backwards but the first (8); the
    ring's 3 -> 0 pair carries (v-1) m = 8 each way."""
    p, m, v = 4, 8, 2
    sched = il.schedule(p, m, v, 64)
    fwd = [sum(a.kind == "send" and a.tag % 2 == 0 for a in acts) for acts in sched]
    bwd = [sum(a.kind == "send" and a.tag % 2 == 1 for a in acts) for acts in sched]
    assert fwd == [16, 16, 16, 8] and bwd == [8, 16, 16, 16]
    assert sum(fwd + bwd) == 112
    assert sum(a.kind == "send" for acts in pp.schedule(p, m, 64) for a in acts) == 48
    wrap = [a for a in sched[3] if a.kind == "send" and a.peer == -3]
    assert len(wrap) == 8 and all(a.tag % 2 == 0 for a in wrap)
    assert sum(a.kind == "send" and a.peer == 3 for a in sched[0]) == 8


def test_megatron_order_by_hand():
    """p=4, m=8, v=2: virtual micro-batches run micro-batches 0-3 through chunk 0, then 0-3
    through chunk 1, then 4-7 likewise; stage i warms up with 2 (p-i-1) + (v-1) p forwards
    (stage 0: 10, stage 3: 4), then alternates, then drains."""
    p, m, v = 4, 8, 2
    assert il.table(p, m, v)[:9] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1), (1, 1), (2, 1),
                                     (3, 1), (4, 0)]  # fmt: skip
    sched = il.schedule(p, m, v, 64, 1.0, 2.0)
    for i, warm in ((0, 10), (3, 4)):
        seconds = [a.seconds * v for a in sched[i] if a.kind == "compute"]
        assert seconds == [1.0] * warm + [1.0, 2.0] * (16 - warm) + [2.0] * warm, i
    # stage 0 sends its forwards in table order (tag 2 (mb v + chunk))
    tags = [a.tag for a in sched[0] if a.kind == "send" and a.tag % 2 == 0]
    assert tags[:5] == [2 * (j * v + c) for j, c in il.table(p, m, v)[:5]]


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (4, 8, 4), (3, 6, 2), (6, 12, 3)])
def test_bubble_by_hand(p, m, v):
    """Free messages, forward f and backward 2f a stage: the makespan is m (f + b) +
    (p - 1)(f + b)/v, so the idle fraction is (p-1)/(v m + p - 1) (1F1B: (p-1)/(m+p-1))."""
    f, b = 1e-3, 2e-3
    makespan, _ = pp.simulate(il.schedule(p, m, v, 64, f, b))
    assert makespan == pytest.approx(m * (f + b) + (p - 1) * (f + b) / v)
    assert 1 - m * (f + b) / makespan == pytest.approx(il.bubble_fraction(p, m, v))
    plain, _ = pp.simulate(pp.schedule(p, m, 64, f, b))
    assert makespan < plain


def test_pp_program_and_memory():
    model = get_model("llama-7b", "t")  # 32 layers: 8 a stage on 4 stages
    lay = ParallelLayout(4, pp=4)
    prog = pp.build(lay, model, pp.Options(seq_len=512, micro_batches=8, virtual_stages=2))
    (step,) = prog.steps
    assert step.label.startswith("interleaved 1F1B v=2 p=4 m=8")
    assert prog.meta["bubble_fraction"] == pytest.approx(3 / 19)
    # stage 0 holds 2 (p-1) + (v-1) p + 1 = 11 chunks of 4 layers = p + (p-1)/v micro-batches
    kw = dict(seq=512, pp=4, micro_batches=8)
    ratio = activation_bytes(model, virtual_stages=2, **kw) / activation_bytes(model, **kw)
    assert ratio == pytest.approx((4 + 3 / 2) / 4)


@pytest.mark.parametrize(
    "p,m,v,match",
    [
        (4, 8, 3, "virtual_stages=3: stage 0 holds 8 layer.s., which do not split into 3"),
        (4, 8, 16, "virtual_stages=16: stage 0 holds 8"),
        (2, 8, 2, "needs pp of 3 or more"),
        (4, 6, 2, "micro_batches=6 must be a multiple of pp=4"),
    ],
)
def test_bad_virtual_stages(p, m, v, match):
    model = get_model("llama-7b", "t")
    with pytest.raises(UsageError, match=match):
        pp.build(ParallelLayout(p, pp=p), model, pp.Options(micro_batches=m, virtual_stages=v))


def test_cli_bad_virtual_stages_exits_2():
    job = run_single("suite", "pp", "--quick", "--dry-run", "--world", "4",
                     "--set", "virtual_stages=3", "--set", "micro_batches=4")  # fmt: skip
    assert job.returncode == 2, job.output
    assert "virtual_stages=3" in job.stderr and "Traceback" not in job.output


SUITE = """\
runs:
  - pattern: PATTERN
    models: [{preset: llama-7b, layers: 10, decoder_first_pipeline_num_layers: 2,
              decoder_last_pipeline_num_layers: 2}]
    degrees: {pp: {min: 4, max: 4}}
    options: {micro_batches: 4, seq_len: 256, compute_ms: 0.5}
  - pattern: PATTERN
    models: [{preset: llama-7b, layers: 12}]
    degrees: {pp: {min: 4, max: 4}}
    options: {micro_batches: 4, seq_len: 256, virtual_stages: 3, compute_ms: 0.5}
"""


@pytest.mark.mpi
@pytest.mark.parametrize("pattern", ["pp", "step"])
def test_uneven_and_interleaved_run_under_mpirun(tmp_path, pattern):
    """2, 3, 3, 2 layers, and 3 model chunks a stage, on 4 ranks: every message checked."""
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(SUITE.replace("PATTERN", pattern)))
    job = run_mpi(4, "suite", str(path), "--backend", "mpi", "--results", str(tmp_path),
                  "--run-id", "r", timeout=120)  # fmt: skip
    assert job.returncode == 0, job.output
    assert "Points with wrong data : 0 of 2 (checked)" in job.stdout
    if pattern == "pp":
        assert "bubble (p-1)/(v m+p-1), v=3" in job.stdout


def test_report_timeline_names_interleaved_passes():
    """The report's 1F1B timeline replays an interleaved schedule: each stage runs m v chunk
    forwards and as many backwards, each micro-batch v times a direction."""
    from collections import Counter

    from commbench.report.timeline import replay

    p, m, v = 4, 8, 2
    passes, makespan = replay(il.schedule(p, m, v, 64, 1e-3, 2e-3), 0.0, v)
    assert makespan == pytest.approx(m * 3e-3 + (p - 1) * 3e-3 / v)
    for stage in range(p):
        seen = Counter((x.direction, x.micro_batch) for x in passes if x.stage == stage)
        assert seen == {(d, j): v for d in "FB" for j in range(m)}


def test_the_planner_prices_and_searches_interleaving():
    """llama-7b on 8 GPUs, --virtual-stages 1,2: each pp >= 3 config is tried both ways; at
    dp2-pp4 (m = 128) the interleaved one sends twice the pipeline messages (more of them on
    the critical path), has half the compute bubble, and holds p + (p-1)/v = 5.5 micro-batches of activations, not 4."""
    from commbench import calibration
    from commbench.calibration import reference
    from commbench.plan import explain, plan
    from commbench.plan.request import request_from_flags

    cal = calibration.load(reference.shipped_path(), kind="reference")
    req = request_from_flags(
        cal, model="llama-7b", gpus=8, gpus_per_node=8, gpu_memory_gb=None, seq_len=4096,
        global_batch=256, micro_batch="1", zero_stage="1", sequence_parallel=False,
        mode="train", peak_tflops=None, mfu=None, recompute="selective", grad_dtype="float32",
        overlap_dp=False, orders="megatron", extrapolate=False, backend=None,
        virtual_stages="1,2",
    )  # fmt: skip
    ranked = {e.config.label: e for e in plan(req, cal).ranked}
    assert "tp1-cp1-dp2-pp4" in ranked and "tp1-cp1-dp2-pp4-vp2" in ranked
    assert not any("-vp" in label and "pp2" in label for label in ranked)  # pp < 3: plain
    one = explain(req, cal, "tp1-cp1-dp2-pp4")
    two = explain(req, cal, "tp1-cp1-dp2-pp4-vp2")
    assert one.config.virtual_stages == 1 and two.config.virtual_stages == 2
    # an unnamed depth is plain 1F1B even when --virtual-stages does not list 1
    only_two = replace(req, virtual_stages=(2,))
    assert explain(only_two, cal, "tp1-cp1-dp2-pp4").config.virtual_stages == 1
    # messages on the critical path: more of them, mostly hidden behind the compute
    assert two.time.pipeline > one.time.pipeline
    bubble = one.time.compute * 3 / 128  # (p-1)/m of the compute, plain 1F1B
    assert one.time.bubble == pytest.approx(bubble, rel=0.05)
    assert two.time.bubble == pytest.approx(bubble / 2, rel=0.05)
    ratio = two.memory["activations"] / one.memory["activations"]
    assert ratio == pytest.approx(5.5 / 4, rel=0.02)


def test_cli_explain_with_a_virtual_depth_the_layers_refuse():
    job = run_single("plan", "--model", "llama-7b", "--gpus", "8", "--explain",
                     "tp1-cp1-dp2-pp4-vp3")  # fmt: skip
    assert job.returncode == 2, job.output
    assert "virtual_stages=3: stage 0 holds 8 layer(s)" in job.stderr
    assert "Traceback" not in job.output


def test_the_search_rejects_an_interleaved_depth_with_megatrons_reason():
    from plan_samples import req

    from commbench.plan.search import candidates

    found = {
        c.config.label: c
        for c in candidates(req("llama-7b", gpus=8, global_batch=12, virtual_stages=(1, 2)))
    }
    plain, two = found["tp1-cp1-dp2-pp4"], found["tp1-cp1-dp2-pp4-vp2"]
    assert plain.stage == "valid" and two.stage == "invalid"
    assert two.reasons == [
        "virtual_stages=2: micro_batches=6 must be a multiple of pp=4 (Megatron's interleaved "
        "schedule)"
    ]
    assert "tp1-cp1-dp4-pp2-vp2" not in found  # below pp_interleaved.MIN_STAGES: plain only
