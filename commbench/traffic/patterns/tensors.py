"""The gradient tensors one rank holds, one entry per parameter tensor as a Llama-style
model registers them (torchtitan's llama3 and Megatron-Core's GPT layer spec alike), and
PyTorch DDP's bucketing of them.

DDP (torch/nn/parallel/distributed.py, c10d reducer.cpp `compute_bucket_assignment_by_size`,
rebuilt after the first iteration in the order gradients became ready) adds whole tensors to
a bucket until it holds at least the cap, then starts the next; the first bucket's cap is
`_DEFAULT_FIRST_BUCKET_BYTES` (1 MiB) only when the cap is DDP's default 25 MiB, else the cap
itself. Gradients become ready in the reverse of the forward's use: the output head, the final
norm, then per layer from the last: w2, w3, w1, ffn_norm, wo, wv, wk, wq, attention_norm, and
the embedding last. Checked against a real DDP on gloo (tests/pytorch_jobs: 12 buckets of the
2-layer tiny Llama at 0.5 MiB, where splitting the bytes gave 16).

Megatron-Core's DDP (megatron/core/distributed/param_and_grad_buffer.py
`_compute_default_per_buffer_param_layout`) keeps one buffer per dtype (dense and expert
parameters apart) and walks its parameters in reverse registration order, closing a bucket
at `bucket_size` elements: none (one bucket per buffer) unless overlap_grad_reduce, then
max(4e7, 1e6 x dp x cp) (megatron/training/training.py). Its layer registers fused tensors:
linear_qkv and linear_fc1 (gate and up) are one each.
"""

from __future__ import annotations

import itertools

from commbench.traffic.layout import ParallelLayout
from commbench.traffic.model import ModelShape

MiB = 1 << 20
DDP_DEFAULT_CAP_MB = 25.0
DDP_FIRST_BUCKET_MB = 1.0


def layer_tensors(model: ModelShape, i: int, tp: int, ep: int) -> tuple[list[float], list[float]]:
    """(dense, expert) elements per tensor of layer i on one rank, in forward order:
    attention_norm, wq, wk, wv, (q/k norms), wo, ffn_norm, then the MLP (w1, w3, w2), or the
    router, shared experts and the local experts' w1, w3, w2 each."""
    h = model.hidden
    if model.is_mla:
        attn = [model.attention_params() / tp]
    else:
        attn = [h * model.q_width / tp, h * model.kv_width / tp, h * model.v_width / tp]
        attn += [model.head_dim / tp] * (2 if model.qk_norm else 0)
        attn += [model.out_width * h / tp]
    dense = [float(h), *attn, float(h)]
    width = 3 if model.gated_mlp else 2
    if not model.is_moe_layer(i):
        return dense + [h * model.ffn_hidden / tp] * width, []
    dense.append(float(h * model.experts))  # the router, replicated
    dense += [h * model.moe_ffn_hidden / tp] * (width * model.shared_experts)
    local = model.experts // ep
    return dense, [h * model.moe_ffn_hidden / tp] * (width * local)


def grad_tensors(layout: ParallelLayout, model: ModelShape) -> tuple[list[int], list[int]]:
    """(dense, expert) gradient elements per tensor of one rank of the busiest pipeline stage,
    in forward order (embedding, layers, final norm, output head)."""
    tp, ep, pp = layout.tp, layout.ep, layout.pp
    stage = model.busiest_stage(pp, tp, ep)
    dense: list[float] = []
    expert: list[float] = []
    if stage == 0:
        dense.append(model.embedding_params() / tp)
    for i in model.stage_layers(pp, stage):
        d, e = layer_tensors(model, i, tp, ep)
        dense += d
        expert += e
    if stage == pp - 1:
        dense.append(float(model.hidden))
        if not model.tied_embeddings or pp > 1:  # a tied head's last stage keeps a copy
            dense.append(model.embedding_params() / tp)
    return [round(x) for x in dense], [round(x) for x in expert]


def megatron_tensors(layout: ParallelLayout, model: ModelShape) -> tuple[list[int], list[int]]:
    """grad_tensors with Megatron's fused tensors: per layer input norm, linear_proj,
    linear_qkv, pre-MLP norm, linear_fc1 (w1 and w3 as one), linear_fc2."""
    dense, expert = grad_tensors(layout, model)
    if model.is_mla:
        return dense, expert
    out: list[int] = []
    it = iter(dense)
    stage = model.busiest_stage(layout.pp, layout.tp, layout.ep)
    if stage == 0:
        out.append(next(it))
    for i in model.stage_layers(layout.pp, stage):
        d, _ = layer_tensors(model, i, layout.tp, layout.ep)
        mine = list(itertools.islice(it, len(d)))
        n_attn = 3 + (2 if model.qk_norm else 0)
        norm1, qkv, proj, norm2, mlp = (
            mine[0],
            mine[1 : 1 + n_attn],
            mine[1 + n_attn],
            mine[2 + n_attn],
            mine[3 + n_attn :],
        )
        fused_mlp = (
            [sum(mlp[:-1]), mlp[-1]] if model.gated_mlp and not model.is_moe_layer(i) else mlp
        )
        out += [norm1, proj, sum(qkv), norm2, *fused_mlp]
    out += list(it)
    return out, expert


def megatron_buckets(tensor_elems: list[int], bucket_size: int | None) -> list[int]:
    """Elements of each bucket of one Megatron grad buffer (reverse registration order)."""
    if bucket_size is None:
        return [sum(tensor_elems)] if tensor_elems else []
    return ddp_buckets(tensor_elems, bucket_size, bucket_size)


def ddp_caps(bucket_mb: float, first_bucket_mb: float | None) -> tuple[int, int]:
    """(first bucket cap, cap) in bytes: torch DDP's rule when first_bucket_mb is None."""
    if first_bucket_mb is None:
        first_bucket_mb = DDP_FIRST_BUCKET_MB if bucket_mb == DDP_DEFAULT_CAP_MB else bucket_mb
    return int(first_bucket_mb * MiB), int(bucket_mb * MiB)


def ddp_buckets(tensor_bytes: list[int], first_cap: int, cap: int) -> list[int]:
    """Bytes of each DDP bucket over `tensor_bytes` taken in reverse (gradient-ready) order:
    whole tensors, a bucket closed once it holds at least its cap."""
    out: list[int] = []
    size = 0
    for nbytes in reversed(tensor_bytes):
        size += nbytes
        if size >= (first_cap if not out else cap):
            out.append(size)
            size = 0
    if size:
        out.append(size)
    return out
