"""A model shape from a Hugging Face `config.json` the user has (read from disk; nothing is
downloaded): the Llama-family decoders (Llama, Mistral, Mixtral, Qwen2/3, Qwen3-MoE) and
DeepSeek-V2/V3 with multi-head latent attention, by the keys transformers' config classes use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from commbench.errors import UsageError
from commbench.traffic.model import ModelShape

# ModelShape field <- the first config key present
KEYS = {
    "layers": ("num_hidden_layers",),
    "hidden": ("hidden_size",),
    "ffn_hidden": ("intermediate_size",),
    "heads": ("num_attention_heads",),
    "kv_heads": ("num_key_value_heads",),
    "vocab": ("vocab_size",),
    "experts": ("n_routed_experts", "num_local_experts", "num_experts"),
    "top_k": ("num_experts_per_tok",),
    "moe_ffn_hidden": ("moe_intermediate_size",),
    "shared_experts": ("n_shared_experts",),
    "dense_layers": ("first_k_dense_replace",),
    "moe_every": ("moe_layer_freq",),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "rope_head_dim": ("qk_rope_head_dim",),
    "v_head_dim": ("v_head_dim",),
}
QK_NORM_TYPES = ("qwen3", "qwen3_moe")  # per-head RMSNorm of Q and K
GELU_ACTS = ("gelu", "gelu_new", "gelu_fast")  # an ungated MLP (GPT-style)


def read_hf_config(path: str | Path, where: str = "hf_config") -> ModelShape:
    """The ModelShape a `config.json` describes, named after its folder (`.../DeepSeek-V3/
    config.json` -> `DeepSeek-V3`). The training context stays commbench's default: a
    config's max_position_embeddings is the longest context, not the one trained at."""
    from commbench.textfile import read_json

    p = Path(path)
    cfg = read_json(p, where)
    if not isinstance(cfg, dict):
        raise UsageError(f"{where}: {path} is not a config.json object")
    cfg = {**cfg, **(cfg.get("text_config") or {})}  # multimodal configs nest the decoder
    name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return shape_from_hf(cfg, name, f"{where} {path}")


def shape_from_hf(cfg: dict[str, Any], name: str, where: str) -> ModelShape:
    """The ModelShape of a parsed config.json (see read_hf_config)."""
    data: dict[str, Any] = {"name": name}
    for field, keys in KEYS.items():
        key = next((k for k in keys if cfg.get(k) is not None), None)
        if key is not None:
            data[field] = cfg[key]
    missing = [f for f in ("layers", "hidden", "ffn_hidden", "heads") if f not in data]
    if missing:
        wanted = ", ".join(KEYS[f][0] for f in missing)
        raise UsageError(f"{where}: no {wanted}: not a decoder config.json")
    if "kv_lora_rank" in data:  # MLA: a Q/K head is the no-RoPE part plus the RoPE part
        data["head_dim"] = cfg.get("qk_nope_head_dim", 0) + cfg.get("qk_rope_head_dim", 0)
    elif cfg.get("head_dim") is not None:
        data["head_dim"] = cfg["head_dim"]
    if cfg.get("decoder_sparse_step", 1) != 1 or cfg.get("mlp_only_layers"):
        raise UsageError(
            f"{where}: decoder_sparse_step > 1 and mlp_only_layers are not supported "
            "(MoE layers are every moe_every-th from dense_layers on)"
        )
    shared = cfg.get("shared_expert_intermediate_size")
    if shared:  # Qwen2-MoE: one shared MLP of its own width, counted in routed-expert widths
        width = data.get("moe_ffn_hidden", data["ffn_hidden"])
        if shared % width:
            raise UsageError(
                f"{where}: shared_expert_intermediate_size {shared} is not a multiple of "
                f"moe_intermediate_size {width}"
            )
        data["shared_experts"] = shared // width
    if not data.get("experts"):  # a dense config: its MoE keys (if any) say nothing
        for f in ("experts", "top_k", "moe_ffn_hidden", "shared_experts", "dense_layers"):
            data.pop(f, None)
    data["tied_embeddings"] = bool(cfg.get("tie_word_embeddings", False))
    data["gated_mlp"] = cfg.get("hidden_act", "silu") not in GELU_ACTS
    data["qk_norm"] = cfg.get("model_type") in QK_NORM_TYPES
    return ModelShape.from_dict(data, where)
