"""Pricing and ranking: the Planner prices a config's Programs through the calibration
(calibration.pricing.Evaluator) on its placement, and plan() / explain() run the search."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from commbench.calibration import Calibration
from commbench.calibration.pricing import Evaluator, ProgramEstimate
from commbench.errors import UsageError
from commbench.plan import inference
from commbench.plan.gpu_memory import memory
from commbench.plan.levers import FULL_RECOMPUTE_COMPUTE, cp_for_memory
from commbench.plan.periodic import extend
from commbench.plan.placement import AxisPlacement, axis_placement, stage_links
from commbench.plan.progress import Progress
from commbench.plan.request import GB, PlanRequest, compute_seconds, gb
from commbench.plan.result import Evaluation, PlanResult, assumptions
from commbench.plan.search import (
    DENSE,
    Candidate,
    Config,
    candidates,
    rank_orders,
)
from commbench.plan.step_time import RoleTimes, StepTime, step_time
from commbench.traffic import patterns
from commbench.traffic.layout import DEFAULT_ORDER, ParallelLayout
from commbench.traffic.patterns import Role
from commbench.traffic.patterns.pp import GPIPE
from commbench.traffic.program import Program

# the patterns whose Program is the 1F1B schedule: they get the compute model's options
PIPELINE = tuple(s.name for s in patterns.PATTERNS.values() if s.role is Role.PIPELINE)
PP_BASE = 8  # micro-batches a long 1F1B schedule is simulated with before it is extended


class Planner:
    """Evaluates configs of one request against one calibration, caching Programs (per degrees,
    micro-batching and ZeRO stage: rank orders share them), their estimates (per placement of
    their axes) and predictions (per message). `exact` simulates every pipeline in full."""

    def __init__(self, req: PlanRequest, cal: Calibration, exact: bool = False) -> None:
        self.req = req
        self.cal = cal
        self.evaluator = Evaluator(cal, req.backend, req.extrapolate)
        self.compute_s = compute_seconds(req)
        self.exact = exact
        self._programs: dict[tuple, Any] = {}
        self._estimates: dict[tuple, ProgramEstimate] = {}
        self._info: dict[tuple, AxisPlacement] = {}

    # programs
    def workload(self, cfg: Config) -> dict[str, Any]:
        req = self.req
        return {
            "seq_len": req.seq,
            "micro_batch": cfg.micro_batch,
            "micro_batches": cfg.micro_batches,
            "sequence_parallel": req.sequence_parallel,
            "grad_dtype": req.grad_dtype,
            "framework": req.framework,
            "cp_comm_type": req.cp_comm_type,
        }

    def pp_options(self, cfg: Config, micro_batches: int) -> dict[str, Any]:
        """The pipeline pattern's options: forward compute per micro-batch from the compute
        model (backward twice that), `micro_batches` of them."""
        fwd_s = 0.0 if self.compute_s is None else self.compute_s / cfg.micro_batches / 3.0
        gpipe = {"pp_schedule": GPIPE} if self.req.pp_schedule == GPIPE else {}
        return {"compute_ms": fwd_s * 1e3, "backward_factor": 2.0, "micro_batches": micro_batches,
                "virtual_stages": cfg.virtual_stages, **gpipe}  # fmt: skip

    def pp_simulated(self, cfg: Config) -> int:
        """Micro-batches the 1F1B schedule is simulated with: all of them when few or when
        exact, else min(p, PP_BASE) (extended to m by periodic.extend); p for an interleaved
        schedule (virtual stages), whose micro-batches Megatron takes in multiples of p."""
        p, m = cfg.pp, cfg.micro_batches
        base = p if cfg.virtual_stages > 1 else min(p, PP_BASE)
        if self.exact or p == 1 or m < 4 * base or self.req.pp_schedule == GPIPE:
            return m  # GPipe: no 1F1B steady state to extend
        return base

    def programs(self, cfg: Config) -> dict[str, Program]:
        """patterns.training_step of the config, or in inference its prefill and decode
        (cached: rank orders share Programs); the training pipeline Program may hold fewer
        micro-batches than the step (pp_simulated)."""
        m_sim = self.pp_simulated(cfg)
        key = (cfg.tp, cfg.cp, cfg.ep, cfg.dp, cfg.pp, cfg.micro_batch, cfg.micro_batches,
               cfg.zero_stage, m_sim, cfg.virtual_stages)  # fmt: skip
        hit = self._programs.get(key)
        if hit is not None:
            return hit
        req = self.req
        layout = ParallelLayout(req.gpus, tp=cfg.tp, cp=cfg.cp, ep=cfg.ep, dp=cfg.dp, pp=cfg.pp)
        if req.mode == "infer":
            progs = inference.programs(req, cfg, layout)
        else:
            # the pipeline Programs come from pp_program, shared by content; training_step
            # builds them at the fewest micro-batches the schedule takes (one; p when
            # interleaved) only to be replaced
            fewest = cfg.pp if cfg.virtual_stages > 1 else 1
            options = {name: self.pp_options(cfg, fewest) for name in PIPELINE}
            options["cp"] = req.cp_options(layout)
            progs = patterns.training_step(
                layout, req.model.for_pipeline(cfg.pp), self.workload(cfg), cfg.zero_stage, options
            )
            for name in PIPELINE:
                if name in progs:
                    progs[name] = self.pp_program(name, cfg, m_sim)
        # one object per distinct Program (ZeRO stages share the others), so estimates cached
        # by Program identity are reused across stages and rank orders
        progs = {name: self._shared(name, cfg, m_sim, prog) for name, prog in progs.items()}
        self._programs[key] = progs
        return progs

    def _shared(self, name: str, cfg: Config, m_sim: int, prog: Program) -> Program:
        role = patterns.get(name).role
        stage = cfg.zero_stage if role is Role.GRADIENT else None
        vp = cfg.virtual_stages if role is Role.PIPELINE else None  # the rest is shared
        key = ("shared", name, cfg.tp, cfg.cp, cfg.ep, cfg.dp, cfg.pp, cfg.micro_batch,
               cfg.micro_batches, m_sim, stage, vp)  # fmt: skip
        return self._programs.setdefault(key, prog)

    def pp_program(self, name: str, cfg: Config, micro_batches: int) -> Program:
        """The pipeline Program `name` of `cfg` with another number of micro-batches (same
        per-micro-batch compute and message size), one object per content: configs of the
        same depth, micro-batches and message size share it, its simulations and estimates
        (at 16K GPUs 79 configs had 35 distinct pipelines)."""
        same = replace(
            cfg, tp=1, cp=1, ep=1, dp=1, micro_batch=1, zero_stage=0, order=DEFAULT_ORDER
        )
        key = ("pipeline", name, micro_batches, self._message_key(cfg), same)
        hit = self._programs.get(key)
        if hit is None:
            layout = ParallelLayout(
                self.req.gpus, tp=cfg.tp, cp=cfg.cp, ep=cfg.ep, dp=cfg.dp, pp=cfg.pp
            )
            opts = {
                k: v
                for k, v in self.workload(cfg).items()
                if k in ("seq_len", "micro_batch", "sequence_parallel")
            }
            opts.update(self.pp_options(cfg, micro_batches), framework=self.req.framework)
            model = self.req.model.for_pipeline(cfg.pp)
            hit = self._programs[key] = patterns.build(name, layout, model, opts)
        return hit

    def _message_key(self, cfg: Config) -> tuple:
        """What a pipeline message's size depends on (pp.build): b s / cp tokens, / tp with
        sequence parallel, when that divides exactly (tp4-cp16 and tp8-cp8 share it), else
        the degrees themselves."""
        tp = cfg.tp if self.req.sequence_parallel else 1
        tokens = cfg.micro_batch * self.req.seq
        if tokens % (cfg.cp * tp) == 0:
            return ("tokens", tokens // (cfg.cp * tp))
        return ("degrees", cfg.micro_batch, cfg.cp, tp)

    # placement
    def info(self, layout: ParallelLayout, axis: str) -> AxisPlacement:
        """Placement of an axis's groups, from the strides (placement.axis_placement: no
        group listed, nothing kept per GPU), cached per degrees, order and axis."""
        key = (layout.tp, layout.cp, layout.ep, layout.dp, layout.pp, layout.order, axis)
        hit = self._info.get(key)
        if hit is None:
            hit = self._info[key] = axis_placement(layout, axis, self.req.gpus_per_node)
        return hit

    def where(self, layout: ParallelLayout) -> Callable[[str], tuple[int, str, int]]:
        """(group size, link class, hosts one group spans) of an axis of `layout`, for
        Evaluator.program."""

        def lookup(axis: str) -> tuple[int, str, int]:
            info = self.info(layout, axis)
            return info.size, info.link_class, info.hosts_spanned

        return lookup

    def stages(self, layout: ParallelLayout) -> Callable[[str], tuple[int, str, tuple[str, ...]]]:
        """(group size, link class, link per stage pair) of a pipeline axis of `layout`, for
        Evaluator.program."""

        def lookup(axis: str) -> tuple[int, str, tuple[str, ...]]:
            info = self.info(layout, axis)
            return info.size, info.link_class, stage_links(layout, axis, self.req.gpus_per_node)

        return lookup

    def signature(self, prog: Program, layout: ParallelLayout) -> tuple:
        """What a Program's estimate depends on besides the Program: each axis's group size,
        link class and hosts spanned, and a pipeline's link per stage pair (two placements with
        the same overall class may cross nodes between different stages)."""
        out = []
        for a in dict.fromkeys(prog.axes()):
            info = self.info(layout, a)
            links = stage_links(layout, a, self.req.gpus_per_node) if a == "pp" else ()
            out.append((a, info.size, info.link_class, info.hosts_spanned, links))
        return tuple(out)

    def price(self, prog: Program, layout: ParallelLayout) -> ProgramEstimate:
        """Evaluator.program of `prog` on `layout`, placed from the strides."""
        return self.evaluator.program(
            prog, layout, placement=self.where(layout), pipeline_links=self.stages(layout)
        )

    def placement(self, layout: ParallelLayout, axes: list[str]) -> dict[str, dict[str, Any]]:
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

    # one config
    def evaluate(self, cfg: Config, mem: dict[str, float] | None = None) -> Evaluation:
        """Price one (valid) config; the estimates say which step could not be priced, if any."""
        req = self.req
        mem = mem if mem is not None else memory(req, cfg)
        layout = cfg.layout(req.gpus, ())  # placed from the strides: no node list
        estimates = {}
        for name, prog in self.programs(cfg).items():
            key = (id(prog), self.signature(prog, layout))
            est = self._estimates.get(key)
            if est is None:
                est = self.price(prog, layout)
                if patterns.get(name).role is Role.PIPELINE:
                    est = extend(self, name, cfg, layout, est)
                self._estimates[key] = est
            estimates[name] = est
        axes = [a for a in ("tp", "cp", "ep", "dp", "pp") if getattr(cfg, a) > 1]
        for est in estimates.values():
            axes += [s.axis for s in est.steps if s.axis not in axes]
        infer, band = None, None
        if req.mode == "infer" and not any(e.error for e in estimates.values()):
            infer = inference.inference_times(req, cfg, estimates)
            time = infer.decode
        else:

            def at(end: int | None) -> StepTime:  # banded ops at their point / band's end
                return step_time(
                    RoleTimes.of(estimates, end),
                    compute_s=self.compute_s,
                    pp=cfg.pp,
                    micro_batches=cfg.micro_batches * cfg.virtual_stages,  # chunk passes
                    overlap_dp=req.overlap_dp,
                )

            time = at(None)
            if any(e.comm_band_s() for e in estimates.values()):
                band = (at(0).step, at(1).step)
        return Evaluation(
            config=cfg,
            placement=self.placement(layout, axes),
            memory=mem,
            time=time,
            extrapolated=any(e.extrapolated for e in estimates.values()),
            estimates=estimates,
            fits=mem["total"] <= req.gpu_memory_gb * GB,
            notes=sorted({n for est in estimates.values() for s in est.steps for n in s.notes}),
            inference=infer,
            step_band_s=band,
        )

    def errors(self, ev: Evaluation) -> list[str]:
        return [f"cannot price {n}: {e.error}" for n, e in ev.estimates.items() if e.error]

    def distinct_orders(self, cfg: Config) -> list[Config]:
        """The config in each rank order that gives a distinct placement (link classes)."""
        if self.req.orders == "megatron":
            return [cfg]
        degrees = {"tp": cfg.tp, "cp": cfg.cp, "dp": cfg.dp, "pp": cfg.pp}
        seen, out = set(), []
        for order in rank_orders(degrees):
            c = replace(cfg, order=order)
            layout = c.layout(self.req.gpus, ())
            sig = tuple(
                (a, self.info(layout, a).link_class, self.info(layout, a).hosts_spanned)
                for a in DENSE
                if degrees[a] > 1
            )
            if sig not in seen:
                seen.add(sig)
                out.append(c)
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
    sizing = Progress(len(valid), "sized the memory of")
    for i, c in enumerate(valid):
        sizing.tick(i)
        mem = memory(req, c.config)
        if mem["total"] > req.gpu_memory_gb * GB:
            c.stage = "memory"
            c.reasons.append(
                f"needs {gb(mem['total']):.1f} GB per GPU > {req.gpu_memory_gb:g} GB ("
                + ", ".join(f"{k} {gb(v):.1f}" for k, v in mem.items() if k != "total" and v)
                + ")"
            )
            rejected.append(c)
            if smallest is None or mem["total"] < smallest[0]:
                smallest = (mem["total"], c)
        else:
            fitting.append((c, mem))
    if not fitting:
        assert smallest is not None  # every valid config was too big
        need, c = smallest
        raise UsageError(
            f"{req.model.name} does not fit on {req.gpus} x {req.gpu_memory_gb:g} GB: the "
            f"smallest per-GPU need is {gb(need):.1f} GB ({c.config.full_label}); try more "
            "GPUs, ZeRO (--zero-stage 1,2,3), --sequence-parallel or --recompute full"
            + (" or --kv-cache-dtype fp8" if req.mode == "infer" else "")
        )
    ranked: list[Evaluation] = []
    first_error = None
    pricing = Progress(len(fitting), "priced")
    for i, (c, mem) in enumerate(fitting):
        pricing.tick(i)
        for oc in planner.distinct_orders(c.config):
            ev = planner.evaluate(oc, mem)
            errs = planner.errors(ev)
            if errs:
                first_error = first_error or errs[0]
                rejected.append(Candidate(oc, errs, "unpriced"))
                continue
            ranked.append(ev)
    if not ranked:
        raise UsageError(f"the calibration cannot price any config: {first_error}")
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
    best = ranked[0].config

    def at_batch(k: int) -> Evaluation:
        more = replace(req, global_batch=req.batch * k)
        return Planner(more, cal).evaluate(replace(best, micro_batches=best.micro_batches * k))

    return PlanResult(
        request=req,
        calibration=cal,
        ranked=ranked,
        rejected=rejected,
        assumptions=assumptions(req, cal),
        counts=counts,
        findings=(inference.findings(req, ranked, at_batch) if req.mode == "infer" else [])
        + cp_for_memory(req, ranked[0], rejected, _pricer(cal)),
    )


def _pricer(cal: Calibration) -> Callable[[PlanRequest, Candidate, dict], Evaluation | None]:
    """levers.cp_for_memory's price(): one Planner for the changed request, full recompute's
    extra forward charged to its compute."""
    planners: dict[tuple[str, str], Planner] = {}  # (KV-cache dtype, recompute) -> planner

    def price(req: PlanRequest, c: Candidate, mem: dict) -> Evaluation | None:
        planner = planners.get((req.kv_cache_dtype, req.recompute))
        if planner is None:
            planner = planners[req.kv_cache_dtype, req.recompute] = Planner(req, cal)
            if req.recompute == "full" and planner.compute_s is not None:
                planner.compute_s *= FULL_RECOMPUTE_COMPUTE
        ev = planner.evaluate(c.config, mem)
        return None if planner.errors(ev) else ev

    return price
