"""Memory per rank of a model under a layout: KV cache, activations, weights, gradients, Adam.

bf16 weights 2P, gradients in their dtype, Adam 12P (fp32 master + two moments, K = 12 in
Rajbhandari et al. 2020, "ZeRO", which also gives the stage 1/2/3 sharding), KV cache
2 L n_kv d_head bytes per token, and activations per layer from Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models" (Table 2), divided by tp
(with sequence parallel) and cp as Megatron-LM does; what Megatron-Core's selective
`--recompute-modules` and Transformer Engine's FP8 caches (`--fp8-format`) drop or shrink, term
by term (docs/pipeline.md, "Activation memory settings").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from commbench.dtypes import canonical_dtype, dtype_size
from commbench.errors import UsageError
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import pp_interleaved

ADAM_BYTES_PER_PARAM = 12  # fp32 master weights + first and second moments (ZeRO paper, K=12)
RECOMPUTE = ("none", "selective", "full")
# Megatron-Core's --recompute-modules (TransformerConfig.recompute_modules) and --fp8-format
RECOMPUTE_MODULES = (
    "core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts",
)  # fmt: skip
FP8_FORMATS = ("e4m3", "hybrid")


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


def check_activation_options(
    model: ModelShape, recompute: str, recompute_modules: tuple[str, ...], fp8: str | None
) -> tuple[str, ...]:
    """The modules a selective recompute recomputes (Megatron's default: core_attn alone),
    after checking the options; UsageError naming the flag and the value."""
    if recompute not in RECOMPUTE:
        raise UsageError(f"recompute {recompute!r}: choose from {', '.join(RECOMPUTE)}")
    if fp8 is not None and fp8 not in FP8_FORMATS:
        raise UsageError(f"--fp8-format {fp8!r}: choose from {', '.join(FP8_FORMATS)}")
    for mod in recompute_modules:
        if mod not in RECOMPUTE_MODULES:
            raise UsageError(
                f"--recompute-modules {mod!r}: choose from {', '.join(RECOMPUTE_MODULES)}"
            )
    if not recompute_modules:
        return ("core_attn",) if recompute == "selective" else ()
    if recompute != "selective":
        raise UsageError(
            f"--recompute-modules needs --recompute selective (Megatron: --recompute-granularity "
            f"selective), not {recompute!r}"
        )
    lacks = {
        "mla_up_proj": not model.is_mla,
        "moe_act": not model.is_moe,
        "moe": not model.is_moe,
        "shared_experts": not model.shared_experts,
    }
    for mod in recompute_modules:
        if lacks.get(mod):
            part = "multi-head latent attention" if mod == "mla_up_proj" else "MoE layers"
            part = "shared experts" if mod == "shared_experts" else part
            raise UsageError(f"--recompute-modules {mod}: model {model.name} has no {part}")
    return recompute_modules


def activation_bytes_per_layer(
    model: ModelShape,
    seq: int,
    micro_batch: int = 1,
    tp: int = 1,
    cp: int = 1,
    sequence_parallel: bool = False,
    recompute: str = "selective",
    moe_layer: bool = False,
    recompute_modules: tuple[str, ...] = (),
    fp8: str | None = None,
    gpipe: bool = False,
) -> float:
    """Activations one transformer layer keeps for backward, per rank, in bytes.

    Korthikanti et al. 2022, Table 2, with 16-bit activations and 1-byte dropout masks:
    s b h (34 + 5 a s / h) with no parallelism; tensor parallel shards 24 of the 34 (10 stay
    replicated: layer-norm inputs, the QKV and MLP inputs, dropout masks) unless sequence
    parallel shards them too; full recompute keeps only the layer input 2 s b h. The 34 is
    generalised to the shape: Q/K/V/output widths (GQA, MLA and its latents), MLP width (GeLU:
    4 s b f, SwiGLU: 6 s b f) and, in an MoE layer, each of the top-k routed copies of a token
    (its dispatched expert input, 2 h, and its expert MLP) beside the shared experts. Context
    parallel divides s by cp.

    Selective recompute is Megatron-Core's `--recompute-modules` (default core_attn, the
    5 a s^2 b attention scores Korthikanti's selective recompute drops; transformer_config.py):
    layernorm drops the input/pre-MLP norms' outputs (the QKV and MLP inputs), mla_up_proj
    MLA's Q, K, V (the latents are kept), moe_act the routed experts' activation output (the
    fc2 input), mlp / moe / shared_experts the whole dense MLP / MoE / shared experts (their
    input, the MLP input, stays). fp8 (`--fp8-format`): each GEMM's input that is cached for
    its weight gradient is one byte (Transformer Engine; DeepSeek-V3 report 3.3.3); what other
    operators read stays 16-bit (activation-function inputs, Q/K/V, the attention output).
    """
    mods = check_activation_options(model, recompute, recompute_modules, fp8)
    s, b, h = seq / cp, micro_batch, model.hidden
    sbh, sb = s * b * h, s * b
    if recompute == "full":
        return 2 * sbh / (tp if sequence_parallel else 1)
    lin = 1 if fp8 else 2  # bytes per element of a GEMM input cached for its weight gradient
    mlp_checkpointed = ("moe" if moe_layer else "mlp") in mods  # keeps its 16-bit input
    # norm outputs: the QKV input and the MLP input (discarded with layernorm recompute)
    norm_out = 0 if "layernorm" in mods else lin + (2 if mlp_checkpointed else lin)
    # replicated without SP: 2 layer-norm inputs (4), the norms' outputs, 2 dropout masks (2)
    replicated = (4 + norm_out + 2) * sbh
    # attention: Q, K (for QK^T), V and the output (the flash-attention output and the output
    # projection's input: one 16-bit copy, DeepSeek-V3's E5M6 of 3.3.3 counted as 16 bits)
    qkv = model.q_width + model.kv_width + model.v_width
    if model.is_mla:  # the down-projections' outputs (latents), whole on every TP rank
        ql, kl = model.q_lora_rank, model.kv_lora_rank
        if "mla_up_proj" in mods:  # the checkpoint keeps c_q, c_kv and k_pe; Q, K, V go
            replicated += 2 * sb * (ql + kl + model.rope_head_dim)
            qkv = 0
        else:  # the latent norms' 16-bit inputs and outputs (the up-projections' inputs)
            replicated += (2 + lin) * sb * (ql + kl)
    attn = 2 * sb * (qkv + model.out_width)
    if moe_layer:
        k, f = model.top_k, model.moe_ffn_hidden
        # each routed copy: its dispatched input (fc1's, FP8 in DeepSeek-V3's dispatch) and MLP;
        # one copy, not two: Megatron-Core weights by the router probs inside the activation
        # (activation_func_with_probs; moe_apply_probs_on_input off), so the combine's unpermute
        # keeps no 2 h copy for the probs' gradient, and permute / all-to-all keep nothing
        routed = k * (lin * sbh + _mlp(model, sb, f, lin, "moe_act" in mods))
        shared = model.shared_experts * _mlp(model, sb, f, lin, False)
        mlp = 0.0 if "moe" in mods else routed + (0.0 if "shared_experts" in mods else shared)
    else:
        mlp = 0.0 if "mlp" in mods else _mlp(model, sb, model.ffn_hidden, lin, False)
    # attention scores: softmax output (2), dropout mask (1), dropout output (2) per head;
    # queries are local (s/cp) against every key (s)
    scores = 0.0 if "core_attn" in mods else 5 * model.heads * s * seq * b
    sharded = attn + mlp + scores
    if sequence_parallel:
        return (replicated + sharded) / tp
    return replicated + sharded / tp


def _mlp(model: ModelShape, sb: float, f: int, lin: int, act_recomputed: bool) -> float:
    """One MLP's activations past its input: the activation function's 16-bit input (SwiGLU:
    the 2f-wide fc1 output, 4 s b f; GeLU 2 s b f) and its output, fc2's input (2 s b f, `lin`
    bytes with FP8), dropped when the activation is recomputed (Megatron's moe_act)."""
    act_in = (4 if model.gated_mlp else 2) * f
    return sb * (act_in + (0 if act_recomputed else lin * f))


def in_flight_micro_batches(
    pp: int, micro_batches: int, stage: int = 0, gpipe: bool = False
) -> int:
    """Micro-batches whose activations 1F1B stage `stage` holds at once: min(pp - stage, m)
    (its warm-up forwards and the one it runs before its first backward); every stage of
    GPipe (torch's ScheduleGPipe: all forwards before any backward) holds all m."""
    return micro_batches if gpipe and pp > 1 else min(pp - stage, micro_batches)


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
    recompute_modules: tuple[str, ...] = (),
    fp8: str | None = None,
    gpipe: bool = False,
) -> float:
    """Activations held by a rank of pipeline stage `stage` (default the first, the busiest
    under 1F1B with even stages): its layers' activations for min(pp - stage, m) in-flight
    micro-batches, the embedding's on the first stage, and the output layer's on the last for
    the one micro-batch it holds (with one stage: Megatron-LM's theoretical estimate). With
    v virtual stages (interleaved 1F1B) a stage holds its warm-up chunks plus one, each 1/v
    of its layers: p + (p-1)/v micro-batches' worth on the first stage (Korthikanti et al.
    2022, section 4.2.3's 1 + (p-1)/(p v) factor). `gpipe`: every stage holds all m
    micro-batches, the last stage its output layer's m times too."""
    options = (sequence_parallel, recompute)
    per_layer = {
        moe: activation_bytes_per_layer(
            model, seq, micro_batch, tp, cp, *options, moe, recompute_modules, fp8
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
        held = per_mb * in_flight_micro_batches(pp, micro_batches, stage, gpipe)
    if stage == pp - 1:  # the output layer's, for each micro-batch the last stage holds
        out = output_activation_bytes(model, seq, micro_batch, tp, cp, sequence_parallel)
        held += out * in_flight_micro_batches(pp, micro_batches, stage, gpipe)
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
    recompute_modules: tuple[str, ...] = (),
    fp8: str | None = None,
    gpipe: bool = False,
) -> TrainingMemory:
    """Per-rank memory of the busiest rank: weights (param dtype), gradients (grad dtype),
    Adam states (12 bytes/param) and activations, of the pipeline stage whose sum is largest
    (with uneven stages a middle stage can be). ZeRO stage 1 shards optimizer states,
    2 also gradients, 3 also weights, over the dp x cp ranks (dense) and the dp x cp / ep
    expert-data-parallel ranks (experts), as Megatron's distributed optimizer does; `gpipe`:
    activations of torch's ScheduleGPipe (all m micro-batches in flight)."""
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
                recompute, stage, virtual_stages, recompute_modules, fp8, gpipe,
            ),
        )  # fmt: skip

    return max((of(s) for s in range(pp)), key=lambda mem: mem.total)
