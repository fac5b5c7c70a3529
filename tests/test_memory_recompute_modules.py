"""Megatron-Core's --recompute-modules and FP8 activation caches in commbench's activation
model (traffic/memory.py), term by term against hand counts in bytes per token: Korthikanti
et al. 2022's 34 s b h for a GPT layer, DeepSeek-V3's MLA + MoE layer with its documented
memory settings (report 3.2.3 and 3.3.3), and the bad inputs."""

import pytest

from commbench.errors import UsageError
from commbench.traffic.memory import activation_bytes_per_layer, training_memory
from commbench.traffic.model import ModelShape
from commbench.traffic.presets import get_model

from conftest import run_single

# Korthikanti et al.'s 22B GPT: GeLU MLP of 4h, MHA of 64 heads, h = 6144
GPT = ModelShape(name="gpt-22b", layers=48, hidden=6144, ffn_hidden=4 * 6144, heads=64,
                 vocab=51200, seq_len=2048, gated_mlp=False, tied_embeddings=True)  # fmt: skip
S = 2048
DEEPSEEK = ("core_attn", "layernorm", "mla_up_proj", "moe_act")  # the report's 3.2.3 recompute


def per_token(model, **kw) -> float:
    """Bytes per token of one layer at s = S, b = 1, no parallelism."""
    return activation_bytes_per_layer(model, S, **kw) / S


def test_gpt_layer_terms_by_module():
    """Korthikanti's 34 h per token with selective recompute (Megatron's default module,
    core_attn); without core_attn the 5 a s scores stay; layernorm drops the QKV and MLP
    inputs (4 h); FP8 halves the three GEMM inputs cached for the weight gradient (QKV input,
    MLP input, fc2 input: 1 + 1 + 4 h) and keeps GeLU's input and Q, K, V, O in 16 bits."""
    h, a = GPT.hidden, GPT.heads
    assert per_token(GPT) == 34 * h
    assert per_token(GPT, recompute_modules=("core_attn",)) == 34 * h
    assert per_token(GPT, recompute_modules=("layernorm",)) == 30 * h + 5 * a * S
    assert per_token(GPT, recompute_modules=("core_attn", "layernorm")) == 30 * h
    assert per_token(GPT, fp8="e4m3") == (34 - 1 - 1 - 4) * h
    # mlp: the GeLU input and output (16 h) go, the MLP input (2 h) stays in 16 bits
    assert per_token(GPT, recompute_modules=("core_attn", "mlp")) == 18 * h
    assert per_token(GPT, recompute_modules=("core_attn", "mlp"), fp8="hybrid") == 17 * h
    assert per_token(GPT, recompute="none") == 34 * h + 5 * a * S


def test_deepseek_v3_moe_layer_by_hand():
    """DeepSeek-V3's MoE layer (h 7168, 128 heads of Q/K 192 and V 128, latents 1536 / 512,
    RoPE key 64, top-8 of 2048-wide experts, one shared), bytes per token.

    Selective (core_attn): norm inputs 4h + norm outputs 4h + masks 2h; Q, K, V, O at 2 bytes
    (24576 + 24576 + 16384 + 16384); the latent norms' inputs and outputs 4 (1536 + 512); the
    shared expert's SwiGLU 6 f; each routed copy its dispatched input 2 h and 6 f.
    DeepSeek's settings (core_attn, layernorm, mla_up_proj, moe_act, FP8): norm inputs 4 h +
    masks 2 h; latents and RoPE key 2 (1536 + 512 + 64); O 2 x 16384; shared 4 f + f; each
    routed copy h (FP8 dispatch) + 4 f (SwiGLU input; its output recomputed)."""
    m = get_model("deepseek-v3")
    h, f = 7168, 2048
    qkvo = 24576 + 24576 + 16384 + 16384
    selective = 10 * h + 2 * qkvo + 4 * (1536 + 512) + 6 * f + 8 * (2 * h + 6 * f)
    assert per_token(m, moe_layer=True) == selective == 468992
    documented = 6 * h + 2 * (1536 + 512 + 64) + 2 * 16384 + 5 * f + 8 * (h + 4 * f)
    assert per_token(m, moe_layer=True, recompute_modules=DEEPSEEK, fp8="e4m3") == documented
    assert documented == 213120  # 0.87 GB a layer at s = 4096
    # without FP8: the norm-output, fc2 and dispatched inputs back at 2 bytes
    bf16 = 6 * h + 2 * (1536 + 512 + 64) + 2 * 16384 + 6 * f + 8 * (2 * h + 4 * f)
    assert per_token(m, moe_layer=True, recompute_modules=DEEPSEEK) == bf16
    # moe: the whole MoE layer recomputed, its 16-bit input kept even with FP8
    moe = 10 * h + 2 * qkvo + 4 * (1536 + 512)
    assert per_token(m, moe_layer=True, recompute_modules=("core_attn", "moe")) == moe
    assert per_token(m, moe_layer=True, recompute_modules=("core_attn", "moe"), fp8="e4m3") == (
        moe - h - 1536 - 512
    )  # the QKV input and the latents' up-projection inputs in FP8
    shared = per_token(m, moe_layer=True, recompute_modules=("core_attn", "shared_experts"))
    assert shared == selective - 6 * f


def test_full_recompute_keeps_the_layer_input_whatever_the_fp8_setting():
    m = get_model("deepseek-v3")
    assert per_token(m, moe_layer=True, recompute="full", fp8="e4m3") == 2 * m.hidden


def test_in_flight_counts_are_megatrons_1f1b():
    """Stage 1 of DeepSeek-V3 on 16 stages (4 MoE layers) holds 15 micro-batches, stage 0
    (3 dense layers and the embedding) 16: Megatron's p - rank - 1 warm-up forwards plus one."""
    m = get_model("deepseek-v3").for_pipeline(16)
    kw = {"pp": 16, "ep": 64, "dp": 128, "seq": 4096, "micro_batches": 120, "zero_stage": 1,
          "recompute_modules": DEEPSEEK, "fp8": "e4m3"}  # fmt: skip
    mem = training_memory(m, **kw)
    assert mem.activations == pytest.approx(4 * 15 * 213120 * 4096)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"recompute_modules": ("attn",)}, "--recompute-modules 'attn': choose from core_attn"),
        ({"recompute_modules": ("moe_act",), "recompute": "full"}, "needs --recompute selective"),
        ({"recompute_modules": ("mla_up_proj",)}, "has no multi-head latent attention"),
        ({"recompute_modules": ("moe",)}, "has no MoE layers"),
        ({"fp8": "e5m2"}, "--fp8-format 'e5m2': choose from e4m3, hybrid"),
    ],
)
def test_bad_options_are_named(kw, match):
    with pytest.raises(UsageError, match=match):
        activation_bytes_per_layer(get_model("llama3-8b"), 4096, **kw)


BASE = ("plan", "--model", "deepseek-v3", "--gpus", "2048", "--gpus-per-node", "8", "--seq-len",
        "4096", "--global-batch", "15360", "--distributed-optimizer")  # fmt: skip


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--recompute-modules", "core_attn,attn"), "--recompute-modules 'attn': choose from"),
        (("--recompute", "full", "--recompute-modules", "moe_act"), "needs --recompute selective"),
        (("--recompute-modules", ","), "--recompute-modules is empty"),
        (("--mode", "infer", "--fp8-format", "e4m3"), "apply to training"),
        (("--fp8-format", "e5m2"), "invalid choice: 'e5m2'"),
    ],
)
def test_cli_bad_input_exits_2_with_one_message(extra, message):
    job = run_single(*BASE, *extra, "--explain", "tp1-ep64-pp16")
    assert job.returncode == 2, job.output
    assert message in job.stderr and "Traceback" not in job.stderr


def test_the_full_recompute_lever_drops_the_modules_and_keeps_fp8():
    """The planner's memory lever (plan/levers.py) asks for full recompute: Megatron takes no
    --recompute-modules with it, so the lever's request names none."""
    from commbench.plan.levers import lever
    from commbench.plan.request import PlanRequest

    req = PlanRequest(model=get_model("deepseek-v3"), gpus=2048, gpus_per_node=8,
                      recompute_modules=DEEPSEEK, fp8="e4m3")  # fmt: skip
    pulled, how = lever(req)
    assert (pulled.recompute, pulled.recompute_modules, pulled.fp8) == ("full", (), "e4m3")
    assert how == "full recompute (--recompute full)"
