"""Model presets (published configs) and the ways to name a model on the command line:
a preset, a preset with overrides, a new shape or a Hugging Face config.json."""

from __future__ import annotations

from typing import Any

from commbench.errors import UsageError
from commbench.traffic.model import ModelShape

# ---- presets: published configs (HF config.json of each model) ----
PRESETS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        # Llama 2 7B / 13B: MHA, SwiGLU, 4K context
        ModelShape(name="llama-7b", layers=32, hidden=4096, ffn_hidden=11008, heads=32),
        ModelShape(name="llama-13b", layers=40, hidden=5120, ffn_hidden=13824, heads=40),
        # Llama 2 70B: GQA with 8 KV heads
        ModelShape(
            name="llama-70b", layers=80, hidden=8192, ffn_hidden=28672, heads=64, kv_heads=8
        ),
        # Llama 3 8B: GQA, 128K vocabulary, 8K context
        ModelShape(
            name="llama3-8b",
            layers=32,
            hidden=4096,
            ffn_hidden=14336,
            heads=32,
            kv_heads=8,
            vocab=128256,
            seq_len=8192,
        ),
        # Mixtral 8x7B / 8x22B: 8 experts, top-2, every layer MoE
        ModelShape(
            name="mixtral-8x7b",
            layers=32,
            hidden=4096,
            ffn_hidden=14336,
            heads=32,
            kv_heads=8,
            experts=8,
            top_k=2,
        ),
        ModelShape(
            name="mixtral-8x22b",
            layers=56,
            hidden=6144,
            ffn_hidden=16384,
            heads=48,
            kv_heads=8,
            vocab=32768,
            experts=8,
            top_k=2,
        ),
        # GPT-3 175B: GeLU MLP (4h), tied embeddings, 2K context (Korthikanti et al.'s model)
        ModelShape(
            name="gpt3-175b",
            layers=96,
            hidden=12288,
            ffn_hidden=49152,
            heads=96,
            vocab=50257,
            seq_len=2048,
            gated_mlp=False,
            tied_embeddings=True,
        ),
        # Llama 3.1 405B (Dubey et al. 2024, Table 3): GQA 128/8, 128K vocabulary, 8K
        # pre-training context; 405B
        ModelShape(
            name="llama3.1-405b",
            layers=126,
            hidden=16384,
            ffn_hidden=53248,
            heads=128,
            kv_heads=8,
            vocab=128256,
            seq_len=8192,
        ),
        # DeepSeek-V3 (arXiv 2412.19437, config.json): MLA (q/kv LoRA ranks 1536/512, heads of
        # 128 + 64 RoPE dims, V heads of 128), 256 routed experts top-8 plus 1 shared of 2048,
        # the first 3 of 61 layers dense (18432); 671B total, 37B active; the 14B multi-token
        # prediction module is not part of the 671B and not modelled
        ModelShape(
            name="deepseek-v3",
            layers=61,
            hidden=7168,
            ffn_hidden=18432,
            heads=128,
            head_dim=192,
            v_head_dim=128,
            q_lora_rank=1536,
            kv_lora_rank=512,
            rope_head_dim=64,
            vocab=129280,
            experts=256,
            top_k=8,
            moe_ffn_hidden=2048,
            shared_experts=1,
            dense_layers=3,
        ),
        # Qwen3-235B-A22B (Qwen3 technical report, config.json): GQA 64/4 of head_dim 128
        # (wider than hidden / heads), Q/K norms, 128 experts top-8 of 1536 in all 94 layers,
        # no shared expert; 235B total, 22B active
        ModelShape(
            name="qwen3-235b-a22b",
            layers=94,
            hidden=4096,
            ffn_hidden=12288,
            heads=64,
            kv_heads=4,
            head_dim=128,
            qk_norm=True,
            vocab=151936,
            experts=128,
            top_k=8,
            moe_ffn_hidden=1536,
        ),
    )
}


def get_model(name: str, where: str = "model") -> ModelShape:
    """A preset by name; unknown names are a UsageError listing the presets."""
    if not isinstance(name, str) or name not in PRESETS:
        raise UsageError(f"{where}: unknown model {name!r}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def parse_model_arg(text: str) -> ModelShape:
    """`--model llama-7b`, `--model llama-7b:layers=8,seq_len=2048`, a new shape
    `--model tiny:layers=4,hidden=256,ffn_hidden=512,heads=8`, or a Hugging Face config.json
    the user has, `--model path/to/config.json[:seq_len=8192]`."""
    name, colon, rest = text.partition(":")
    if not colon and not name.endswith(".json"):
        return get_model(name, "--model")
    from commbench.keys import assign
    from commbench.textfile import loads_yaml  # for the values only

    data: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise UsageError(f"--model {text!r}: expected KEY=VALUE after ':', got {item!r}")
        value_of = loads_yaml(value, f"--model {name}.{key.strip()}", strict=False)
        assign(data, key.strip(), value_of, f"--model {text}")
    if name.endswith(".json"):
        data["hf_config"] = name
    elif name in PRESETS:
        data["preset"] = name
    else:
        data["name"] = name
    return ModelShape.from_dict(data, f"--model {text}")


def model_sets_seq_len(text: str) -> bool:
    """True when a `--model` argument names its own seq_len (`llama-7b:seq_len=128`)."""
    _, _, rest = text.partition(":")
    return any(item.partition("=")[0].strip() == "seq_len" for item in rest.split(","))
