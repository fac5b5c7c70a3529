"""The planner at scale: the 1F1B extension from short simulations, placement worked out
without listing groups, partial --explain configs, and the KV-cache dtype."""

from __future__ import annotations

import pytest
from plan_samples import config, req

from commbench import calibration
from commbench.calibration import reference
from commbench.plan import Config, Planner, explain
from commbench.plan.planner import PP_BASE
from commbench.traffic.layout import ParallelLayout


@pytest.fixture(scope="module")
def ref():
    return calibration.load(reference.shipped_path(), kind="reference")


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


# ---- placement without groups ---------------------------------------------------------------
LAYOUTS = [
    (64, 8, dict(tp=2, cp=2, dp=4, pp=4)),
    (64, 8, dict(tp=8, dp=2, pp=4, order=tuple("pp-tp-cp-ep-dp".split("-")))),
    (48, 6, dict(tp=2, cp=3, dp=2, pp=4)),  # nodes of 6: groups straddle them
    (96, 8, dict(tp=4, ep=6, dp=12, pp=2, order=tuple("dp-tp-cp-ep-pp".split("-")))),
    (72, 72, dict(tp=4, dp=9, pp=2)),  # one NVL72-like node
    (24, 8, dict(cp=3, dp=4, pp=2, order=tuple("cp-dp-tp-ep-pp".split("-")))),
    (48, 6, dict(tp=2, cp=4, dp=3, pp=2)),  # cp 4's blocks of 2 and their strided partners
    (16, 4, dict(tp=1, dp=1, pp=16)),
]


@pytest.mark.parametrize(("world", "gpn", "degrees"), LAYOUTS)
def test_placement_from_strides_equals_the_listed_groups(world, gpn, degrees):
    """axis_placement and stage_links give what the groups on host_map's nodes give."""
    from commbench.plan.placement import axis_placement, stage_links
    from commbench.traffic.layout import host_map
    from commbench.traffic.patterns import pp

    nodes = host_map(world, ranks_per_node=gpn)
    lay = ParallelLayout(world, nodes=nodes, **degrees)
    cp = degrees.get("cp", 1)
    sub = [f"cp_{k}{a}" for a in range(1, cp + 1) if cp % a == 0 for k in ("in", "out")]
    for axis in ("tp", "cp", "dp", "pp", "dp-cp", "ep", "edp", "tp-cp", "pp_ends", *sub):
        info, got = lay.info(axis), axis_placement(lay, axis, gpn)
        assert (got.size, got.stride, got.hosts_spanned, got.link_class) == (
            info.size,
            info.stride,
            info.hosts_spanned,
            info.link_class,
        ), axis
    assert stage_links(lay, "pp", gpn) == pp.stage_links(lay.info("pp").groups, nodes)


def test_placement_keeps_nothing_per_gpu():
    """65,536 GPUs: the placement of every axis without building a group or a host map."""
    from commbench.plan.placement import axis_placement, stage_links

    lay = ParallelLayout(65536, tp=8, cp=2, dp=256, pp=16)
    assert axis_placement(lay, "tp", 8).link_class == "intra"
    got = axis_placement(lay, "dp-cp", 8)
    assert (got.size, got.stride, got.hosts_spanned) == (512, 8, 512)
    assert set(stage_links(lay, "pp", 8)) == {"inter"}
    assert "dense" not in lay.__dict__ or "grid" not in lay.dense.__dict__


# ---- --explain of a partial config ----------------------------------------------------------
def test_explain_sets_unnamed_axes_to_1_and_picks_micro_batch_and_zero(ref):
    """tp8-pp16 is tp8-cp1-dp(rest)-pp16, not a searched cp; micro-batch and ZeRO are the
    best of those the request allows, and the explanation says what it chose."""
    r = req("llama-70b", 256, micro_batch_sizes=(1, 2), zero_stages=(0, 1))
    ev = explain(r, ref, "tp8-pp16")
    c = ev.config
    assert (c.tp, c.cp, c.ep, c.dp, c.pp) == (8, 1, 1, 2, 16)
    text = " | ".join(ev.chosen)
    assert "cp = 1 (not named)" in text and "dp = 2 (the rest of the 256 GPUs)" in text
    assert f"micro-batch {c.micro_batch}" in text and f"ZeRO {c.zero_stage}" in text
    # the pick is the best of the four (b, z) the search would price for that split
    p = Planner(r, ref)
    alts = [
        p.evaluate(config(tp=8, dp=2, pp=16, b=b, m=r.batch // (2 * b), z=z))
        for b in (1, 2)
        for z in (0, 1)
    ]
    best = min(alts, key=lambda e: (not e.fits, e.step_s))
    assert (c.micro_batch, c.zero_stage) == (best.config.micro_batch, best.config.zero_stage)
    named = explain(r, ref, "tp8-pp16-b2-z1")
    assert (named.config.micro_batch, named.config.zero_stage) == (2, 1)
    assert not any("ZeRO" in line for line in named.chosen)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tp3-pp4", "tp3*pp4 = 12 does not divide the 64 GPUs"),
        ("tp8-dp4", "dp=4 leaves 32 of the 64 GPUs used"),
        ("cp5", "cp5 = 5 does not divide the 64 GPUs"),
    ],
)
def test_explain_degrees_that_do_not_divide_the_gpus_exit_2(text, message):
    """Named before any search: one message with the value, exit 2."""
    from conftest import run_single

    job = run_single("plan", "--model", "llama-7b", "--gpus", "64", "--explain", text)
    assert job.returncode == 2, job.output
    assert message in job.stderr and "Traceback" not in job.output


# ---- routing a uniform router fast ----------------------------------------------------------
def test_uniform_subsets_draw_every_k_subset_alike():
    """Distinct experts per token; each of the C(4, 2) = 6 pairs about 1/6 of the time."""
    import numpy as np

    from commbench.traffic.patterns.ep import uniform_subsets

    got = uniform_subsets(np.random.default_rng(0), 60000, 4, 2)
    assert got.shape == (60000, 2) and np.all(got[:, 0] != got[:, 1])
    pairs = np.unique(np.sort(got, axis=1), axis=0, return_counts=True)[1]
    assert len(pairs) == 6 and np.all(np.abs(pairs / 60000 - 1 / 6) < 0.01)
    wide = uniform_subsets(np.random.default_rng(1), 4096, 256, 8)
    assert all(len(set(row)) == 8 for row in wide.tolist())


# ---- the KV cache's dtype and the memory levers -----------------------------------------------
def test_kv_cache_dtype_halves_the_cache_and_its_decode_reads(ref):
    """fp8 and int8 hold the KV cache in one byte: half bf16's memory and HBM reads."""
    from commbench.plan import memory
    from commbench.plan.inference import decode_compute

    cfg = config(tp=4, dp=2, b=1, m=4)
    kw = dict(mode="infer", seq_len=32768, global_batch=8)
    bf16, fp8, int8 = (req("llama-7b", 8, kv_cache_dtype=d, **kw) for d in ("bf16", "fp8", "int8"))
    assert memory(fp8, cfg)["kv_cache"] == pytest.approx(memory(bf16, cfg)["kv_cache"] / 2)
    assert memory(int8, cfg)["kv_cache"] == memory(fp8, cfg)["kv_cache"]
    assert memory(fp8, cfg)["weights"] == memory(bf16, cfg)["weights"]
    (_, hbm16), (_, hbm8) = decode_compute(bf16, cfg), decode_compute(fp8, cfg)
    assert hbm16 is not None and hbm8 is not None and hbm8 < hbm16
    a, b = Planner(bf16, ref).evaluate(cfg), Planner(fp8, ref).evaluate(cfg)
    assert b.step_s < a.step_s  # decode is HBM-bound: fewer bytes, a shorter TPOT


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kv-cache-dtype", "fp8"], "--kv-cache-dtype applies to --mode infer"),
        (["--mode", "infer", "--kv-cache-dtype", "fp4"], "invalid choice: 'fp4'"),
    ],
)
def test_kv_cache_dtype_bad_input_exits_2(args, message):
    from conftest import run_single

    job = run_single("plan", "--model", "llama-7b", "--gpus", "8", *args)
    assert job.returncode == 2, job.output
    assert message in job.stderr and "Traceback" not in job.output


def test_finding_when_cp_only_buys_memory_full_recompute_frees(ref):
    """Every GPU its own node: CP's ring crosses nodes, and tp1-cp1-dp8 with full recompute
    (4/3 of the compute) fits and beats the best, tp2-cp4: the plan says so."""
    from commbench.plan import plan

    r = req("llama-7b", 8, gpus_per_node=1, seq_len=65536, zero_stages=(0, 1, 2, 3))
    res = plan(r, ref)
    best = res.ranked[0]
    assert best.config.cp > 1
    found = [f for f in res.findings if "only for memory" in f]
    assert len(found) == 1 and "full recompute (--recompute full)" in found[0]
    assert f"the best {best.config.label} uses CP {best.config.cp}" in found[0]
    # none once recompute is full already, nor when the best has no CP
    full = plan(req("llama-7b", 8, gpus_per_node=1, seq_len=65536, recompute="full"), ref)
    assert not [f for f in full.findings if "only for memory" in f]
    short = plan(req("llama-7b", 8, zero_stages=(0,)), ref)
    assert short.ranked[0].config.cp == 1 and not short.findings


def test_pipeline_estimates_are_kept_per_stage_link_not_per_axis_class(ref):
    """Two rank orders whose pp groups both cross nodes (class inter) but at different stage
    pairs share a pipeline Program; each gets its own estimate, as a fresh planner prices it."""
    r = req("llama-7b", 16, gpus_per_node=4, zero_stages=(0,))
    spread = config(tp=2, dp=2, pp=4, m=64)  # Megatron order: pp stride 4, every pair inter
    packed = Config(**{**spread.__dict__, "order": tuple("tp-pp-cp-ep-dp".split("-"))})
    shared = Planner(r, ref)
    a, b = shared.evaluate(spread), shared.evaluate(packed)
    assert a.placement["pp"]["link_class"] == b.placement["pp"]["link_class"] == "inter"
    assert shared.programs(spread)["pp"] is shared.programs(packed)["pp"]
    alone = Planner(r, ref).evaluate(packed)
    assert b.estimates["pp"].total_s == alone.estimates["pp"].total_s
    assert b.estimates["pp"].total_s < a.estimates["pp"].total_s  # intra pairs are faster


def test_finding_when_a_wider_replica_only_buys_memory_fp8_kv_frees(ref):
    """llama-70b serving 128K-token contexts on 16 GPUs: tp8-pp2 is the best that fits in
    bf16, but tp8 alone (twice the replicas) fits with an fp8 KV cache and is faster."""
    from commbench.plan import plan

    kw = dict(mode="infer", seq_len=131072, global_batch=20)
    res = plan(req("llama-70b", 16, **kw), ref)
    found = [f for f in res.findings if "only for memory" in f]
    assert len(found) == 1, res.findings
    assert "uses 16 GPUs a replica" in found[0] and "tp8-cp1-dp2-pp1" in found[0]
    assert "--kv-cache-dtype fp8" in found[0]
    fp8 = plan(req("llama-70b", 16, kv_cache_dtype="fp8", **kw), ref)
    assert fp8.ranked[0].config.label == "tp8-cp1-dp2-pp1"  # what the finding said
    assert not [f for f in fp8.findings if "only for memory" in f]
