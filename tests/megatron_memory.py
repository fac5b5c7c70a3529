"""Megatron-LM's theoretical memory estimate (megatron/training/theoretical_memory_usage.py),
written again from its formulas to check commbench's memory model against: the most loaded
pipeline shard's parameters x 18 bytes (bf16 weights, fp32 gradients, fp32 master weights and
Adam moments) or 6 + 12/dp with the distributed optimizer, and the first stage's activations
per Korthikanti et al. 2022 (with sequence parallel and selective recompute: 18 + 4 f/h bytes
per s b h element and layer over tp; else 10 + 24/tp), the embedding's input and dropout for
pp in-flight micro-batches, the output layer when pp = 1.

Like Megatron's, it counts the attention as MHA/GQA widths or MLA's projections, ignores
SwiGLU and MoE in the activations (its TODO), and shards the optimizer over dp (not dp x cp).
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.traffic.model import ModelShape


@dataclass(frozen=True)
class MegatronEstimate:
    weights_and_optimizer: float  # bytes
    activations: float

    @property
    def total(self) -> float:
        return self.weights_and_optimizer + self.activations


def _attention(m: ModelShape) -> float:
    h = m.hidden
    if m.is_mla:
        nope = m.head_dim - m.rope_head_dim
        q = (
            m.q_lora_rank * (h + m.heads * m.head_dim + 1)
            if m.q_lora_rank
            else h * m.heads * m.head_dim
        )
        kv = m.kv_lora_rank * (h + m.heads * (nope + m.v_head_dim) + 1) + h * m.rope_head_dim
        return q + kv + m.heads * m.v_head_dim * h
    # 2 h^2 (1 + groups/heads) x (query projection / hidden)
    return 2 * h * h * (1 + m.kv_heads / m.heads) * (m.q_width / h)


def weights_and_optimizer(
    m: ModelShape, *, tp: int, pp: int, dp: int, ep: int = 1, distributed_optimizer: bool
) -> float:
    """Bytes on the most loaded shard: L/pp layers and the embedding (both when pp = 1)."""
    gated = 1.5 if m.gated_mlp else 1.0
    moe = m.moe_layers
    dense = m.layers - moe
    attn = _attention(m)
    dense_mlp = 2 * m.hidden * m.ffn_hidden * gated
    shared = 2 * m.hidden * m.shared_experts * m.moe_ffn_hidden * gated
    routed = 2 * m.hidden * m.moe_ffn_hidden * m.experts * gated
    norms = 2 * m.hidden
    router = m.hidden * m.experts
    tp_sharded = (attn + dense_mlp) * dense + (attn + shared) * moe
    replicated = norms * dense + (norms + router) * moe + m.hidden
    expert = routed * moe
    emb = m.hidden * m.vocab
    tp_shard = (tp_sharded / pp + emb) / tp
    if not m.tied_embeddings and pp == 1:
        tp_shard += emb / tp
    repl = replicated / pp
    exp = expert / pp / (tp * ep)
    world = tp * pp * dp
    edp = world // (tp * ep * pp)

    def per_param(d: int) -> float:
        return 6 + 12 / d if distributed_optimizer else 18

    return (tp_shard + repl) * per_param(dp) + exp * per_param(edp)


def activations(
    m: ModelShape,
    *,
    seq: int,
    micro_batch: int,
    tp: int,
    pp: int,
    micro_batches: int,
    sequence_parallel: bool,
    recompute: str = "selective",
) -> float:
    """First-stage activation bytes (non-interleaved 1F1B)."""
    s, b, h = seq, micro_batch, m.hidden
    if sequence_parallel and recompute == "selective":
        act = s * b * h * (18 + 4 * m.ffn_hidden / h) * m.layers
        act += 8 * s * b * pp + s * b * h * pp
        if pp > 1:
            act *= min(1, micro_batches / pp)
        else:
            act += s * b * h * 4 * (1 + m.vocab / h)
        return act / tp
    act = s * b * h * (10 + 24 / tp) * m.layers
    act += 8 * s * b * pp + s * b * h * pp
    if pp > 1:
        act *= min(1, micro_batches / pp)
    else:
        act += (s * b * m.vocab / tp + s * b * h) * 2
    return act * 1.05


def estimate(
    m: ModelShape,
    *,
    tp: int,
    pp: int,
    dp: int,
    ep: int = 1,
    seq: int,
    micro_batch: int = 1,
    micro_batches: int,
    sequence_parallel: bool,
    distributed_optimizer: bool,
) -> MegatronEstimate:
    return MegatronEstimate(
        weights_and_optimizer(
            m, tp=tp, pp=pp, dp=dp, ep=ep, distributed_optimizer=distributed_optimizer
        ),
        activations(
            m,
            seq=seq,
            micro_batch=micro_batch,
            tp=tp,
            pp=pp,
            micro_batches=micro_batches,
            sequence_parallel=sequence_parallel,
        ),
    )
