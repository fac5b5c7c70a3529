"""`plan --explain CONFIG`: one config priced step by step, a partial CONFIG completed as the
search would (unnamed axes 1, dp the rest, micro-batch, ZeRO and order its best)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from commbench.calibration import Calibration
from commbench.errors import UsageError
from commbench.plan.planner import Planner
from commbench.plan.request import PlanRequest
from commbench.plan.result import Evaluation
from commbench.plan.search import Config, candidates, explain_degrees, parse_config


def explain(req: PlanRequest, cal: Calibration, text: str) -> Evaluation:
    """The config CONFIG names, its unnamed axes 1 and dp the rest of the GPUs (explain_degrees,
    which refuses degrees that do not divide the GPUs before any search); micro-batch size,
    ZeRO stage and rank order unless named are the best the search would pick for it (those
    that fit first, then the fastest), and Evaluation.chosen says so. Priced even if it does
    not fit (say so), with every Program step's estimate."""
    want = parse_config(text)
    deg = explain_degrees(req, want, text)
    # the named interleaving depth, else plain 1F1B, is searched whatever --virtual-stages lists
    # (with only 2 listed, an unnamed depth found no split)
    req = replace(req, virtual_stages=(want.get("virtual_stages", 1),))
    planner = Planner(req, cal)

    # an unnamed interleaving depth is plain 1F1B
    named = {"virtual_stages": 1, **deg, **{k: v for k, v in want.items() if k != "order"}}

    def matches(cfg: Config) -> bool:
        d = cfg.as_dict()
        return all(d[k] == v for k, v in named.items())

    hits = [c for c in candidates(req) if matches(c.config)]
    if not hits:
        raise UsageError(
            f"--explain {text}: no split of {req.gpus} GPUs has "
            + ", ".join(f"{k}={v}" for k, v in {**deg, **want}.items() if k != "order")
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
    best = min(priced, key=lambda e: (not e.fits, e.step_s, e.config.full_label))
    best.chosen = chosen(req, want, best, len(priced))
    return best


def chosen(req: PlanRequest, want: dict[str, Any], ev: Evaluation, tried: int) -> list[str]:
    """What --explain set or picked that CONFIG did not name."""
    c, out = ev.config, []
    axes = ("tp", "cp", "ep", "pp") if req.model.is_moe else ("tp", "cp", "pp")
    unnamed = [a for a in axes if a not in want and getattr(c, a) == 1]
    if unnamed:
        out.append(f"{', '.join(unnamed)} = 1 (not named)")
    if "dp" not in want:
        out.append(f"dp = {c.dp} (the rest of the {req.gpus} GPUs)")
    picks = []
    if "micro_batch" not in want and "micro_batches" not in want:
        picks.append(f"micro-batch {c.micro_batch} ({c.micro_batches} per step)")
    if "zero_stage" not in want:
        picks.append(f"ZeRO {c.zero_stage}")
    if "order" not in want and req.orders == "all":
        picks.append(f"order {'-'.join(c.order)}")
    if picks and tried == 1:
        out.append(f"{', '.join(picks)}: the only choice the request allows")
    elif picks:
        out.append(
            f"{', '.join(picks)}: the best of {tried} priced (micro-batch "
            f"{','.join(map(str, req.micro_batch_sizes))}, ZeRO "
            f"{','.join(map(str, req.zero_stages))})"
        )
    return out
