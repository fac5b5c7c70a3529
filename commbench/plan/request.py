"""What to plan (PlanRequest, built from the flags or directly), and the compute time of a step,
which needs no calibration."""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from commbench.dtypes import canonical_dtype
from commbench.errors import UsageError
from commbench.traffic.layout import ParallelLayout, host_map
from commbench.traffic.memory import check_activation_options
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import FRAMEWORKS, check_choice
from commbench.traffic.patterns.cp import FRAMEWORK_COMM_TYPES, node_hierarchy
from commbench.traffic.patterns.pp import check_schedule
from commbench.traffic.presets import parse_model_arg

if TYPE_CHECKING:
    from commbench.calibration import Calibration

GB = 1e9
DEFAULT_HBM_GBPS = 3350.0  # H100 SXM HBM3, 3.35 TB/s (NVIDIA H100 datasheet): decode's roofline
DEFAULT_MFU = 0.40  # Llama 3 (Dubey et al. 2024, Table 4): 38-43% BF16 MFU on 8K-16K H100s
DEFAULT_TOKENS = {"train": 1 << 22, "infer": 1 << 18}  # 4M tokens: Llama 2's global batch
MODES = ("train", "infer")
ORDERS = ("megatron", "all")
ZERO_STAGES = (0, 1, 2, 3)
AUTO_MICRO_BATCHES = (1, 2, 4, 8)
MAX_GPUS = 65536  # the largest job one plan ranks configurations for
# bytes per element of the inference KV cache: bf16, or quantized to FP8 (E4M3, vLLM's and
# TensorRT-LLM's fp8 KV cache) or INT8, one byte each (per-block scales not counted)
KV_CACHE_DTYPES = {"bf16": 2, "fp8": 1, "int8": 1}


# ---- the request ------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """What to plan: the model, the cluster, the workload and the modelling options; checked
    on construction (UsageError naming the flag)."""

    model: ModelShape
    gpus: int
    gpus_per_node: int
    gpu_memory_gb: float = 80.0
    seq_len: int | None = None  # None: the model's
    global_batch: int | None = None  # sequences per step; None: DEFAULT_TOKENS / seq
    micro_batch_sizes: tuple[int, ...] = (1,)
    zero_stages: tuple[int, ...] = (0,)
    virtual_stages: tuple[int, ...] = (1,)  # interleaved 1F1B depths to try (1: plain 1F1B)
    sequence_parallel: bool = False
    mode: str = "train"
    peak_tflops: float | None = None  # None: no compute model (communication only)
    mfu: float = DEFAULT_MFU
    hbm_gbps: float = DEFAULT_HBM_GBPS  # memory bandwidth per GPU, GB/s (inference decode)
    recompute: str = "selective"
    recompute_modules: tuple[str, ...] = ()  # Megatron's --recompute-modules (): core_attn
    fp8: str | None = None  # Megatron's --fp8-format: FP8 GEMM inputs cached (traffic.memory)
    kv_cache_dtype: str = "bf16"  # --mode infer: KV_CACHE_DTYPES
    grad_dtype: str = "float32"
    overlap_dp: bool = False
    orders: str = "megatron"
    extrapolate: bool = False
    backend: str | None = None
    framework: str = "megatron"  # whose traffic the configs are priced with (docs/frameworks.md)
    pp_schedule: str | None = None  # torchtitan: torch's pipelining schedule class (pattern pp)
    # CP's form (pattern cp; None: the framework's, p2p for Megatron); a2a+p2p keeps the a2a
    # inside a node (cp.node_hierarchy)
    cp_comm_type: str | None = None

    def __post_init__(self) -> None:
        check_choice("--framework", self.framework, FRAMEWORKS)
        if self.cp_comm_type is not None:
            forms = FRAMEWORK_COMM_TYPES[self.framework]
            if self.cp_comm_type not in forms:
                raise UsageError(
                    f"--cp-comm-type {self.cp_comm_type!r}: {self.framework} implements "
                    f"{', '.join(forms)}"
                )
            if self.mode != "train":
                raise UsageError("--cp-comm-type applies to training (--mode train)")
        if self.pp_schedule is not None:
            for v in self.virtual_stages:
                check_schedule(self.pp_schedule, self.framework, v)
        if self.gpus < 1 or self.gpus_per_node < 1:
            raise UsageError("--gpus and --gpus-per-node must be positive")
        if self.gpus > MAX_GPUS:
            raise UsageError(
                f"--gpus {self.gpus}: at most {MAX_GPUS} (the bound of one plan: the candidate "
                "search grows with the GPU count's divisors)"
            )
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
        if not self.hbm_gbps > 0:
            raise UsageError("--hbm-gbps must be positive")
        if not 0 < self.mfu <= 1:
            raise UsageError(f"--mfu {self.mfu} must be in (0, 1]")
        if self.peak_tflops is not None and not self.peak_tflops > 0:
            raise UsageError("--peak-tflops must be positive")
        if self.seq_len is not None and self.seq_len < 1:
            raise UsageError("--seq-len must be positive")
        if not self.micro_batch_sizes or any(b < 1 for b in self.micro_batch_sizes):
            raise UsageError("--micro-batch sizes must be positive")
        if not self.virtual_stages or any(v < 1 for v in self.virtual_stages):
            raise UsageError("--virtual-stages must be positive")
        if any(z not in ZERO_STAGES for z in self.zero_stages) or not self.zero_stages:
            raise UsageError("--zero-stage: choose from 0, 1, 2, 3")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise UsageError(
                f"--kv-cache-dtype {self.kv_cache_dtype!r}: choose from {', '.join(KV_CACHE_DTYPES)}"
            )
        if self.kv_cache_dtype != "bf16" and self.mode != "infer":
            raise UsageError(
                "--kv-cache-dtype applies to --mode infer (training keeps no KV cache)"
            )
        if self.mode == "train":
            check_activation_options(self.model, self.recompute, self.recompute_modules, self.fp8)
        if self.mode == "infer":
            if self.recompute_modules or self.fp8:
                raise UsageError(
                    "--recompute-modules and --fp8-format apply to training (activations kept "
                    "for backward)"
                )
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

    def cp_options(self, layout: ParallelLayout) -> dict[str, Any]:
        """Pattern cp's options beyond the workload's for a config: a2a+p2p's sizes, the a2a
        inside a node (cp.node_hierarchy); the planner prices and --verify measures them."""
        if self.cp_comm_type != "a2a+p2p":
            return {}
        sizes = node_hierarchy(layout, self.model, self.gpus_per_node)
        return {"hierarchical_context_parallel_sizes": tuple(sizes)}

    @property
    def num_nodes(self) -> int:
        return max(1, math.ceil(self.gpus / self.gpus_per_node))

    def as_dict(self) -> dict[str, Any]:
        """The plan file's `inputs` (planfile.PlanFile)."""
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
            "virtual_stages": list(self.virtual_stages),
            "pp_schedule": self.pp_schedule,
            "cp_comm_type": self.cp_comm_type,
            "sequence_parallel": self.sequence_parallel,
            "mode": self.mode,
            "peak_tflops": self.peak_tflops,
            "mfu": self.mfu,
            "hbm_gbps": self.hbm_gbps,
            "recompute": self.recompute,
            "recompute_modules": list(self.recompute_modules),
            "fp8": self.fp8,
            "kv_cache_dtype": self.kv_cache_dtype,
            "grad_dtype": self.grad_dtype,
            "overlap_dp": self.overlap_dp,
            "orders": self.orders,
            "extrapolate": self.extrapolate,
            "backend": self.backend,
        }


# ---- from the command line --------------------------------------------------------------------
def load_calibration(path: str | None) -> Calibration:
    """The calibration the user named, or the shipped reference."""
    from commbench import calibration
    from commbench.calibration import reference

    if path is None:
        with resources.as_file(reference.shipped_path()) as p:
            return calibration.load(p, kind="reference")
    return calibration.load(path)


def int_list(text: str, what: str, allowed: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """`1,2,4` as distinct integers in order; UsageError naming the flag `what`."""
    try:
        vals = tuple(dict.fromkeys(int(v) for v in text.split(",") if v.strip()))
    except ValueError:
        raise UsageError(f"{what} {text!r}: give integers separated by commas") from None
    if not vals:
        raise UsageError(f"{what} is empty")
    if allowed is not None and any(v not in allowed for v in vals):
        raise UsageError(f"{what} {text!r}: choose from {', '.join(map(str, allowed))}")
    return vals


def name_list(text: str | None, what: str) -> tuple[str, ...]:
    """`core_attn,moe_act` as distinct names in order (None: none given); UsageError naming the
    flag `what` when it names nothing."""
    if text is None:
        return ()
    names = tuple(dict.fromkeys(v.strip() for v in text.split(",") if v.strip()))
    if not names:
        raise UsageError(f"{what} is empty")
    return names


def request_from_flags(
    cal: Calibration,
    *,
    model: str,
    gpus: int,
    gpus_per_node: int | None,
    gpu_memory_gb: float | None,
    seq_len: int | None,
    global_batch: int | None,
    micro_batch: str,
    zero_stage: str | None,
    sequence_parallel: bool,
    mode: str,
    peak_tflops: float | None,
    mfu: float | None,
    recompute: str,
    recompute_modules: str | None = None,
    fp8: str | None = None,
    kv_cache_dtype: str = "bf16",
    hbm_gbps: float | None = None,
    grad_dtype: str,
    overlap_dp: bool,
    orders: str,
    extrapolate: bool,
    backend: str | None,
    framework: str = "megatron",
    virtual_stages: str = "1",
    pp_schedule: str | None = None,
    cp_comm_type: str | None = None,
) -> PlanRequest:
    """A PlanRequest from `commbench plan`'s flags as given (None: not given), the calibration's
    device filling the defaults: gpus_per_node, memory_gb, peak_bf16_tflops."""
    device = cal.doc.get("device") or {}
    if backend is None and len(cal.backends) > 1:
        raise UsageError(
            f"{cal.source} has several backends ({', '.join(cal.backends)}): choose one with "
            "--backend"
        )
    mb = AUTO_MICRO_BATCHES if micro_batch == "auto" else int_list(micro_batch, "--micro-batch")
    if any(b < 1 for b in mb):
        raise UsageError("--micro-batch sizes must be positive")
    zero_text = zero_stage or ("all" if mode == "train" else "0")
    if mode == "infer" and zero_text == "all":
        raise UsageError("--zero-stage applies to training; --mode infer has no optimizer")
    zero = ZERO_STAGES if zero_text == "all" else int_list(zero_text, "--zero-stage", ZERO_STAGES)
    if mfu is not None and peak_tflops is None and "peak_bf16_tflops" not in device:
        raise UsageError("--mfu needs --peak-tflops (this calibration states no device peak)")
    return PlanRequest(
        model=parse_model_arg(model),
        gpus=gpus,
        gpus_per_node=gpus_per_node or int(device.get("gpus_per_node", 8)),
        gpu_memory_gb=gpu_memory_gb or float(device.get("memory_gb", 80.0)),
        seq_len=seq_len,
        global_batch=global_batch,
        micro_batch_sizes=mb,
        zero_stages=zero,
        sequence_parallel=sequence_parallel,
        mode=mode,
        peak_tflops=peak_tflops or device.get("peak_bf16_tflops"),
        mfu=mfu or DEFAULT_MFU,
        hbm_gbps=hbm_gbps or float(device.get("hbm_gbps", DEFAULT_HBM_GBPS)),
        recompute=recompute,
        recompute_modules=name_list(recompute_modules, "--recompute-modules"),
        fp8=fp8,
        virtual_stages=int_list(virtual_stages, "--virtual-stages"),
        kv_cache_dtype=kv_cache_dtype,
        grad_dtype=canonical_dtype(grad_dtype),
        overlap_dp=overlap_dp,
        orders=orders,
        extrapolate=extrapolate,
        backend=backend,
        framework=framework,
        pp_schedule=pp_schedule,
        cp_comm_type=cp_comm_type,
    )


# ---- compute --------------------------------------------------------------------------------
def flops_per_token(model: ModelShape, seq: int, mode: str = "train") -> float:
    """Model FLOPs per token: 6 P_active + 12 L H Q s (training; PaLM, Chowdhery et al. 2022,
    App. B: the 6N rule plus attention scores), a third of it for a forward pass (inference)."""
    dense = 6.0 * model.param_counts().active
    attention = 12.0 * model.layers * model.q_width * seq  # q_width = H Q
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


def gb(nbytes: float) -> float:
    return nbytes / GB
