"""Planner: reference calibration, memory arithmetic (Adam states sharded as ZeRO does, KV
cache), three worked scenarios against the reference calibration, the shared evaluator's
pricing rules, explain, the JSON layout and bad input."""

from __future__ import annotations

import json
import re

import pytest
from plan_samples import ALPHA_S, BUSBW, config, req, stated_time, synthetic_calibration

from commbench import calibration
from commbench.calibration import reference
from commbench.calibration.pricing import Evaluator, busiest_bytes
from commbench.errors import UsageError
from commbench.plan import (
    Planner,
    explain,
    flops_per_token,
    memory,
    parse_config,
    plan,
)
from commbench.results.planfile import PlanFile
from commbench.traffic import presets as models
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.memory import kv_cache_bytes_per_token
from commbench.traffic.patterns import pp as pp_pattern
from commbench.traffic.program import Program, Step

from conftest import run_single

KiB, GiB = 1 << 10, 1 << 30


@pytest.fixture(scope="module")
def ref():
    return calibration.load(reference.shipped_path(), kind="reference")


# ---- the reference calibration ----------------------------------------------------------------
def test_reference_is_generated_cited_and_usable(ref):
    doc = reference.build()
    assert reference.shipped_path().read_text() == reference.render(doc), "regenerate the file"
    assert doc["kind"] == "reference" and ref.kind == "reference"
    assert "NOT a measurement" in doc["provenance"]["statement"]
    urls = [s["url"] for s in doc["provenance"]["sources"]]
    assert len(urls) >= 5 and all(u.startswith("https://") for u in urls)
    d = reference.derived()
    assert d["inter_busbw_GBps"] == pytest.approx(48.0)  # 24 GB/s per 200G NIC x 2
    assert d["intra_alpha_s"] == pytest.approx((0.6 + 6.6 / 14) * 1e-6)
    # every op the planner needs, any group size, both link classes, without extrapolate
    for op in ("allreduce", "allgather", "reduce_scatter", "alltoallv", "sendrecv", "broadcast"):
        for p in (2, 3, 8, 64, 1024):
            for link in ("intra", "inter"):
                e = ref.explain(op, 32 << 20, p, link, dtype="bfloat16")
                assert e.seconds > 0 and not e.extrapolated and e.kind == "reference"
    # the ring statement: 2(p-1) alpha + 2(p-1)/p S / busbw
    S = 64 << 20
    want = 14 * d["intra_alpha_s"] + 2 * 7 / 8 * S / (d["intra_busbw_GBps"] * 1e9)
    assert ref.predict("allreduce", S, 8, "intra") == pytest.approx(want)


# ---- memory: weights, gradients, Adam states (ZeRO sharding), KV cache ----------------------------
def test_memory_follows_zero_sharding_and_kv_cache():
    m = models.get_model("llama-7b")
    P = m.params
    assert 6.5e9 < P < 7.0e9
    r = req()
    mem = memory(r, config(m=8))
    assert mem["weights"] == pytest.approx(2 * P)
    assert mem["grads"] == pytest.approx(4 * P)  # fp32 gradients (DDP)
    assert mem["optimizer"] == pytest.approx(12 * P)  # Adam: fp32 master + 2 moments
    bf16 = memory(req(grad_dtype="bfloat16"), config(m=8))
    assert bf16["grads"] == pytest.approx(2 * P)
    z3 = memory(r, config(dp=8, z=3))  # ZeRO-3 shards all three over dp = 8
    for k in ("weights", "grads", "optimizer"):
        assert z3[k] == pytest.approx(mem[k] / 8)
    z1 = memory(r, config(dp=8, z=1))
    assert z1["weights"] == pytest.approx(2 * P) and z1["optimizer"] == pytest.approx(12 * P / 8)
    # KV cache: 2 L n_kv d_head x 2 bytes = 512 KiB per token; 32K tokens = 16 GiB
    assert kv_cache_bytes_per_token(m) == 512 * KiB
    inf = memory(req(mode="infer", seq_len=32768, global_batch=1), config())
    assert inf["kv_cache"] == 16 * GiB
    assert inf["weights"] == pytest.approx(2 * P, rel=1e-6)


def test_compute_flops_follow_6p_plus_attention():
    m = models.get_model("llama-70b")
    P = m.param_counts().active
    assert flops_per_token(m, 4096) == pytest.approx(6 * P + 12 * 80 * 64 * 128 * 4096)
    assert flops_per_token(m, 4096, "infer") == pytest.approx(flops_per_token(m, 4096) / 3)


# ---- three worked scenarios, against the reference calibration -------------------------------------
def test_7b_on_8x80gb_finds_tp_dp_and_rejects_pure_dp_without_zero(ref):
    res = plan(req(seq_len=4096, zero_stages=(0,)), ref)
    labels = {e.config.label for e in res.ranked}
    assert {"tp2-cp1-dp4-pp1", "tp4-cp1-dp2-pp1", "tp8-cp1-dp1-pp1"} <= labels
    pure = [c for c in res.rejected if c.config.label == "tp1-cp1-dp8-pp1"]
    assert pure and pure[0].stage == "memory"
    assert "needs" in pure[0].reasons[-1] and "> 80 GB" in pure[0].reasons[-1]
    # 2P + 4P + 12P = 18P bytes of states alone, beyond 80 GB
    assert memory(res.request, pure[0].config)["total"] > 18 * models.get_model("llama-7b").params
    assert all(e.memory["total"] <= 80e9 for e in res.ranked)
    assert [e.rank for e in res.ranked] == list(range(1, len(res.ranked) + 1))
    assert all(a.step_s <= b.step_s for a, b in zip(res.ranked, res.ranked[1:]))


def _link(e, axis):
    return e.placement.get(axis, {}).get("link_class")


def test_70b_on_32_gpus_puts_tp_inside_and_pp_across_nodes(ref):
    res = plan(req("llama-70b", 32, zero_stages=(0, 1, 2, 3), orders="all"), ref)
    top = res.ranked[:3]
    assert all(_link(e, "tp") == "intra" and _link(e, "pp") == "inter" for e in top)
    tp_inter = [e for e in res.ranked if _link(e, "tp") == "inter"]
    assert tp_inter, "--orders all must also try TP across nodes"
    best_inside = min(
        e.rank for e in res.ranked if _link(e, "tp") == "intra" and _link(e, "pp") == "inter"
    )
    assert best_inside < min(e.rank for e in tp_inter)
    # the worked config: TP=8 x PP=4, Megatron placement above the one with TP across nodes
    same = [e for e in res.ranked if e.config.label == "tp8-cp1-dp1-pp4"]
    inside = [e for e in same if _link(e, "tp") == "intra"]
    across = [e for e in same if _link(e, "tp") == "inter"]
    assert inside and across and inside[0].rank < across[0].rank
    assert across[0].times["tp"] > 5 * inside[0].times["tp"]  # 48 vs 370 GB/s


def test_moe_with_long_context_uses_ep_and_cp(ref):
    res = plan(req("mixtral-8x7b", 64, seq_len=65536, zero_stages=(0, 1, 2, 3)), ref)
    best = res.ranked[0]
    assert best.config.ep > 1 and best.config.cp > 1
    assert all(e.config.cp > 1 for e in res.ranked[:5])
    assert best.times["ep"] > 0 and best.times["cp"] > 0


def test_comm_bound_flag_follows_the_30_percent_rule(ref):
    # a small global batch makes the per-step gradient all-reduce across nodes dominate
    res = plan(req("llama-7b", 64, global_batch=64, zero_stages=(0,)), ref)
    for e in res.ranked:
        assert e.comm_bound == (e.comm_s / e.step_s > 0.30)
    assert any(e.comm_bound for e in res.ranked)


def test_periodic_pipeline_shortcut_matches_full_simulation(ref):
    r = req("llama-7b", 8, zero_stages=(0,))
    fast, exact = Planner(r, ref), Planner(r, ref, exact=True)
    for cfg in (config(dp=2, pp=4, m=512), config(tp=2, pp=4, m=1024)):
        a, b = fast.evaluate(cfg), exact.evaluate(cfg)
        assert fast.pp_simulated(cfg) < cfg.micro_batches == exact.pp_simulated(cfg)
        assert a.estimates["pp"].total_s == pytest.approx(b.estimates["pp"].total_s, rel=1e-9)
        assert a.times["pp"] == pytest.approx(b.times["pp"], rel=1e-9)
        assert a.step_s == pytest.approx(b.step_s, rel=1e-9)


def test_bubble_matches_1f1b_formula_without_messages(ref):
    r = req("llama-7b", 8, zero_stages=(0,))
    ev = Planner(r, ref).evaluate(config(dp=2, pp=4, m=512))
    p, m = 4, 512
    # idle time of the first stage = (p-1)/(m+p-1) of the pipeline without messages
    makespan_free = ev.times["compute"] + ev.times["bubble"]
    assert ev.times["bubble"] / makespan_free == pytest.approx((p - 1) / (m + p - 1), rel=1e-6)


def test_inference_prices_forward_traffic_and_kv_cache(ref):
    res = plan(req("llama-7b", 8, mode="infer", seq_len=32768, global_batch=8), ref)
    for e in res.ranked:
        assert "dp" not in e.estimates and "zero" not in e.estimates
        assert e.memory["kv_cache"] > 0 and e.memory["optimizer"] == 0
        for est in e.estimates.values():
            assert all(s.phase == "forward" for s in est.steps)


# ---- the evaluator's rules (synthetic measured calibration) --------------------------------------
def test_evaluator_prices_by_the_stated_line_and_says_how():
    cal = synthetic_calibration()
    ev = Evaluator(cal)
    assert ev.backend == "mpi"
    lay = ParallelLayout(4, tp=4)
    prog = Program(
        "t",
        (
            Step(op="allreduce", nbytes=1 << 20, axis="tp", repeat=3, dtype="bfloat16"),
            Step(op="allgather", nbytes=1 << 20, axis="tp", repeat=2, dtype="bfloat16"),
        ),
    )
    est = ev.program(prog, lay)
    ar, ag = est.steps
    # MPI has no bf16 reduction: the suite moves the same bytes as float32, and so is it priced
    assert ar.dtype == "float32" and "runs as float32" in ar.notes[0]
    assert ar.per_op_s == pytest.approx(stated_time("allreduce", 1 << 20, 4), rel=0.05)
    assert ar.total_s == pytest.approx(3 * ar.per_op_s)
    # an all-gather moves bytes: the float32 series prices the bf16 one, and the note says so
    assert ag.dtype == "bfloat16" and "priced by bytes" in ag.notes[0]
    assert ag.per_op_s == pytest.approx(stated_time("allgather", 1 << 20, 4), rel=0.05)
    assert est.total_s == pytest.approx(ar.total_s + ag.total_s)


def test_evaluator_refuses_outside_the_calibration_unless_extrapolating():
    cal = synthetic_calibration()
    lay = ParallelLayout(4, tp=4)
    prog = Program(
        "t", (Step(op="allreduce", nbytes=64 << 20, axis="tp", repeat=1, dtype="float32"),)
    )
    est = Evaluator(cal).program(prog, lay)
    assert est.total_s is None and "outside the measured sizes" in est.error
    est = Evaluator(cal, extrapolate=True).program(prog, lay)
    assert est.total_s > 0 and est.extrapolated
    # a link class nothing was measured on
    est = Evaluator(cal).program(prog, lay, link_classes={"tp": "inter"})
    assert est.error and "inter" in est.error


def test_alltoallv_is_priced_at_the_busiest_rank():
    split = ((100, 900, 0, 0), (0, 0, 0, 0), (0, 0, 0, 0), (0, 2000, 0, 48))
    st = Step(op="alltoallv", nbytes=2048, axis="ep", repeat=1, split=split)
    assert busiest_bytes(st) == 2900  # rank 1 receives 900 + 2000


def test_pipeline_schedule_is_simulated_with_priced_messages():
    cal = synthetic_calibration()
    nbytes = 64 * KiB
    sched = pp_pattern.schedule(2, 1, nbytes)  # one micro-batch: forward then backward message
    prog = Program(
        "pp", (Step(op="p2p_schedule", nbytes=nbytes, axis="pp", schedule=sched, ring=False),)
    )
    est = Evaluator(cal).program(prog, ParallelLayout(2, pp=2))
    msg = stated_time("sendrecv", nbytes, 2)
    assert est.total_s == pytest.approx(2 * msg, rel=0.05)
    assert est.comm_s == pytest.approx(est.total_s)  # no compute: all of it is messages
    assert ALPHA_S > 0 and BUSBW > 0


# ---- explain and JSON ------------------------------------------------------------------------------
def test_parse_config_forms():
    assert parse_config("tp8-pp4-dp1") == {"tp": 8, "pp": 4, "dp": 1}
    assert parse_config("tp=8,pp=4,zero=1,m=64") == {
        "tp": 8,
        "pp": 4,
        "zero_stage": 1,
        "micro_batches": 64,
    }
    assert parse_config("tp=2,order=pp-tp-cp-ep-dp")["order"] == ("pp", "tp", "cp", "ep", "dp")
    for bad in ("tp8-xx4", "tp=x", "foo=1", "order=tp-pp", ""):
        with pytest.raises(UsageError):
            parse_config(bad)


def test_explain_prices_every_step(ref):
    ev = explain(req("llama-70b", 32), ref, "tp8-pp4")
    assert ev.config.tp == 8 and ev.config.pp == 4
    assert set(ev.estimates) == {"tp", "pp"}
    assert all(s.total_s is not None for est in ev.estimates.values() for s in est.steps)
    # explain simulates the full pipeline
    assert f"m={ev.config.micro_batches}" in ev.estimates["pp"].steps[0].label
    with pytest.raises(UsageError, match="tp=16"):
        explain(req("llama-70b", 32), ref, "tp16-pp2")


def test_plan_json_layout(tmp_path):
    out = tmp_path / "plan.json"
    job = run_single(
        "plan", "--model", "llama-70b", "--gpus", "32", "--gpus-per-node", "8", "--json",
        "--top", "3", "-o", str(out),
    )  # fmt: skip
    assert job.returncode == 0, job.output
    doc = json.loads(job.stdout)
    assert doc["schema"] == "commbench.plan/1"
    assert doc["calibration"]["kind"] == "reference"
    assert set(doc["inputs"]) >= {"model", "gpus", "gpus_per_node", "seq_len", "global_batch"}
    assert len(doc["configs"]) == 3 and doc["counts"]["ranked"] >= 3
    c = doc["configs"][0]
    assert set(c) >= {"rank", "label", "tp", "cp", "ep", "dp", "pp", "micro_batches",
                      "zero_stage", "order", "placement", "memory_gb", "time_s", "comm_s",
                      "comm_share", "comm_bound", "extrapolated"}  # fmt: skip
    assert set(c["time_s"]) >= {"compute", "bubble", "tp", "cp", "ep", "pp", "dp", "step"}
    assert all({"reasons", "stage"} <= set(r) for r in doc["rejected"])
    full = json.loads(out.read_text())
    assert len(full["configs"]) == doc["counts"]["ranked"]
    # the plan file's one typed home reads back what the planner wrote, field for field
    assert PlanFile.from_json(full, str(out)).to_json() == full


@pytest.mark.parametrize(
    "config, message",
    [
        ({"label": "a", "tp": "8"}, "plan.json: configs[0].tp: must be an integer, got '8'"),
        ({"label": "a", "notes": "x"}, "configs[0].notes: must be a JSON list"),
        ({"label": "a", "placement": {"tp": {"size": 8}}}, "configs[0].placement.tp: must hold"),
        (
            {"label": "a", "comm_share": -1},
            "configs[0].comm_share: must be a non-negative fraction",
        ),
        ({"label": "a", "step_band_s": [2.0]}, "configs[0].step_band_s: must be [low, high]"),
        ({"label": "a", "step_band_s": [2.0, 1.0]}, "configs[0].step_band_s: must be [low, high]"),
        ({"label": "a", "step_band_s": "1-2"}, "configs[0].step_band_s: must be a JSON list"),
    ],
)
def test_plan_file_names_the_bad_field(config, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        PlanFile.from_json({"configs": [config]}, "plan.json")
    assert (
        PlanFile.from_json({"configs": [{"label": "a", "notes": None}]}, "p").configs[0].notes == []
    )


def test_plan_text_says_reference_and_explain_lists_steps():
    job = run_single("plan", "--model", "llama-70b", "--gpus", "32", "--gpus-per-node", "8")
    assert job.returncode == 0, job.output
    assert "REFERENCE" in job.stdout and "tp8-cp1-dp1-pp4" in job.stdout
    job = run_single(
        "plan", "--model", "llama-70b", "--gpus", "32", "--gpus-per-node", "8", "--explain",
        "tp=8,pp=4",
    )  # fmt: skip
    assert job.returncode == 0, job.output
    assert "## tp:" in job.stdout and "## pp:" in job.stdout and "allreduce" in job.stdout


# ---- bad input: one clear line, exit 2 -------------------------------------------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "llama-7b", "--gpus", "12", "--gpus-per-node", "8"], "whole number of nodes"),
        # 7 stages of 4 layers cannot be split (7 of 32 can: Megatron's uneven stages)
        (["--model", "llama-7b:layers=4", "--gpus", "7", "--gpus-per-node", "8"],
         "no split of 7 GPUs"),
        (["--model", "llama-70b", "--gpus", "8", "--gpu-memory", "16"], "smallest per-GPU need"),
        (["--model", "nope", "--gpus", "8"], "unknown model"),
        (["--model", "llama-7b", "--gpus", "8", "--mode", "infer", "--zero-stage", "1"], "infer"),
        (["--model", "llama-7b", "--gpus", "8", "--mode", "infer", "--overlap-dp"], "infer"),
        (["--model", "llama-7b", "--gpus", "8", "--global-batch", "1", "--micro-batch", "2"],
         "smaller than every --micro-batch"),
        (["--model", "llama-7b", "--gpus", "8", "--explain", "tp3"], "tp3 = 3 does not divide the 8 GPUs"),
        (["--model", "llama-7b", "--gpus", "8", "--calibration", "/nonexistent.json"],
         "cannot read calibration"),
    ],
)  # fmt: skip
def test_plan_bad_input_exits_2(args, message):
    job = run_single("plan", *args)
    assert job.returncode == 2, job.output
    assert message in job.stderr and "Traceback" not in job.output


def test_calibration_lacking_a_link_class_is_named(tmp_path):
    doc = reference.build()
    doc["link_table"] = [x for x in doc["link_table"] if x["link_class"] == "intra"]
    path = tmp_path / "intra-only.json"
    calibration.save(doc, path)
    job = run_single(
        "plan", "--model", "llama-7b", "--gpus", "16", "--gpus-per-node", "8", "--calibration",
        str(path),
    )  # fmt: skip
    assert job.returncode == 2, job.output
    assert "cannot price any config" in job.stderr and "inter" in job.stderr


def test_a_pipeline_pays_the_inter_node_link_only_between_stages_on_two_nodes(ref):
    """pp=4 over 2 nodes of 2 ranks: stages 0-1 and 2-3 share a node, 1-2 cross. Each message
    is priced on its own pair's link (the old pricing took the axis's one class, inter, for
    all three pairs: 64% too high for a mostly intra-node pipeline on the emulated cluster)."""
    nodes = (0, 0, 1, 1)
    layout = ParallelLayout(4, pp=4, nodes=nodes)
    model = models.parse_model_arg("llama-7b")
    prog = pp_pattern.build(layout, model, pp_pattern.Options(micro_batches=4, seq_len=2048))
    (step,) = prog.steps
    # the last pair is the ring's 3 -> 0 (interleaved 1F1B only: 1F1B never prices it)
    links = ("intra", "inter", "intra", "inter")
    assert pp_pattern.stage_links(layout.groups("pp"), nodes) == links
    ev = Evaluator(ref)
    est = ev.program(prog, layout)
    intra, inter = (ref.predict("sendrecv", step.nbytes, 2, link) for link in ("intra", "inter"))
    assert inter > 2 * intra
    per_pair = {(0, 1): intra, (1, 2): inter, (2, 3): intra}
    want, _ = pp_pattern.simulate(
        step.schedule, lambda src, dst, n: per_pair[min(src, dst), max(src, dst)]
    )
    assert est.comm_s == pytest.approx(want)
    all_inter, _ = pp_pattern.simulate(step.schedule, inter)
    assert est.comm_s < 0.9 * all_inter
    # pp=2 with dp=2 (strided) crosses on every pipeline; a record's class prices pairs alike
    wide = ParallelLayout(4, pp=2, nodes=nodes)
    assert pp_pattern.stage_links(wide.groups("pp"), nodes) == ("inter",)
    forced = ev.program(prog, layout, link_classes={"pp": "inter"})
    assert forced.comm_s == pytest.approx(all_inter)


def test_tied_embedding_grad_priced_over_the_first_and_last_stage(ref):
    """gpt3-175b (tied embeddings) at tp 8 dp 2 pp 4 on nodes of 8: Megatron's embedding group
    is each pipeline's first and last rank (ranks r and r + 48: axis pp_ends, 2 ranks on two
    nodes); the planner's price of the step Program (plan --verify's) holds its V h / t fp32
    gradient all-reduce as one all-reduce of 2 inter-node ranks."""
    from commbench.plan.verify import predicted, step_program

    planner, cfg = (
        Planner(req("gpt3-175b", 64, zero_stages=(0,)), ref),
        config(tp=8, dp=2, pp=4, m=8),
    )
    prog = step_program(planner.req, cfg)
    (tied,) = [s for s in prog.steps if s.label == "tied embedding grad"]
    gpt3 = models.get_model("gpt3-175b")
    assert (tied.axis, tied.nbytes) == ("pp_ends", 4 * round(gpt3.vocab * gpt3.hidden / 8))
    lay = cfg.layout(64, ())
    assert planner.placement(lay, ["pp_ends"])["pp_ends"] == {
        "size": 2, "link_class": "inter", "hosts_spanned": 2, "stride": 48,
    }  # fmt: skip
    same = Evaluator(ref).step(0, tied, 2, "inter")
    assert same.total_s and predicted(planner, cfg, prog)["pp_ends"] == pytest.approx(same.total_s)


def test_cp_comm_type_prices_the_form_megatron_runs(ref):
    """--cp-comm-type a2a: configs whose cp does not split a TP rank's heads are invalid with
    the reason (TE's a2a head split), the others' CP traffic is all-to-alls; a2a+p2p keeps its
    all-to-all inside a node (tp x a <= GPUs per node) and runs the ring across; --verify
    measures the same Program the planner priced."""
    from commbench.plan import search, verify

    long = {"seq_len": 131072, "zero_stages": (1,)}
    r = req("llama-7b", 64, cp_comm_type="a2a", **long)  # 32 heads, 32 KV heads
    bad = {c.config.label: c.reasons for c in search.candidates(r) if c.stage == "invalid"}
    assert any("cp=64 does not divide the 32 heads" in w for w in bad["tp1-cp64-dp1-pp1"])
    assert "cp=4 does not divide the 2 heads and 2 KV heads of a TP rank" in " ".join(
        bad["tp16-cp4-dp1-pp1"]
    )
    assert "tp2-cp8-dp4-pp1" not in bad
    ev = Planner(r, ref).evaluate(config(tp=2, cp=8, dp=4, m=8, z=1))
    assert {s.op for s in ev.estimates["cp"].steps} == {"alltoall"}
    r = req("llama-7b", 64, cp_comm_type="a2a+p2p", **long)
    cfg = config(tp=2, cp=16, dp=2, m=16, z=1)
    ev = Planner(r, ref).evaluate(cfg)
    axes = {s.axis: (s.op, s.link_class) for s in ev.estimates["cp"].steps}
    assert axes == {"cp_in4": ("alltoall", "intra"), "cp_out4": ("sendrecv", "inter")}
    measured = verify.step_program(r, cfg)
    assert {s.axis for s in measured.steps} >= set(axes)
    with pytest.raises(UsageError, match="megatron implements p2p, all_gather, a2a, a2a"):
        req("llama-7b", 64, cp_comm_type="torch_allgather")
    with pytest.raises(UsageError, match="applies to training"):
        req("llama-7b", 64, cp_comm_type="a2a", mode="infer")
