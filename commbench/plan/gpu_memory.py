"""Bytes per GPU of a config's busiest rank, by kind: weights, gradients, optimizer state,
activations and KV cache (the arithmetic is traffic.memory's; this picks it for a request)."""

from __future__ import annotations

from commbench.dtypes import dtype_size
from commbench.plan.request import KV_CACHE_DTYPES, PlanRequest
from commbench.plan.search import Config
from commbench.traffic.memory import activation_bytes_per_layer, kv_cache_bytes, training_memory
from commbench.traffic.patterns.pp import GPIPE


def memory(req: PlanRequest, cfg: Config) -> dict[str, float]:
    """Bytes per GPU of the busiest rank by kind, and the total."""
    model, seq = req.model.for_pipeline(cfg.pp), req.seq  # uneven stages where pp needs them
    if req.mode == "train":
        mem = training_memory(
            model,
            tp=cfg.tp,
            cp=cfg.cp,
            pp=cfg.pp,
            dp=cfg.dp,
            ep=cfg.ep,
            seq=seq,
            micro_batch=cfg.micro_batch,
            micro_batches=cfg.micro_batches,
            zero_stage=cfg.zero_stage,
            grad_dtype=req.grad_dtype,
            sequence_parallel=req.sequence_parallel,
            recompute=req.recompute,
            virtual_stages=cfg.virtual_stages,
            recompute_modules=req.recompute_modules,
            fp8=req.fp8,
            gpipe=req.pp_schedule == GPIPE,
        ).as_dict()
        return {**mem, "kv_cache": 0.0}  # TrainingMemory's total already sums the rest
    weights = model.rank_params(cfg.tp, cfg.pp, cfg.ep) * dtype_size("bfloat16")
    sequences = req.batch // cfg.dp  # every micro-batch's cache lives on every stage
    kv = kv_cache(req, seq * sequences, cfg)
    act = max(
        activation_bytes_per_layer(
            model,
            seq,
            cfg.micro_batch,
            cfg.tp,
            cfg.cp,
            req.sequence_parallel,
            "selective",
            moe,
        )
        for moe in {model.is_moe_layer(i) for i in range(model.layers)}
    )
    return {
        "weights": float(weights),
        "grads": 0.0,
        "optimizer": 0.0,
        "activations": act,
        "kv_cache": kv,
        "total": weights + act + kv,
    }


def kv_cache(req: PlanRequest, tokens: int, cfg: Config) -> float:
    """KV cache of `tokens` tokens per GPU in the request's --kv-cache-dtype (traffic.memory's
    bf16 bytes scaled to its element size)."""
    bf16 = kv_cache_bytes(req.model, tokens, "bfloat16", cfg.tp, cfg.pp, cfg.cp)
    return bf16 * KV_CACHE_DTYPES[req.kv_cache_dtype] / KV_CACHE_DTYPES["bf16"]
