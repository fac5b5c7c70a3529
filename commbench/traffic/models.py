"""Model shapes (presets with their published configs) and the memory arithmetic planners need.

Parameter counts are derived from the shape (Llama / Mixtral layer structure: attention with
grouped-query K/V, SwiGLU or GeLU MLP, RMSNorm, untied or tied embeddings, top-k routed
experts). Memory follows DESIGN.md section 5: bf16 weights 2P, gradients, Adam 12P (fp32
master + two moments, the ZeRO paper's K = 12), KV cache 2 L n_kv d_head bytes per token,
and activations per layer from Korthikanti et al. 2022, "Reducing Activation Recomputation
in Large Transformer Models" (Table 2), divided by tp (with sequence parallel) and cp as
Megatron-LM does.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from commbench.dtypes import canonical_dtype, dtype_size
from commbench.errors import UsageError

ADAM_BYTES_PER_PARAM = 12  # fp32 master weights + first and second moments (ZeRO paper, K=12)
RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's shape; optional fields default from the others.

    kv_heads < heads is grouped-query attention; experts > 0 makes every `moe_every`-th layer
    (starting with layer 0, Megatron's moe_layer_freq) a top-k routed MoE layer of `experts`
    MLPs of width moe_ffn_hidden.
    """

    name: str
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_heads: int | None = None  # None: = heads (multi-head attention)
    head_dim: int | None = None  # None: = hidden // heads
    vocab: int = 32000
    seq_len: int = 4096  # the training context the patterns use unless told otherwise
    experts: int = 0  # routed experts per MoE layer; 0 = dense
    top_k: int = 0  # experts per token
    moe_ffn_hidden: int | None = None  # None: = ffn_hidden
    moe_every: int = 1
    gated_mlp: bool = True  # SwiGLU (3 matrices) vs GeLU (2)
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise UsageError("model name must be a non-empty string")
        for f in ("layers", "hidden", "ffn_hidden", "heads", "vocab", "seq_len", "moe_every"):
            _positive(self, f)
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
        ModelShape("llama-7b", layers=32, hidden=4096, ffn_hidden=11008, heads=32),
        ModelShape("llama-13b", layers=40, hidden=5120, ffn_hidden=13824, heads=40),
        # Llama 2 70B: GQA with 8 KV heads
        ModelShape("llama-70b", layers=80, hidden=8192, ffn_hidden=28672, heads=64, kv_heads=8),
        # Llama 3 8B: GQA, 128K vocabulary, 8K context
        ModelShape(
            "llama3-8b",
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
            "mixtral-8x7b",
            layers=32,
            hidden=4096,
            ffn_hidden=14336,
            heads=32,
            kv_heads=8,
            experts=8,
            top_k=2,
        ),
        ModelShape(
            "mixtral-8x22b",
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
            "gpt3-175b",
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


# ---- memory arithmetic (bytes per rank) ----
def kv_cache_bytes_per_token(
    model: ModelShape, dtype: str = "bfloat16", tp: int = 1, pp: int = 1
) -> float:
    """K and V of every layer for one token: 2 L n_kv d_head x bytes, split over tp (heads)
    and pp (layers). Llama-7B (MHA) in bf16: 512 KiB per token."""
    size = dtype_size(canonical_dtype(dtype))
    return 2 * model.layers * model.kv_heads * model.head_dim * size / (tp * pp)


def kv_cache_bytes(
    model: ModelShape, tokens: int, dtype: str = "bfloat16", tp: int = 1, pp: int = 1, cp: int = 1
) -> float:
    """KV cache of `tokens` tokens per rank (context parallel splits the tokens)."""
    return kv_cache_bytes_per_token(model, dtype, tp, pp) * tokens / cp


def activation_bytes_per_layer(
    model: ModelShape,
    seq: int,
    micro_batch: int = 1,
    tp: int = 1,
    cp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "selective",
    moe_layer: bool = False,
) -> float:
    """Activations one transformer layer keeps for backward, per rank, in bytes.

    Korthikanti et al. 2022, Table 2, with 16-bit activations and 1-byte dropout masks:
    s b h (34 + 5 a s / h) with no parallelism; tensor parallel shards 24 of the 34 (10 stay
    replicated: layer-norm inputs, the QKV and MLP inputs, dropout masks) unless sequence
    parallel shards them too; selective recompute drops the 5 a s^2 b attention-score
    terms; full recompute keeps only the layer input 2 s b h. The 34 is generalised to the
    shape: Q/K/V/output widths (GQA), MLP width (GeLU: 4 s b f, SwiGLU: 6 s b f) and, in an
    MoE layer, top-k routed copies of the tokens. Context parallel divides s by cp.
    """
    if recompute not in RECOMPUTE:
        raise UsageError(f"recompute {recompute!r}: choose from {', '.join(RECOMPUTE)}")
    s, b, h = seq / cp, micro_batch, model.hidden
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (tp if sequence_parallel else 1)
    # replicated without SP: 2 layer-norm inputs (4), QKV input (2), MLP input (2), 2 masks (2)
    replicated = 10 * sbh
    # attention: Q, K (for QK^T), V, the output-projection input; 16-bit each
    attn = 2 * s * b * (model.q_width + 2 * model.kv_width + model.q_width)
    if moe_layer:
        k, f = model.top_k, model.moe_ffn_hidden
        mlp = k * s * b * (6 if model.gated_mlp else 4) * f + 2 * 2 * k * sbh  # + permuted copies
    else:
        mlp = s * b * (6 if model.gated_mlp else 4) * model.ffn_hidden
    # attention scores: softmax output (2), dropout mask (1), dropout output (2) per head;
    # queries are local (s/cp) against every key (s)
    scores = 0.0 if recompute == "selective" else 5 * model.heads * s * seq * b
    sharded = attn + mlp + scores
    if sequence_parallel:
        return (replicated + sharded) / tp
    return replicated + sharded / tp


def in_flight_micro_batches(pp: int, micro_batches: int) -> int:
    """Micro-batches whose activations the first 1F1B stage holds at once: min(pp, m)."""
    return min(pp, micro_batches)


def activation_bytes(
    model: ModelShape,
    seq: int,
    micro_batch: int = 1,
    tp: int = 1,
    cp: int = 1,
    pp: int = 1,
    micro_batches: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "selective",
) -> float:
    """Activations held by a rank of the first pipeline stage (the busiest under 1F1B):
    its layers' activations for min(pp, m) in-flight micro-batches (Megatron's estimate)."""
    layers = model.stage_layers(pp, 0)
    per_mb = sum(
        activation_bytes_per_layer(
            model, seq, micro_batch, tp, cp, sequence_parallel, recompute, model.is_moe_layer(i)
        )
        for i in layers
    )
    return per_mb * in_flight_micro_batches(pp, micro_batches)


@dataclass(frozen=True)
class TrainingMemory:
    """Bytes per rank of one training configuration, by kind."""

    weights: float
    grads: float
    optimizer: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "total": self.total}


def training_memory(
    model: ModelShape,
    tp: int = 1,
    cp: int = 1,
    pp: int = 1,
    dp: int = 1,
    ep: int = 1,
    seq: int | None = None,
    micro_batch: int = 1,
    micro_batches: int = 1,
    zero_stage: int = 0,
    param_dtype: str = "bfloat16",
    grad_dtype: str = "float32",
    optimizer_bytes: int = ADAM_BYTES_PER_PARAM,
    sequence_parallel: bool = False,
    recompute: str = "selective",
) -> TrainingMemory:
    """Per-rank memory of the busiest rank: weights (param dtype), gradients (grad dtype),
    Adam states (12 bytes/param) and activations. ZeRO stage 1 shards optimizer states,
    2 also gradients, 3 also weights, over the dp x cp ranks (dense) and the dp x cp / ep
    expert-data-parallel ranks (experts), as Megatron's distributed optimizer does."""
    if zero_stage not in (0, 1, 2, 3):
        raise UsageError(f"zero_stage {zero_stage!r}: choose 0, 1, 2 or 3")
    if (cp * dp) % ep:
        raise UsageError(f"ep={ep} must divide cp*dp = {cp * dp}")
    seq = seq or model.seq_len
    pbytes = dtype_size(canonical_dtype(param_dtype))
    gbytes = dtype_size(canonical_dtype(grad_dtype))
    stage = model.busiest_stage(pp, tp, ep)
    sp = model.stage_params(pp, stage)
    dense, expert = sp.dense_per_rank(tp), sp.expert_per_rank(tp, ep)
    shard_dense, shard_expert = cp * dp, cp * dp // ep

    def sharded(level: int) -> float:
        if zero_stage >= level:
            return dense / shard_dense + expert / shard_expert
        return dense + expert

    return TrainingMemory(
        weights=sharded(3) * pbytes,
        grads=sharded(2) * gbytes,
        optimizer=sharded(1) * optimizer_bytes,
        activations=activation_bytes(
            model, seq, micro_batch, tp, cp, pp, micro_batches, sequence_parallel, recompute
        ),
    )
