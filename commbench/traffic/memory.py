"""Memory per rank of a model under a layout: KV cache, activations, weights, gradients, Adam.

bf16 weights 2P, gradients in their dtype, Adam 12P (fp32 master + two moments, K = 12 in
Rajbhandari et al. 2020, "ZeRO", which also gives the stage 1/2/3 sharding), KV cache
2 L n_kv d_head bytes per token, and activations per layer from Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models" (Table 2), divided by tp
(with sequence parallel) and cp as Megatron-LM does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from commbench.dtypes import canonical_dtype, dtype_size
from commbench.errors import UsageError
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import pp_interleaved

ADAM_BYTES_PER_PARAM = 12  # fp32 master weights + first and second moments (ZeRO paper, K=12)
RECOMPUTE = ("none", "selective", "full")


def kv_cache_bytes_per_token(
    model: ModelShape, dtype: str = "bfloat16", tp: int = 1, pp: int = 1
) -> float:
    """K and V of every layer for one token: 2 L n_kv d_head x bytes, split over tp (heads)
    and pp (layers); with MLA the latent and RoPE key, (d_c + d_h^R) L, split over pp only.
    Llama-7B (MHA) in bf16: 512 KiB per token."""
    size = dtype_size(canonical_dtype(dtype))
    return model.layers * model.kv_cache_width(tp) * size / pp


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
    shape: Q/K/V/output widths (GQA, MLA), MLP width (GeLU: 4 s b f, SwiGLU: 6 s b f) and, in
    an MoE layer, top-k routed copies of the tokens beside the shared experts' own. Context
    parallel divides s by cp.
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
    attn = 2 * s * b * (model.q_width + model.kv_width + model.v_width + model.out_width)
    if moe_layer:  # top-k routed copies (+ their permuted inputs) and the shared experts
        k, f = model.top_k, model.moe_ffn_hidden
        per_mlp = s * b * (6 if model.gated_mlp else 4) * f
        mlp = (k + model.shared_experts) * per_mlp + 2 * 2 * k * sbh
    else:
        mlp = s * b * (6 if model.gated_mlp else 4) * model.ffn_hidden
    # attention scores: softmax output (2), dropout mask (1), dropout output (2) per head;
    # queries are local (s/cp) against every key (s)
    scores = 0.0 if recompute == "selective" else 5 * model.heads * s * seq * b
    sharded = attn + mlp + scores
    if sequence_parallel:
        return (replicated + sharded) / tp
    return replicated + sharded / tp


def in_flight_micro_batches(pp: int, micro_batches: int, stage: int = 0) -> int:
    """Micro-batches whose activations 1F1B stage `stage` holds at once: min(pp - stage, m)
    (its warm-up forwards and the one it runs before its first backward)."""
    return min(pp - stage, micro_batches)


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
    stage: int = 0,
    virtual_stages: int = 1,
) -> float:
    """Activations held by a rank of pipeline stage `stage` (default the first, the busiest
    under 1F1B with even stages): its layers' activations for min(pp - stage, m) in-flight
    micro-batches, the embedding's on the first stage, and the output layer's on the last for
    the one micro-batch it holds (with one stage: Megatron-LM's theoretical estimate). With
    v virtual stages (interleaved 1F1B) a stage holds its warm-up chunks plus one, each 1/v
    of its layers: p + (p-1)/v micro-batches' worth on the first stage (Korthikanti et al.
    2022, section 4.2.3's 1 + (p-1)/(p v) factor)."""
    per_layer = {
        moe: activation_bytes_per_layer(
            model, seq, micro_batch, tp, cp, sequence_parallel, recompute, moe
        )
        for moe in (False, True)
    }
    per_mb = sum(per_layer[model.is_moe_layer(i)] for i in model.stage_layers(pp, stage))
    if stage == 0:
        per_mb += embedding_activation_bytes(model, seq, micro_batch, tp, cp, sequence_parallel)
    if virtual_stages > 1 and pp > 1:
        chunks = pp_interleaved.in_flight_chunks(pp, stage, micro_batches, virtual_stages)
        held = per_mb * chunks / virtual_stages
    else:
        held = per_mb * in_flight_micro_batches(pp, micro_batches, stage)
    if stage == pp - 1:
        held += output_activation_bytes(model, seq, micro_batch, tp, cp, sequence_parallel)
    return held


def embedding_activation_bytes(
    model: ModelShape, seq: int, micro_batch: int, tp: int, cp: int, sequence_parallel: bool
) -> float:
    """The embedding's input token ids (8 bytes each) and its dropout mask (1 byte per
    element) for one micro-batch, split over tp with sequence parallel (Megatron-LM)."""
    sb = seq / cp * micro_batch
    return (8 * sb + sb * model.hidden) / (tp if sequence_parallel else 1)


def output_activation_bytes(
    model: ModelShape, seq: int, micro_batch: int, tp: int, cp: int, sequence_parallel: bool
) -> float:
    """The output layer's 16-bit input (the final norm's output; split over tp with sequence
    parallel) and the fp32 logits the vocab-parallel cross entropy keeps (split over tp)."""
    sb = seq / cp * micro_batch
    return 2 * sb * model.hidden / (tp if sequence_parallel else 1) + 4 * sb * model.vocab / tp


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
    virtual_stages: int = 1,
) -> TrainingMemory:
    """Per-rank memory of the busiest rank: weights (param dtype), gradients (grad dtype),
    Adam states (12 bytes/param) and activations, of the pipeline stage whose sum is largest
    (with uneven stages a middle stage can be). ZeRO stage 1 shards optimizer states,
    2 also gradients, 3 also weights, over the dp x cp ranks (dense) and the dp x cp / ep
    expert-data-parallel ranks (experts), as Megatron's distributed optimizer does."""
    if zero_stage not in (0, 1, 2, 3):
        raise UsageError(f"zero_stage {zero_stage!r}: choose 0, 1, 2 or 3")
    if (cp * dp) % ep:
        raise UsageError(f"ep={ep} must divide cp*dp = {cp * dp}")
    seq = seq or model.seq_len
    pbytes = dtype_size(canonical_dtype(param_dtype))
    gbytes = dtype_size(canonical_dtype(grad_dtype))
    shard_dense, shard_expert = cp * dp, cp * dp // ep

    def of(stage: int) -> TrainingMemory:
        sp = model.stage_params(pp, stage)
        dense, expert = sp.dense_per_rank(tp), sp.expert_per_rank(tp, ep)

        def sharded(level: int) -> float:
            if zero_stage >= level:
                return dense / shard_dense + expert / shard_expert
            return dense + expert

        return TrainingMemory(
            weights=sharded(3) * pbytes,
            grads=sharded(2) * gbytes,
            optimizer=sharded(1) * optimizer_bytes,
            activations=activation_bytes(
                model, seq, micro_batch, tp, cp, pp, micro_batches, sequence_parallel,
                recompute, stage, virtual_stages,
            ),
        )  # fmt: skip

    return max((of(s) for s in range(pp)), key=lambda mem: mem.total)
