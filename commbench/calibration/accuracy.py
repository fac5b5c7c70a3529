"""Predicted against measured: every suite point's Program, rebuilt from its record and priced
through a calibration by the planner's own evaluation (evaluate.Evaluator), next to the time the
suite measured. This is how commbench proves (or disproves) its models.

Like with like: a step the suite could not run whole (buffers over --max-bytes) was measured as
a chunk and scaled by the count (`measured_extrapolated`), and a pipeline's large messages ran
in pieces; such a step is priced as it ran (the chunk or the pieces, from the point record's
chunks/measured bytes, by execution's own chunking) times the suite's scale, so the comparison
tests the calibration, not the linear scaling. `predicted_program_s` is the whole Program priced
as the planner prices it (full-size steps), for reference.

    rows = validate.compare(["results/RUN"], calibration.load("cal.json"))
    for s in validate.summarize(rows): print(s["pattern"], s["median_abs_error"])

Rows are ValidationRow JSON and summaries ValidationSummary JSON (commbench.results.validation:
every key, stable; `validate --json` and the report read them).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from statistics import median

from commbench.calibration import Calibration
from commbench.calibration.pricing import Evaluator
from commbench.dtypes import dtype_size
from commbench.errors import UsageError
from commbench.results.records import PointRecord, PointStep
from commbench.results.rundir import RECORDS, Run, read_run
from commbench.results.validation import ValidationRow, ValidationStep, ValidationSummary
from commbench.traffic.patterns.base import options_label
from commbench.traffic.program import Program

ACCURACY_BAND = 0.20  # a prediction within 20% of the measurement counts as accurate


def rerun_spread(values: Sequence[float]) -> float | None:
    """How far reruns of one measurement disagree: max / min - 1 of two of them, the median
    over every pair (what one rerun shows; the range over three or more only grows with their
    number); None for fewer than two positive values. The calibration's noise floor, plan
    --verify's ties and the benchmarks' repeat spreads are all this."""
    vals = [v for v in values if v > 0]
    if len(vals) < 2:
        return None
    return median(max(a, b) / min(a, b) - 1.0 for a, b in itertools.combinations(vals, 2))


def _rel(pred: float | None, meas: float | None) -> float | None:
    if pred is None or not meas:
        return None
    return (pred - meas) / meas


def as_executed(program: Program, measured_steps: list[PointStep]) -> Program:
    """The point's Program as the suite ran it: chunked steps as their measured chunk and split
    pipelines as their pieces (the ops' own helpers), each repeat times the suite's scale."""
    from commbench.ops.alltoallv import shrink_split
    from commbench.ops.p2p_schedule import split_schedule

    measured = {s.index: s for s in measured_steps}
    steps = []
    for i, st in enumerate(program.steps):
        m = measured.get(i)
        if m is None:
            steps.append(st)
            continue
        ex = st
        if st.schedule is not None:
            if m.chunks > 1:
                ex, _ = split_schedule(st, m.measured_bytes)
        elif m.extrapolated:
            if st.split is not None:
                split = shrink_split(st.split, m.chunks, dtype_size(st.dtype))
                ex = st.with_(split=split, nbytes=max(sum(r) for r in split))
            else:
                ex = st.with_(nbytes=m.measured_bytes, dtype=m.measured_dtype)
        steps.append(ex.with_(repeat=st.repeat * m.scale) if m.scale != 1 else ex)
    return Program(program.pattern, tuple(steps), program.meta)


def compare(
    runs: Sequence[str | Path | Run], calibration: Calibration, extrapolate: bool = False
) -> list[dict]:
    """One row per suite point of `runs` (run directories or read Runs): measured vs predicted,
    as ValidationRow JSON. A malformed point record is a UsageError naming its field."""
    from commbench.traffic import patterns

    evaluators: dict[str, Evaluator | str] = {}
    rows = []
    for item in runs:
        run = item if isinstance(item, Run) else read_run(item)
        run_id = run.run_id
        for rec in run.records:
            if rec.get("kind") != "point":
                continue
            pt = PointRecord.from_json(rec, f"{run.path / RECORDS}: point {rec.get('point')!r}")
            label = options_label(pt.swept)
            row = ValidationRow(
                run_id=run_id,
                run_dir=str(run.path),
                suite=pt.suite,
                run=pt.run,
                point=pt.point,
                pattern=pt.pattern,
                config=pt.config.label,
                model=pt.model,
                options="" if label == "-" else label,
                backend=pt.backend,
                world=pt.world_size,
                measured_s=pt.time_us * 1e-6,
                measured_extrapolated=pt.extrapolated,
                wrong=pt.wrong,
            )
            rows.append(row)
            ev = evaluators.get(pt.backend)
            if ev is None:
                try:
                    ev = Evaluator(calibration, pt.backend, extrapolate)
                except UsageError as e:
                    ev = str(e)
                evaluators[pt.backend] = ev
            if isinstance(ev, str):
                row.why = ev
                continue
            try:
                layout, _, _, program = patterns.rebuild(rec)
            except (UsageError, KeyError, TypeError) as e:
                row.why = f"cannot rebuild the point's Program: {e}"
                continue
            links = pt.link_classes
            est = ev.program(as_executed(program, pt.steps), layout, link_classes=links)
            row.predicted_program_s = ev.program(program, layout, link_classes=links).total_s
            measured = {s.index: s for s in pt.steps}
            for s in est.steps:
                m = measured.get(s.index)
                ms = m.total_us * 1e-6 if m is not None else None
                row.steps.append(
                    ValidationStep(
                        index=s.index,
                        op=s.op,
                        axis=s.axis,
                        phase=s.phase,
                        label=s.label,
                        group_size=s.group_size,
                        link_class=s.link_class,
                        bytes=s.nbytes,
                        repeat=s.repeat,
                        measured_s=ms,
                        predicted_s=s.total_s,
                        rel_error=_rel(s.total_s, ms),
                        method=s.method,
                        error=s.error,
                    )
                )
            if est.error:
                row.why = est.error
                continue
            row.predicted_s = est.total_s
            row.rel_error = _rel(est.total_s, row.measured_s)
            row.abs_error = None if row.rel_error is None else abs(row.rel_error)
            row.predicted_extrapolated = est.extrapolated
            if row.rel_error is None:
                row.why = "the point has no positive measured time"
                continue
            row.status = "ok"
    return [r.to_json() for r in rows]


def summarize(rows: list[dict]) -> list[dict]:
    """Per pattern (in first-seen order) of compare's rows: points predicted, median and max
    |error|, as ValidationSummary JSON."""
    by: dict[str, list[ValidationRow]] = {}
    for r in map(ValidationRow.from_json, rows):
        by.setdefault(r.pattern, []).append(r)
    out = []
    for pattern, rs in by.items():
        ok = [r for r in rs if r.status == "ok"]
        errs = [r.abs_error for r in ok if r.abs_error is not None]
        rels = [r.rel_error for r in ok if r.rel_error is not None]
        out.append(
            ValidationSummary(
                pattern=pattern,
                points=len(errs),
                not_predicted=len(rs) - len(errs),
                median_abs_error=median(errs) if errs else None,
                max_abs_error=max(errs) if errs else None,
                median_rel_error=median(rels) if rels else None,
                within_20pct=(sum(e <= ACCURACY_BAND for e in errs) / len(errs)) if errs else None,
            ).to_json()
        )
    return out
