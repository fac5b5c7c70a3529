"""Expert parallelism for MoE layers (GShard, Lepikhin et al. 2020; Megatron-Core's all-to-all
token dispatcher): each MoE layer sends every local token's top-k copies to the ranks holding
their experts (dispatch) and back (combine), 2 all-to-all-v forward and 2 backward. T = local
tokens b s / (c t) (Megatron runs MoE with sequence parallel, so TP ranks split the tokens);
per-peer bytes follow a seeded router: uniform, Zipf (a few hot experts) or Dirichlet (each
rank its own skew). A capacity factor C = ceil(T k / E x cf) drops overflow and, with `pad`,
pads every expert's buffer to C (drop-and-pad); none means dropless.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from commbench.errors import UsageError
from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import Fact, TrafficOptions, check, check_choice
from commbench.traffic.program import Program, Step

NAME = "ep"
AXIS = Axis.EP
ROUTERS = ("uniform", "zipf", "dirichlet")


@dataclass(frozen=True)
class Options(TrafficOptions):
    """Router skew (uniform, zipf with exponent zipf_s, dirichlet with concentration
    dirichlet_alpha), seed, top-k (None: the model's), capacity factor (None: dropless)."""

    router: str = "uniform"
    zipf_s: float = 1.0
    dirichlet_alpha: float = 1.0
    seed: int = 0
    top_k: int | None = None
    capacity_factor: float | None = None
    pad: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("router", self.router, ROUTERS)
        if self.zipf_s < 0 or not self.dirichlet_alpha > 0:
            raise UsageError("zipf_s must be >= 0 and dirichlet_alpha > 0")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise UsageError(f"capacity_factor must be positive, got {self.capacity_factor}")
        if self.top_k is not None and self.top_k < 1:
            raise UsageError(f"top_k must be at least 1, got {self.top_k}")


def router_probs(options: Options, experts: int, sources: int) -> np.ndarray:
    """Routing probabilities [source rank, expert] of the configured router."""
    rng = np.random.default_rng(options.seed)
    if options.router == "uniform":
        return np.full((sources, experts), 1.0 / experts)
    if options.router == "zipf":
        ranks = rng.permutation(experts)  # which experts are hot: seeded, shared by all ranks
        w = 1.0 / (ranks + 1.0) ** options.zipf_s
        return np.tile(w / w.sum(), (sources, 1))
    return rng.dirichlet(np.full(experts, options.dirichlet_alpha), size=sources)


def route(options: Options, tokens: int, experts: int, top_k: int, sources: int) -> np.ndarray:
    """Tokens per [source rank, expert]: each token picks top_k distinct experts, sampled
    without replacement from the router's probabilities (Gumbel top-k, seeded)."""
    probs = router_probs(options, experts, sources)
    rng = np.random.default_rng([options.seed, 1])
    counts = np.zeros((sources, experts), dtype=np.int64)
    with np.errstate(divide="ignore"):
        logp = np.log(probs)
    for r in range(sources):
        keys = logp[r] + rng.gumbel(size=(tokens, experts))
        chosen = np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]
        counts[r] = np.bincount(chosen.ravel(), minlength=experts)
    return counts


def capacity(tokens: int, top_k: int, experts: int, factor: float) -> int:
    """Expert capacity per source rank: ceil(T k / E x cf) (GShard / Megatron)."""
    return math.ceil(tokens * top_k / experts * factor)


def dispatch_split(counts: np.ndarray, ep: int, token_bytes: int) -> tuple[tuple[int, ...], ...]:
    """bytes[src][dst]: the tokens src sends to the experts dst holds (experts are split in
    contiguous blocks of E/ep, Megatron's local experts)."""
    per_rank = counts.reshape(counts.shape[0], ep, -1).sum(axis=2)
    return tuple(tuple(int(v) * token_bytes for v in row) for row in per_rank)


def transpose(split: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    return tuple(zip(*split))


def build(layout: ParallelLayout, model: ModelShape, options: Options) -> Program:
    """Dispatch and combine of every MoE layer of the busiest stage, every micro-batch."""
    seq = options.seq(model)
    check(layout, model, seq, sp=layout.tp > 1)
    if not model.is_moe:
        raise UsageError(f"pattern ep needs an MoE model; {model.name} has no experts")
    e, E = layout.ep, model.experts
    k = options.top_k or model.top_k
    if k > E:
        raise UsageError(f"top_k {k} exceeds the {E} experts of {model.name}")
    T = options.micro_batch * seq // (layout.cp * layout.tp)
    counts = route(options, T, E, k, e)
    routed = int(counts.sum())
    router_load = counts.sum(axis=0)
    cap = None
    kept = counts
    if options.capacity_factor is not None:
        cap = capacity(T, k, E, options.capacity_factor)
        kept = np.minimum(counts, cap)
        counts = np.full_like(counts, cap) if options.pad else kept
    token_bytes = model.hidden * options.elem
    split = dispatch_split(counts, e, token_bytes)
    load = counts.sum(axis=0)  # tokens per expert
    recv = np.array([sum(col) for col in zip(*split)], dtype=float)
    layers = max(
        sum(model.is_moe_layer(i) for i in model.stage_layers(layout.pp, s))
        for s in range(layout.pp)
    )
    n = layers * options.micro_batches
    meta = {
        "tokens": T,
        "top_k": k,
        "capacity": cap,
        "dropped_fraction": 1.0 - float(kept.sum()) / routed,
        "imbalance": float(load.max() / load.mean()),
        "router_imbalance": float(router_load.max() / router_load.mean()),
        "rank_imbalance": float(recv.max() / recv.mean()) if recv.mean() > 0 else 1.0,
        "expert_load": [int(x) for x in load],
        "moe_layers": layers,
    }
    if e == 1 or n == 0:
        return Program(NAME, (), meta)
    comb = transpose(split)
    dt = options.dtype

    def a2a(s, phase: str, label: str) -> Step:
        return Step(
            op="alltoallv",
            nbytes=max(sum(r) for r in s),
            axis=AXIS,
            repeat=n,
            phase=phase,
            dtype=dt,
            label=label,
            split=s,
        )

    steps = (
        a2a(split, "forward", "dispatch"),
        a2a(comb, "forward", "combine"),
        a2a(split, "backward", "combine grad"),
        a2a(comb, "backward", "dispatch grad"),
    )
    return Program(NAME, steps, meta)


def point_facts(meta: dict, time_s: float) -> list[Fact]:
    """How uneven the routed load was: tokens per expert max/mean after capacity, before it
    (the router's), and the share dropped by the capacity factor."""
    return [
        Fact("imbalance", "imbalance max/mean", meta["imbalance"], ".2f"),
        Fact("router_imbalance", "router imbalance", meta["router_imbalance"], ".2f"),
        Fact("dropped_fraction", "dropped", meta["dropped_fraction"], ".1%"),
    ]
