"""Model shapes: presets with their published configs, parameter counts and stage placement.

Parameter counts are derived from the shape (Llama / Mixtral layer structure: attention with
grouped-query K/V, SwiGLU or GeLU MLP, RMSNorm, untied or tied embeddings, top-k routed
experts); pipeline stages place the embedding first and the head last, as Megatron-LM does.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from commbench.errors import UsageError
from commbench.traffic import bounds


@dataclass(frozen=True, kw_only=True)
class ModelShape:
    """A decoder-only transformer's shape; optional fields default from the others.

    kv_heads, head_dim and moe_ffn_hidden accept None ("derive it") and are ints once
    constructed, so they are typed int and __post_init__ fills them.

    kv_heads < heads is grouped-query attention; experts > 0 makes every `moe_every`-th layer
    (starting with layer 0, Megatron's moe_layer_freq) a top-k routed MoE layer of `experts`
    MLPs of width moe_ffn_hidden.
    """

    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int = None  # type: ignore[assignment]  # None: = heads (multi-head attention)
    head_dim: int = None  # type: ignore[assignment]  # None: = hidden // heads
    vocab: int = 32000
    seq_len: int = 4096  # the training context the patterns use unless told otherwise
    experts: int = 0  # routed experts per MoE layer; 0 = dense
    top_k: int = 0  # experts per token
    moe_ffn_hidden: int = None  # type: ignore[assignment]  # None: = ffn_hidden
    moe_every: int = 1
    gated_mlp: bool = True  # SwiGLU (3 matrices) vs GeLU (2)
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UsageError("model name must be a non-empty string")
        for f in ("layers", "hidden", "ffn_hidden", "heads", "vocab", "seq_len", "moe_every"):
            _positive(self, f)
        bounds.check_shape(self.name, asdict(self))
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
        for f in ("kv_heads", "head_dim", "moe_ffn_hidden"):
            _positive(self, f)
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

    def is_moe_layer(self, i: int) -> bool:
        """Layer i holds routed experts (Megatron moe_layer_freq: layers 0, n, 2n, ...)."""
        return self.is_moe and i % self.moe_every == 0

    @property
    def moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.layers))

    @property
    def q_width(self) -> int:
        """heads x head_dim: the width of Q and of the attention output."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """kv_heads x head_dim: the width of K and of V."""
        return self.kv_heads * self.head_dim

    # ---- parameters ----
    def attention_params(self) -> int:
        """W_q, W_k, W_v, W_o (no biases, as Llama)."""
        h = self.hidden
        return h * self.q_width + 2 * h * self.kv_width + self.q_width * h

    def mlp_params(self, ffn: int | None = None) -> int:
        """One MLP: gate+up+down (SwiGLU) or up+down (GeLU)."""
        return (3 if self.gated_mlp else 2) * self.hidden * (ffn or self.ffn_hidden)

    def layer_params(self, i: int) -> tuple[int, int]:
        """(non-expert, expert) parameters of layer i; the 2 norms and the router are
        non-expert (replicated across tensor-parallel ranks, like Megatron)."""
        base = self.attention_params() + 2 * self.hidden
        if self.is_moe_layer(i):
            router = self.hidden * self.experts
            return base + router, self.experts * self.mlp_params(self.moe_ffn_hidden)
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
    def stage_layers(self, pp: int, stage: int) -> range:
        """Layer indices of pipeline stage `stage` of `pp` (layers divide evenly)."""
        assert self.layers % pp == 0, (self.layers, pp)
        n = self.layers // pp
        return range(stage * n, (stage + 1) * n)

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
        """A shape from a suite file or record; `preset:` starts from a preset and overrides."""
        if not isinstance(data, dict):
            raise UsageError(f"{where}: a model is a preset name or a mapping of shape fields")
        data = dict(data)
        base: dict[str, Any] = {}
        if "preset" in data:
            preset = data.pop("preset")
            base = get_model(preset, f"{where}.preset").to_dict()
        known = {f.name: f for f in fields(cls)}
        for key, value in data.items():
            if key not in known:
                raise UsageError(
                    f"{where}.{key}: unknown model field; choose from {', '.join(known)}"
                )
            want = (
                bool if key in ("gated_mlp", "tied_embeddings") else str if key == "name" else int
            )
            ok = (isinstance(value, want) and (want is not int or not isinstance(value, bool))) or (
                value is None and key in ("kv_heads", "head_dim", "moe_ffn_hidden")
            )
            if not ok:
                raise UsageError(f"{where}.{key}: expected {want.__name__}, got {value!r}")
        merged = {**base, **data}
        if base and "name" not in data:
            merged["name"] = base["name"]
        for key in ("kv_heads", "head_dim", "moe_ffn_hidden"):
            if base and key not in data and _derived(base, key):
                merged[key] = None  # re-derive from the overridden fields
        missing = [
            f for f in ("name", "layers", "hidden", "ffn_hidden", "heads") if f not in merged
        ]
        if missing:
            raise UsageError(f"{where}: missing {', '.join(missing)} (or give preset: NAME)")
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
    return base["moe_ffn_hidden"] == base["ffn_hidden"]


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
    )
}


def get_model(name: str, where: str = "model") -> ModelShape:
    """A preset by name; unknown names are a UsageError listing the presets."""
    if not isinstance(name, str) or name not in PRESETS:
        raise UsageError(f"{where}: unknown model {name!r}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def parse_model_arg(text: str) -> ModelShape:
    """`--model llama-7b`, `--model llama-7b:layers=8,seq_len=2048` or a new shape
    `--model tiny:layers=4,hidden=256,ffn_hidden=512,heads=8`."""
    import yaml

    name, colon, rest = text.partition(":")
    if not colon:
        return get_model(name, "--model")
    data: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise UsageError(f"--model {text!r}: expected KEY=VALUE after ':', got {item!r}")
        data[key.strip()] = yaml.safe_load(value)
    if name in PRESETS:
        data["preset"] = name
    else:
        data["name"] = name
    return ModelShape.from_dict(data, f"--model {text}")
