"""Command-line overrides of a suite (`--model`, `--set`, `--degree`, `--order`): parsed and
applied to every run of a loaded suite they fit, validated as the suite file itself is."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from commbench.errors import UsageError
from commbench.keys import assign
from commbench.traffic import patterns
from commbench.traffic.bounds import check_options
from commbench.traffic.layout import Axis
from commbench.traffic.model import ModelShape
from commbench.traffic.suitefile import (
    DEGREE_AXES,
    DegreeSpec,
    Suite,
    option_names,
    parse_degree,
)


@dataclass(frozen=True)
class Overrides:
    """`--model`, `--set`, `--degree`, `--order` applied to every run they fit.
    `model_seq_len`: a `--model NAME:...,seq_len=N` named its sequence, so the runs' own
    `seq_len` options yield to the model's (`--set seq_len=` still wins over both)."""

    models: tuple[ModelShape, ...] = ()
    model_seq_len: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    degrees: dict[str, DegreeSpec] = field(default_factory=dict)
    order: tuple[Axis, ...] | None = None


def parse_assignments(items: list[str] | None, flag: str) -> dict[str, Any]:
    """KEY=VALUE flags, values read as YAML scalars or lists (`--set router=zipf`); yaml is
    imported only when there are some (every rank of a suite asks, flags or not)."""
    out: dict[str, Any] = {}
    if not items:
        return out
    from commbench.textfile import loads_yaml

    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE")
        assign(out, key.strip(), loads_yaml(value, f"{flag} {key.strip()}", strict=False), flag)
    return out


def parse_degree_flags(items: list[str] | None) -> dict[str, DegreeSpec]:
    out: dict[str, DegreeSpec] = {}
    for item in items or []:
        axis, eq, value = item.partition("=")
        axis = axis.strip()
        if not eq or axis not in DEGREE_AXES:
            raise UsageError(
                f"--degree {item!r}: expected AXIS=VALUES with AXIS one of {', '.join(DEGREE_AXES)}"
            )
        assign(out, axis, parse_degree(value.strip(), f"--degree {axis}"), "--degree")
    return out


def apply_overrides(suite: Suite, ov: Overrides) -> Suite:
    """The suite with command-line overrides applied (validated like the file)."""
    used = set()
    runs = []
    for run in suite.runs:
        spec = patterns.get(run.pattern)
        names = option_names(spec)
        options, sweep = dict(run.options), dict(run.sweep)
        if ov.models and ov.model_seq_len and spec.needs_model and "seq_len" not in ov.options:
            options.pop("seq_len", None)
            sweep.pop("seq_len", None)
        for k, v in ov.options.items():
            if k in names:
                used.add(k)
                options[k] = v
                sweep.pop(k, None)
        check_options(patterns.make_options(run.pattern, options, "--set"), "--set")
        models = run.models
        if ov.models and spec.needs_model:
            models = tuple(m for m in ov.models if m.is_moe or not spec.needs_moe)
        degrees = dict(run.degrees)
        if spec.axis is not None:
            degrees.update(ov.degrees)
        runs.append(
            dataclasses.replace(
                run,
                options=options,
                sweep=sweep,
                models=models,
                degrees=degrees,
                order=ov.order or run.order,
            )
        )
    unknown = set(ov.options) - used
    if unknown:
        raise UsageError(
            f"--set {sorted(unknown)[0]}: no run of suite {suite.name} has this option"
        )
    return dataclasses.replace(suite, runs=tuple(runs))
