"""plan --mode infer: prefill latency and time per output token from the prefill and decode
Programs, the decode roofline (weights the tokens reach and the KV cache at the HBM
bandwidth), and the seed's advice as checks against the reference calibration: decode
communication at small batches is latency-bound, and EP at batch 1 loses to replicated
experts while it wins at larger batches."""

from __future__ import annotations

import json

import pytest

from commbench import calibration
from commbench.calibration import reference
from commbench.plan import Config, PlanRequest, plan
from commbench.plan.inference import decode_compute, decode_split, pass_roles
from commbench.results.planfile import PlanFile
from commbench.traffic.memory import kv_cache_bytes
from commbench.traffic.patterns import Role
from commbench.traffic.patterns import get as pattern
from commbench.traffic.presets import get_model

from conftest import run_single


@pytest.fixture(scope="module")
def ref():
    return calibration.load(reference.shipped_path(), kind="reference")


def req(model, gpus, **kw) -> PlanRequest:
    kw.setdefault("gpus_per_node", 8)
    kw.setdefault("peak_tflops", 989.4)
    return PlanRequest(model=get_model(model), gpus=gpus, mode="infer", **kw)


def cfg(tp=1, cp=1, ep=1, dp=1, pp=1, b=1, m=1) -> Config:
    return Config(tp=tp, cp=cp, ep=ep, dp=dp, pp=pp, micro_batch=b, micro_batches=m, zero_stage=0)


@pytest.fixture(scope="module")
def deepseek(ref):
    return plan(req("deepseek-v3", 64), ref)


def test_deepseek_v3_on_64_gpus_is_ranked_by_time_per_output_token(deepseek):
    res = deepseek
    assert len(res.ranked) > 10
    tpots = [e.inference.tpot_s for e in res.ranked]
    assert tpots == sorted(tpots) and [e.step_s for e in res.ranked] == tpots
    for e in res.ranked:
        assert set(e.estimates) == {"prefill", "decode"}
        assert {pattern(n).role for n in e.estimates} == {Role.PREFILL, Role.DECODE}
        inf = e.inference
        assert inf.batch == res.request.batch
        assert inf.tokens_per_s == pytest.approx(inf.batch / inf.tpot_s)
        assert inf.prefill.step > inf.tpot_s  # a whole prompt costs more than one token
        # the decode pass's time is its compute plus its communication (no pipeline here)
        if e.config.pp == 1:
            d = inf.decode
            assert d.step == pytest.approx(d.compute + sum(d.in_layer.values()))
    best = res.ranked[0]
    assert best.config.ep > 1  # 671B of experts: spreading them wins at this batch
    text = "\n".join(res.findings)
    assert "TPOT" in text and "latency-bound" in text and "expert parallelism" in text


def test_decode_reads_the_weights_its_tokens_reach_and_the_kv_cache():
    """The roofline's memory side: dense weights of the rank, experts hit 1-(1-1/E)^(b ep k)."""
    r = req("mixtral-8x7b", 8, global_batch=2)
    c = cfg(tp=2, ep=2, dp=4, b=1, m=1)  # 2 sequences over dp = 4: at least one each
    b, m = decode_split(r, c)
    assert (b, m) == (1, 1)
    model = r.model
    sp = model.stage_params(1, 0)
    hit = 1 - (1 - 1 / 8) ** (1 * 2 * 2)
    weights = (sp.dense_per_rank(2) + sp.expert_per_rank(2, 2) * hit) * 2
    kv = kv_cache_bytes(model, 4096, "bfloat16", 2, 1, 1)
    flops_s, memory_s = decode_compute(r, c)
    assert memory_s == pytest.approx((weights + kv) / 3350e9)
    assert flops_s < memory_s  # one token per sequence: decode is memory-bound


def test_ep_at_batch_1_loses_to_replicated_experts_and_wins_at_64(ref):
    """The seed's advice, as the planner prices it: Mixtral on one node."""

    def best(res, ep):
        return min(e.step_s for e in res.ranked if (e.config.ep > 1) == ep)

    one = plan(req("mixtral-8x7b", 8, global_batch=1), ref)
    assert best(one, True) > best(one, False)
    many = plan(req("mixtral-8x7b", 8, global_batch=64), ref)
    assert best(many, True) < best(many, False)
    assert any("loses to replicated experts" in f for f in one.findings)
    assert any("wins over replicated experts" in f for f in many.findings)


def test_small_batch_decode_communication_is_latency_bound(ref):
    """8x the batch moves 8x the bytes in little more time: the per-message cost dominates."""
    res = plan(req("llama3.1-405b", 16, global_batch=2), ref)
    best = res.ranked[0]
    small = best.inference.decode.comm
    finding = next(f for f in res.findings if "decode communication" in f)
    assert "latency-bound" in finding
    grown = float(finding.split(" in ")[1].split("x")[0])
    assert 1.0 <= grown < 2.0 and small > 0


def test_pass_roles_group_a_pass_like_a_training_step(deepseek):
    e = next(e for e in deepseek.ranked if e.config.cp > 1)
    roles = pass_roles(e.estimates["decode"])
    assert set(roles.in_layer) == {a for a in ("tp", "cp", "ep") if getattr(e.config, a) > 1}
    assert roles.pipeline_s is None and roles.gradient_s == 0


def test_plan_infer_cli_table_json_and_plan_file(tmp_path):
    out = tmp_path / "plan.json"
    job = run_single(
        "plan", "--model", "mixtral-8x7b", "--gpus", "8", "--mode", "infer", "--top", "3",
        "-o", str(out),
    )  # fmt: skip
    assert job.returncode == 0, job.output
    assert "TPOT" in job.stdout and "tok/s/GPU" in job.stdout and "# finding:" in job.stdout
    doc = json.loads(out.read_text())
    assert doc["findings"] and doc["inputs"]["hbm_gbps"] == 3350.0
    first = doc["configs"][0]["inference"]
    assert {"prefill_s", "tpot_s", "tokens_per_s", "tokens_per_s_per_gpu", "batch"} <= set(first)
    back = PlanFile.from_json(doc, str(out))
    assert back.findings == doc["findings"] and back.configs[0].inference == first
    job = run_single("plan", "--model", "mixtral-8x7b", "--gpus", "8", "--mode", "infer",
                     "--explain", "tp2-ep4")  # fmt: skip
    assert job.returncode == 0, job.output
    assert "# inference at batch" in job.stdout and "compute bound by HBM reads" in job.stdout
    assert "## prefill" in job.stdout and "## decode" in job.stdout
    job = run_single("plan", "--model", "mixtral-8x7b", "--gpus", "8", "--mode", "infer",
                     "--hbm-gbps", "0")  # fmt: skip
    assert job.returncode == 2 and "--hbm-gbps" in job.stderr
