"""Whether the best config pays for memory with parallelism a cheaper lever would free: the
seed article's "GQA/MQA or a quantized KV cache is often cheaper than adding CP; CP is for
what really does not fit". When the best config uses context parallelism (in inference also:
more GPUs a replica, tp x cp x pp, than another config), each config without CP (with a
smaller replica) that was rejected for memory is sized again with the lever (an fp8 KV cache in inference,
full recompute in training), and those that then fit are priced; if one is faster than the
best, a `# finding:` says which, by how much, and what the lever costs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from commbench.plan.gpu_memory import memory
from commbench.plan.request import GB, PlanRequest, gb
from commbench.plan.result import Evaluation
from commbench.plan.search import Candidate

# a full recompute re-runs each layer's forward in the backward: 4/3 of the step's FLOPs
# (Korthikanti et al. 2022, 3.3; Megatron-LM's --recompute-granularity full)
FULL_RECOMPUTE_COMPUTE = 4.0 / 3.0


def lever(req: PlanRequest) -> tuple[PlanRequest, str] | None:
    """The request with the memory lever pulled, and how to say it; None when it already is."""
    if req.mode == "infer":
        if req.kv_cache_dtype != "bf16":
            return None
        return replace(req, kv_cache_dtype="fp8"), "an fp8 KV cache (--kv-cache-dtype fp8)"
    if req.recompute == "full":
        return None
    return replace(req, recompute="full", recompute_modules=()), "full recompute (--recompute full)"


def cp_for_memory(
    req: PlanRequest,
    best: Evaluation,
    rejected: list[Candidate],
    price: Callable[[PlanRequest, Candidate, dict[str, float]], Evaluation | None],
) -> list[str]:
    """A finding when the best config uses CP (in inference: or a larger replica) only for
    memory the lever frees: a config without CP (with fewer GPUs a replica), rejected for
    memory, fits with the lever and is faster (its time with the
    lever's cost: full recompute's extra forward). `price(req, candidate, memory)` prices a
    candidate under the changed request (None: it cannot be priced)."""
    pulled = lever(req)
    if pulled is None:
        return []
    req2, how = pulled
    b = best.config
    # in inference also a larger replica (tp x cp x pp GPUs) than the lever needs
    wider = req.mode == "infer"
    if b.cp == 1 and not wider:
        return []
    cap = req.gpu_memory_gb * GB
    alts = []
    for c in rejected:
        a = c.config
        if c.stage != "memory" or not (
            (b.cp > 1 and a.cp == 1) or (wider and a.replica < b.replica)
        ):
            continue
        mem = memory(req2, a)
        if mem["total"] <= cap:
            ev = price(req2, c, mem)
            if ev is not None:
                alts.append((ev, memory(req, a)["total"], mem["total"]))
    if not alts:
        return []
    ev, before, after = min(alts, key=lambda a: (a[0].step_s, a[0].config.full_label))
    if ev.step_s >= best.step_s:
        return []
    unit = "TPOT" if req.mode == "infer" else "step"
    scale = 1e3 if req.mode == "infer" else 1.0
    suffix = "ms" if req.mode == "infer" else "s"
    a = ev.config
    what = (
        f"CP {b.cp}"
        if b.cp > 1 and a.cp == 1
        else f"{b.replica} GPUs a replica (tp x cp x pp; {a.replica} would do)"
    )
    why = (
        "a quantized KV cache is often cheaper than "
        + ("CP" if what.startswith("CP") else "a wider replica")
        if req.mode == "infer"
        else "its extra forward (4/3 of the compute) included, recompute is cheaper than CP"
    )
    return [
        f"the best {b.label} uses {what} only for memory: "
        f"{ev.config.label} needs {gb(before):.1f} GB > {req.gpu_memory_gb:g} GB, but with "
        f"{how} {gb(after):.1f} GB, and runs a {unit} of {scale * ev.step_s:.4g} {suffix} "
        f"against {scale * best.step_s:.4g} {suffix} ({best.step_s / ev.step_s:.2f}x faster; "
        f"{why}, which is for what really does not fit)"
    ]
