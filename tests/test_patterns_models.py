"""Model presets and memory arithmetic against published shapes (HF config.json), the ZeRO
paper's K = 12 (Rajbhandari et al. 2020) and Korthikanti et al. 2022 (Table 2)."""

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
    # 1F1B: the first stage holds min(p, m) micro-batches of its L/p layers
    assert activation_bytes(m, 4096, tp=2, pp=4, micro_batches=8, sequence_parallel=True) == (
        pytest.approx(one * 32 / 4 * 4)
    )
    assert activation_bytes(m, 4096, pp=4, micro_batches=2) == pytest.approx(
        activation_bytes_per_layer(m, 4096) * 8 * 2
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
    with pytest.raises(UsageError, match="unknown model 'llama-9b'"):
        get_model("llama-9b")
    assert set(PRESETS) >= {"llama-7b", "llama-13b", "llama-70b", "mixtral-8x7b"}
