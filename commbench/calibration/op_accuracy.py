"""Predicted against measured, op by op: every primitive-op record of a run (`commbench run`
sweeps, `commbench import` logs, a suite's step records) predicted from a calibration, with how
far each prediction reached beyond what was measured (bytes, group size, nodes).

This is how a transfer is checked: fit on 2 nodes, validate a 4-node run, and every row says
whether it was inside the calibration or how far outside.

    rows = op_accuracy.compare(["results/RUN"], calibration.load("cal.json"), extrapolate=True)
    for s in op_accuracy.summarize(rows): print(s["op"], s["median_abs_error"])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from statistics import median

from commbench.calibration.choice import asked_regime, regimes_of
from commbench.calibration.predict import Calibration
from commbench.calibration.reach import group_nodes
from commbench.dtypes import canonical_dtype_name
from commbench.errors import UsageError
from commbench.ops import OPS, canonical_op
from commbench.results.rundir import Run, read_run

# records of one op (suite points are Programs); `trace`: an op of a profiled job
# (`commbench trace --results`), so a calibration is scored in-job against the microbenchmark
OP_KINDS = ("collective", "step", "trace")
SCHEMA = "commbench.calibration.op_accuracy/1"
ROW_KEYS = (
    "run_id", "kind", "op", "backend", "dtype", "link_class", "group_size", "nodes", "timing",
    "placement", "regime", "bytes", "measured_s", "predicted_s", "rel_error", "abs_error",
    "method", "extrapolated", "reach", "band", "band_terms", "status", "why",
)  # fmt: skip


def op_records(run: Run, left_out: Counter | None = None) -> list[dict]:
    """The run's records of one primitive op with a positive time, a clean check and a known
    size; the op records left out are counted in `left_out`, by why."""
    out = []
    skipped: Counter = Counter() if left_out is None else left_out
    for rec in run.records:
        if rec.get("kind") not in OP_KINDS:
            continue
        op = canonical_op(rec.get("op") or "")
        if op not in OPS or OPS[op].scheduled or not rec.get("link_class"):
            continue
        t = rec.get("time_us")
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not t > 0:
            skipped["with no positive time"] += 1
        elif (rec.get("wrong") or 0) > 0:
            skipped["with wrong data (the run's #wrong)"] += 1
        elif rec.get("sized") is False:
            skipped["with no size (the trace did not say)"] += 1
        else:
            out.append(rec)
    return out


def nothing_to_validate(runs: Sequence[Run]) -> str:
    """Why runs without a usable op record have nothing to validate: their op records all
    returned wrong data, no time or no size (said with the counts), or they have none."""
    left_out: Counter = Counter()
    for run in runs:
        op_records(run, left_out)
    names = ", ".join(str(r.path) for r in runs)
    if not left_out:
        return (
            f"no suite point records and no op records (kind {', '.join(OP_KINDS)}) in "
            f"{names}: nothing to validate"
        )
    parts = [f"{n} {why}" for why, n in sorted(left_out.items(), key=lambda kv: -kv[1])]
    return (
        f"none of the {sum(left_out.values())} op record(s) in {names} can be validated: "
        f"{', '.join(parts)}; measure again"
    )


def compare(
    runs: Sequence[str | Path | Run], cal: Calibration, extrapolate: bool = False
) -> list[dict]:
    """One row per op record of `runs`: measured and predicted seconds, the relative error
    (predicted - measured) / measured, the method and the reach; a record the calibration
    cannot price gets status "not predicted" and why."""
    rows = []
    for item in runs:
        run = item if isinstance(item, Run) else read_run(item)
        run_id = run.run_id
        for rec in op_records(run):
            op, link, p = canonical_op(rec["op"]), str(rec["link_class"]), int(rec["group_size"])
            nbytes, measured = int(rec["bytes"]), float(rec["time_us"]) * 1e-6
            row = dict.fromkeys(ROW_KEYS)
            row.update(
                run_id=run_id,
                kind=rec["kind"],
                op=op,
                backend=str(rec.get("backend")),
                dtype=canonical_dtype_name(str(rec.get("dtype"))),
                link_class=link,
                group_size=p,
                nodes=group_nodes(rec, link),
                timing=rec.get("timing"),
                placement=rec.get("placement"),
                bytes=nbytes,
                measured_s=measured,
                status="not predicted",
            )
            try:
                algorithm, protocol = asked_regime(
                    rec, regimes_of(cal.series, op, link), str(run.path)
                )
                got = cal.explain(
                    op,
                    nbytes,
                    p,
                    link,
                    dtype=row["dtype"],
                    backend=row["backend"],
                    extrapolate=extrapolate,
                    timing=row["timing"],
                    placement=row["placement"],
                    nodes=row["nodes"],
                    algorithm=algorithm,
                    protocol=protocol,
                )
            except UsageError as e:
                row["why"] = str(e)
                rows.append(row)
                continue
            rel = (got.seconds - measured) / measured
            row.update(
                regime=got.series.regime if got.series is not None else "",
                predicted_s=got.seconds,
                rel_error=rel,
                abs_error=abs(rel),
                method=got.method,
                extrapolated=got.extrapolated or not got.reach.inside,
                reach=got.reach.as_dict() | {"text": got.reach.describe()},
                band=list(got.band) if got.band is not None else None,  # seconds (band.py)
                band_terms=got.band_terms,
                status="ok",
            )
            rows.append(row)
    return rows


def summarize(rows: list[dict], band: float, min_bytes: int = 0) -> list[dict]:
    """Per (op, link class, group size, nodes, regime) in first-seen order, over rows of at least
    min_bytes: points, not predicted, median / max |error|, median signed error, the share
    within `band`, and how many predictions reached beyond the measurements."""
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["bytes"] >= min_bytes:
            key = (r["op"], r["link_class"], r["group_size"], r["nodes"], r.get("regime") or "")
            by.setdefault(key, []).append(r)
    out = []
    for (op, link, p, nodes, regime), rs in by.items():
        ok = [r for r in rs if r["status"] == "ok"]
        errs = [r["abs_error"] for r in ok]
        out.append(
            {
                "op": op,
                "link_class": link,
                "group_size": p,
                "nodes": nodes,
                "regime": regime,  # the pinned NCCL regime priced under, "" NCCL's choice
                "points": len(ok),
                "not_predicted": len(rs) - len(ok),
                "extrapolated": sum(bool(r["extrapolated"]) for r in ok),
                "median_abs_error": median(errs) if errs else None,
                "max_abs_error": max(errs) if errs else None,
                "median_rel_error": median(r["rel_error"] for r in ok) if ok else None,
                "within_band": sum(e <= band for e in errs) / len(errs) if errs else None,
            }
        )
    return out
