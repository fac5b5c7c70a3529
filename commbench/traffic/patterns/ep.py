"""Expert parallelism for MoE layers (GShard, Lepikhin et al. 2020; Megatron-Core's all-to-all
token dispatcher): each MoE layer sends every local token's top-k copies to the ranks holding
their experts (dispatch) and back (combine), 2 all-to-all-v forward and 2 backward. T = local
tokens b s / (c t) (Megatron runs MoE with sequence parallel, so TP ranks split the tokens);
per-peer bytes follow a seeded router: uniform, Zipf (a few hot experts) or Dirichlet (each
rank its own skew). A capacity factor C = ceil(T k / E x cf) drops overflow and, with `pad`,
pads every expert's buffer to C (drop-and-pad); none means dropless. As DeepSeek-V3 does
(arXiv 2412.19437, 3.2 and 3.3), routing can be node-limited (experts in `groups` groups, one
per node, each token sent to at most `group_limit` of them, chosen by their top experts'
scores) and the dispatch can move FP8 tokens (1 byte per element and an fp32 scale per 128)
while the combine stays in the activation dtype. Experts are sharded over the dp x cp ranks,
as Megatron-Core's expert rank generator does (layout.expert). `routing: draw` (the default)
prices one seeded draw, reused for every MoE layer and micro-batch (one draw can sit in the
tail of its router's spread: issue 31 saw the 1st percentile at ep 4); `routing: expected`
prices the expectation: each expert's token count is its mean over EXPECT_DRAWS draws (exact
T k / E for the uniform router), rounded so each source still sends T k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from commbench.errors import UsageError
from commbench.traffic import routecache
from commbench.traffic.bounds import check_routing
from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import Fact, TrafficOptions, check, check_choice
from commbench.traffic.program import Program, Step

NAME = "ep"
AXIS = Axis.EP
ROUTERS = ("uniform", "zipf", "dirichlet")
DISPATCH = ("bf16", "fp8")  # the dispatch's payload: the activation dtype, or FP8 + scales
FP8_BLOCK = 128  # elements per fp32 scale (DeepSeek-V3's 1 x 128 tile quantisation)
ROUTINGS = ("draw", "expected")
EXPECT_DRAWS = 32  # draws averaged for routing: expected (non-uniform routers)


@dataclass(frozen=True)
class Options(TrafficOptions):
    """Router skew (uniform, zipf with exponent zipf_s, dirichlet with concentration
    dirichlet_alpha), seed, top-k (None: the model's), capacity factor (None: dropless),
    dispatch payload (bf16 or fp8), node-limited routing (groups, group_limit)."""

    router: str = "uniform"
    zipf_s: float = 1.0
    dirichlet_alpha: float = 1.0
    seed: int = 0
    top_k: int | None = None
    capacity_factor: float | None = None
    pad: bool = True
    dispatch: str = "bf16"
    groups: int = 1
    group_limit: int | None = None
    routing: str = "draw"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("router", self.router, ROUTERS)
        check_choice("routing", self.routing, ROUTINGS)
        check_choice("dispatch", self.dispatch, DISPATCH)
        if self.groups < 1:
            raise UsageError(f"groups must be at least 1, got {self.groups}")
        if self.group_limit is not None and not 1 <= self.group_limit <= self.groups:
            raise UsageError(
                f"group_limit {self.group_limit} must be between 1 and groups {self.groups}"
            )
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
    without replacement from the router's probabilities (Gumbel top-k, seeded); with a
    group_limit M, only among the experts of the M groups whose best top_k/M scores sum
    highest (DeepSeek-V3's node-limited routing); a uniform router's k-subsets drawn directly
    (uniform_subsets). Cached per user (traffic/routecache): a
    warm rank never imports numpy.random."""
    key = {
        "router": options.router,
        "seed": options.seed,
        "zipf_s": options.zipf_s,
        "dirichlet_alpha": options.dirichlet_alpha,
        "groups": options.groups,
        "group_limit": options.group_limit,
        "shape": [tokens, experts, top_k, sources],
    }
    if options.routing != "draw":  # keys of the draws cached before this option stay valid
        key["routing"] = options.routing
    check_routing(tokens, experts, "ep")
    return routecache.load(key, lambda: _route(options, tokens, experts, top_k, sources))


def _route(options: Options, tokens: int, experts: int, top_k: int, sources: int) -> np.ndarray:
    """route's draw (or expectation), uncached."""
    if options.routing == "expected":
        return _expected(options, tokens, experts, top_k, sources)
    return _draw(options, tokens, experts, top_k, sources, [options.seed, 1])


def _expected(options: Options, tokens: int, experts: int, top_k: int, sources: int) -> np.ndarray:
    """Mean counts per [source, expert], in whole tokens summing to T k per source (largest
    remainders rounded up): T k / E for the uniform router (each expert is one of a token's k
    with probability k / E), else the mean of EXPECT_DRAWS draws."""
    if options.router == "uniform" and (options.group_limit or options.groups) == options.groups:
        mean = np.full((sources, experts), tokens * top_k / experts)
    else:
        draws = [
            _draw(options, tokens, experts, top_k, sources, [options.seed, 1, j])
            for j in range(EXPECT_DRAWS)
        ]
        mean = np.mean(draws, axis=0)
    counts = np.floor(mean).astype(np.int64)
    for r in range(sources):
        short = tokens * top_k - int(counts[r].sum())
        counts[r, np.argsort(-(mean[r] - counts[r]), kind="stable")[:short]] += 1
    return counts


def _draw(
    options: Options, tokens: int, experts: int, top_k: int, sources: int, seed: list[int]
) -> np.ndarray:
    """One Gumbel top-k draw of every source's tokens."""
    probs = router_probs(options, experts, sources)
    rng = np.random.default_rng(seed)
    counts = np.zeros((sources, experts), dtype=np.int64)
    with np.errstate(divide="ignore"):
        logp = np.log(probs)
    G, M = options.groups, options.group_limit
    if options.router == "uniform" and (M is None or M >= G) and top_k * top_k <= experts:
        for r in range(sources):
            chosen = uniform_subsets(rng, tokens, experts, top_k)
            counts[r] = np.bincount(chosen.ravel(), minlength=experts)
        return counts
    for r in range(sources):
        keys = logp[r] + rng.gumbel(size=(tokens, experts))
        if M is not None and M < G:
            keys = limit_groups(keys, G, M, top_k)
        chosen = np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]
        counts[r] = np.bincount(chosen.ravel(), minlength=experts)
    return counts


def uniform_subsets(rng: np.random.Generator, tokens: int, experts: int, top_k: int) -> np.ndarray:
    """[token, top_k] distinct experts per token, each k-subset equally likely: what Gumbel
    top-k of equal probabilities draws, from k integers a token instead of E keys (32x fewer
    for DeepSeek-V3's 8 of 256; its plan on 64 GPUs routed for 6 s cold). A token whose k
    draws repeat an expert is drawn again (a uniform ordered k-tuple given its entries are
    distinct is a uniform k-subset); with k^2 <= E over 60% of tokens pass each round."""
    chosen = rng.integers(0, experts, size=(tokens, top_k))
    while True:
        ordered = np.sort(chosen, axis=1)
        again = np.any(ordered[:, 1:] == ordered[:, :-1], axis=1)
        if not again.any():
            return chosen
        chosen[again] = rng.integers(0, experts, size=(int(again.sum()), top_k))


def limit_groups(keys: np.ndarray, groups: int, limit: int, top_k: int) -> np.ndarray:
    """keys[token, expert] with every expert outside each token's best `limit` groups set to
    -inf; a group scores the sum of its best ceil(top_k / limit) keys."""
    t, e = keys.shape
    by_group = keys.reshape(t, groups, e // groups)
    best = -np.sort(-by_group, axis=2)[:, :, : math.ceil(top_k / limit)].sum(axis=2)
    keep = np.argpartition(-best, limit - 1, axis=1)[:, :limit]
    mask = np.full((t, groups), True)
    np.put_along_axis(mask, keep, False, axis=1)
    return np.where(np.repeat(mask, e // groups, axis=1), -np.inf, keys)


def token_bytes(model: ModelShape, options: Options) -> tuple[int, int]:
    """(dispatch, combine) bytes per routed token: the hidden vector in the activation dtype,
    or for an FP8 dispatch one byte per element plus an fp32 scale per 128, rounded up to
    whole activation-dtype elements (the bytes move as such; a copy does not care)."""
    combine = model.hidden * options.elem
    if options.dispatch == "bf16":
        return combine, combine
    fp8 = model.hidden + 4 * math.ceil(model.hidden / FP8_BLOCK)
    return math.ceil(fp8 / options.elem) * options.elem, combine


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
    T = options.micro_batch * seq // (layout.cp * layout.tp)
    split, comb, meta = routed(layout, model, options, T)
    n = meta["moe_layers"] * options.micro_batches
    if layout.ep == 1 or n == 0:
        return Program(NAME, (), meta)
    dt = options.dtype
    steps = (
        a2a(split, n, "forward", "dispatch", dt),
        a2a(comb, n, "forward", "combine", dt),
        a2a(transpose(comb), n, "backward", "combine grad", dt),  # activation dtype
        a2a(comb, n, "backward", "dispatch grad", dt),
    )
    return Program(NAME, steps, meta)


def a2a(split: tuple[tuple[int, ...], ...], n: float, phase: str, label: str, dt: str) -> Step:
    """An all-to-all-v Step of `split`, n times on the ep axis."""
    return Step(
        op="alltoallv",
        nbytes=max(sum(r) for r in split),
        axis=AXIS,
        repeat=n,
        phase=phase,
        dtype=dt,
        label=label,
        split=split,
    )


def routed(
    layout: ParallelLayout, model: ModelShape, options: Options, T: int
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...], dict]:
    """(dispatch split, combine split, meta) of one MoE layer when every EP rank routes T
    tokens: the per-layer part training, prefill and decode share."""
    if not model.is_moe:
        raise UsageError(f"expert parallelism needs an MoE model; {model.name} has no experts")
    e, E = layout.ep, model.experts
    k = options.top_k or model.top_k
    if k > E:
        raise UsageError(f"top_k {k} exceeds the {E} experts of {model.name}")
    if E % options.groups:
        raise UsageError(f"groups {options.groups} must divide the {E} experts of {model.name}")
    counts = route(options, T, E, k, e)
    routed = int(counts.sum())
    router_load = counts.sum(axis=0)
    cap = None
    kept = counts
    if options.capacity_factor is not None:
        cap = capacity(T, k, E, options.capacity_factor)
        kept = np.minimum(counts, cap)
        counts = np.full_like(counts, cap) if options.pad else kept
    out_bytes, back_bytes = token_bytes(model, options)
    split = dispatch_split(counts, e, out_bytes)
    comb = transpose(dispatch_split(counts, e, back_bytes))
    load = counts.sum(axis=0)  # tokens per expert
    recv = np.array([sum(col) for col in zip(*split)], dtype=float)
    layers = max(
        sum(model.is_moe_layer(i) for i in model.stage_layers(layout.pp, s))
        for s in range(layout.pp)
    )
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
        "dispatch_token_bytes": out_bytes,
    }
    return split, comb, meta


def point_facts(meta: dict, time_s: float) -> list[Fact]:
    """How uneven the routed load was: tokens per expert max/mean after capacity, before it
    (the router's), and the share dropped by the capacity factor."""
    return [
        Fact("imbalance", "imbalance max/mean", meta["imbalance"], ".2f"),
        Fact("router_imbalance", "router imbalance", meta["router_imbalance"], ".2f"),
        Fact("dropped_fraction", "dropped", meta["dropped_fraction"], ".1%"),
    ]
