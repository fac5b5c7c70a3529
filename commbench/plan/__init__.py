"""Rank (tp, cp, ep, dp, pp, micro-batch) configs for a model on a cluster from a calibration.

Pure: reads model shapes, the pattern Programs, the layout code and a calibration; never a
transport or torch. A PlanRequest (request.py) says what to plan; for every split of the GPUs
(search.py) plan() (planner.py)

1. places the layout as the suites do (ParallelLayout in Megatron order tp-cp-ep-dp-pp, or
   every distinct order with `orders="all"`; nodes of `gpus_per_node` consecutive ranks, so a
   group inside a node is `intra` and one across nodes `inter`);
2. checks the degrees against the model (patterns.violations: heads, KV heads, MLP width,
   layers, experts, sequence) and the global batch against dp x micro-batch;
3. checks per-GPU memory (gpu_memory.memory: bf16 weights, gradients, Adam 12 bytes/param sharded
   by ZeRO stage as ZeRO does; activations after Korthikanti et al. 2022 for the micro-batches
   in flight under 1F1B, min(pp, m) on the first stage; inference: weights, KV cache
   2 L n_kv d_head bytes/token and one layer's activations);
4. prices the Programs the suites would run (patterns.training_step) through the calibration
   with calibration.pricing.Evaluator (one evaluation, shared with `validate`);
5. combines them by pattern role into a step time (step_time.py: the 1F1B makespan, the
   in-layer traffic stretched by the bubble, the exposed gradient traffic) and ranks by it.

Compute (when a peak is known): FLOPs per token 6 P_active + 12 L H Q s for training (the 6PT
rule of Kaplan et al. 2020 plus the attention term of Chowdhery et al. 2022, PaLM, App. B; it
dominates at 32K-128K context) and 2 P_active + 4 L H Q s for inference (forward only);
compute_s = tokens x FLOPs/token / (gpus x peak x MFU).

The answer (result.py) is a PlanResult, written as a plan file (results.planfile.PlanFile).
"""

from commbench.plan.explain import explain
from commbench.plan.gpu_memory import memory
from commbench.plan.planner import Planner, plan
from commbench.plan.request import (
    PlanRequest,
    flops_per_token,
    load_calibration,
    request_from_flags,
)
from commbench.plan.result import Evaluation, PlanResult, explain_file
from commbench.plan.search import Config, parse_config
from commbench.plan.step_time import RoleTimes, StepTime, step_time

__all__ = [
    "Config",
    "Evaluation",
    "PlanRequest",
    "PlanResult",
    "Planner",
    "RoleTimes",
    "StepTime",
    "explain",
    "explain_file",
    "flops_per_token",
    "load_calibration",
    "memory",
    "parse_config",
    "plan",
    "request_from_flags",
    "step_time",
]
