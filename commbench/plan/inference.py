"""Inference pricing: a config's prefill latency and time per output token (TPOT) from the
prefill and decode Programs (traffic.patterns, roles PREFILL and DECODE) priced through the
calibration, with a compute model where a peak is known.

Prefill is compute-bound: its FLOPs (2 P_active + 4 L H Q s per token) at the MFU. Decode
reads every weight it uses and the KV cache once per micro-batch and token, so its compute
slot is max(FLOPs time, bytes read / HBM bandwidth) (the roofline of Williams et al. 2009;
"memory-bound decode" in Pope et al. 2022, "Efficiently Scaling Transformer Inference"). An
MoE layer reads only the experts its tokens reach: 1 - (1 - 1/E)^(b ep k) of the local ones.
Both passes combine their communication as a training step does (step_time): the pipeline's
makespan, in-layer traffic stretched by (m+p-1)/m. Decode keeps p micro-batches in flight,
so in steady state each sequence gets a token every max(m, p) of the m+p-1 slots of a pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from commbench.calibration.pricing import ProgramEstimate
from commbench.dtypes import dtype_size
from commbench.ops import OPS
from commbench.plan.gpu_memory import kv_cache
from commbench.plan.request import PlanRequest, flops_per_token
from commbench.plan.search import Config
from commbench.plan.step_time import RoleTimes, StepTime, step_time
from commbench.traffic import patterns
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.patterns import Role
from commbench.traffic.program import Program

if TYPE_CHECKING:
    from commbench.plan.result import Evaluation

INFERENCE_ROLES: tuple[Role, ...] = (Role.PREFILL, Role.DECODE)
PASSES: dict[Role, str] = {
    s.role: s.name for s in patterns.PATTERNS.values() if s.role in INFERENCE_ROLES
}
WEIGHT_BYTES = dtype_size("bfloat16")


@dataclass(frozen=True, kw_only=True)
class InferenceTimes:
    """One config's inference: the prefill of every replica's prompts and a decode step."""

    prefill: StepTime  # the prompts of one data-parallel replica, m micro-batches
    decode: StepTime  # one pass of every sequence's next token through the pipeline
    batch: int  # sequences decoded at once over the whole job
    decode_micro_batches: int
    pp: int
    gpus: int
    memory_s: float | None  # of the decode compute: HBM reads (None: no compute model)
    flops_s: float | None

    @property
    def tpot_s(self) -> float:
        """Seconds between one sequence's output tokens in steady state."""
        m, p = self.decode_micro_batches, self.pp
        return self.decode.step * max(m, p) / (m + p - 1)

    @property
    def tokens_per_s(self) -> float:
        return self.batch / self.tpot_s

    def as_dict(self) -> dict[str, Any]:
        return {
            "prefill_s": self.prefill.step,
            "tpot_s": self.tpot_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.tokens_per_s / self.gpus,
            "batch": self.batch,
            "decode_comm_s": self.decode.comm,
            "decode_memory_s": self.memory_s,
            "decode_flops_s": self.flops_s,
        }


def decode_split(req: PlanRequest, cfg: Config) -> tuple[int, int]:
    """(sequences per micro-batch, micro-batches) of a replica's decode batch: as many
    micro-batches as stages (the pipeline stays full), fewer when the batch is smaller."""
    seqs = max(1, req.batch // cfg.dp)
    m = math.gcd(seqs, cfg.pp)
    return seqs // m, m


def programs(req: PlanRequest, cfg: Config, layout: ParallelLayout) -> dict[str, Program]:
    """The prefill and decode Programs of a config, with the compute per micro-batch and
    stage the compute model gives (none without a peak)."""
    b, m = decode_split(req, cfg)
    prefill_s, decode_s = compute_per_micro_batch(req, cfg)
    common = {"seq_len": req.seq}
    out = {}
    passes: list[tuple[Role, dict[str, Any]]] = [
        (Role.PREFILL, {"micro_batch": cfg.micro_batch, "micro_batches": cfg.micro_batches,
                        "compute_ms": (prefill_s or 0.0) * 1e3}),
        (Role.DECODE, {"micro_batch": b, "micro_batches": m, "compute_ms": (decode_s or 0.0) * 1e3}),
    ]  # fmt: skip
    for role, opts in passes:
        out[PASSES[role]] = patterns.build(
            PASSES[role], layout, req.model.for_pipeline(cfg.pp), {**common, **opts}
        )
    return out


def compute_per_micro_batch(req: PlanRequest, cfg: Config) -> tuple[float | None, float | None]:
    """(prefill, decode) compute of one micro-batch on one stage's GPU, seconds."""
    if req.peak_tflops is None:
        return None, None
    flops_s, memory_s = decode_compute(req, cfg)
    m = decode_split(req, cfg)[1]
    rate = req.peak_tflops * 1e12 * req.mfu
    prompts = cfg.micro_batch * req.seq * flops_per_token(req.model, req.seq, "infer")
    assert flops_s is not None and memory_s is not None
    return prompts / (cfg.replica * rate), max(flops_s, memory_s) / m


def decode_compute(req: PlanRequest, cfg: Config) -> tuple[float | None, float | None]:
    """(FLOPs time, HBM time) of one decode step per GPU, every micro-batch: each micro-batch
    reads its stage's weights (the experts its tokens reach) and its sequences' KV cache."""
    if req.peak_tflops is None:
        return None, None
    model = req.model.for_pipeline(cfg.pp)
    b, m = decode_split(req, cfg)
    flops = req.batch * flops_per_token(model, req.seq, "infer")
    flops_s = flops / (req.gpus * req.peak_tflops * 1e12 * req.mfu)
    stage = model.busiest_stage(cfg.pp, cfg.tp, cfg.ep)
    sp = model.stage_params(cfg.pp, stage)
    hit = 1.0
    if model.is_moe:
        hit = 1.0 - (1.0 - 1.0 / model.experts) ** (b * cfg.ep * (model.top_k or 1))
    weights = (sp.dense_per_rank(cfg.tp) + sp.expert_per_rank(cfg.tp, cfg.ep) * hit) * WEIGHT_BYTES
    kv = kv_cache(req, req.seq * b * m, cfg)
    memory_s = (m * weights + kv) / (req.hbm_gbps * 1e9)
    return flops_s, memory_s


def pass_roles(est: ProgramEstimate) -> RoleTimes:
    """A whole pass's estimate grouped as a training step's: its pipeline schedule, and its
    other steps as in-layer traffic by axis."""
    in_layer: dict[str, float] = {}
    pipeline = None
    for s in est.steps:
        if OPS[s.op].scheduled:
            pipeline = s
        else:
            in_layer[s.axis] = in_layer.get(s.axis, 0.0) + (s.comm_s or 0.0)
    return RoleTimes(
        in_layer=in_layer,
        pipeline_s=pipeline.total_s if pipeline is not None else None,
        pipeline_comm_s=(pipeline.comm_s or 0.0) if pipeline is not None else 0.0,
        gradient_s=0.0,
    )


def inference_times(
    req: PlanRequest, cfg: Config, estimates: Mapping[str, ProgramEstimate]
) -> InferenceTimes:
    """Prefill and decode StepTimes of a config from its priced Programs."""
    b, m = decode_split(req, cfg)
    prefill_s, decode_s = compute_per_micro_batch(req, cfg)
    flops_s, memory_s = decode_compute(req, cfg)
    prefill = step_time(
        pass_roles(estimates[PASSES[Role.PREFILL]]),
        compute_s=None if prefill_s is None else prefill_s * cfg.micro_batches,
        pp=cfg.pp,
        micro_batches=cfg.micro_batches,
        overlap_dp=False,
    )
    decode = step_time(
        pass_roles(estimates[PASSES[Role.DECODE]]),
        compute_s=None if decode_s is None else decode_s * m,
        pp=cfg.pp,
        micro_batches=m,
        overlap_dp=False,
    )
    return InferenceTimes(
        prefill=prefill,
        decode=decode,
        batch=b * m * cfg.dp,
        decode_micro_batches=m,
        pp=cfg.pp,
        gpus=req.gpus,
        memory_s=memory_s,
        flops_s=flops_s,
    )


BATCH_STEP = 8  # the latency check prices the best config at this many times the batch


def findings(
    req: PlanRequest, ranked: list[Evaluation], at_batch: Callable[[int], Evaluation]
) -> list[str]:
    """What the ranking says about serving, in the seed's terms: what the best config's TPOT
    is made of; whether its decode communication is latency-bound (at BATCH_STEP x the batch,
    BATCH_STEP x the bytes take under a quarter of BATCH_STEP x the time: the per-message cost
    dominates); and for an MoE model whether expert parallelism beats replicated experts
    (ep = 1) at this batch."""
    best = ranked[0]
    assert best.inference is not None
    inf = best.inference.as_dict()
    out = []
    parts = [f"communication {1e3 * inf['decode_comm_s']:.3g} ms"]
    if inf["decode_memory_s"] is not None:
        parts.insert(0, f"weight + KV-cache reads {1e3 * inf['decode_memory_s']:.3g} ms")
        parts.append(f"FLOPs {1e3 * inf['decode_flops_s']:.3g} ms")
    out.append(
        f"best {best.config.label} at batch {inf['batch']}: TPOT {1e3 * inf['tpot_s']:.3g} ms "
        f"({', '.join(parts)} per decode pass), prefill {inf['prefill_s']:.3g} s"
    )
    big = at_batch(BATCH_STEP)
    if big.inference is not None:
        comm = big.inference.decode.comm / best.inference.decode.comm
        grow = big.inference.tpot_s / best.inference.tpot_s
        gain = big.inference.tokens_per_s / best.inference.tokens_per_s
        kind = "latency-bound" if comm < BATCH_STEP / 4 else "bandwidth-bound"
        out.append(
            f"decode communication at batch {inf['batch']} is {kind}: {BATCH_STEP}x the batch "
            f"moves {BATCH_STEP}x the bytes in {comm:.2f}x the time; TPOT grows {grow:.2f}x for "
            f"{gain:.2f}x the throughput"
            + ("" if big.fits else f" (but needs {big.memory['total'] / 1e9:.0f} GB per GPU)")
        )
    if req.model.is_moe:
        with_ep = [e for e in ranked if e.config.ep > 1]
        without = [e for e in ranked if e.config.ep == 1]
        if with_ep and without:
            a, b = with_ep[0], without[0]
            verdict = "wins over" if a.step_s < b.step_s else "loses to"
            out.append(
                f"at batch {inf['batch']} expert parallelism ({a.config.label}, TPOT "
                f"{1e3 * a.step_s:.3g} ms) {verdict} replicated experts ({b.config.label}, "
                f"{1e3 * b.step_s:.3g} ms)"
            )
        elif without or with_ep:
            kind = "replicated experts (ep = 1)" if with_ep else "expert parallelism"
            out.append(f"no config with {kind} fits in memory to compare against")
    return out
