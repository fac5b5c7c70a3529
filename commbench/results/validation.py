"""The rows of `commbench validate`, typed: a suite point's measured time next to the
calibration's prediction, and the per-pattern summary. Their JSON (`validate --json`, the
report) keeps these keys; commbench.calibration.accuracy builds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commbench.results.records import JsonRecord


@dataclass(kw_only=True)
class ValidationStep(JsonRecord):
    """One Program step of a point: measured and predicted, as the suite ran it."""

    index: int
    op: str
    axis: str
    phase: str
    label: str
    group_size: int
    link_class: str
    bytes: int
    repeat: float
    measured_s: float | None
    predicted_s: float | None
    rel_error: float | None  # (predicted - measured) / measured
    method: str  # how the calibration priced it
    error: str | None  # why it could not be priced


@dataclass(kw_only=True)
class ValidationRow(JsonRecord):
    """A suite point: where it comes from, what it measured, measured vs predicted seconds."""

    run_id: str
    run_dir: str
    suite: str
    run: str
    point: int
    pattern: str
    config: str  # the layout label
    model: str | None
    options: str  # the swept options, `sp=True m=8`
    backend: str
    world: int
    measured_s: float  # sum over steps of median time x repeat
    predicted_s: float | None = None  # the same steps, as the suite ran them, priced
    predicted_program_s: float | None = None  # the Program at full size, as plan prices it
    rel_error: float | None = None  # (predicted - measured) / measured, signed
    abs_error: float | None = None
    status: str = "not predicted"  # or "ok"
    why: str | None = None  # the reason when not predicted
    measured_extrapolated: bool  # the suite measured a chunk of a big step and scaled it
    predicted_extrapolated: bool = False  # a prediction went beyond the calibration
    wrong: int  # elements the suite's check found wrong
    steps: list[ValidationStep] = field(default_factory=list)


@dataclass(kw_only=True)
class ValidationSummary(JsonRecord):
    """Per pattern: how many points were predicted and how close."""

    pattern: str
    points: int  # points predicted
    not_predicted: int
    median_abs_error: float | None
    max_abs_error: float | None
    median_rel_error: float | None
    within_20pct: float | None  # share of points with |error| <= 20%
