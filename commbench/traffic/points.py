"""A suite's points on one world: every model x sweep value x degree combination that fits.

`auto`/`max` degrees become the divisors of the world the model allows (Megatron-LM's
divisibility rules, patterns.violations); explicit degrees that cannot fit are errors naming
the field, and each point carries its Program, built before the first collective.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from commbench.errors import UsageError
from commbench.traffic import bounds, patterns
from commbench.traffic.layout import Axis, ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import violations
from commbench.traffic.program import Program
from commbench.traffic.suitefile import DEGREE_AXES, ONE, RunSpec, Suite


@dataclass(frozen=True)
class Point:
    """One configuration to measure: a run's pattern on one model, layout and options."""

    index: int
    run: RunSpec
    model: ModelShape | None
    layout: ParallelLayout
    options: Any
    swept: dict[str, Any]
    program: Program


def _sweeps(run: RunSpec) -> list[dict[str, Any]]:
    keys = list(run.sweep)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(run.sweep[k] for k in keys))]


def _explicit_error(run: RunSpec, axes: list[str], message: str) -> UsageError:
    field = ",".join(axes)
    return UsageError(f"{run.where}.degrees.{field}: {message}")


def _layouts(run: RunSpec, model: ModelShape | None, world: int, opts: Any) -> list[dict]:
    """Valid degree combinations of a run for one model and option set."""
    specs = {a: run.degrees.get(a, ONE) for a in DEGREE_AXES}
    seq = opts.seq(model) if model is not None else 1
    sp = (
        bool(getattr(opts, "sequence_parallel", False))
        or patterns.get(run.pattern).always_sequence_parallel
    )
    valid = []
    for values in itertools.product(*(specs[a].candidates(world) for a in DEGREE_AXES)):
        d = dict(zip(DEGREE_AXES, values))
        explicit = [a for a in DEGREE_AXES if specs[a].explicit and a in run.degrees]
        fixed = all(specs[a].explicit for a in DEGREE_AXES)
        prod = d[Axis.TP] * d[Axis.CP] * d[Axis.PP]
        if world % prod:
            exp_prod = 1
            for a in (Axis.TP, Axis.CP, Axis.PP):
                if specs[a].explicit:
                    exp_prod *= d[a]
            if world % exp_prod or fixed:
                raise _explicit_error(
                    run,
                    [a for a in (Axis.TP, Axis.CP, Axis.PP) if a in explicit] or [Axis.TP],
                    f"tp*cp*pp = {d[Axis.TP]}*{d[Axis.CP]}*{d[Axis.PP]} = {prod} does not divide the "
                    f"world size {world}",
                )
            continue
        dp = world // prod
        if (d[Axis.CP] * dp) % d[Axis.EP]:
            if fixed:
                raise _explicit_error(
                    run,
                    [Axis.EP],
                    f"ep={d[Axis.EP]} does not divide cp*dp = {d[Axis.CP] * dp} on a world of {world}",
                )
            continue
        if model is not None:
            layout = ParallelLayout(
                world, tp=d[Axis.TP], cp=d[Axis.CP], ep=d[Axis.EP], pp=d[Axis.PP]
            )
            bad = [(a, msg) for a, msg in violations(layout, model, seq, sp)]
            hard = [(a, msg) for a, msg in bad if specs[a].explicit]
            if hard and (fixed or all(specs[a].explicit for a, _ in bad)):
                a, msg = hard[0]
                raise _explicit_error(run, [a], msg)
            if bad:
                continue
        valid.append(d)
    for axis in DEGREE_AXES:
        if specs[axis].kind != "max":
            continue
        best: dict[tuple, int] = {}
        for d in valid:
            rest = tuple(d[a] for a in DEGREE_AXES if a != axis)
            best[rest] = max(best.get(rest, 0), d[axis])
        valid = [d for d in valid if d[axis] == best[tuple(d[a] for a in DEGREE_AXES if a != axis)]]
    return valid


def expand(suite: Suite, world: int, nodes: tuple[int, ...] = ()) -> list[Point]:
    """Every point of the suite on `world` ranks, with its Program built (pure; identical on
    every rank). Points without traffic (e.g. dp = 1 for a dp run) are left out, and so is a
    configuration an earlier run already has (two runs that overrides make alike)."""
    points: list[Point] = []
    seen: set[tuple] = set()
    for run in suite.runs:
        for model in run.models or (None,):
            for swept in _sweeps(run):
                opts = patterns.make_options(run.pattern, {**run.options, **swept}, run.where)
                for d in _layouts(run, model, world, opts):
                    layout = ParallelLayout(world, order=run.order, nodes=nodes, **d)
                    key = (run.pattern, model, layout, opts)
                    if key in seen:
                        continue
                    seen.add(key)
                    try:
                        program = patterns.build(run.pattern, layout, model, opts)
                    except UsageError as e:
                        raise UsageError(f"{run.where}: {layout.label()}: {e}") from None
                    if not program.steps:
                        continue
                    points.append(Point(len(points) + 1, run, model, layout, opts, swept, program))
                    bounds.check_points(len(points), suite.name, world)
    if not points:
        why = (
            "most patterns need at least 2"
            if world < 2
            else "; ".join(why_dropped(run, world) for run in suite.runs[:3])
        )
        raise UsageError(
            f"suite {suite.name}: no configuration with traffic fits a world of {world} "
            f"rank(s) ({why})"
        )
    return points


def dropped_runs(suite: Suite, points: list[Point]) -> list[str]:
    """One line per run of the suite that made no point on this world, saying why (a prime
    world leaves tp/pp/cp/ep nothing but degree 1, which moves no traffic)."""
    kept = {id(pt.run) for pt in points}
    world = points[0].layout.world
    return [why_dropped(run, world) for run in suite.runs if id(run) not in kept]


def why_dropped(run: RunSpec, world: int) -> str:
    """Why `run` has no point on `world` ranks: no layout fits, or only degree 1 on its axis."""
    axis = patterns.get(run.pattern).axis
    fits: set[int] = set()
    for model in run.models or (None,):
        for swept in _sweeps(run):
            opts = patterns.make_options(run.pattern, {**run.options, **swept}, run.where)
            fits |= {d.get(axis, 1) for d in _layouts(run, model, world, opts)}
    name = f"run {run.name} ({run.where})"
    if not fits:
        return f"{name}: no layout fits a world of {world} (its degrees must divide the world)"
    if axis is None or max(fits) > 1:
        return f"{name}: each of its configurations is an earlier run's, measured there once"
    degrees = ",".join(map(str, sorted(fits)))
    return (
        f"{name}: on a world of {world} only {axis}={degrees} fits (a degree must divide the "
        f"world and the model's shape), which moves no {run.pattern} traffic"
    )
