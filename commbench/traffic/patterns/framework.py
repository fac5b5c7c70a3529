"""The collectives of a Megatron-Core training step outside the per-layer strategies: the
parts tp, cp, ep, pp, dp and zero leave out, each a function of the layout, the model and
the workload, for the `step` pattern (which `plan --verify` prices and measures):

- the batch broadcast inside a TP group (megatron/core/utils.py get_batch_on_this_tp_rank:
  the tensors of b s elements the rank's pipeline stage uses, int64 tokens, labels and
  position ids and the fp32 loss mask, before the CP split);
- the vocab-parallel embedding's output all-reduce of b (s/c) h (reduce-scatter with sequence
  parallel, whose backward is an all-gather; VocabParallelEmbedding);
- the LM head's input-gradient all-reduce in backward (with sequence parallel: the forward
  all-gather, the backward re-gather of the input and reduce-scatter of its gradient);
- vocab-parallel cross entropy's three all-reduces of b (s/c) fp32 (max logit, target logit,
  sum of exponentials; tensor_parallel.cross_entropy);
- the sequence-parallel layernorm (and router) gradient all-reduce over tp, fp32 main grads
  (finalize_model_grads._allreduce_layernorm_grads);
- the loss all-reduce of [loss sum, tokens] in fp32 over dp x cp once per step and the
  grad-norm all-reduce of one fp32 over the model-parallel ranks (tp x pp; every rank when
  the grads are sharded: the distributed optimizer, ZeRO 1-3);
- with tied embeddings and pp > 1, the word-embedding grad all-reduce between the first and
  last stage (axis pp_ends, Megatron's embedding group);
  with expert_bias, the MoE token counts of the aux-loss-free load balancing once per step;
- the MoE token-count all-to-all of E int64 counts per MoE layer (MoEAlltoAllTokenDispatcher)
  and, with tp > 1 and experts sharded over tp (expert_tensor_parallel), the all-gather over
  tp of the received tokens after the dispatch and the reduce-scatter before the combine (and
  their mirror in backward).

Under `framework: torchtitan` (PyTorch's own parallelism as torchtitan/trainer.py drives it)
the step differs, each checked against real PyTorch on gloo (tests/pytorch_jobs): no batch
broadcast (every TP rank loads its batch), no LM-head re-gather with SP (autograd keeps the
gathered input), the per-step trainer scalars instead of the per-micro-batch loss (the valid
token count, int64 summed over dp before the micro-batches; the loss-finite flag, int32 MIN
over dp x cp, and over pp, after them), SP norm weights' Partial grads all-reduced one by one
(in backward under FSDP2; otherwise where a Replicate value is first needed: the grad norm and
the optimizer's update, 2 per weight), and the grad norm (clip_grad_norm_'s full_tensor) as
one all-reduce of one fp32 per gradient tensor on every mesh dimension that shards one (tp,
the FSDP dims), plus one fp32 over pp.

int64 buffers move as 8-byte float64 elements: a broadcast or all-to-all does not look at them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import ep, tensors
from commbench.traffic.patterns.base import FRAMEWORKS, check, check_choice, dp_axis
from commbench.traffic.program import Program, Step

NAME = "framework"

INT64 = "float64"  # an 8-byte element stands in for int64 tokens and counts
FP32 = "float32"


def _step(op: str, nbytes: int, axis: str, repeat: float, phase: str, dt: str, label: str) -> Step:
    return Step(op=op, nbytes=nbytes, axis=axis, repeat=repeat, phase=phase, dtype=dt, label=label)


def batch_broadcast(
    layout: ParallelLayout, micro_batch: int, seq: int, m: int, stage: int = 0
) -> list[Step]:
    """TP rank 0 broadcasts each micro-batch's tensors of b s that its pipeline stage uses
    (megatron/core/utils.py get_batch_on_this_tp_rank): with pp = 1 tokens, labels, position
    ids (int64) and the fp32 loss mask; the first stage tokens and position ids; the last
    labels and the loss mask; a middle stage nothing. Assumed: no attention mask from the
    data loader (create_attention_mask_in_dataloader off, as with causal flash attention)."""
    if layout.tp == 1:
        return []
    bs = micro_batch * seq
    first, last = stage == 0, stage == layout.pp - 1
    ints = 3 if first and last else 2 if first else 1 if last else 0
    out = []
    if ints:
        out.append(_step("broadcast", 8 * bs, Axis.TP, ints * m, "forward", INT64, "batch ints"))
    if last:
        out.append(_step("broadcast", 4 * bs, Axis.TP, m, "forward", FP32, "batch loss mask"))
    return out


def tied_embedding(layout: ParallelLayout, model: ModelShape) -> list[Step]:
    """Tied embeddings with pp > 1: the first and last stages all-reduce the word-embedding
    gradient, V h / t fp32 main grads, once per step (finalize_model_grads.py
    _allreduce_word_embedding_grads) over the embedding group, each pipeline's first and
    last rank (parallel_state._EMBEDDING_GLOBAL_RANKS): the pp group itself when pp = 2,
    else the 2-rank groups of axis pp_ends (the middle stages take no part)."""
    if not model.tied_embeddings or layout.pp == 1:
        return []
    n = 4 * round(model.embedding_params() / layout.tp)
    axis = Axis.PP if layout.pp == 2 else Axis.PP_ENDS
    return [_step("allreduce", n, axis, 1, "backward", FP32, "tied embedding grad")]


def expert_bias(layout: ParallelLayout, model: ModelShape, framework: str) -> list[Step]:
    """The aux-loss-free load balancing's tokens-per-expert counts, fp32 [MoE layers of the
    stage, E], all-reduced once per step: Megatron over tp x cp x dp (finalize_model_grads.py
    _update_router_expert_bias), torchtitan over tp (with ep) then dp x cp
    (components/optimizer/optimizer.py _update_expert_bias)."""
    stage = model.busiest_stage(layout.pp, layout.tp, layout.ep)
    layers = sum(model.is_moe_layer(i) for i in model.stage_layers(layout.pp, stage))
    n = 4 * layers * model.experts
    if not n:
        return []
    axes: list[str]
    if framework == "torchtitan":
        axes = [Axis.TP] if layout.ep > 1 and layout.tp > 1 else []
        axes += [dp_axis(layout)] if layout.dp * layout.cp > 1 else []
    else:
        axes = ["tp-cp-dp"] if layout.tp * layout.cp * layout.dp > 1 else []
    return [
        _step("allreduce", n, a, 1, "optimizer", FP32, "expert-bias token counts") for a in axes
    ]


def embedding(layout: ParallelLayout, S: int, m: int, sp: bool, dt: str) -> list[Step]:
    """Vocab-parallel embedding of b (s/c) h (S bytes): forward all-reduce, or with sequence
    parallel a reduce-scatter forward and its all-gather backward."""
    if layout.tp == 1:
        return []
    if not sp:
        return [_step("allreduce", S, Axis.TP, m, "forward", dt, "embedding output")]
    return [
        _step("reduce_scatter", S, Axis.TP, m, "forward", dt, "embedding output (SP)"),
        _step("allgather", S, Axis.TP, m, "backward", dt, "embedding grad (SP)"),
    ]


def lm_head(layout: ParallelLayout, S: int, m: int, sp: bool, dt: str) -> tuple[list, list]:
    """(forward, backward) of the column-parallel LM head on b (s/c) h (S bytes): the input
    gradient's all-reduce, or with sequence parallel the forward all-gather of the input, its
    re-gather in backward and the reduce-scatter of its gradient."""
    if layout.tp == 1:
        return [], []
    if not sp:
        return [], [_step("allreduce", S, Axis.TP, m, "backward", dt, "LM head input grad")]
    fwd = [_step("allgather", S, Axis.TP, m, "forward", dt, "LM head input (SP)")]
    bwd = [
        _step("allgather", S, Axis.TP, m, "backward", dt, "LM head input re-gather (SP)"),
        _step("reduce_scatter", S, Axis.TP, m, "backward", dt, "LM head input grad (SP)"),
    ]
    return fwd, bwd


def cross_entropy(layout: ParallelLayout, tokens: int, m: int) -> list[Step]:
    """Vocab-parallel cross entropy: 3 all-reduces of b (s/c) fp32 per micro-batch."""
    if layout.tp == 1:
        return []
    return [_step("allreduce", 4 * tokens, Axis.TP, 3 * m, "forward", FP32, "cross entropy")]


def norm_params(layout: ParallelLayout, model: ModelShape) -> int:
    """Parameters of the busiest stage marked sequence_parallel: 2 norms of h per layer, the
    router (E h) of each MoE layer and the final norm on the last stage."""
    stage = model.busiest_stage(layout.pp, layout.tp, layout.ep)
    n = sum(
        2 * model.hidden + (model.experts * model.hidden if model.is_moe_layer(i) else 0)
        for i in model.stage_layers(layout.pp, stage)
    )
    return n + (model.hidden if stage == layout.pp - 1 else 0)


def layernorm_grads(layout: ParallelLayout, model: ModelShape, sp: bool) -> list[Step]:
    """With sequence parallel, one all-reduce over tp of the norm gradients (fp32 main grads)."""
    if layout.tp == 1 or not sp:
        return []
    return [
        _step(
            "allreduce", 4 * norm_params(layout, model), Axis.TP, 1, "backward", FP32,
            "SP layernorm grads",
        )
    ]  # fmt: skip


def loss(layout: ParallelLayout, m: int) -> list[Step]:
    """[loss sum, tokens] in fp32 all-reduced over dp x cp once per step, on the last stage
    (Megatron-LM's training.train_step reduces the micro-batches' losses after the schedule;
    `m` is kept for callers)."""
    if layout.dp * layout.cp == 1:
        return []
    return [_step("allreduce", 8, dp_axis(layout), 1, "forward", FP32, "loss")]


def titan_scalars(layout: ParallelLayout) -> tuple[list[Step], list[Step]]:
    """(before the micro-batches, after them) of torchtitan's train_step: the valid-token
    count (int64 sum over the batch mesh, dp) and the loss-finite flag (int32 MIN over the
    loss mesh dp x cp, then over pp)."""
    before = []
    if layout.dp > 1:
        before.append(_step("allreduce", 8, Axis.DP, 1, "forward", INT64, "valid tokens"))
    after = []
    if layout.dp * layout.cp > 1:
        after.append(_step("allreduce", 4, dp_axis(layout), 1, "optimizer", "int32", "finite"))
    if layout.pp > 1:
        after.append(_step("allreduce", 4, Axis.PP, 1, "optimizer", "int32", "finite (pp)"))
    return before, after


def titan_grad_norm(layout: ParallelLayout, model: ModelShape, fsdp: bool) -> list[Step]:
    """clip_grad_norm_ on DTensor grads: the per-tensor norms (one fp32 each) all-reduced on
    every mesh dim that shards a gradient (tp; dp x cp under FSDP2), then one over pp. With
    ep > 1 (_clip_grad_norm_with_ep) the experts' grouped tensors (w1, w2, w3 of each MoE
    layer: GroupedExperts) have their own norm, reduced over ep (and edp under FSDP2)."""
    dense, expert = tensors.grad_tensors(layout, model)
    split = bool(expert) and layout.ep > 1
    n = len(dense) + (0 if split else len(expert))
    axes: list[str] = [Axis.TP] if layout.tp > 1 else []
    if fsdp and layout.dp * layout.cp > 1:
        axes.append(dp_axis(layout))
    out = [_step("allreduce", 4 * n, a, 1, "optimizer", FP32, "grad norm") for a in axes]
    if split:
        stage = model.busiest_stage(layout.pp, layout.tp, layout.ep)
        grouped = sum(model.is_moe_layer(i) for i in model.stage_layers(layout.pp, stage))
        grouped *= 3 if model.gated_mlp else 2
        ep_axes = [Axis.EP] + ([Axis.EDP] if fsdp and layout.edp > 1 else [])
        out += [
            _step("allreduce", 4 * grouped, a, 1, "optimizer", FP32, "expert grad norm")
            for a in ep_axes
        ]
    if layout.pp > 1:
        out.append(_step("allreduce", 4, Axis.PP, 1, "optimizer", FP32, "grad norm (pp)"))
    return out


def titan_norm_grads(layout: ParallelLayout, model: ModelShape, m: int, fsdp: bool) -> list[Step]:
    """SP norm weights' Partial grads, all-reduced per weight over tp: each micro-batch's
    backward under FSDP2, else twice a step (the grad norm, the optimizer's update)."""
    stage = model.busiest_stage(layout.pp, layout.tp, layout.ep)
    norms = 2 * len(model.stage_layers(layout.pp, stage)) + (stage == layout.pp - 1)
    h = 4 * model.hidden
    if fsdp and layout.dp * layout.cp > 1:
        return [_step("allreduce", h, Axis.TP, norms * m, "backward", FP32, "SP norm grads")]
    return [_step("allreduce", h, Axis.TP, 2 * norms, "optimizer", FP32, "SP norm grads")]


def grad_norm(layout: ParallelLayout, distributed_optimizer: bool) -> list[Step]:
    """The squared grad norm, one fp32, over the model-parallel ranks (tp x pp), or over every
    rank when the gradients are sharded (the distributed optimizer, ZeRO 1-3)."""
    axis = "-".join(
        a
        for a in (Axis.TP, Axis.CP, Axis.DP, Axis.PP)
        if distributed_optimizer or a in (Axis.TP, Axis.PP)
    )
    size = layout.world if distributed_optimizer else layout.tp * layout.pp
    if size == 1:
        return []
    return [_step("allreduce", 4, axis, 1, "optimizer", FP32, "grad norm")]


def token_counts(layout: ParallelLayout, model: ModelShape, moe_layers: float) -> list[Step]:
    """Each MoE layer's forward exchanges the E int64 tokens-per-expert counts over ep."""
    if layout.ep == 1 or not moe_layers:
        return []
    return [
        _step(
            "alltoall", 8 * model.experts, Axis.EP, moe_layers, "forward", INT64,
            "MoE token counts",
        )
    ]  # fmt: skip


def moe_tp(layout: ParallelLayout, recv_bytes: int, moe_layers: float, dt: str) -> list[Step]:
    """With tp > 1, the tokens an EP rank received are gathered over tp for its TP-sharded
    experts and reduce-scattered back before the combine (S = tp x received bytes); backward
    mirrors both."""
    if layout.tp == 1 or not moe_layers or layout.ep == 1:
        return []
    S = layout.tp * recv_bytes
    return [
        _step("allgather", S, Axis.TP, moe_layers, "forward", dt, "MoE tokens to expert TP"),
        _step("reduce_scatter", S, Axis.TP, moe_layers, "forward", dt, "MoE expert TP output"),
        _step("allgather", S, Axis.TP, moe_layers, "backward", dt, "MoE expert TP output grad"),
        _step("reduce_scatter", S, Axis.TP, moe_layers, "backward", dt, "MoE tokens grad"),
    ]


@dataclass(frozen=True)
class Options(ep.Options):
    """The workload, sequence parallel, the distributed optimizer (grad norm over every
    rank), expert_tensor_parallel (experts sharded over tp, Megatron-Core's ETP = TP: the
    received tokens are gathered over tp; off, ETP = 1 as pattern ep models it, each TP rank
    routes its own tokens) and EP routing as pattern ep's."""

    sequence_parallel: bool = False
    distributed_optimizer: bool = False
    expert_tensor_parallel: bool = False
    framework: str = "megatron"
    expert_bias: bool | None = None  # None: the framework's (torchtitan on, Megatron off)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("framework", self.framework, FRAMEWORKS)


def parts(layout: ParallelLayout, model: ModelShape, options: Options) -> dict[str, list[Step]]:
    """The ops above by where Megatron-Core issues them in a step: the batch and embedding
    (input), the MoE token counts and expert-TP gathers, the LM head and cross entropy
    (head), the loss, their backward, the layernorm grads, the grad norm."""
    seq = options.seq(model)
    sp = options.sequence_parallel and layout.tp > 1
    moe = model.is_moe and layout.ep > 1
    check(layout, model, seq, sp or (moe and layout.tp > 1))
    m, dt = options.micro_batches, options.dtype
    tokens = options.micro_batch * seq // layout.cp
    S = tokens * model.hidden * options.elem
    out: dict[str, list[Step]] = {"moe_counts": [], "moe_forward": [], "moe_backward": []}
    if moe:
        split, _, routing = ep.routed(layout, model, options, math.ceil(tokens / layout.tp))
        n = routing["moe_layers"] * m
        recv = max(sum(col) for col in zip(*split))
        expert_tp = moe_tp(layout, recv, n, dt) if options.expert_tensor_parallel else []
        out.update(
            moe_counts=token_counts(layout, model, n),
            moe_forward=expert_tp[:2],
            moe_backward=expert_tp[2:],
        )
    head_fwd, head_bwd = lm_head(layout, S, m, sp, dt)
    emb = embedding(layout, S, m, sp, dt)
    zero = getattr(options, "zero_stage", 0)
    out.update(
        input=batch_broadcast(
            layout,
            options.micro_batch,
            seq,
            m,
            model.busiest_stage(layout.pp, layout.tp, layout.ep),
        )
        + [s for s in emb if s.phase == "forward"],
        head=head_fwd + cross_entropy(layout, tokens, m),
        loss=loss(layout, m),
        head_backward=head_bwd,
        input_backward=[s for s in emb if s.phase == "backward"],
        grads=layernorm_grads(layout, model, sp) + tied_embedding(layout, model),
        optimizer=grad_norm(layout, options.distributed_optimizer or zero > 0),
    )
    on = options.framework == "torchtitan" if options.expert_bias is None else options.expert_bias
    bias = expert_bias(layout, model, options.framework) if on else []
    if options.framework == "torchtitan":
        before, after = titan_scalars(layout)
        fsdp = zero == 3
        out.update(
            input=before + [s for s in emb if s.phase == "forward"],
            loss=[],
            head_backward=[s for s in head_bwd if s.op != "allgather"],  # no re-gather
            grads=titan_norm_grads(layout, model, m, fsdp) if sp else [],
            optimizer=titan_grad_norm(layout, model, fsdp) + after,
        )
    out["optimizer"] = out["optimizer"] + bias
    return out


ORDER = ("input", "moe_counts", "moe_forward", "head", "loss", "head_backward", "moe_backward",
         "input_backward", "grads", "optimizer")  # fmt: skip


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """Every op above of one step on the busiest rank, in Megatron-Core's order."""
    by_part = parts(layout, model, options)
    steps = tuple(s for part in ORDER for s in by_part[part])
    seq = options.seq(model)
    tokens = options.micro_batch * seq // layout.cp
    meta = {"norm_params": norm_params(layout, model), "tokens": tokens}
    return Program(NAME, steps, meta)
