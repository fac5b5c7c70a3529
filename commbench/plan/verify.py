"""`plan --verify K`, the arithmetic: which planned configs to measure, the step Program the
planner prices for each (pattern step: the same Program `suite step` measures, so traffic has
one source of truth), and how predicted and measured step communication agree (top-1, Kendall
tau, the median error and the axis the prediction missed most). Pure; the measuring is in
commands/plan_verify.py."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from commbench.calibration.accuracy import rerun_spread
from commbench.errors import UsageError
from commbench.plan.planner import Planner
from commbench.plan.request import PlanRequest
from commbench.plan.result import PlanResult
from commbench.plan.search import Config
from commbench.traffic import patterns
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.patterns.pp import GPIPE
from commbench.traffic.program import Program

STEP_PATTERN = next(s.name for s in patterns.PATTERNS.values() if s.role is patterns.Role.STEP)


def select(result: PlanResult, world: int, k: int) -> list[Config]:
    """The best `k` distinct configs of the plan that fit `world` ranks (memory and
    calibration included); fewer than k is a UsageError saying how many fit."""
    if result.request.gpus != world:
        raise UsageError(
            f"--verify measures on the launched world: --gpus {result.request.gpus} but "
            f"{world} rank(s); launch with mpirun -n {result.request.gpus}"
        )
    seen: dict[tuple, Config] = {}
    for ev in result.ranked:
        c = ev.config
        key = (c.tp, c.cp, c.ep, c.dp, c.pp, c.micro_batch, c.micro_batches, c.zero_stage,
               c.virtual_stages)  # fmt: skip
        if ev.fits and key not in seen:
            seen[key] = c
    if len(seen) < k:
        raise UsageError(
            f"--verify {k}: only {len(seen)} planned config(s) fit {world} ranks "
            f"(memory, calibration); give --verify {len(seen)} or fewer"
        )
    return list(seen.values())[:k]


def step_options(req: PlanRequest, cfg: Config) -> dict[str, Any]:
    """Pattern step's options for a planned config (no synthetic compute: communication)."""
    return {
        "seq_len": req.seq,
        "micro_batch": cfg.micro_batch,
        "micro_batches": cfg.micro_batches,
        "sequence_parallel": req.sequence_parallel,
        "grad_dtype": req.grad_dtype,
        "zero_stage": cfg.zero_stage,
        "framework": req.framework,
        "virtual_stages": cfg.virtual_stages,
        **({"pp_schedule": req.pp_schedule} if req.pp_schedule == GPIPE else {}),
        **({"cp_comm_type": req.cp_comm_type} if req.cp_comm_type else {}),
    }


def step_program(req: PlanRequest, cfg: Config) -> Program:
    """The step Program of a planned config: what --verify measures and prices."""
    layout = ParallelLayout(req.gpus, tp=cfg.tp, cp=cfg.cp, ep=cfg.ep, dp=cfg.dp, pp=cfg.pp)
    model = req.model.for_pipeline(cfg.pp)  # uneven stages as the planner priced them
    options = {**step_options(req, cfg), **req.cp_options(layout)}  # the sizes it priced
    return patterns.build(STEP_PATTERN, layout, model, options)


def by_axis(prog: Program, seconds: Sequence[float | None]) -> dict[str, float]:
    """Seconds per axis of a Program, from one number per step (x its repeat already)."""
    out: dict[str, float] = {}
    for st, s in zip(prog.steps, seconds):
        out[st.axis] = out.get(st.axis, 0.0) + (s or 0.0)
    return out


def median_by_axis(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Per axis, the median of its seconds over measurement rounds."""
    axes = dict.fromkeys(a for r in rounds for a in r)
    return {a: statistics.median(r.get(a, 0.0) for r in rounds) for a in axes}


def predicted(planner: Planner, cfg: Config, prog: Program) -> dict[str, float]:
    """The planner's price of the step Program, seconds per axis (a step it cannot price is
    a UsageError naming it)."""
    est = planner.price(prog, cfg.layout(planner.req.gpus, ()))  # as the ranking priced it
    if est.error:
        raise UsageError(f"--verify {cfg.label}: cannot price the step: {est.error}")
    return by_axis(prog, [s.comm_s for s in est.steps])


def kendall_tau(a: list[float], b: list[float]) -> float:
    """Kendall's tau-a of two score lists: (concordant - discordant) / pairs; 1 for one item."""
    n = len(a)
    pairs = n * (n - 1) // 2
    if pairs == 0:
        return 1.0
    s = 0
    for i in range(n):
        for j in range(i + 1, n):
            x, y = a[i] - a[j], b[i] - b[j]
            s += int(x * y > 0) - int(x * y < 0)
    return s / pairs


def kendall_tau_b(a: list[float], b: list[float], tied: set[tuple[int, int]]) -> float:
    """Kendall's tau-b with the pairs `tied` (i < j) counted as ties in b (measured within
    the noise of each other): (C - D) / sqrt((n0 - ties in a) (n0 - ties in b)); 1 for one
    item, 0 when every pair is tied."""
    n = len(a)
    n0 = n * (n - 1) // 2
    if n0 == 0:
        return 1.0
    s, ties_a, ties_b = 0, 0, 0
    for i in range(n):
        for j in range(i + 1, n):
            x, y = a[i] - a[j], 0.0 if (i, j) in tied else b[i] - b[j]
            ties_a += x == 0
            ties_b += y == 0
            s += int(x * y > 0) - int(x * y < 0)
    denom = ((n0 - ties_a) * (n0 - ties_b)) ** 0.5
    return s / denom if denom else 0.0


@dataclass(frozen=True)
class Row:
    """One verified config: predicted and measured step communication per axis, seconds,
    and the measured step communication of every round (its repeat spread)."""

    config: Config
    predicted: dict[str, float]
    measured: dict[str, float]
    rounds: tuple[float, ...] = ()
    whole: dict[str, float] = dataclasses.field(default_factory=dict)  # replayed, by axis
    whole_s: float | None = None  # the step replayed as one timed Program (measure/replay)

    @property
    def spread(self) -> float:
        """The rounds' repeat spread (accuracy.rerun_spread; 0 for one round)."""
        return rerun_spread(self.rounds) or 0.0

    @property
    def predicted_s(self) -> float:
        return sum(self.predicted.values())

    @property
    def measured_s(self) -> float:
        return sum(self.measured.values())

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return self.predicted_s / self.measured_s - 1 if self.measured_s > 0 else 0.0

    def as_whole(self) -> Row:
        """The row with the replayed step as its measurement: the whole step time, split by
        axis in proportion to the replayed ops' shares."""
        assert self.whole_s is not None, "not replayed"
        share = sum(self.whole.values()) or 1.0
        measured = {a: v / share * self.whole_s for a, v in self.whole.items()}
        return dataclasses.replace(self, measured=measured, rounds=())

    def missed_most(self) -> tuple[str, float]:
        """The axis whose prediction is furthest off, and by how much (seconds, signed)."""
        axes = set(self.predicted) | set(self.measured)
        diff = {a: self.predicted.get(a, 0.0) - self.measured.get(a, 0.0) for a in axes}
        axis = max(diff, key=lambda a: abs(diff[a]))
        return axis, diff[axis]


def within_noise(rows: list[Row]) -> set[tuple[int, int]]:
    """Pairs (i < j) whose measured step communication differs by no more than the larger
    repeat spread of the two: their measured order is noise, not a ranking."""
    out = set()
    for i, r in enumerate(rows):
        for j in range(i + 1, len(rows)):
            q = rows[j]
            lo = min(r.measured_s, q.measured_s)
            if lo > 0 and abs(r.measured_s - q.measured_s) / lo <= max(r.spread, q.spread):
                out.add((i, j))
    return out


@dataclass(frozen=True)
class Agreement:
    top1_same: bool
    kendall_tau: float  # plain tau-a: every measured order counts
    median_abs_error: float
    missed_most: str  # the axis with the largest total |predicted - measured|
    kendall_tau_noise: float = 1.0  # tau-b with pairs measured within noise counted as ties
    ties: int = 0  # pairs measured within the noise of each other
    top1_within_noise: bool = False  # the predicted best measured within noise of the best


def agreement(rows: list[Row], whole: bool = False) -> Agreement:
    """How the measured ranking (by step communication) agrees with the predicted one;
    `whole`: measured as the step replayed as one timed Program (ties: none counted)."""
    if whole:
        rows = [r.as_whole() for r in rows]
    pred = [r.predicted_s for r in rows]
    meas = [r.measured_s for r in rows]
    miss: dict[str, float] = {}
    for r in rows:
        for a in set(r.predicted) | set(r.measured):
            miss[a] = miss.get(a, 0.0) + abs(r.predicted.get(a, 0.0) - r.measured.get(a, 0.0))
    tied = within_noise(rows)
    best_p, best_m = pred.index(min(pred)), meas.index(min(meas))
    return Agreement(
        top1_same=best_p == best_m,
        kendall_tau=kendall_tau(pred, meas),
        median_abs_error=statistics.median(abs(r.error) for r in rows),
        missed_most=max(miss, key=lambda a: miss[a]),
        kendall_tau_noise=kendall_tau_b(pred, meas, tied),
        ties=len(tied),
        top1_within_noise=best_p == best_m or (min(best_p, best_m), max(best_p, best_m)) in tied,
    )


def summary(rows: list[Row], ag: Agreement, whole: Agreement | None = None) -> dict[str, Any]:
    """The verification as JSON (verify.json in the run directory: what bench scripts read)."""
    return {
        "configs": [
            {
                "config": r.config.full_label,
                "predicted_s": r.predicted_s,
                "measured_s": r.measured_s,
                "error": r.error,
                "predicted_by_axis": r.predicted,
                "measured_by_axis": r.measured,
                "rounds_s": list(r.rounds),
                "spread": r.spread,
                "missed_most": r.missed_most()[0],
                "whole_s": r.whole_s,
                "whole_by_axis": r.whole,
            }
            for r in rows
        ],
        "agreement": dataclasses.asdict(ag),
        "agreement_whole": dataclasses.asdict(whole) if whole else None,
    }


def text(rows: list[Row], ag: Agreement, whole: Agreement | None = None) -> list[str]:
    """The verification table and its summary lines."""
    lines = [
        "# plan --verify: predicted vs measured step communication (pattern step, the "
        "Program the planner priced), seconds per step; measured: the sum of its ops, each "
        "timed alone; spread: max / min - 1 over rounds; whole: the step replayed as one "
        "timed Program (every axis in order, no barrier between ops)",
        f"{'config':<28} {'predicted':>10} {'measured':>10} {'error':>8} {'spread':>7} "
        f"{'whole':>8}  missed most",
    ]
    for r in rows:
        axis, d = r.missed_most()
        w = f"{r.whole_s:>8.4g}" if r.whole_s is not None else f"{'-':>8}"
        lines.append(
            f"{r.config.full_label:<28} {r.predicted_s:>10.4g} {r.measured_s:>10.4g} "
            f"{r.error:>+8.1%} {r.spread:>7.1%} {w}  {axis} {d:+.3g} s"
        )
    lines += [
        f"top-1 same: {'yes' if ag.top1_same else 'no'}; Kendall tau {ag.kendall_tau:.2f}; "
        f"median |error| {ag.median_abs_error:.1%}; missed most: {ag.missed_most}",
        f"within noise: {ag.ties} pair(s) measured within their repeat spread, counted as "
        f"ties: Kendall tau-b {ag.kendall_tau_noise:.2f}; top-1 within noise: "
        f"{'yes' if ag.top1_within_noise else 'no'}",
    ]
    if whole is not None:
        lines.append(
            f"whole step replayed: top-1 same: {'yes' if whole.top1_same else 'no'}; Kendall "
            f"tau {whole.kendall_tau:.2f}; median |error| {whole.median_abs_error:.1%}"
        )
    return lines
