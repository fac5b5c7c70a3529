"""Rank (tp, cp, ep, dp, pp, micro-batch) configs for a model on a cluster from a calibration.

Pure: reads model shapes, the pattern Programs, the layout code and a calibration; never a
transport or torch. For every split of the GPUs it

1. places the layout as the suites do (ParallelLayout in Megatron order tp-cp-ep-dp-pp, or
   every distinct order with `orders="all"`; nodes of `gpus_per_node` consecutive ranks, so a
   group inside a node is `intra` and one across nodes `inter`);
2. checks the degrees against the model (patterns.violations: heads, KV heads, MLP width,
   layers, experts, sequence) and the global batch against dp x micro-batch;
3. checks per-GPU memory (models.training_memory: bf16 weights, gradients, Adam 12 bytes/param
   sharded by ZeRO stage as ZeRO does; activations after Korthikanti et al. 2022 for the
   micro-batches in flight under 1F1B, min(pp, m) on the first stage; inference: weights,
   KV cache 2 L n_kv d_head bytes/token and one layer's activations);
4. evaluates the Programs the suites would run (patterns.training_step) through the calibration
   with evaluate.Evaluator (one evaluation, shared with `validate`);
5. combines them into a step time (below) and ranks by it.

Compute (when a peak is known): FLOPs per token 6 P_active + 12 L H Q s for training (the 6PT
rule of Kaplan et al. 2020 plus the attention term of Chowdhery et al. 2022, PaLM, App. B; it
dominates at 32K-128K context) and 2 P_active + 4 L H Q s for inference (forward only);
compute_s = tokens x FLOPs/token / (gpus x peak x MFU).

Step time, no overlap by default: the 1F1B schedule (pp Program) is simulated with forward and
backward compute per micro-batch (backward = 2 x forward), so its makespan holds compute,
bubble (p-1)/(m+p-1) and the pipeline messages left on the critical path; the per-layer
traffic (TP, CP, EP) runs inside each micro-batch's slot, so it is stretched by the same
(m+p-1)/m; the gradient traffic (DP all-reduce or ZeRO) follows the pipeline, or with
`overlap_dp` hides behind the backward compute (PyTorch DDP bucketing, Li et al. 2020):

    step = makespan(1F1B) + (tp + cp + ep) x (m+p-1)/m + dp_exposed

Communication share = (tp + cp + ep + pp + dp_exposed) / step; a config is communication-bound
above 30% (the seed article's rule of thumb).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any

from commbench.calibration import Calibration
from commbench.calibration.pricing import Evaluator, ProgramEstimate
from commbench.dtypes import dtype_size
from commbench.errors import UsageError
from commbench.traffic import patterns
from commbench.traffic.layout import DEFAULT_ORDER, ParallelLayout, host_map
from commbench.traffic.models import (
    ModelShape,
    activation_bytes_per_layer,
    kv_cache_bytes,
    training_memory,
)
from commbench.traffic.patterns.base import resolve_axis, violations
from commbench.traffic.program import Program

GB = 1e9
COMM_BOUND = 0.30  # seed article: communication over ~30% of the step
DEFAULT_MFU = 0.40  # Llama 3 (Dubey et al. 2024, Table 4): 38-43% BF16 MFU on 8K-16K H100s
DEFAULT_TOKENS = {"train": 1 << 22, "infer": 1 << 18}  # 4M tokens: Llama 2's global batch
MODES = ("train", "infer")
ORDERS = ("megatron", "all")
DENSE = ("tp", "cp", "dp", "pp")


# ---- the request ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanRequest:
    """What to plan: the model, the cluster, the workload and the modelling options."""

    model: ModelShape
    gpus: int
    gpus_per_node: int
    gpu_memory_gb: float = 80.0
    seq_len: int | None = None  # None: the model's
    global_batch: int | None = None  # sequences per step; None: DEFAULT_TOKENS / seq
    micro_batch_sizes: tuple[int, ...] = (1,)
    zero_stages: tuple[int, ...] = (0,)
    sequence_parallel: bool = False
    mode: str = "train"
    peak_tflops: float | None = None  # None: no compute model (communication only)
    mfu: float = DEFAULT_MFU
    recompute: str = "selective"
    grad_dtype: str = "float32"
    overlap_dp: bool = False
    orders: str = "megatron"
    extrapolate: bool = False
    backend: str | None = None

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.gpus_per_node < 1:
            raise UsageError("--gpus and --gpus-per-node must be positive")
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise UsageError(
                f"--gpus {self.gpus} is not a whole number of nodes of --gpus-per-node "
                f"{self.gpus_per_node}"
            )
        if self.mode not in MODES:
            raise UsageError(f"--mode {self.mode!r}: choose train or infer")
        if self.orders not in ORDERS:
            raise UsageError(f"--orders {self.orders!r}: choose megatron or all")
        if not self.gpu_memory_gb > 0:
            raise UsageError("--gpu-memory must be positive (GB)")
        if not 0 < self.mfu <= 1:
            raise UsageError(f"--mfu {self.mfu} must be in (0, 1]")
        if self.peak_tflops is not None and not self.peak_tflops > 0:
            raise UsageError("--peak-tflops must be positive")
        if self.seq_len is not None and self.seq_len < 1:
            raise UsageError("--seq-len must be positive")
        if not self.micro_batch_sizes or any(b < 1 for b in self.micro_batch_sizes):
            raise UsageError("--micro-batch sizes must be positive")
        if any(z not in (0, 1, 2, 3) for z in self.zero_stages) or not self.zero_stages:
            raise UsageError("--zero-stage: choose from 0, 1, 2, 3")
        if self.mode == "infer":
            if any(self.zero_stages):
                raise UsageError("--zero-stage applies to training; --mode infer has no optimizer")
            if self.overlap_dp:
                raise UsageError("--overlap-dp applies to training; --mode infer has no gradients")
        if self.global_batch is not None:
            if self.global_batch < 1:
                raise UsageError("--global-batch must be positive")
            if self.global_batch < min(self.micro_batch_sizes):
                raise UsageError(
                    f"--global-batch {self.global_batch} is smaller than every --micro-batch "
                    f"({', '.join(map(str, self.micro_batch_sizes))})"
                )

    @property
    def seq(self) -> int:
        return self.seq_len or self.model.seq_len

    @property
    def batch(self) -> int:
        """Sequences per step."""
        if self.global_batch is not None:
            return self.global_batch
        return max(1, DEFAULT_TOKENS[self.mode] // self.seq)

    @property
    def nodes(self) -> tuple[int, ...]:
        return host_map(self.gpus, ranks_per_node=self.gpus_per_node)

    @property
    def num_nodes(self) -> int:
        return max(1, math.ceil(self.gpus / self.gpus_per_node))

    def as_dict(self) -> dict:
        return {
            "model": self.model.name,
            "model_shape": self.model.to_dict(),
            "gpus": self.gpus,
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.num_nodes,
            "gpu_memory_gb": self.gpu_memory_gb,
            "seq_len": self.seq,
            "global_batch": self.batch,
            "tokens_per_step": self.batch * self.seq,
            "micro_batch_sizes": list(self.micro_batch_sizes),
            "zero_stages": list(self.zero_stages),
            "sequence_parallel": self.sequence_parallel,
            "mode": self.mode,
            "peak_tflops": self.peak_tflops,
            "mfu": self.mfu,
            "recompute": self.recompute,
            "grad_dtype": self.grad_dtype,
            "overlap_dp": self.overlap_dp,
            "orders": self.orders,
            "extrapolate": self.extrapolate,
            "backend": self.backend,
        }


@dataclass(frozen=True)
class Config:
    """One candidate: degrees, micro-batching, ZeRO stage and rank order."""

    tp: int
    cp: int
    ep: int
    dp: int
    pp: int
    micro_batch: int
    micro_batches: int
    zero_stage: int
    order: tuple[str, ...] = DEFAULT_ORDER

    @property
    def label(self) -> str:
        """`tp8-cp1-dp1-pp4` (+ `-ep4` style for MoE, as ParallelLayout.label)."""
        parts = [f"tp{self.tp}", f"cp{self.cp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        return "-".join(parts + [f"dp{self.dp}", f"pp{self.pp}"])

    @property
    def full_label(self) -> str:
        extra = f"-b{self.micro_batch}-m{self.micro_batches}-z{self.zero_stage}"
        order = "" if self.order == DEFAULT_ORDER else f"@{'-'.join(self.order)}"
        return self.label + extra + order

    def layout(self, gpus: int, nodes: tuple[int, ...]) -> ParallelLayout:
        return ParallelLayout(
            gpus, self.tp, self.cp, self.ep, self.dp, self.pp, self.order, nodes=nodes
        )

    def as_dict(self) -> dict:
        return {
            "label": self.label,
            "tp": self.tp,
            "cp": self.cp,
            "ep": self.ep,
            "dp": self.dp,
            "pp": self.pp,
            "micro_batch": self.micro_batch,
            "micro_batches": self.micro_batches,
            "zero_stage": self.zero_stage,
            "order": "-".join(self.order),
        }


# ---- compute --------------------------------------------------------------------------------
def flops_per_token(model: ModelShape, seq: int, mode: str = "train") -> float:
    """Model FLOPs per token: 6 P_active + 12 L H Q s (training; PaLM, Chowdhery et al. 2022,
    App. B: the 6N rule plus attention scores), a third of it for a forward pass (inference)."""
    dense = 6.0 * model.param_counts().active
    attention = 12.0 * model.layers * model.heads * model.head_dim * seq
    total = dense + attention
    return total if mode == "train" else total / 3.0


def compute_seconds(req: PlanRequest) -> float | None:
    """Compute time of one step per GPU: tokens x FLOPs/token / (gpus x peak x MFU)."""
    if req.peak_tflops is None:
        return None
    tokens = req.batch * req.seq
    return (
        tokens
        * flops_per_token(req.model, req.seq, req.mode)
        / (req.gpus * req.peak_tflops * 1e12 * req.mfu)
    )


# ---- memory ---------------------------------------------------------------------------------
def memory(req: PlanRequest, cfg: Config) -> dict[str, float]:
    """Bytes per GPU of the busiest rank by kind, and the total."""
    model, seq = req.model, req.seq
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
        ).as_dict()
        return {**mem, "kv_cache": 0.0}  # TrainingMemory's total already sums the rest
    weights = model.rank_params(cfg.tp, cfg.pp, cfg.ep) * dtype_size("bfloat16")
    sequences = req.batch // cfg.dp  # every micro-batch's cache lives on every stage
    kv = kv_cache_bytes(model, seq * sequences, "bfloat16", cfg.tp, cfg.pp, cfg.cp)
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


def _gb(nbytes: float) -> float:
    return nbytes / GB


# ---- enumeration ----------------------------------------------------------------------------
def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass
class Candidate:
    """A config and, when it cannot run, why."""

    config: Config
    reasons: list[str] = field(default_factory=list)
    stage: str = "valid"  # valid | invalid | memory | unpriced


def _orders(cfg_degrees: dict[str, int], mode: str) -> list[tuple[str, ...]]:
    """Rank orders to try: Megatron's, or every distinct order of the dense axes of degree > 1
    (each permutation fills the slots those axes hold in Megatron's order, so the identity is
    Megatron's order itself and the trivial axes and ep stay where they are)."""
    if mode == "megatron":
        return [DEFAULT_ORDER]
    live = [a for a in DEFAULT_ORDER if cfg_degrees.get(a, 1) > 1 and a in DENSE]
    out = []
    for perm in itertools.permutations(live):
        it = iter(perm)
        out.append(tuple(next(it) if a in live else a for a in DEFAULT_ORDER))
    return out


def candidates(req: PlanRequest) -> list[Candidate]:
    """Every (tp, cp, ep, dp, pp, micro-batch, ZeRO stage) split of the GPUs, with the reasons
    the invalid ones cannot run (degrees vs the model, batch divisibility)."""
    model, seq, B = req.model, req.seq, req.batch
    out = []
    for tp in divisors(req.gpus):
        for cp in divisors(req.gpus // tp):
            for pp in divisors(req.gpus // (tp * cp)):
                dp = req.gpus // (tp * cp * pp)
                eps = (
                    [e for e in divisors(cp * dp) if model.experts % e == 0]
                    if model.is_moe
                    else [1]
                )
                for ep in eps:
                    layout = ParallelLayout(req.gpus, tp, cp, ep, dp, pp)
                    bad = [why for _, why in violations(layout, model, seq, req.sequence_parallel)]
                    for b in req.micro_batch_sizes:
                        reasons = list(bad)
                        m = B // (dp * b) if B % (dp * b) == 0 else 0
                        if not m:
                            reasons.append(
                                f"global batch {B} is not divisible by dp x micro-batch = "
                                f"{dp} x {b}"
                            )
                        stages = [z for z in req.zero_stages if z == 0 or dp * cp > 1]
                        if not stages:  # ZeRO asked for, but nothing to shard over
                            stages = [req.zero_stages[0]]
                            reasons.append("ZeRO needs dp x cp > 1 to shard over")
                        for z in stages:
                            cfg = Config(tp, cp, ep, dp, pp, b, m, z)
                            out.append(
                                Candidate(cfg, list(reasons), "invalid" if reasons else "valid")
                            )
    return out


# ---- evaluation -----------------------------------------------------------------------------
@dataclass
class Evaluation:
    """A priced config: placement, memory, time breakdown and the estimates behind it."""

    config: Config
    placement: dict[str, dict]
    memory: dict[str, float]
    times: dict[str, float | None]
    step_s: float
    comm_s: float
    comm_share: float | None
    extrapolated: bool
    estimates: dict[str, ProgramEstimate]
    fits: bool = True
    notes: list[str] = field(default_factory=list)
    rank: int = 0

    @property
    def comm_bound(self) -> bool | None:
        return None if self.comm_share is None else self.comm_share > COMM_BOUND

    def as_dict(self, steps: bool = False) -> dict:
        out = {
            "rank": self.rank,
            **self.config.as_dict(),
            "placement": self.placement,
            "memory_gb": {k: _gb(v) for k, v in self.memory.items()},
            "fits": self.fits,
            "time_s": {**self.times, "step": self.step_s},
            "comm_s": self.comm_s,
            "comm_share": self.comm_share,
            "comm_bound": self.comm_bound,
            "extrapolated": self.extrapolated,
            "notes": self.notes,
        }
        if steps:
            out["programs"] = {
                name: [s.as_dict() for s in est.steps] for name, est in self.estimates.items()
            }
        return out


class Planner:
    """Evaluates configs of one request against one calibration, caching Programs (per degrees,
    micro-batching and ZeRO stage: rank orders share them), their estimates (per placement of
    their axes) and predictions (per message). `exact` simulates every pipeline in full."""

    def __init__(self, req: PlanRequest, cal: Calibration, exact: bool = False) -> None:
        self.req = req
        self.cal = cal
        self.evaluator = Evaluator(cal, req.backend, req.extrapolate)
        self.nodes = req.nodes
        self.compute_s = compute_seconds(req)
        self.exact = exact
        self._programs: dict[tuple, Any] = {}
        self._estimates: dict[tuple, ProgramEstimate] = {}
        self._info: dict[tuple, Any] = {}

    # programs
    def workload(self, cfg: Config) -> dict:
        req = self.req
        return {
            "seq_len": req.seq,
            "micro_batch": cfg.micro_batch,
            "micro_batches": cfg.micro_batches,
            "sequence_parallel": req.sequence_parallel,
            "grad_dtype": req.grad_dtype,
        }

    def pp_options(self, cfg: Config, micro_batches: int) -> dict:
        """The pp pattern's options: forward compute per micro-batch from the compute model
        (backward twice that; none in inference), `micro_batches` of them."""
        fwd_s = 0.0
        if self.compute_s is not None:
            per_mb = self.compute_s / cfg.micro_batches
            fwd_s = per_mb / 3.0 if self.req.mode == "train" else per_mb
        backward = 2.0 if self.req.mode == "train" else 0.0  # inference: forward passes only
        return {
            "compute_ms": fwd_s * 1e3,
            "backward_factor": backward,
            "micro_batches": micro_batches,
        }

    def pp_simulated(self, cfg: Config) -> int:
        """Micro-batches the 1F1B schedule is simulated with: all of them when few or when
        exact, else p + (m mod p) (extended by periodicity, see pipeline())."""
        p, m = cfg.pp, cfg.micro_batches
        if self.exact or p == 1 or m < 4 * p:
            return m
        return p + m % p

    def programs(self, cfg: Config) -> dict[str, Program]:
        """patterns.training_step of the config (cached: rank orders share Programs); the pp
        Program may hold fewer micro-batches than the step (pp_simulated)."""
        m_sim = self.pp_simulated(cfg)
        key = (cfg.tp, cfg.cp, cfg.ep, cfg.dp, cfg.pp, cfg.micro_batch, cfg.micro_batches,
               cfg.zero_stage, m_sim)  # fmt: skip
        hit = self._programs.get(key)
        if hit is not None:
            return hit
        req = self.req
        layout = ParallelLayout(req.gpus, cfg.tp, cfg.cp, cfg.ep, cfg.dp, cfg.pp)
        options = {"pp": self.pp_options(cfg, m_sim)}
        progs = patterns.training_step(
            layout, req.model, self.workload(cfg), cfg.zero_stage, options
        )
        if req.mode == "infer":
            progs = {k: forward_only(v) for k, v in progs.items() if k not in ("dp", "zero")}
        # one object per distinct Program (ZeRO stages share tp/cp/ep/pp ones), so estimates
        # cached by Program identity are reused across stages and rank orders
        progs = {name: self._shared(name, cfg, m_sim, prog) for name, prog in progs.items()}
        self._programs[key] = progs
        return progs

    def _shared(self, name: str, cfg: Config, m_sim: int, prog: Program) -> Program:
        key = ("shared", name, cfg.tp, cfg.cp, cfg.ep, cfg.dp, cfg.pp, cfg.micro_batch,
               cfg.micro_batches, m_sim, cfg.zero_stage if name in ("dp", "zero") else None)  # fmt: skip
        return self._programs.setdefault(key, prog)

    def pp_program(self, cfg: Config, micro_batches: int) -> Program:
        """The pp Program of `cfg` with another number of micro-batches (same per-micro-batch
        compute and message size)."""
        key = ("pp", cfg.tp, cfg.cp, cfg.pp, cfg.micro_batch, cfg.micro_batches, micro_batches)
        hit = self._programs.get(key)
        if hit is None:
            layout = ParallelLayout(self.req.gpus, cfg.tp, cfg.cp, cfg.ep, cfg.dp, cfg.pp)
            opts = {
                k: v
                for k, v in self.workload(cfg).items()
                if k in ("seq_len", "micro_batch", "sequence_parallel")
            }
            opts.update(self.pp_options(cfg, micro_batches))
            prog = patterns.build("pp", layout, self.req.model, opts)
            hit = forward_only(prog) if self.req.mode == "infer" else prog
            self._programs[key] = hit
        return hit

    def pipeline(
        self, cfg: Config, layout: ParallelLayout, sim: ProgramEstimate
    ) -> ProgramEstimate:
        """The 1F1B estimate at the config's m from the simulation at m1 = pp_simulated: the
        makespan of a uniform 1F1B schedule grows periodically in m with period p (a max-plus
        linear system), so T(m) = T(m1) + (m - m1)/p x (T(m1+p) - T(m1)); checked at runtime on
        T(m1+2p), else the full schedule is simulated."""
        p, m = cfg.pp, cfg.micro_batches
        m1 = self.pp_simulated(cfg)
        if m1 == m or sim.error:
            return sim
        more = [
            self.evaluator.program(
                self.pp_program(cfg, m1 + k * p), layout, placement=self.where(layout)
            )
            for k in (1, 2)
        ]
        bad = next((e for e in more if e.error), None)
        if bad is not None:
            return bad
        T = [sim.total_s, more[0].total_s, more[1].total_s]
        C = [sim.comm_s, more[0].comm_s, more[1].comm_s]
        tol = 1e-9 * max(T)
        if abs((T[2] - T[1]) - (T[1] - T[0])) > tol or abs((C[2] - C[1]) - (C[1] - C[0])) > tol:
            return self.evaluator.program(
                self.pp_program(cfg, m), layout, placement=self.where(layout)
            )
        k = (m - m1) // p
        st = sim.steps[0]
        total, comm = T[0] + k * (T[1] - T[0]), C[0] + k * (C[1] - C[0])
        ext = replace(
            st,
            label=st.label.replace(f"m={m1}", f"m={m}"),
            per_op_s=total,
            total_s=total,
            comm_s=comm,
            method=st.method + f" (simulated at m={m1},{m1 + p},{m1 + 2 * p}, extended by "
            f"period p={p})",
        )
        return ProgramEstimate(sim.pattern, [ext])

    def info(self, layout: ParallelLayout, axis: str):
        """GroupInfo of an axis (cached: every order of every config asks for its groups)."""
        key = (layout.tp, layout.cp, layout.ep, layout.dp, layout.pp, layout.order, axis)
        hit = self._info.get(key)
        if hit is None:
            hit = self._info[key] = resolve_axis(layout, axis)
        return hit

    def where(self, layout: ParallelLayout):
        """(group size, link class) of an axis of `layout`, for Evaluator.program."""

        def lookup(axis: str) -> tuple[int, str]:
            info = self.info(layout, axis)
            return info.size, info.link_class

        return lookup

    def placement(self, layout: ParallelLayout, axes: list[str]) -> dict[str, dict]:
        out = {}
        for axis in axes:
            info = self.info(layout, axis)
            out[axis] = {
                "size": info.size,
                "link_class": info.link_class,
                "hosts_spanned": info.hosts_spanned,
                "stride": info.stride,
            }
        return out

    def evaluate(self, cfg: Config, mem: dict[str, float] | None = None) -> Evaluation:
        """Price one (valid) config; the estimates say which step could not be priced, if any."""
        req = self.req
        mem = mem if mem is not None else memory(req, cfg)
        layout = cfg.layout(req.gpus, self.nodes)
        progs = self.programs(cfg)
        estimates = {}
        for name, prog in progs.items():
            where = tuple((a, self.info(layout, a).link_class) for a in dict.fromkeys(prog.axes()))
            key = (id(prog), where)
            est = self._estimates.get(key)
            if est is None:
                est = self.evaluator.program(prog, layout, placement=self.where(layout))
                if name == "pp":
                    est = self.pipeline(cfg, layout, est)
                self._estimates[key] = est
            estimates[name] = est
        axes = [a for a in ("tp", "cp", "ep", "dp", "pp") if getattr(cfg, a) > 1]
        for est in estimates.values():
            axes += [s.axis for s in est.steps if s.axis not in axes]
        place = self.placement(layout, axes)
        p, m = cfg.pp, cfg.micro_batches
        comp = self.compute_s
        t = {name: (est.comm_s if est.error is None else None) for name, est in estimates.items()}
        inlayer = sum(t.get(k) or 0.0 for k in ("tp", "cp", "ep"))
        stretch = (m + p - 1) / m
        pp_est = estimates.get("pp")
        if pp_est is not None and pp_est.error is None:
            makespan = pp_est.total_s
            pp_comm = pp_est.comm_s
        else:
            makespan, pp_comm = (comp or 0.0), 0.0
        grad = (t.get("dp") or 0.0) + (t.get("zero") or 0.0)
        dp_exposed = grad
        if req.overlap_dp and comp is not None:
            dp_exposed = max(0.0, grad - comp * 2.0 / 3.0)
        step = makespan + inlayer * stretch + dp_exposed
        comm = inlayer + pp_comm + dp_exposed
        bubble = makespan - pp_comm - (comp or 0.0) + inlayer * (stretch - 1.0)
        times = {
            "compute": comp,
            "bubble": bubble,
            "tp": t.get("tp", 0.0) or 0.0,
            "cp": t.get("cp", 0.0) or 0.0,
            "ep": t.get("ep", 0.0) or 0.0,
            "pp": pp_comm,
            "dp": grad,
            "dp_exposed": dp_exposed,
        }
        notes = sorted({n for est in estimates.values() for s in est.steps for n in s.notes})
        return Evaluation(
            config=cfg,
            placement=place,
            memory=mem,
            times=times,
            step_s=step,
            comm_s=comm,
            comm_share=(comm / step) if comp is not None and step > 0 else None,
            extrapolated=any(e.extrapolated for e in estimates.values()),
            estimates=estimates,
            fits=mem["total"] <= req.gpu_memory_gb * GB,
            notes=notes,
        )

    def errors(self, ev: Evaluation) -> list[str]:
        return [f"cannot price {n}: {e.error}" for n, e in ev.estimates.items() if e.error]

    def distinct_orders(self, cfg: Config) -> list[Config]:
        """The config in each rank order that gives a distinct placement (link classes)."""
        if self.req.orders == "megatron":
            return [cfg]
        degrees = {"tp": cfg.tp, "cp": cfg.cp, "dp": cfg.dp, "pp": cfg.pp}
        seen, out = set(), []
        for order in _orders(degrees, "all"):
            c = replace(cfg, order=order)
            layout = c.layout(self.req.gpus, self.nodes)
            sig = tuple(
                (a, self.info(layout, a).link_class, self.info(layout, a).hosts_spanned)
                for a in DENSE
                if degrees[a] > 1
            )
            if sig not in seen:
                seen.add(sig)
                out.append(c)
        return out


def forward_only(prog: Program) -> Program:
    """Inference: the forward steps of a training Program; a 1F1B schedule keeps its forward
    messages (even tags, patterns.pp.tag) and compute, so it becomes a forward pipeline."""
    from commbench.traffic.patterns.pp import FWD

    steps = []
    for st in prog.steps:
        if st.op == "p2p_schedule":
            sched = tuple(
                tuple(a for a in acts if a.kind == "compute" or a.tag % 2 == FWD)
                for acts in st.schedule
            )
            steps.append(st.with_(schedule=sched, phase="forward", label=st.label + " forward"))
        elif st.phase == "forward":
            steps.append(st)
    return Program(prog.pattern, tuple(steps), prog.meta)


# ---- the plan -------------------------------------------------------------------------------
@dataclass
class PlanResult:
    """Ranked feasible configs, the rejected ones with reasons, and what was assumed."""

    request: PlanRequest
    calibration: Calibration
    ranked: list[Evaluation]
    rejected: list[Candidate]
    assumptions: list[str]
    counts: dict[str, int]

    def as_dict(self, top: int | None = None, steps: bool = False) -> dict:
        cal = self.calibration
        return {
            "schema": "commbench.plan/1",
            "inputs": self.request.as_dict(),
            "calibration": calibration_summary(cal),
            "assumptions": self.assumptions,
            "counts": self.counts,
            "configs": [e.as_dict(steps) for e in self.ranked[:top]],
            "rejected": [
                {**c.config.as_dict(), "stage": c.stage, "reasons": c.reasons}
                for c in self.rejected
            ],
        }


def calibration_summary(cal: Calibration) -> dict:
    doc = cal.doc
    out: dict[str, Any] = {"path": cal.source, "kind": cal.kind, "backends": cal.backends}
    out["link_classes"] = cal.link_classes
    if cal.kind == "reference":
        out["statement"] = doc["provenance"].get("statement")
        out["sources"] = [s.get("url") or s["title"] for s in doc["provenance"]["sources"]]
    else:
        out["runs"] = [r["run_id"] for r in doc["provenance"].get("runs", [])]
    if "device" in doc:
        out["device"] = doc["device"]
    return out


def assumptions(req: PlanRequest, cal: Calibration) -> list[str]:
    """The modelling choices in force, said once at the top of every plan."""
    out = []
    if cal.kind == "reference":
        out.append(
            f"calibration {cal.source} is a REFERENCE statement from published numbers, not a "
            "measurement of this cluster"
        )
    if req.peak_tflops is None:
        out.append(
            "no compute model (give --peak-tflops): step time and ranking are communication only"
        )
    else:
        f = "6 P_active + 12 L H Q s" if req.mode == "train" else "2 P_active + 4 L H Q s"
        out.append(
            f"compute = tokens x ({f}) FLOPs / (gpus x {req.peak_tflops:g} TFLOP/s x MFU "
            f"{req.mfu:g}) (Kaplan et al. 2020; PaLM, Chowdhery et al. 2022)"
        )
    out.append(
        "1F1B pipeline simulated with the calibration's message times (sends do not block); "
        "TP/CP/EP traffic runs inside each micro-batch, stretched by the bubble (m+p-1)/m"
    )
    if req.mode == "train":
        out.append(
            "gradient traffic (DP/ZeRO) "
            + (
                "overlapped with the backward compute (2/3 of compute)"
                if req.overlap_dp
                else "not overlapped (exposed after the pipeline)"
            )
        )
    else:
        out.append(
            "inference: prefill of the batch, forward traffic only; memory = weights + KV cache "
            "+ one layer's activations"
        )
    out.append(f"communication-bound: communication > {COMM_BOUND:.0%} of the step")
    if req.orders == "megatron":
        out.append("rank order tp-cp-ep-dp-pp (Megatron); --orders all tries every placement")
    if req.extrapolate:
        out.append("predictions may extrapolate beyond the calibration (marked)")
    return out


def plan(req: PlanRequest, cal: Calibration) -> PlanResult:
    """Enumerate, check, price and rank every config; UsageError when none can run (with the
    closest reason: the smallest memory need, or what the calibration lacks)."""
    planner = Planner(req, cal)
    cands = candidates(req)
    valid = [c for c in cands if c.stage == "valid"]
    rejected = [c for c in cands if c.stage != "valid"]
    if not valid:
        reasons = sorted({r for c in cands for r in c.reasons})
        raise UsageError(
            f"no split of {req.gpus} GPUs is valid for {req.model.name} "
            f"(seq {req.seq}, global batch {req.batch}): " + "; ".join(reasons[:6])
        )
    fitting: list[tuple[Candidate, dict]] = []
    smallest: tuple[float, Candidate] | None = None
    for c in valid:
        mem = memory(req, c.config)
        if mem["total"] > req.gpu_memory_gb * GB:
            c.stage = "memory"
            c.reasons.append(
                f"needs {_gb(mem['total']):.1f} GB per GPU > {req.gpu_memory_gb:g} GB ("
                + ", ".join(f"{k} {_gb(v):.1f}" for k, v in mem.items() if k != "total" and v)
                + ")"
            )
            rejected.append(c)
            if smallest is None or mem["total"] < smallest[0]:
                smallest = (mem["total"], c)
        else:
            fitting.append((c, mem))
    if not fitting:
        need, c = smallest
        raise UsageError(
            f"{req.model.name} does not fit on {req.gpus} x {req.gpu_memory_gb:g} GB: the "
            f"smallest per-GPU need is {_gb(need):.1f} GB ({c.config.full_label}); try more "
            "GPUs, ZeRO (--zero-stage 1,2,3), --sequence-parallel or --recompute full"
        )
    ranked: list[Evaluation] = []
    first_error = None
    for c, mem in fitting:
        for oc in planner.distinct_orders(c.config):
            ev = planner.evaluate(oc, mem)
            errs = planner.errors(ev)
            if errs:
                first_error = first_error or errs[0]
                rejected.append(Candidate(oc, errs, "unpriced"))
                continue
            ranked.append(ev)
    if not ranked:
        raise UsageError(
            f"the calibration cannot price any config: {first_error}"
            + ("" if req.extrapolate else " (or pass --extrapolate)")
        )
    ranked.sort(key=lambda e: (e.step_s, e.memory["total"], e.config.full_label))
    for i, e in enumerate(ranked, 1):
        e.rank = i
    counts = {
        "candidates": len(cands),
        "valid": len(valid),
        "fit_memory": len(fitting),
        "ranked": len(ranked),
        "rejected": len(rejected),
        "unpriced": sum(c.stage == "unpriced" for c in rejected),
    }
    return PlanResult(req, cal, ranked, rejected, assumptions(req, cal), counts)


# ---- explain --------------------------------------------------------------------------------
_KEYS = {"tp", "cp", "ep", "dp", "pp", "m", "b", "z", "zero", "order"}


def parse_config(text: str) -> dict[str, Any]:
    """`tp8-pp4-dp1`, `tp8-cp1-dp4-pp1-m8`, or `tp=8,pp=4,zero=1,order=pp-tp-cp-ep-dp`."""
    import re

    out: dict[str, Any] = {}
    items = text.split(",") if "=" in text else text.split("-")
    for item in filter(None, (s.strip() for s in items)):
        if "=" in item:
            key, _, value = item.partition("=")
        else:
            mt = re.fullmatch(r"([a-z]+)(\d+)", item)
            if not mt:
                raise UsageError(
                    f"--explain {text!r}: cannot read {item!r} (use e.g. tp8-pp4-dp1 or tp=8,pp=4)"
                )
            key, value = mt.groups()
        key = key.strip()
        if key not in _KEYS:
            raise UsageError(
                f"--explain {text!r}: unknown key {key!r}; use {', '.join(sorted(_KEYS))}"
            )
        if key == "order":
            order = tuple(value.split("-"))
            if sorted(order) != sorted(DEFAULT_ORDER):
                raise UsageError(
                    f"--explain order {value!r} is not a permutation of tp-cp-ep-dp-pp"
                )
            out["order"] = order
            continue
        try:
            n = int(value)
        except ValueError:
            raise UsageError(f"--explain {text!r}: {key}={value!r} is not an integer") from None
        out[
            {"m": "micro_batches", "b": "micro_batch", "z": "zero_stage", "zero": "zero_stage"}.get(
                key, key
            )
        ] = n
    if not out:
        raise UsageError(f"--explain {text!r}: name at least one degree, e.g. tp8-pp4")
    return out


def explain(req: PlanRequest, cal: Calibration, text: str) -> Evaluation:
    """The best config matching CONFIG, priced even if it does not fit (say so), with every
    Program step's estimate; UsageError if no valid config matches."""
    want = parse_config(text)
    planner = Planner(req, cal, exact=True)
    cands = candidates(req)

    def matches(cfg: Config) -> bool:
        d = cfg.as_dict() | {"order": cfg.order}
        return all(d[k] == v for k, v in want.items() if k != "order")

    hits = [c for c in cands if matches(c.config)]
    if not hits:
        raise UsageError(
            f"--explain {text}: no split of {req.gpus} GPUs has "
            + ", ".join(f"{k}={v}" for k, v in want.items() if k != "order")
        )
    valid = [c for c in hits if c.stage == "valid"]
    if not valid:
        c = hits[0]
        raise UsageError(f"--explain {text}: {c.config.label} cannot run: {'; '.join(c.reasons)}")
    evals = []
    for c in valid:
        cfgs = (
            [replace(c.config, order=want["order"])]
            if "order" in want
            else planner.distinct_orders(c.config)
        )
        for oc in cfgs:
            evals.append(planner.evaluate(oc))
    priced = [e for e in evals if not planner.errors(e)] or evals
    best = min(priced, key=lambda e: (not e.fits, e.step_s))
    return best
