"""Model presets and memory arithmetic against published shapes (HF config.json), the ZeRO
paper's K = 12 (Rajbhandari et al. 2020) and Korthikanti et al. 2022 (Table 2)."""

import json

import pytest

from commbench.errors import UsageError
from commbench.traffic.memory import (
    ADAM_BYTES_PER_PARAM,
    activation_bytes,
    activation_bytes_per_layer,
    kv_cache_bytes,
    kv_cache_bytes_per_token,
    training_memory,
)
from commbench.traffic.model import ModelShape
from commbench.traffic.presets import PRESETS, get_model, parse_model_arg

KiB, GiB = 1 << 10, 1 << 30


@pytest.mark.parametrize(
    "name,total,active",
    [
        ("llama-7b", 6.74e9, 6.74e9),
        ("llama-13b", 13.02e9, 13.02e9),
        ("llama-70b", 68.98e9, 68.98e9),
        ("llama3-8b", 8.03e9, 8.03e9),
        ("mixtral-8x7b", 46.70e9, 12.88e9),
        ("mixtral-8x22b", 140.63e9, 39.16e9),
        ("gpt3-175b", 174.57e9, 174.57e9),
    ],
)
def test_param_counts_match_published(name, total, active):
    c = get_model(name).param_counts()
    assert c.total == pytest.approx(total, rel=2e-3)
    assert c.active == pytest.approx(active, rel=2e-3)


@pytest.mark.parametrize(
    "name,total,active",
    [
        # Llama 3 paper (Dubey et al. 2024): 405B
        ("llama3.1-405b", 405e9, 405e9),
        # DeepSeek-V3 model card: 671B total, 36.6B activated counting the output head but
        # not the input embedding lookup (the 37B of the paper, rounded)
        ("deepseek-v3", 671e9, 36.6e9),
        # Qwen3 report: 235B total, 22B activated (embeddings included)
        ("qwen3-235b-a22b", 235e9, 22e9),
    ],
)
def test_new_presets_within_1_percent_of_published(name, total, active):
    m = get_model(name)
    c = m.param_counts()
    assert c.total == pytest.approx(total, rel=0.01)
    counted = c.active - (m.embedding_params() if name == "deepseek-v3" else 0)
    assert counted == pytest.approx(active, rel=0.01)


def test_mla_shared_experts_and_dense_layers_are_counted_from_the_shape():
    """DeepSeek-V3 by hand: MLA's down/up projections and norms, 1 shared + 256 routed experts
    of 2048 in layers 3..60, a dense MLP of 18432 in layers 0..2."""
    m = get_model("deepseek-v3")
    h = 7168
    q = 1536 * (h + 128 * 192 + 1)
    kv = 512 * (h + 128 * (128 + 128) + 1) + h * 64
    assert m.attention_params() == q + kv + 128 * 128 * h
    assert [m.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]
    assert m.moe_layers == 58
    expert_mlp = 3 * h * 2048
    assert m.layer_params(3) == (m.attention_params() + 2 * h + 256 * h + expert_mlp,
                                 256 * expert_mlp)  # fmt: skip
    assert m.layer_params(0) == (m.attention_params() + 2 * h + 3 * h * 18432, 0)
    # the cache holds the 512-wide latent and the 64-wide RoPE key, whole on every TP rank
    assert m.kv_cache_width() == m.kv_cache_width(tp=8) == 576
    qwen = get_model("qwen3-235b-a22b")
    assert qwen.q_width == 8192 != qwen.hidden and qwen.kv_cache_width(tp=4) == 2 * 128
    assert qwen.attention_params() == 2 * 4096 * 8192 + 2 * 4096 * 512 + 2 * 128


DEEPSEEK_V3_CONFIG = {  # the published config.json's shape keys (deepseek-ai/DeepSeek-V3)
    "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "vocab_size": 129280, "hidden_act": "silu", "tie_word_embeddings": False,
    "max_position_embeddings": 163840, "num_nextn_predict_layers": 1,
}  # fmt: skip
QWEN3_MOE_CONFIG = {  # Qwen/Qwen3-235B-A22B config.json
    "model_type": "qwen3_moe", "hidden_size": 4096, "intermediate_size": 12288,
    "moe_intermediate_size": 1536, "num_hidden_layers": 94, "num_attention_heads": 64,
    "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
    "hidden_act": "silu", "tie_word_embeddings": False, "max_position_embeddings": 40960,
}  # fmt: skip
LLAMA_405B_CONFIG = {  # meta-llama/Llama-3.1-405B config.json
    "model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248,
    "num_hidden_layers": 126, "num_attention_heads": 128, "num_key_value_heads": 8,
    "vocab_size": 128256, "hidden_act": "silu", "tie_word_embeddings": False,
}  # fmt: skip


@pytest.mark.parametrize(
    "preset,cfg",
    [
        ("deepseek-v3", DEEPSEEK_V3_CONFIG),
        ("qwen3-235b-a22b", QWEN3_MOE_CONFIG),
        ("llama3.1-405b", LLAMA_405B_CONFIG),
    ],
)
def test_a_hf_config_json_gives_the_presets_shape(tmp_path, preset, cfg):
    path = tmp_path / preset / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    shape = parse_model_arg(f"{path}:seq_len={get_model(preset).seq_len}")
    assert shape.name == preset
    assert shape.to_dict() == get_model(preset).to_dict()
    # a suite file names it the same way, with overrides
    short = ModelShape.from_dict({"hf_config": str(path), "layers": 8}, "m")
    assert short.layers == 8 and short.params < get_model(preset).params


def test_hf_config_errors_are_one_line(tmp_path):
    with pytest.raises(UsageError, match="cannot read .*nothing.json"):
        parse_model_arg(str(tmp_path / "nothing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="bad.json:1: not valid JSON"):
        parse_model_arg(str(bad))
    bad.write_text(json.dumps({"model_type": "bert", "hidden_size": 768}))
    with pytest.raises(UsageError, match="no num_hidden_layers"):
        parse_model_arg(str(bad))
    bad.write_text(json.dumps({**QWEN3_MOE_CONFIG, "decoder_sparse_step": 2}))
    with pytest.raises(UsageError, match="decoder_sparse_step"):
        parse_model_arg(str(bad))
    with pytest.raises(UsageError, match="preset or hf_config"):
        ModelShape.from_dict({"preset": "llama-7b", "hf_config": str(bad)}, "m")


def test_llama7b_count_is_derived_exactly():
    m = get_model("llama-7b")
    layer = 4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    assert m.params == 32 * layer + 2 * 32000 * 4096 + 4096 == 6_738_415_616


def test_gqa_and_moe_structure():
    m = get_model("llama-70b")
    assert (m.kv_heads, m.head_dim, m.kv_width) == (8, 128, 1024)
    assert m.attention_params() == 2 * 8192 * 8192 + 2 * 8192 * 1024
    mx = get_model("mixtral-8x7b")
    assert mx.moe_layers == 32 and mx.param_counts().expert == 32 * 8 * 3 * 4096 * 14336


def test_stage_params_add_up():
    m = get_model("llama-70b")
    for pp in (1, 2, 4, 8):
        stages = [m.stage_params(pp, s) for s in range(pp)]
        assert sum(s.sharded + s.replicated + s.expert for s in stages) == m.params
    # the first stage holds the embedding, the last the output head: both are the busiest
    assert m.busiest_stage(4) in (0, 3)


def test_kv_cache_seed_check():
    m = get_model("llama-7b")
    assert kv_cache_bytes_per_token(m) == 512 * KiB  # 2 L n_kv d_head x 2 bytes
    assert kv_cache_bytes(m, 32 * 1024) == 16 * GiB
    # GQA: 8 of 64 heads for 70B, 80 layers
    assert kv_cache_bytes_per_token(get_model("llama-70b")) == 2 * 80 * 8 * 128 * 2
    assert kv_cache_bytes_per_token(m, tp=4) == 128 * KiB


def test_activations_match_korthikanti_table2():
    """GPT-3 175B is the paper's model: GeLU MLP of 4h, MHA, so the formulas are exact."""
    m = get_model("gpt3-175b")
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    assert activation_bytes_per_layer(m, s, b, recompute="none") == pytest.approx(
        sbh * (34 + 5 * a * s / h)
    )
    assert activation_bytes_per_layer(m, s, b, tp=t, recompute="none") == pytest.approx(
        sbh * (10 + 24 / t + 5 * a * s / (h * t))
    )
    assert activation_bytes_per_layer(
        m, s, b, tp=t, sequence_parallel=True, recompute="none"
    ) == pytest.approx(sbh / t * (34 + 5 * a * s / h))
    assert activation_bytes_per_layer(m, s, b, tp=t, recompute="selective") == pytest.approx(
        sbh * (10 + 24 / t)
    )
    assert activation_bytes_per_layer(
        m, s, b, tp=t, sequence_parallel=True, recompute="selective"
    ) == pytest.approx(sbh * 34 / t)
    assert activation_bytes_per_layer(m, s, b, recompute="full") == 2 * sbh


def test_activations_split_by_cp_and_pipeline_in_flight():
    m = get_model("llama-7b")
    one = activation_bytes_per_layer(m, 4096, 1, tp=2, sequence_parallel=True)
    assert activation_bytes_per_layer(m, 4096, 1, tp=2, cp=2, sequence_parallel=True) == (
        pytest.approx(one / 2)
    )
    # 1F1B: the first stage holds min(p, m) micro-batches of its L/p layers and embedding
    # (8-byte token ids, a 1-byte dropout mask per element)
    emb = 8 * 4096 + 4096 * 4096
    assert activation_bytes(m, 4096, tp=2, pp=4, micro_batches=8, sequence_parallel=True) == (
        pytest.approx((one * 32 / 4 + emb / 2) * 4)
    )
    assert activation_bytes(m, 4096, pp=4, micro_batches=2) == pytest.approx(
        (activation_bytes_per_layer(m, 4096) * 8 + emb) * 2
    )
    # one stage also holds the output layer's input and its fp32 logits
    assert activation_bytes(m, 4096) == pytest.approx(
        activation_bytes_per_layer(m, 4096) * 32 + emb + 2 * 4096 * 4096 + 4 * 4096 * 32000
    )


def test_training_memory_seed_and_zero_sharding():
    m = get_model("llama-7b")
    P = m.params
    mem = training_memory(m, grad_dtype="float32")
    assert mem.weights == 2 * P and mem.grads == 4 * P
    assert mem.optimizer == ADAM_BYTES_PER_PARAM * P
    # worked check: 7B bf16 weights 14 GB; weights + grads + Adam well over 100 GB
    assert 13e9 < mem.weights < 14e9 and mem.weights + mem.grads + mem.optimizer > 100e9
    z1 = training_memory(m, dp=8, zero_stage=1)
    z3 = training_memory(m, dp=8, zero_stage=3)
    assert z1.optimizer == pytest.approx(12 * P / 8) and z1.weights == 2 * P
    assert z3.weights == pytest.approx(2 * P / 8) and z3.grads == pytest.approx(4 * P / 8)
    tp = training_memory(m, tp=4)
    assert tp.weights < 2 * P / 4 * 1.01 and tp.weights > 2 * P / 4
    mx = get_model("mixtral-8x7b")
    ep = training_memory(mx, dp=8, ep=8)
    dense = training_memory(mx, dp=8)
    assert ep.weights < dense.weights / 4  # experts split 8 ways
    with pytest.raises(UsageError, match="ep=3"):
        training_memory(mx, dp=8, ep=3)


def test_custom_shapes_and_errors():
    tiny = ModelShape.from_dict(
        {"name": "tiny", "layers": 2, "hidden": 64, "ffn_hidden": 128, "heads": 4}
    )
    assert tiny.kv_heads == 4 and tiny.head_dim == 16
    short = ModelShape.from_dict({"preset": "llama-70b", "layers": 8})
    assert short.name == "llama-70b" and short.layers == 8 and short.kv_heads == 8
    wider = ModelShape.from_dict({"preset": "llama-7b", "name": "w", "hidden": 8192, "heads": 64})
    assert wider.head_dim == 128 and wider.kv_heads == 64  # re-derived from the overrides
    assert parse_model_arg("llama-7b:layers=4,seq_len=1024").layers == 4
    assert parse_model_arg("t:layers=2,hidden=64,ffn_hidden=96,heads=4").name == "t"
    with pytest.raises(UsageError, match="m.layer: unknown model field"):
        ModelShape.from_dict({"preset": "llama-7b", "layer": 3}, "m")
    with pytest.raises(UsageError, match=r"m.layers: expected int"):
        ModelShape.from_dict({"preset": "llama-7b", "layers": "many"}, "m")
    with pytest.raises(UsageError, match="missing"):
        ModelShape.from_dict({"name": "x", "layers": 2})
    with pytest.raises(UsageError, match="kv_heads 3 must divide heads 8"):
        ModelShape(name="x", layers=2, hidden=64, ffn_hidden=128, heads=8, kv_heads=3)
    with pytest.raises(UsageError, match="top_k"):
        ModelShape(name="x", layers=2, hidden=64, ffn_hidden=128, heads=8, experts=4, top_k=5)
    with pytest.raises(UsageError, match="rope_head_dim need kv_lora_rank"):
        ModelShape(name="x", layers=2, hidden=64, ffn_hidden=128, heads=4, rope_head_dim=8)
    with pytest.raises(UsageError, match="latent attention has kv_heads = heads"):
        ModelShape(name="x", layers=2, hidden=64, ffn_hidden=128, heads=4, kv_heads=2,
                   kv_lora_rank=16)  # fmt: skip
    with pytest.raises(UsageError, match="shared_experts needs experts"):
        ModelShape(name="x", layers=2, hidden=64, ffn_hidden=128, heads=4, shared_experts=1)
    with pytest.raises(UsageError, match="dense_layers must be 0 or a positive"):
        ModelShape.from_dict({"preset": "deepseek-v3", "dense_layers": -1})
    with pytest.raises(UsageError, match="unknown model 'llama-9b'"):
        get_model("llama-9b")
    assert set(PRESETS) >= {"llama-7b", "llama-13b", "llama-70b", "mixtral-8x7b"}
