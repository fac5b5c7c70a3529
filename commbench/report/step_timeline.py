"""One measured whole training step (a pattern whose role is the step) laid out in time: each
Program step's measured time (median per op x scale x repeat) end to end in Program order,
on its axis's row, so the report shows where and in what order a config's step spends its
communication. The suite times each op alone (all groups of its axis at once), so every span
is exposed communication; the pipeline's synthetic compute, inside its 1F1B schedule's span,
is marked as the compute stand-in."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from commbench.results.records import StepRecord
from commbench.results.rundir import Run
from commbench.traffic import patterns
from commbench.traffic.patterns import Role


@dataclass(frozen=True)
class Span:
    """One Program step's time in the replay, seconds from the step's start."""

    axis: str
    phase: str
    label: str
    start: float
    end: float


@dataclass(frozen=True)
class StepTimeline:
    label: str
    spans: list[Span]
    compute_s: float  # synthetic compute inside the pipeline span (0: none)

    @property
    def total_s(self) -> float:
        return self.spans[-1].end if self.spans else 0.0

    def axes(self) -> list[str]:
        return list(dict.fromkeys(s.axis for s in self.spans))


def point_key(rec: dict) -> tuple:
    """Which point of its run a point or step record belongs to: (suite, run, point). The
    index alone repeats where one run directory holds two suites' points (`plan --verify`
    without --calibration: its quick sweep's points 1..N, then the configs' 1..K)."""
    return rec.get("suite"), rec.get("run"), rec.get("point")


def step_timelines(runs: list[Run]) -> list[StepTimeline]:
    """A timeline for every complete point of a step-role pattern in `runs`."""
    out = []
    for run in runs:
        by_point: dict[tuple, list[dict]] = {}
        for rec in run.records:
            if rec.get("kind") == StepRecord.kind:
                by_point.setdefault(point_key(rec), []).append(rec)
        for rec in run.records:
            spec = patterns.PATTERNS.get(str(rec.get("pattern")))
            if rec.get("kind") != "point" or spec is None or spec.role is not Role.STEP:
                continue
            _, _, _, prog = patterns.rebuild(rec)
            seconds = [0.0] * len(prog.steps)
            for st in by_point.get(point_key(rec), []):
                for i in st["program_steps"]:
                    seconds[i] = st["time_us"] * 1e-6 * st["scale"] * prog.steps[i].repeat
            spans, t = [], 0.0
            for step, s in zip(prog.steps, seconds):
                spans.append(Span(step.axis, step.phase, step.label, t, t + s))
                t += s
            label = f"{run.path.name} point {rec['point']}: {rec.get('model')} "
            label += rec["config"]["label"]
            out.append(StepTimeline(label, spans, float(prog.meta.get("compute_s") or 0.0)))
    return out


@dataclass(frozen=True)
class Verification:
    """A `plan --verify` run: per config (in the planner's order) its label, predicted and
    measured step communication, seconds."""

    run_id: str
    configs: list[tuple[str, float, float]]


def verifications(runs: list[Run]) -> list[Verification]:
    """The runs whose step points carry the planner's prediction (`plan --verify`)."""
    out = []
    for run in runs:
        by_config: dict[str, tuple[float, list[float]]] = {}  # rounds measured in turn
        for rec in run.records:
            if rec.get("kind") == "point" and "predicted_s" in (rec.get("meta") or {}):
                pred, times = by_config.setdefault(
                    str(rec["run"]), (rec["meta"]["predicted_s"], [])
                )
                times.append(float(rec["time_us"]) * 1e-6)
        rows = [(k, float(p), statistics.median(t)) for k, (p, t) in by_config.items()]
        if len(rows) >= 2:
            out.append(Verification(run.path.name, rows))
    return out
