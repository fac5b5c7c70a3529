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

Row keys (stable; the report reads them):
    run_id, run_dir, suite, run, point    where the point comes from
    pattern, config, model, options        what it measured (config: the layout label,
                                           options: the swept options, `sp=True m=8`)
    backend, world
    measured_s                             the point's measured time (sum over its steps of
                                           median time x repeat), seconds
    predicted_s                            the same steps, as the suite ran them, priced by the
                                           calibration, or None
    predicted_program_s                    the Program at full size as the planner prices it
    rel_error                              (predicted - measured) / measured, signed, or None
    abs_error                              |rel_error|, or None
    status, why                            "ok" / "not predicted", and the reason when not
    measured_extrapolated                  the suite measured a chunk of a big step and scaled it
    predicted_extrapolated                 a prediction went beyond the calibration (--extrapolate)
    wrong                                  elements the suite's check found wrong
    steps                                  one dict per Program step: index, op, axis, phase,
                                           label, group_size, link_class, bytes, repeat,
                                           measured_s, predicted_s, rel_error, method, error
Summary rows (summarize): pattern, points (predicted), not_predicted, median_abs_error,
max_abs_error, median_rel_error, within_20pct (fraction of points with |error| <= 20%).
"""

from __future__ import annotations

from pathlib import Path
from statistics import median

from commbench.calibration import Calibration
from commbench.calibration.pricing import Evaluator
from commbench.dtypes import dtype_size
from commbench.errors import UsageError
from commbench.results.rundir import Run, read_run
from commbench.traffic.patterns.base import options_label
from commbench.traffic.program import Program

GOAL = 0.20  # the accuracy goal: median |error| per pattern under 20%


def _options_label(rec: dict) -> str:
    label = options_label(rec.get("swept"))
    return "" if label == "-" else label


def _rel(pred: float | None, meas: float | None) -> float | None:
    if pred is None or not meas:
        return None
    return (pred - meas) / meas


def as_executed(program: Program, rec: dict) -> Program:
    """The point's Program as the suite ran it: chunked steps as their measured chunk and split
    pipelines as their pieces (execution's own helpers), each repeat times the suite's scale."""
    from commbench.ops.alltoallv import shrink_split
    from commbench.ops.p2p_schedule import split_schedule

    measured = {s["index"]: s for s in rec.get("steps") or []}
    steps = []
    for i, st in enumerate(program.steps):
        m = measured.get(i)
        if m is None:
            steps.append(st)
            continue
        ex = st
        chunks, scale = m.get("chunks", 1), m.get("scale", 1.0)
        if st.op == "p2p_schedule":
            if chunks > 1:
                ex, _ = split_schedule(st, m["measured_bytes"])
        elif m.get("extrapolated"):
            if st.op == "alltoallv":
                split = shrink_split(st.split, chunks, dtype_size(st.dtype))
                ex = st.with_(split=split, nbytes=max(sum(r) for r in split))
            else:
                ex = st.with_(nbytes=m["measured_bytes"], dtype=m["measured_dtype"])
        steps.append(ex.with_(repeat=st.repeat * scale) if scale != 1 else ex)
    return Program(program.pattern, tuple(steps), program.meta)


def compare(
    runs: list[str | Path | Run], calibration: Calibration, extrapolate: bool = False
) -> list[dict]:
    """One row per suite point of `runs` (run directories or read Runs): measured vs predicted."""
    from commbench.traffic import patterns

    evaluators: dict[str, Evaluator | str] = {}
    rows = []
    for item in runs:
        run = item if isinstance(item, Run) else read_run(item)
        run_id = str(run.meta.get("run_id") or run.path.name)
        for rec in run.records:
            if rec.get("kind") != "point":
                continue
            cfg = rec.get("config") or {}
            meas = rec.get("time_us")
            row = {
                "run_id": run_id,
                "run_dir": str(run.path),
                "suite": rec.get("suite"),
                "run": rec.get("run"),
                "point": rec.get("point"),
                "pattern": rec.get("pattern"),
                "config": cfg.get("label"),
                "model": rec.get("model"),
                "options": _options_label(rec),
                "backend": rec.get("backend"),
                "world": rec.get("world_size"),
                "measured_s": meas * 1e-6 if isinstance(meas, int | float) else None,
                "predicted_s": None,
                "predicted_program_s": None,
                "rel_error": None,
                "abs_error": None,
                "status": "not predicted",
                "why": None,
                "measured_extrapolated": bool(rec.get("extrapolated")),
                "predicted_extrapolated": False,
                "wrong": rec.get("wrong", 0),
                "steps": [],
            }
            rows.append(row)
            backend = rec.get("backend")
            ev = evaluators.get(backend)
            if ev is None:
                try:
                    ev = Evaluator(calibration, backend, extrapolate)
                except UsageError as e:
                    ev = str(e)
                evaluators[backend] = ev
            if isinstance(ev, str):
                row["why"] = ev
                continue
            try:
                layout, _, _, program = patterns.rebuild(rec)
            except (UsageError, KeyError, TypeError) as e:
                row["why"] = f"cannot rebuild the point's Program: {e}"
                continue
            links = rec.get("link_classes") or {}
            est = ev.program(as_executed(program, rec), layout, link_classes=links)
            row["predicted_program_s"] = ev.program(program, layout, link_classes=links).total_s
            measured = {s["index"]: s for s in rec.get("steps") or []}
            for s in est.steps:
                m = measured.get(s.index, {})
                ms = m["total_us"] * 1e-6 if "total_us" in m else None
                row["steps"].append(
                    {
                        "index": s.index,
                        "op": s.op,
                        "axis": s.axis,
                        "phase": s.phase,
                        "label": s.label,
                        "group_size": s.group_size,
                        "link_class": s.link_class,
                        "bytes": s.nbytes,
                        "repeat": s.repeat,
                        "measured_s": ms,
                        "predicted_s": s.total_s,
                        "rel_error": _rel(s.total_s, ms),
                        "method": s.method,
                        "error": s.error,
                    }
                )
            if est.error:
                row["why"] = est.error
                continue
            row["predicted_s"] = est.total_s
            row["rel_error"] = _rel(est.total_s, row["measured_s"])
            row["abs_error"] = None if row["rel_error"] is None else abs(row["rel_error"])
            row["predicted_extrapolated"] = est.extrapolated
            if row["rel_error"] is None:
                row["why"] = "the point has no positive measured time"
                continue
            row["status"] = "ok"
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Per pattern (in first-seen order): points predicted, median and max |error|."""
    by: dict[str, list[dict]] = {}
    for r in rows:
        by.setdefault(r["pattern"], []).append(r)
    out = []
    for pattern, rs in by.items():
        errs = [r["abs_error"] for r in rs if r["status"] == "ok"]
        rels = [r["rel_error"] for r in rs if r["status"] == "ok"]
        out.append(
            {
                "pattern": pattern,
                "points": len(errs),
                "not_predicted": len(rs) - len(errs),
                "median_abs_error": median(errs) if errs else None,
                "max_abs_error": max(errs) if errs else None,
                "median_rel_error": median(rels) if rels else None,
                "within_20pct": (sum(e <= GOAL for e in errs) / len(errs)) if errs else None,
            }
        )
    return out
