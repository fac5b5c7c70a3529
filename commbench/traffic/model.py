"""Model shapes: parameter counts and stage placement (the presets: traffic/presets.py).

Parameter counts are derived from the shape (Llama / Mixtral layer structure: attention with
grouped-query K/V or DeepSeek-V2/V3's multi-head latent attention, SwiGLU or GeLU MLP,
RMSNorm, untied or tied embeddings, top-k routed experts beside always-active shared experts,
the first layers dense), counted as Megatron-LM's theoretical memory estimate counts them;
pipeline stages place the embedding first and the head last, as Megatron-LM does.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from typing import Any

from commbench.errors import UsageError
from commbench.traffic import bounds, pipeline_split
from commbench.traffic.pipeline_split import PipelineSplit, check_settings, megatron_split

BOOL_FIELDS = ("gated_mlp", "tied_embeddings", "qk_norm", "account_for_embedding_in_pipeline_split",
               "account_for_loss_in_pipeline_split")  # fmt: skip
DERIVED_FIELDS = ("kv_heads", "head_dim", "moe_ffn_hidden", "v_head_dim")  # None: derive it
SPLIT_FIELDS = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers")


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """A decoder-only transformer's shape; optional fields default from the others.

    kv_heads, head_dim, v_head_dim and moe_ffn_hidden accept None ("derive it") and are ints once
    constructed, so they are typed int and __post_init__ fills them.

    kv_heads < heads is grouped-query attention; kv_lora_rank > 0 is multi-head latent
    attention (DeepSeek-V2, Liu et al. 2024): K and V come from a shared latent of that rank
    (queries from one of q_lora_rank), head_dim includes the rope_head_dim decoupled RoPE part,
    and the KV cache holds only the latent and the RoPE key. experts > 0 makes every
    `moe_every`-th layer from `dense_layers` on (DeepSeek's first_k_dense_replace, Megatron's
    moe_layer_freq) a top-k routed MoE layer of `experts` MLPs of width moe_ffn_hidden plus
    `shared_experts` MLPs of that width every token passes through.
    """

    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int = None  # type: ignore[assignment]  # None: = heads (multi-head attention)
    head_dim: int = None  # type: ignore[assignment]  # None: = hidden // heads
    v_head_dim: int = None  # type: ignore[assignment]  # None: = head_dim
    qk_norm: bool = False  # per-head RMSNorm of Q and K (Qwen3)
    q_lora_rank: int = 0  # MLA: rank of the query down-projection (0: none)
    kv_lora_rank: int = 0  # MLA: rank of the K/V latent; 0 = not MLA
    rope_head_dim: int = 0  # MLA: the decoupled RoPE part of each Q/K head (in head_dim)
    vocab: int = 32000
    seq_len: int = 4096  # the training context the patterns use unless told otherwise
    experts: int = 0  # routed experts per MoE layer; 0 = dense
    top_k: int = 0  # experts per token
    moe_ffn_hidden: int = None  # type: ignore[assignment]  # None: = ffn_hidden
    moe_every: int = 1
    shared_experts: int = 0  # always-active expert MLPs per MoE layer (DeepSeekMoE)
    dense_layers: int = 0  # the first layers keep a dense MLP (DeepSeek-V3: 3)
    gated_mlp: bool = True  # SwiGLU (3 matrices) vs GeLU (2)
    tied_embeddings: bool = False
    # the pipeline split, Megatron-Core's settings (traffic/pipeline_split.py); None: even
    decoder_first_pipeline_num_layers: int | None = None
    decoder_last_pipeline_num_layers: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UsageError("model name must be a non-empty string")
        for f in ("layers", "hidden", "ffn_hidden", "heads", "vocab", "seq_len", "moe_every"):
            _positive(self, f)
        bounds.check_shape(self.name, vars(self))  # asdict deep-copies: ~0.2 ms a shape
        check_settings(self.name, self.split)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise UsageError(
                    f"model {self.name}: hidden {self.hidden} is not a multiple of heads "
                    f"{self.heads} (give head_dim)"
                )
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.moe_ffn_hidden is None:
            object.__setattr__(self, "moe_ffn_hidden", self.ffn_hidden)
        if self.v_head_dim is None:
            object.__setattr__(self, "v_head_dim", self.head_dim)
        for f in ("kv_heads", "head_dim", "moe_ffn_hidden", "v_head_dim"):
            _positive(self, f)
        for f in ("q_lora_rank", "kv_lora_rank", "rope_head_dim", "shared_experts", "dense_layers"):
            _non_negative(self, f)
        if self.is_mla and (self.kv_heads != self.heads or self.rope_head_dim >= self.head_dim):
            raise UsageError(
                f"model {self.name}: multi-head latent attention has kv_heads = heads and a "
                f"rope_head_dim below head_dim"
            )
        if not self.is_mla and (self.q_lora_rank or self.rope_head_dim):
            raise UsageError(
                f"model {self.name}: q_lora_rank and rope_head_dim need kv_lora_rank > 0 (MLA)"
            )
        if self.shared_experts and not self.experts:
            raise UsageError(f"model {self.name}: shared_experts needs experts > 0")
        if self.heads % self.kv_heads:
            raise UsageError(
                f"model {self.name}: kv_heads {self.kv_heads} must divide heads {self.heads}"
            )
        if self.experts < 0 or self.top_k < 0:
            raise UsageError(f"model {self.name}: experts and top_k must be 0 or more")
        if self.experts and not 1 <= self.top_k <= self.experts:
            raise UsageError(
                f"model {self.name}: top_k {self.top_k} must be between 1 and experts "
                f"{self.experts}"
            )
        if not self.experts and self.top_k:
            raise UsageError(f"model {self.name}: top_k {self.top_k} needs experts > 0")

    # ---- structure ----
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        """Multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    def is_moe_layer(self, i: int) -> bool:
        """Layer i holds routed experts: from dense_layers on, every moe_every-th (HF DeepSeek
        and Megatron moe_layer_freq: layers 0, n, 2n, ... when none is dense)."""
        return self.is_moe and i >= self.dense_layers and i % self.moe_every == 0

    @property
    def moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.layers))

    @property
    def q_width(self) -> int:
        """heads x head_dim: the width of Q."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """kv_heads x head_dim: the width of K (V's is v_width)."""
        return self.kv_heads * self.head_dim

    @property
    def v_width(self) -> int:
        """kv_heads x v_head_dim: the width of V."""
        return self.kv_heads * self.v_head_dim

    @property
    def out_width(self) -> int:
        """heads x v_head_dim: the attention output, the input of W_o."""
        return self.heads * self.v_head_dim

    def kv_cache_width(self, tp: int = 1) -> float:
        """Elements one layer caches per token on one of tp ranks: K and V of the local KV
        heads, or with MLA the latent and the RoPE key, which every TP rank keeps whole
        (DeepSeek-V2 caches (d_c + d_h^R) elements per token and layer)."""
        if self.is_mla:
            return self.kv_lora_rank + self.rope_head_dim
        return (self.kv_width + self.v_width) / tp

    # ---- parameters ----
    def attention_params(self) -> int:
        """W_q, W_k, W_v, W_o (no biases, as Llama) and Qwen3's Q/K norms; with MLA the
        down-projections, their norms, the up-projections and the shared RoPE key
        (Megatron-LM's multi_latent_attention count)."""
        h = self.hidden
        if not self.is_mla:
            norms = 2 * self.head_dim if self.qk_norm else 0
            return (
                h * self.q_width + h * (self.kv_width + self.v_width) + self.out_width * h + norms
            )
        nope = self.head_dim - self.rope_head_dim
        qr, kr = self.q_lora_rank, self.kv_lora_rank
        q = qr * (h + self.q_width + 1) if qr else h * self.q_width
        kv = kr * (h + self.heads * (nope + self.v_head_dim) + 1) + h * self.rope_head_dim
        return q + kv + self.out_width * h

    def mlp_params(self, ffn: int | None = None) -> int:
        """One MLP: gate+up+down (SwiGLU) or up+down (GeLU)."""
        return (3 if self.gated_mlp else 2) * self.hidden * (ffn or self.ffn_hidden)

    def shared_expert_params(self) -> int:
        """The shared experts of one MoE layer (tensor-parallel like a dense MLP)."""
        return self.shared_experts * self.mlp_params(self.moe_ffn_hidden)

    def layer_params(self, i: int) -> tuple[int, int]:
        """(non-expert, expert) parameters of layer i; the 2 norms and the router are
        non-expert (replicated across tensor-parallel ranks, like Megatron), and so are the
        shared experts."""
        base = self.attention_params() + 2 * self.hidden
        if self.is_moe_layer(i):
            router = self.hidden * self.experts
            return (
                base + router + self.shared_expert_params(),
                self.experts * self.mlp_params(self.moe_ffn_hidden),
            )
        return base + self.mlp_params(), 0

    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    def head_params(self) -> int:
        """Output projection (0 when tied) plus the final norm."""
        return (0 if self.tied_embeddings else self.vocab * self.hidden) + self.hidden

    def param_counts(self) -> ParamCounts:
        """Total, active-per-token, embedding and expert parameter counts."""
        dense = expert = active_expert = 0
        for i in range(self.layers):
            d, e = self.layer_params(i)
            dense += d
            expert += e
            if e:
                active_expert += self.top_k * self.mlp_params(self.moe_ffn_hidden)
        emb = self.embedding_params() + self.head_params()
        return ParamCounts(
            total=dense + expert + emb,
            active=dense + active_expert + emb,
            embedding=emb,
            expert=expert,
        )

    @property
    def params(self) -> int:
        """Total parameters."""
        return self.param_counts().total

    # ---- pipeline stages ----
    @property
    def split(self) -> PipelineSplit:  # the pipeline split settings (uneven stages)
        return PipelineSplit(**{f.name: getattr(self, f.name) for f in fields(PipelineSplit)})

    def stage_counts(self, pp: int) -> tuple[int, ...]:
        """Layers on each of `pp` stages (UsageError naming the value if the split fails)."""
        return pipeline_split.stage_counts(self.layers, pp, self.split)

    @lru_cache(maxsize=256)  # noqa: B019  (shapes are few and frozen)
    def for_pipeline(self, pp: int) -> ModelShape:
        """This shape, with Megatron's uneven split where `pp` does not divide the layers and
        no split was given (the planner's depths); else itself."""
        if self.split != PipelineSplit() or self.layers % pp == 0 or pp > self.layers:
            return self
        return replace(self, **asdict(megatron_split(self.layers, pp)))

    def stage_layers(self, pp: int, stage: int) -> range:
        """Layer indices of pipeline stage `stage` of `pp` (contiguous, in stage order)."""
        counts = self.stage_counts(pp)
        return range(sum(counts[:stage]), sum(counts[: stage + 1]))

    def stage_params(self, pp: int, stage: int) -> StageParams:
        """Parameters one pipeline stage holds: its layers, the embedding on the first stage,
        the output head and final norm on the last (Megatron's placement)."""
        layers = self.stage_layers(pp, stage)
        split = [self.layer_params(i) for i in layers]
        # norms and routers are replicated across tensor-parallel ranks; the rest is sharded
        norms = [
            2 * self.hidden + (self.hidden * self.experts if self.is_moe_layer(i) else 0)
            for i in layers
        ]
        sharded = sum(d for d, _ in split) - sum(norms)
        replicated = sum(norms)
        expert = sum(e for _, e in split)
        if stage == 0:
            sharded += self.embedding_params()
        if stage == pp - 1:
            sharded += self.head_params() - self.hidden
            replicated += self.hidden
            if self.tied_embeddings and pp > 1:
                sharded += self.embedding_params()  # the last stage keeps its own copy
        return StageParams(sharded, replicated, expert)

    def rank_params(self, tp: int = 1, pp: int = 1, ep: int = 1, stage: int | None = None) -> int:
        """Parameters on one rank of `stage` (default: the largest stage): dense weights split
        over tp, norms and routers replicated, experts split over tp x ep."""
        stages = range(pp) if stage is None else [stage]
        return max(self.stage_params(pp, s).per_rank(tp, ep) for s in stages)

    def busiest_stage(self, pp: int, tp: int = 1, ep: int = 1) -> int:
        """The pipeline stage with the most parameters per rank (first or last, usually)."""
        return max(range(pp), key=lambda s: self.stage_params(pp, s).per_rank(tp, ep))

    # ---- (de)serialisation ----
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = "model") -> ModelShape:
        """A shape from a suite file or record; `preset: NAME` or `hf_config: PATH` (a Hugging
        Face config.json) starts from that shape and the other keys override it."""
        if not isinstance(data, dict):
            raise UsageError(f"{where}: a model is a preset name or a mapping of shape fields")
        data = dict(data)
        base: dict[str, Any] = {}
        if "preset" in data and "hf_config" in data:
            raise UsageError(f"{where}: give preset or hf_config, not both")
        if "preset" in data:
            from commbench.traffic.presets import get_model  # the presets are ModelShapes

            base = get_model(data.pop("preset"), f"{where}.preset").to_dict()
        elif "hf_config" in data:
            from commbench.traffic.hf_config import read_hf_config  # it builds ModelShapes

            path = data.pop("hf_config")
            if not isinstance(path, str):
                raise UsageError(f"{where}.hf_config: expected the path of a config.json")
            base = read_hf_config(path, f"{where}.hf_config").to_dict()
        known = {f.name: f for f in fields(cls)}
        for key, value in data.items():
            if key not in known:
                raise UsageError(
                    f"{where}.{key}: unknown model field; choose from {', '.join(known)}"
                )
            want = bool if key in BOOL_FIELDS else str if key == "name" else int
            ok = (isinstance(value, want) and (want is not int or not isinstance(value, bool))) or (
                value is None and key in DERIVED_FIELDS + SPLIT_FIELDS
            )
            if not ok:
                raise UsageError(f"{where}.{key}: expected {want.__name__}, got {value!r}")
        merged = {**base, **data}
        if base and "name" not in data:
            merged["name"] = base["name"]
        for key in DERIVED_FIELDS:
            if base and key not in data and _derived(base, key):
                merged[key] = None  # re-derive from the overridden fields
        missing = [
            f for f in ("name", "layers", "hidden", "ffn_hidden", "heads") if f not in merged
        ]
        if missing:
            raise UsageError(
                f"{where}: missing {', '.join(missing)} (or give preset: NAME or hf_config: PATH)"
            )
        try:
            return cls(**merged)
        except UsageError as e:
            raise UsageError(f"{where}: {e}") from None


def _derived(base: dict, key: str) -> bool:
    """True if a preset's field equals what it would default to (so overrides re-derive it)."""
    if key == "kv_heads":
        return base["kv_heads"] == base["heads"]
    if key == "head_dim":
        return base["head_dim"] * base["heads"] == base["hidden"]
    if key == "v_head_dim":
        return base["v_head_dim"] == base["head_dim"]
    return base["moe_ffn_hidden"] == base["ffn_hidden"]


def _non_negative(shape: ModelShape, name: str) -> None:
    value = getattr(shape, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise UsageError(
            f"model {shape.name}: {name} must be 0 or a positive integer, got {value!r}"
        )


def _positive(shape: ModelShape, name: str) -> None:
    value = getattr(shape, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"model {shape.name}: {name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of a model: total, active per token (MoE), embedding+head, experts."""

    total: int
    active: int
    embedding: int
    expert: int

    @property
    def dense(self) -> int:
        """Everything that is not a routed expert."""
        return self.total - self.expert


@dataclass(frozen=True)
class StageParams:
    """Parameters of one pipeline stage: tensor-parallel-sharded, replicated, expert."""

    sharded: int
    replicated: int
    expert: int

    def dense_per_rank(self, tp: int) -> float:
        return self.sharded / tp + self.replicated

    def expert_per_rank(self, tp: int, ep: int) -> float:
        return self.expert / (tp * ep)

    def per_rank(self, tp: int, ep: int) -> int:
        return math.ceil(self.dense_per_rank(tp) + self.expert_per_rank(tp, ep))
