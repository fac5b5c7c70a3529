"""The search space: every (tp, cp, ep, dp, pp, micro-batch, ZeRO stage) split of the GPUs (and
interleaved 1F1B's virtual stages), its rank orders, and the reasons a split cannot run; plus
reading a config named on the command line (`--explain tp8-pp4`)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from commbench.errors import UsageError
from commbench.plan.request import PlanRequest
from commbench.traffic.layout import DEFAULT_ORDER, Axis, ParallelLayout, parse_order
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import pp_interleaved
from commbench.traffic.patterns.base import violations
from commbench.traffic.patterns.cp import a2a_violation
from commbench.traffic.pipeline_split import virtual_error

DENSE = ("tp", "cp", "dp", "pp")  # the axes whose order --orders all permutes


@dataclass(frozen=True, kw_only=True)
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
    order: tuple[Axis, ...] = DEFAULT_ORDER
    virtual_stages: int = 1  # virtual stages a pipeline stage holds (> 1: interleaved 1F1B)

    @property
    def label(self) -> str:
        """`tp8-cp1-dp1-pp4` (+ `-ep4` style for MoE, as ParallelLayout.label; `-vp2` for
        interleaved 1F1B)."""
        parts = [f"tp{self.tp}", f"cp{self.cp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        vp = [f"vp{self.virtual_stages}"] if self.virtual_stages > 1 else []
        return "-".join(parts + [f"dp{self.dp}", f"pp{self.pp}"] + vp)

    @property
    def replica(self) -> int:
        """GPUs one model replica spans: tp x cp x pp (dp replicas of it make the job)."""
        return self.tp * self.cp * self.pp

    @property
    def full_label(self) -> str:
        extra = f"-b{self.micro_batch}-m{self.micro_batches}-z{self.zero_stage}"
        order = "" if self.order == DEFAULT_ORDER else f"@{'-'.join(self.order)}"
        return self.label + extra + order

    def layout(self, gpus: int, nodes: tuple[int, ...]) -> ParallelLayout:
        return ParallelLayout(
            gpus,
            tp=self.tp,
            cp=self.cp,
            ep=self.ep,
            dp=self.dp,
            pp=self.pp,
            order=self.order,
            nodes=nodes,
        )

    def as_dict(self) -> dict[str, Any]:
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
            "virtual_stages": self.virtual_stages,
            "order": "-".join(self.order),
        }


@dataclass
class Candidate:
    """A config and, when it cannot run, why."""

    config: Config
    reasons: list[str] = field(default_factory=list)
    stage: str = "valid"  # valid | invalid | memory | unpriced


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def rank_orders(degrees: dict[str, int]) -> list[tuple[Axis, ...]]:
    """Every distinct order of the dense axes of degree > 1 (each permutation fills the slots
    those axes hold in Megatron's order, so the identity is Megatron's order itself and the
    trivial axes and ep stay where they are)."""
    live = [a for a in DEFAULT_ORDER if degrees.get(a, 1) > 1 and a in DENSE]
    out = []
    for perm in itertools.permutations(live):
        it = iter(perm)
        out.append(tuple(next(it) if a in live else a for a in DEFAULT_ORDER))
    return out


def virtual_stages(model: ModelShape, pp: int, wanted: tuple[int, ...]) -> dict[int, str]:
    """The interleaving depths of `wanted` (--virtual-stages) for a pp-stage pipeline, each
    with why it cannot run ("" if it can): below pp_interleaved.MIN_STAGES only plain 1F1B
    (Megatron's bound without p2p overlap); a depth must split every stage's layers evenly."""
    if pp < pp_interleaved.MIN_STAGES:
        return {1: ""}
    return {
        v: "" if v == 1 else virtual_error(model.layers, pp, model.split, v) or "" for v in wanted
    }


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
                    layout = ParallelLayout(req.gpus, tp=tp, cp=cp, ep=ep, dp=dp, pp=pp)
                    split = model.for_pipeline(pp)  # Megatron's uneven split if pp needs one
                    bad = [why for _, why in violations(layout, split, seq, req.sequence_parallel)]
                    if why := a2a_violation(layout, split, req.cp_comm_type or ""):
                        bad.append(why)
                    vps = virtual_stages(split, pp, req.virtual_stages) if not bad else {1: ""}
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
                        for z, (vp, why) in itertools.product(stages, vps.items()):
                            # the layers' split, then Megatron's micro-batch condition
                            schedule = pp_interleaved.error(pp, m, vp) if m else None
                            more = [w for w in (why, schedule) if w]
                            cfg = Config(
                                tp=tp,
                                cp=cp,
                                ep=ep,
                                dp=dp,
                                pp=pp,
                                micro_batch=b,
                                micro_batches=m,
                                zero_stage=z,
                                virtual_stages=vp,
                            )
                            why_not = reasons + more
                            out.append(Candidate(cfg, why_not, "invalid" if why_not else "valid"))
    return out


# ---- a config named on the command line ---------------------------------------------------------
_KEYS = {"tp", "cp", "ep", "dp", "pp", "vp", "m", "b", "z", "zero", "order"}
_FIELDS = {"m": "micro_batches", "b": "micro_batch", "z": "zero_stage", "zero": "zero_stage",
           "vp": "virtual_stages"}  # fmt: skip


def parse_config(text: str) -> dict[str, Any]:
    """`tp8-pp4-dp1`, `tp8-cp1-dp4-pp1-m8`, or `tp=8,pp=4,zero=1,order=pp-tp-cp-ep-dp` as
    Config fields (`order` a tuple)."""
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
            out["order"] = parse_order(value, "--explain order")
            continue
        try:
            n = int(value)
        except ValueError:
            raise UsageError(f"--explain {text!r}: {key}={value!r} is not an integer") from None
        out[_FIELDS.get(key, key)] = n
    if not out:
        raise UsageError(f"--explain {text!r}: name at least one degree, e.g. tp8-pp4")
    return out


NAMED_AXES = ("tp", "cp", "ep", "pp")  # an --explain config's axes: 1 unless named


def explain_degrees(req: PlanRequest, want: dict[str, Any], text: str) -> dict[str, int]:
    """The degrees an --explain config names, the axes it does not name 1 and dp the rest of
    the GPUs; UsageError naming the value when they do not divide the GPUs (before any
    search)."""
    deg = {a: want.get(a, 1) for a in NAMED_AXES}
    for a, v in {**deg, **({"dp": want["dp"]} if "dp" in want else {})}.items():
        if v < 1:
            raise UsageError(f"--explain {text}: {a}={v} must be a positive integer")
    model = deg["tp"] * deg["cp"] * deg["pp"]
    shown = "*".join(f"{a}{deg[a]}" for a in ("tp", "cp", "pp") if a in want) or "1"
    if req.gpus % model:
        raise UsageError(f"--explain {text}: {shown} = {model} does not divide the {req.gpus} GPUs")
    dp = req.gpus // model
    if "dp" in want and want["dp"] != dp:
        raise UsageError(
            f"--explain {text}: dp={want['dp']} leaves {want['dp'] * model} of the {req.gpus} "
            f"GPUs used ({shown} = {model}: dp must be {dp}, or leave it out)"
        )
    if (deg["cp"] * dp) % deg["ep"]:
        raise UsageError(
            f"--explain {text}: ep={deg['ep']} does not divide cp x dp = {deg['cp'] * dp}"
        )
    return {**deg, "dp": dp}
