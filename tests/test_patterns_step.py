"""The whole-step pattern against Megatron-LM's formulas: the framework ops the per-strategy
patterns leave out (embedding, LM head, cross entropy, SP layernorm grads, batch broadcast,
loss, grad norm, distributed optimizer, MoE token counts) and the step as the sum of its
parts. llama-7b, TP=2, DP=4, s=2048, b=1 as the issue's Megatron comparison."""

from __future__ import annotations

from collections import Counter

import pytest

from commbench.errors import UsageError
from commbench.report.step_timeline import step_timelines
from commbench.results.rundir import read_run
from commbench.traffic import patterns
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.presets import get_model

from conftest import run_checked_step, run_mpi, run_single

LLAMA = get_model("llama-7b")
MIXTRAL = get_model("mixtral-8x7b")
B, S_LEN, H = 1, 2048, 4096
ACT = B * S_LEN * H * 2  # b s h in bf16


def step(world=8, model=LLAMA, **kw):
    degrees = {k: kw.pop(k) for k in ("tp", "cp", "ep", "pp") if k in kw}
    opts = {"seq_len": S_LEN, "micro_batch": B, "micro_batches": 1, **kw}
    return patterns.build("step", ParallelLayout(world, **degrees), model, opts)


def by_label(prog, label):
    found = [s for s in prog.steps if s.label == label]
    assert len(found) == 1, (label, [s.label for s in prog.steps])
    return found[0]


def test_embedding_and_lm_head_without_sp():
    prog = step(tp=2)
    emb = by_label(prog, "embedding output")
    assert (emb.op, emb.axis, emb.nbytes, emb.repeat, emb.phase) == (
        "allreduce", "tp", ACT, 1, "forward",
    )  # fmt: skip
    head = by_label(prog, "LM head input grad")
    assert (head.op, head.nbytes, head.phase) == ("allreduce", ACT, "backward")


def test_embedding_and_lm_head_with_sp():
    prog = step(tp=2, sequence_parallel=True)
    assert by_label(prog, "embedding output (SP)").op == "reduce_scatter"
    assert by_label(prog, "embedding grad (SP)").op == "allgather"
    ops = [(s.op, s.phase, s.nbytes) for s in prog.steps if s.label.startswith("LM head")]
    assert ops == [
        ("allgather", "forward", ACT),
        ("allgather", "backward", ACT),
        ("reduce_scatter", "backward", ACT),
    ]


def test_cross_entropy_is_three_fp32_allreduces_of_bs():
    ce = by_label(step(tp=2, micro_batches=3), "cross entropy")
    assert (ce.op, ce.dtype, ce.nbytes, ce.repeat) == ("allreduce", "float32", B * S_LEN * 4, 9)


def test_layernorm_grads_only_with_sp():
    labels = [s.label for s in step(tp=2).steps]
    assert "SP layernorm grads" not in labels
    ln = by_label(step(tp=2, sequence_parallel=True), "SP layernorm grads")
    # Megatron: 2 RMSNorm weights per layer + the final norm, fp32 main grads
    assert ln.nbytes == (2 * 32 + 1) * H * 4 and ln.axis == "tp"


def test_batch_broadcast_loss_and_grad_norm():
    prog = step(tp=2, micro_batches=2)
    tokens = by_label(prog, "batch ints")  # tokens, labels, position ids
    mask = by_label(prog, "batch loss mask")
    assert (tokens.op, tokens.nbytes, tokens.repeat) == ("broadcast", 8 * B * S_LEN, 6)
    assert (mask.nbytes, mask.repeat) == (4 * B * S_LEN, 2)
    loss = by_label(prog, "loss")
    # Megatron-LM reduces [loss, tokens] once per step, after the schedule
    assert (loss.axis, loss.nbytes, loss.repeat) == ("dp", 8, 1)
    assert by_label(prog, "grad norm").axis == "tp-pp"
    assert by_label(step(tp=2, distributed_optimizer=True), "grad norm").axis == "tp-cp-dp-pp"
    # ZeRO 1-3 shard the grads too: the norm sums over every rank (defect 1 of issue 31)
    for zero in (1, 2, 3):
        assert by_label(step(tp=2, zero_stage=zero), "grad norm").axis == "tp-cp-dp-pp"


def test_torchtitan_step_differs_where_pytorch_does():
    """TP 2 + SP on the 2-layer model, 2 micro-batches: 10 backward all-gathers (Megatron's
    re-gathers make 20), no batch broadcast, the per-step scalars, FSDP2's policy."""
    tiny = ModelShape(name="t", layers=2, hidden=256, heads=4, ffn_hidden=688, vocab=1024)
    opts = {"seq_len": 128, "micro_batch": 2, "micro_batches": 2, "sequence_parallel": True}

    def ops(prog, op, phase):
        return sum(s.repeat for s in prog.steps if s.op == op and s.phase == phase)

    lay = ParallelLayout(4, tp=2)
    titan = patterns.build("step", lay, tiny, {**opts, "framework": "torchtitan"})
    mega = patterns.build("step", lay, tiny, opts)
    assert ops(titan, "allgather", "backward") == 10 and ops(mega, "allgather", "backward") == 20
    assert not [s for s in titan.steps if s.op == "broadcast"]
    assert [s for s in mega.steps if s.op == "broadcast"]
    assert {s.label for s in titan.steps} >= {"valid tokens", "finite", "grad norm"}
    fsdp = patterns.build("step", ParallelLayout(2), tiny, {**opts, "sequence_parallel": False,
                          "framework": "torchtitan", "zero_stage": 3})  # fmt: skip
    norm = [s for s in fsdp.steps if s.label == "grad norm"]
    assert [(s.axis, s.count) for s in norm] == [("dp", 21)]  # one fp32 per grad tensor
    assert ops(fsdp, "allgather", "backward") == 6  # the [norm, output] unit stays gathered
    with pytest.raises(UsageError, match="framework 'deepspeed': choose from megatron"):
        patterns.build("step", lay, tiny, {"framework": "deepspeed"})


def test_distributed_optimizer_moves_fp32_grads_and_bf16_params():
    prog = step(tp=2, distributed_optimizer=True)
    params = LLAMA.rank_params(tp=2)
    rs = sum(s.total_bytes for s in prog.steps if s.op == "reduce_scatter")
    ag = sum(s.total_bytes for s in prog.steps if s.op == "allgather")
    assert {s.dtype for s in prog.steps if s.op == "reduce_scatter"} == {"float32"}
    # padded to whole elements over the 4 dp ranks, per bucket
    assert 0 <= rs - 4 * params < 4 * 4 * 8 and 0 <= ag - 2 * params < 2 * 4 * 8
    assert not [s for s in prog.steps if s.label.startswith("grad bucket")]  # no DDP buckets
    ddp = step(tp=2)
    assert sum(s.total_bytes for s in ddp.steps if s.label.startswith("grad bucket")) == 4 * params


def test_moe_token_counts_and_expert_tp():
    plain = step(world=8, model=MIXTRAL, tp=2, ep=4, seq_len=256, micro_batches=2)
    assert not [s for s in plain.steps if "expert TP" in s.label]  # ETP = 1: none
    prog = step(
        world=8, model=MIXTRAL, tp=2, ep=4, seq_len=256, micro_batches=2,
        expert_tensor_parallel=True,
    )  # fmt: skip
    counts = by_label(prog, "MoE token counts")
    assert (counts.op, counts.axis, counts.nbytes) == ("alltoall", "ep", 8 * MIXTRAL.experts)
    assert counts.repeat == MIXTRAL.layers * 2
    dispatch = by_label(prog, "dispatch")
    received = max(sum(col) for col in zip(*dispatch.split))
    gather = by_label(prog, "MoE tokens to expert TP")
    assert (gather.op, gather.axis, gather.nbytes) == ("allgather", "tp", 2 * received)
    order = [s.label for s in prog.steps]
    assert order.index("MoE token counts") < order.index("dispatch") < order.index(gather.label)
    assert order.index(gather.label) < order.index("combine")


def test_step_is_the_sum_of_the_planners_parts():
    layout = ParallelLayout(8, tp=2, pp=2)
    opts = {"seq_len": S_LEN, "micro_batches": 4, "sequence_parallel": True}
    prog = patterns.build("step", layout, LLAMA, opts)
    parts = patterns.training_step(layout, LLAMA, opts)
    parts["framework"] = patterns.build("framework", layout, LLAMA, opts)
    assert set(parts) == {"tp", "pp", "dp", "framework"}
    assert Counter(prog.steps) == Counter(s for p in parts.values() for s in p.steps)
    phases = [s.phase for s in prog.steps]
    assert phases.index("forward+backward") > max(i for i, p in enumerate(phases) if p == "forward")
    assert phases[-1] == "optimizer"


@pytest.mark.parametrize(
    ("degrees", "what"),
    [({"tp": 3}, "tp=3"), ({"pp": 3}, "pp=3"), ({"cp": 3}, "cp=3")],
)
def test_degrees_that_do_not_fit_the_model(degrees, what):
    with pytest.raises(UsageError, match=what):
        step(world=degrees.get("tp", 1) * degrees.get("pp", 1) * degrees.get("cp", 1), **degrees)


def test_suite_step_dry_run_prints_the_whole_program():
    job = run_single("suite", "step", "--quick", "--dry-run", "--world", "8")
    assert job.returncode == 0, job.output
    for label in ("batch ints", "cross entropy", "MoE token counts", "grad norm"):
        assert label in job.stdout
    assert "1F1B p=2 m=4" in job.stdout and "dense params" in job.stdout  # pp, distopt


def test_suite_step_bad_degree_exits_2():
    job = run_single("suite", "step", "--quick", "--dry-run", "--world", "6", "--degree", "tp=3")
    assert job.returncode == 2 and "tp=3 does not divide the 8 heads" in job.stderr, job.output
    assert "Traceback" not in job.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["mpi", "gloo"])
def test_suite_step_on_8_ranks(tmp_path, backend):
    """Every config of the quick step suite on 8 ranks, every op checked exactly, with the
    step's time split by axis and phase."""
    job = run_mpi(
        8, "suite", "step", "--quick", "--backend", backend, "--results", str(tmp_path),
        "--run-id", "s", timeout=300,
    )  # fmt: skip
    assert job.returncode == 0, job.output
    assert "Points with wrong data : 0 of 12 (checked)" in job.stdout
    assert "raw communication by axis: " in job.stdout
    assert "raw communication by phase: " in job.stdout
    # the report's timeline lays every Program step end to end: its length is the point's time
    run = read_run(tmp_path / "s")
    timelines = step_timelines([run])
    points = [r for r in run.records if r.get("kind") == "point" and r["pattern"] == "step"]
    assert len(timelines) == len(points) == 11
    for tl, pt in zip(timelines, points):
        assert len(tl.spans) == pt["steps_total"]
        assert tl.total_s * 1e6 == pytest.approx(pt["time_us"], rel=1e-6)
        assert all(s.end > s.start for s in tl.spans)  # every step measured


def test_plan_framework_flag_ranks_configs():
    """`plan --framework torchtitan` ranks configs priced with torchtitan's traffic (DDP's
    100 MiB buckets: a different dp time); an unknown framework is a usage error, exit 2."""
    titan = run_single("plan", "--model", "llama-7b", "--gpus", "16", "--framework", "torchtitan",
                       "--json")  # fmt: skip
    mega = run_single("plan", "--model", "llama-7b", "--gpus", "16", "--json")
    assert titan.returncode == 0 and mega.returncode == 0, titan.output
    assert titan.stdout != mega.stdout  # the same configs, priced differently
    bad = run_single("plan", "--model", "llama-7b", "--gpus", "16", "--framework", "deepspeed")
    assert bad.returncode == 2 and "invalid choice: 'deepspeed'" in bad.output


def test_megatron_tied_embedding_expert_bias_and_batch_per_stage():
    """Issue 31's defects 5 and 8 and the batch broadcast as get_batch_on_this_tp_rank does
    it per pipeline stage: gpt3-175b at tp 2 pp 2 all-reduces ~1.15 GiB of tied embedding
    grads between its two stages; deepseek-v3's expert-bias counts are 58 KiB a step."""
    gpt3 = get_model("gpt3-175b")
    prog = patterns.build("step", ParallelLayout(8, tp=2, pp=2), gpt3, {"seq_len": 1024})
    tied = by_label(prog, "tied embedding grad")
    assert (tied.op, tied.axis, tied.dtype, tied.repeat) == ("allreduce", "pp", "float32", 1)
    assert tied.nbytes == 4 * gpt3.vocab * gpt3.hidden // 2
    # the busiest (last) stage receives labels and the loss mask, not tokens or positions
    ints, mask = by_label(prog, "batch ints"), by_label(prog, "batch loss mask")
    assert (ints.repeat, mask.repeat) == (4, 4)  # one int64 tensor x 4 micro-batches
    flat = patterns.build("step", ParallelLayout(4, tp=2), gpt3, {"seq_len": 1024})
    assert by_label(flat, "batch ints").repeat == 12 and "tied embedding grad" not in str(flat)
    ds = get_model("deepseek-v3")
    lay, opts = ParallelLayout(64, tp=2, ep=8), {"seq_len": 1024, "micro_batches": 1}
    assert "expert-bias" not in str(patterns.build("step", lay, ds, opts))  # Megatron: off
    bias = by_label(
        patterns.build("step", lay, ds, {**opts, "expert_bias": True}), "expert-bias token counts"
    )
    assert (bias.axis, bias.nbytes) == ("tp-cp-dp", 4 * 58 * 256)  # 58 MoE layers x 256
    titan = patterns.build("step", lay, ds, {**opts, "framework": "torchtitan"})
    assert [s.axis for s in titan.steps if s.label.startswith("expert-bias")] == ["tp", "dp"]


TIED = ModelShape(name="tiny-tied", layers=3, hidden=128, ffn_hidden=256, heads=4, kv_heads=4,
                  vocab=512, tied_embeddings=True)  # fmt: skip


@pytest.mark.parametrize("pp", [3, 4, 6])
def test_megatron_tied_embedding_group_is_first_and_last_stage(pp):
    """pp > 2: the word-embedding grad all-reduce runs over Megatron's embedding group, each
    pipeline's first and last rank (parallel_state._EMBEDDING_GLOBAL_RANKS), axis pp_ends:
    at tp 2 dp 2 the pipelines are ranks {r + 4 i}, so their ends are (r, r + 4 (pp - 1))."""
    model = ModelShape(**{**TIED.__dict__, "layers": 12})
    lay = ParallelLayout(4 * pp, tp=2, pp=pp)
    prog = patterns.build("step", lay, model, {"seq_len": 64})
    tied = by_label(prog, "tied embedding grad")
    assert (tied.op, tied.axis, tied.dtype, tied.repeat) == ("allreduce", "pp_ends", "float32", 1)
    assert tied.nbytes == 4 * 512 * 128 // 2  # V h / t fp32
    assert lay.groups("pp_ends") == tuple((r, r + 4 * (pp - 1)) for r in range(4))
    info = lay.info("pp_ends")
    assert (info.size, info.stride) == (2, 4 * (pp - 1))
    two = patterns.build("step", ParallelLayout(8, tp=2, pp=2), model, {"seq_len": 64})
    assert by_label(two, "tied embedding grad").axis == "pp"  # the pp group is that pair
    untied = ModelShape(**{**model.__dict__, "tied_embeddings": False})
    assert "tied embedding" not in str(patterns.build("step", lay, untied, {"seq_len": 64}))


def test_ends_axis_bad_input_is_one_message():
    with pytest.raises(UsageError, match="_ends follows one axis"):
        ParallelLayout(8, tp=2, pp=2).groups("tp-pp_ends")


@pytest.mark.parametrize("world", [3, 6])
def test_tied_embedding_pp3_runs_under_mpirun_with_correct_data(tmp_path, world):
    """A suite step of a tied tiny model at pp 3 (tp 1 and 2): the embedding grad all-reduce
    runs on the 2-rank groups of the first and last stage (the middle stage sits it out),
    every point's data checked."""
    run_checked_step(tmp_path, world, {"tp": world // 3, "pp": 3}, {"micro_batches": 3},
                     name="tiny-tied", layers=3, kv_heads=4, tied_embeddings=True)  # fmt: skip
    run = read_run(tmp_path / "s")
    tied = [r for r in run.records if r.get("kind") == "step" and r.get("axis") == "pp_ends"]
    assert tied and all(r["group_size"] == 2 and r["groups"] == world // 3 for r in tied)


def test_hierarchical_cp_runs_under_mpirun_and_bad_sizes_exit_2(tmp_path):
    """A step with cp_comm_type a2a+p2p over cp 4 as [2, 2] on 4 ranks: the all-to-alls on
    the blocks {0,1} {2,3}, the ring on {0,2} {1,3}, every point's data checked; sizes that do
    not multiply to cp are one message, exit 2."""
    suite = run_checked_step(
        tmp_path, 4, {"cp": 4},
        {"micro_batches": 2, "cp_comm_type": "a2a+p2p",
         "hierarchical_context_parallel_sizes": [2, 2]},
    )  # fmt: skip
    recs = [r for r in read_run(tmp_path / "s").records if r.get("kind") == "step"]
    assert {(r["axis"], r["op"]) for r in recs if r["axis"].startswith("cp")} == {
        ("cp_in2", "alltoall"), ("cp_out2", "sendrecv"),
    }  # fmt: skip
    bad = run_single("suite", str(suite), "--dry-run", "--world", "4",
                     "--set", "hierarchical_context_parallel_sizes=[4,2]")  # fmt: skip
    assert bad.returncode == 2 and "4 x 2 = 8, not cp = 4" in bad.output
    assert "Traceback" not in bad.output and len(bad.output.strip().splitlines()) == 1


def test_megatron_ddp_buckets_one_per_buffer_or_4e7_with_overlap():
    """Megatron-Core's DDP (param_and_grad_buffer.py): one bucket per grad buffer, or with
    overlap_grad_reduce whole tensors up to max(4e7, 1e6 dp cp) elements; llama-7b at tp 2
    dp 2: 1 or 65 all-reduces (the issue counted 1 or 66 from Megatron's own buffers; torch
    DDP's rule at 25 MiB gave 516)."""
    lay, opts = ParallelLayout(4, tp=2), {"seq_len": 1024}

    def buckets(**extra):
        prog = patterns.build("step", lay, LLAMA, {**opts, **extra})
        return [s for s in prog.steps if s.label.startswith("grad bucket")]

    one = buckets()
    assert [(s.repeat, s.axis) for s in one] == [(1, "dp")]
    assert one[0].nbytes == 4 * LLAMA.rank_params(tp=2)
    over = buckets(overlap_grad_reduce=True)
    assert sum(s.repeat for s in over) == 65
    assert sum(s.repeat for s in over if s.count < 40_000_000) <= 1  # only the remainder
    assert sum(s.total_bytes for s in over) == one[0].nbytes
    titan = buckets(framework="torchtitan")
    assert sum(s.repeat for s in titan) == 82  # torch's rule, torchtitan's 100 MiB
    for bad, msg in (
        ({"framework": "torchtitan", "overlap_grad_reduce": True}, "framework torchtitan has none"),
        ({"framework": "fsdp"}, "framework 'fsdp': choose from megatron, torchtitan"),
        ({"framework": "torchtitan", "distributed_optimizer": True}, "zero_stage 3 \\(FSDP2\\)"),
    ):
        with pytest.raises(UsageError, match=msg):
            patterns.build("step", lay, LLAMA, {**opts, **bad})
    job = run_single("suite", "step", "--quick", "--dry-run", "--world", "4",
                     "--set", "framework=torchtitan", "--set", "overlap_grad_reduce=true")  # fmt: skip
    assert job.returncode == 2 and "overlap_grad_reduce" in job.stderr, job.output
    assert job.stderr.count("\n") <= 2  # one message, no traceback
