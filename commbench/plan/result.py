"""What the planner answers: priced configs (Evaluation), the ranked plan (PlanResult) and what
it states about itself (the calibration used, the assumptions in force), as the plan file's
records (results.planfile)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from commbench.calibration import Calibration
from commbench.calibration.pricing import ProgramEstimate
from commbench.plan.inference import InferenceTimes
from commbench.plan.request import PlanRequest, gb
from commbench.plan.search import Candidate, Config
from commbench.plan.step_time import StepTime
from commbench.results.planfile import (
    AxisPlacement,
    ExplainFile,
    PlanFile,
    PlannedConfig,
    PlanTimes,
    RejectedConfig,
)

COMM_BOUND = 0.30  # a rule of thumb: communication over ~30% of the step is the bottleneck


@dataclass(kw_only=True)
class Evaluation:
    """A priced config: placement, memory, time breakdown and the estimates behind it."""

    config: Config
    placement: dict[str, dict[str, Any]]  # axis -> size, link_class, hosts_spanned, stride
    memory: dict[str, float]
    time: StepTime
    extrapolated: bool
    estimates: dict[str, ProgramEstimate]
    fits: bool = True
    notes: list[str] = field(default_factory=list)
    rank: int = 0
    inference: InferenceTimes | None = None  # --mode infer: prefill, TPOT, throughput
    # the step with every banded op at its band's low / high end (StepTime of RoleTimes.of's
    # ends); None where no op is banded
    step_band_s: tuple[float, float] | None = None
    chosen: list[str] = field(default_factory=list)  # --explain: what it set or picked

    @property
    def times(self) -> dict[str, float | None]:
        """compute, bubble, tp, cp, ep, pp, dp, dp_exposed (StepTime.parts)."""
        return self.time.parts()

    @property
    def step_s(self) -> float:
        """What configs are ranked by: the step, or in inference the time per output token."""
        return self.inference.tpot_s if self.inference is not None else self.time.step

    @property
    def comm_s(self) -> float:
        return self.time.comm

    @property
    def comm_share(self) -> float | None:
        return self.time.comm_share

    @property
    def comm_bound(self) -> bool | None:
        return None if self.comm_share is None else self.comm_share > COMM_BOUND

    def planned(self, steps: bool = False) -> PlannedConfig:
        """The plan file's record of this config; `steps`: with every Program step's estimate."""
        t, programs = self.time, None
        if steps:
            programs = {
                name: [s.as_dict() for s in est.steps] for name, est in self.estimates.items()
            }
        return PlannedConfig(
            rank=self.rank,
            **self.config.as_dict(),
            placement={a: AxisPlacement(**d) for a, d in self.placement.items()},
            memory_gb={k: gb(v) for k, v in self.memory.items()},
            fits=self.fits,
            time_s=PlanTimes(
                compute=t.compute,
                bubble=t.bubble,
                tp=t.in_layer.get("tp", 0.0),
                cp=t.in_layer.get("cp", 0.0),
                ep=t.in_layer.get("ep", 0.0),
                pp=t.pipeline,
                dp=t.gradient,
                dp_exposed=t.gradient_exposed,
                step=t.step,
            ),
            comm_s=self.comm_s,
            comm_share=self.comm_share,
            comm_bound=self.comm_bound,
            extrapolated=self.extrapolated,
            step_band_s=None if self.step_band_s is None else list(self.step_band_s),
            notes=self.notes,
            programs=programs,
            inference=None if self.inference is None else self.inference.as_dict(),
        )


@dataclass(kw_only=True)
class PlanResult:
    """Ranked feasible configs, the rejected ones with reasons, and what was assumed."""

    request: PlanRequest
    calibration: Calibration
    ranked: list[Evaluation]
    rejected: list[Candidate]
    assumptions: list[str]
    counts: dict[str, int]
    findings: list[str] = field(default_factory=list)  # inference: what the ranking says

    def plan_file(self, top: int | None = None) -> PlanFile:
        """The plan file of the best `top` configs (None: all) and every rejected one."""
        return PlanFile(
            inputs=self.request.as_dict(),
            calibration=calibration_summary(self.calibration),
            assumptions=self.assumptions,
            findings=self.findings,
            counts=self.counts,
            configs=[e.planned() for e in self.ranked[:top]],
            rejected=[
                RejectedConfig(**c.config.as_dict(), stage=c.stage, reasons=c.reasons)
                for c in self.rejected
            ],
        )


def explain_file(req: PlanRequest, cal: Calibration, ev: Evaluation) -> ExplainFile:
    """What `--explain --json` writes: the request, the calibration and one config's steps."""
    return ExplainFile(
        inputs=req.as_dict(),
        calibration=calibration_summary(cal),
        config=ev.planned(steps=True),
        chosen=tuple(ev.chosen),
    )


def calibration_summary(cal: Calibration) -> dict[str, Any]:
    """The plan file's `calibration`: which one priced the plan, and where it comes from."""
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
            "inference: prefill of each replica's prompts (m micro-batches of b) and decode of "
            "the global batch with p micro-batches in flight; ranked by time per output token "
            "(TPOT); decode compute = max(FLOPs, (weights + KV cache) read at "
            f"{req.hbm_gbps:g} GB/s); memory = weights + KV cache ({req.kv_cache_dtype}) + one "
            "layer's activations"
        )
    out.append(f"communication-bound: communication > {COMM_BOUND:.0%} of the step")
    if req.orders == "megatron":
        out.append("rank order tp-cp-ep-dp-pp (Megatron); --orders all tries every placement")
    if req.extrapolate:
        out.append("predictions may extrapolate beyond the calibration (marked)")
    return out
