"""Check a calibration against measured suites: every suite point's predicted time (its Program
rebuilt from the record and priced as `commbench plan` prices it) next to the measured one; or,
for op sweeps (`commbench run`, `commbench import`, or any run with --ops), every primitive op
record's predicted time with how far it reached beyond the calibration (bytes, group size,
nodes; calibration/op_accuracy.py).

    commbench validate --calibration cal.json results/RUN [RUN...]
    commbench validate --calibration cal.json results/RUN --json -o validation.json
    commbench validate --calibration cal-2nodes.json results/SWEEP-4NODES --extrapolate

Per point: measured and predicted time, the relative error (predicted - measured) / measured,
and why a point could not be predicted (a size, op, group size or link class the calibration
did not measure: pass --extrapolate to let it scale). Then per pattern the median and max
|error|. Reads records and the calibration only.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from commbench.calibration import Calibration

HELP = "compare a calibration's predictions with measured suite points or op sweeps"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="suite run directories")
    p.add_argument("--calibration", required=True, metavar="FILE", help="calibration JSON")
    p.add_argument(
        "--extrapolate",
        action="store_true",
        help="let predictions extrapolate beyond what the calibration measured (marked)",
    )
    p.add_argument("--json", action="store_true", help="print rows and summary as JSON")
    p.add_argument("-o", "--output", default=None, help="also write rows and summary as JSON")
    p.add_argument("--steps", action="store_true", help="also print every step's comparison")
    p.add_argument(
        "--ops",
        action="store_true",
        help="predict every primitive op record (suite steps too) instead of whole suite "
        "points; the default for runs without suite points (commbench run, commbench import)",
    )
    p.add_argument(
        "--min-bytes",
        default=None,
        metavar="SIZE",
        help="with --ops: summarise only sizes >= SIZE (rows keep every size; default: all)",
    )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.3f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f}"


def print_rows(
    rows: list[dict], summary: list[dict], cal: Calibration, steps: bool, out: TextIO
) -> None:
    """The rows as a table (with every step's comparison with `steps`), then the summary."""
    from commbench.calibration.accuracy import ACCURACY_BAND
    from commbench.results.validation import ValidationRow, ValidationSummary
    from commbench.tables import Column, Table

    w = out.write
    w(f"# commbench validate: {len(rows)} point(s) against {cal.source} [{cal.kind}]\n")
    floor = cal.doc.get("noise_floor")
    if floor:
        w(
            f"# noise floor the calibration states: its runs repeat within {floor['median_rel']:.0%}"
            f" (median over {floor['sizes']} sizes of {floor['runs']} runs), so the band is "
            f"{band_of(cal):.0%}\n"
        )
    w(
        "# measured = the suite's time (sum of median x repeat over steps); predicted = the "
        "same Program priced by the calibration; error = (predicted - measured) / measured\n"
    )
    t = Table(
        [
            Column("run", "", 22),
            Column("pt", "", 3),
            Column("pattern", "", 11),
            Column("model", "", 12),
            Column("config", "", 22),
            Column("options", "", 16),
            Column("measured", "(ms)", 11),
            Column("predicted", "(ms)", 11),
            Column("error", "(%)", 8),
            Column("note", "", 4),
        ],
        out,
    )
    for r in map(ValidationRow.from_json, rows):
        note = ("x" if r.measured_extrapolated else "") + ("*" if r.predicted_extrapolated else "")
        t.row(
            r.run_id[-22:],
            r.point,
            r.pattern,
            r.model or "-",
            r.config,
            r.options or "-",
            _ms(r.measured_s),
            _ms(r.predicted_s),
            _pct(r.rel_error),
            note or "-",
        )
        if r.status != "ok":
            w(f"#   not predicted: {r.why}\n")
        if steps:
            for st in r.steps:
                w(
                    f"#   step {st.index:>3} {st.op:<14} {st.axis:<8} p={st.group_size:<3} "
                    f"{st.link_class:<5} {st.bytes:>10} B x {st.repeat:<6g} measured "
                    f"{_ms(st.measured_s)} ms predicted {_ms(st.predicted_s)} ms "
                    f"({_pct(st.rel_error)}%) {st.error or st.method}\n"
                )
    w(
        "# note x: the suite measured a chunk of a step larger than --max-bytes and scaled it; "
        "*: a prediction extrapolated beyond the calibration\n"
    )
    w("#\n# summary per pattern (|error| = |predicted - measured| / measured)\n")
    s = Table(
        [
            Column("pattern", "", 12),
            Column("points", "", 6),
            Column("skipped", "", 7),
            Column("median|err|", "(%)", 11),
            Column("max|err|", "(%)", 9),
            Column("median err", "(signed %)", 10),
            Column(f"<={ACCURACY_BAND:.0%}", "(share)", 7),
        ],
        out,
    )
    for x in map(ValidationSummary.from_json, summary):
        s.row(
            x.pattern,
            x.points,
            x.not_predicted,
            "-" if x.median_abs_error is None else f"{100 * x.median_abs_error:.1f}",
            "-" if x.max_abs_error is None else f"{100 * x.max_abs_error:.1f}",
            _pct(x.median_rel_error),
            "-" if x.within_20pct is None else f"{x.within_20pct:.2f}",
        )


def band_of(cal: Calibration) -> float:
    """The error band validation counts as accurate: 20%, or the noise floor the calibration
    states (its runs' repeat spread) where that is larger."""
    from commbench.calibration.accuracy import ACCURACY_BAND

    floor = cal.doc.get("noise_floor") or {}
    return max(ACCURACY_BAND, float(floor.get("median_rel", 0.0)))


def print_op_rows(
    rows: list[dict], summary: list[dict], cal: Calibration, band: float, out: TextIO
) -> None:
    """Per-op rows (op, shape, bytes, measured, predicted, error, reach), then the summary."""
    from commbench.sizes import format_size
    from commbench.tables import Column, Table

    w = out.write
    w(f"# commbench validate --ops: {len(rows)} record(s) against {cal.source} [{cal.kind}]\n")
    w("# error = (predicted - measured) / measured; reach = how far beyond the measurements\n")
    t = Table(
        [
            Column("op", "", 14),
            Column("p", "", 4),
            Column("nodes", "", 5),
            Column("link", "", 5),
            Column("bytes", "", 10),
            Column("measured", "(us)", 11),
            Column("predicted", "(us)", 11),
            Column("error", "(%)", 8),
            Column("unc", "(+-%)", 6),
            Column("reach", "", 4),
        ],
        out,
    )
    for r in rows:
        ok = r["status"] == "ok"
        t.row(
            f"{r['op']} {r['regime']}" if r.get("regime") else r["op"],
            r["group_size"],
            "-" if r["nodes"] is None else r["nodes"],
            r["link_class"],
            format_size(r["bytes"]),
            f"{r['measured_s'] * 1e6:.2f}",
            f"{r['predicted_s'] * 1e6:.2f}" if ok else "-",
            _pct(r["rel_error"]),
            f"{100 * (r['band'][1] / r['predicted_s'] - 1):.0f}" if ok and r["band"] else "-",
            r["reach"]["text"] if ok else "-",
        )
        if not ok:
            w(f"#   not predicted: {r['why']}\n")
    banded = [r for r in rows if r["status"] == "ok" and r["band"]]
    if banded:
        inside = sum(r["band"][0] <= r["measured_s"] <= r["band"][1] for r in banded)
        w(
            f"# unc: the uncertainty band, where the measured time should lie, stated for "
            f"{len(banded)} prediction(s) "
            f"beyond the measured node counts (calibration/band.py); {inside} inside it\n"
        )
    w(f"#\n# summary per op and shape (|error|; share within the band, {band:.0%})\n")
    s = Table(
        [
            Column("op", "", 14),
            Column("p", "", 4),
            Column("nodes", "", 5),
            Column("link", "", 5),
            Column("points", "", 6),
            Column("skipped", "", 7),
            Column("extrap", "", 6),
            Column("median|err|", "(%)", 11),
            Column("max|err|", "(%)", 9),
            Column("median err", "(signed %)", 10),
            Column(f"<={band:.0%}", "(share)", 7),
        ],
        out,
    )
    for x in summary:
        s.row(
            f"{x['op']} {x['regime']}" if x.get("regime") else x["op"],
            x["group_size"],
            "-" if x["nodes"] is None else x["nodes"],
            x["link_class"],
            x["points"],
            x["not_predicted"],
            x["extrapolated"],
            "-" if x["median_abs_error"] is None else f"{100 * x['median_abs_error']:.1f}",
            "-" if x["max_abs_error"] is None else f"{100 * x['max_abs_error']:.1f}",
            _pct(x["median_rel_error"]),
            "-" if x["within_band"] is None else f"{x['within_band']:.2f}",
        )


def say_in_sample(names: list[str]) -> None:
    """The line under the tables when a validated run is one the calibration was fitted from."""
    if names:
        print(
            f"# in-sample: {', '.join(names)} is among the calibration's own inputs: these errors "
            "say how well it fits those points (+0.0% at a measured size), not how well it "
            "predicts; validate against a run it was not fitted from"
        )


def main_ops(args: argparse.Namespace, cal: Calibration, runs: list) -> int:
    """validate --ops: every primitive op record predicted, with its reach."""
    from commbench.calibration import op_accuracy
    from commbench.calibration.document import fitted_from
    from commbench.errors import UsageError
    from commbench.sizes import parse_size

    rows = op_accuracy.compare(runs, cal, args.extrapolate)
    if not rows:
        raise UsageError(op_accuracy.nothing_to_validate(runs))
    if not any(r["status"] == "ok" for r in rows):
        raise UsageError(
            f"none of the {len(rows)} op record(s) could be predicted: {rows[0]['why']}"
            + ("" if args.extrapolate else " (or pass --extrapolate)")
        )
    min_bytes = parse_size(args.min_bytes, "--min-bytes") if args.min_bytes else 0
    in_sample = fitted_from(cal.doc, runs)
    band = band_of(cal)
    summary = op_accuracy.summarize(rows, band, min_bytes)
    doc = {
        "schema": op_accuracy.SCHEMA,
        "calibration": {"path": cal.source, "kind": cal.kind},
        "runs": [str(r.path) for r in runs],
        "extrapolate": args.extrapolate,
        "band": band,
        "noise_floor": cal.doc.get("noise_floor"),
        "min_bytes": min_bytes,
        "in_sample": in_sample,
        "summary": summary,
        "rows": rows,
    }
    if args.output:
        from commbench.results.rundir import write_json_output

        write_json_output(args.output, doc)
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print_op_rows(rows, summary, cal, band, sys.stdout)
    say_in_sample(in_sample)
    if args.output:
        print(f"validation: {args.output}")
    return 0


def main(args: argparse.Namespace) -> int:
    from commbench import calibration
    from commbench.calibration import accuracy as validate
    from commbench.calibration.document import fitted_from
    from commbench.errors import UsageError
    from commbench.results.rundir import read_run

    cal = calibration.load(args.calibration)
    runs = [read_run(p) for p in args.runs]
    has_points = any(r.get("kind") == "point" for run in runs for r in run.records)
    if args.ops or not has_points:
        return main_ops(args, cal, runs)
    rows = validate.compare(runs, cal, args.extrapolate)  # one row per point: never empty
    if not any(r["status"] == "ok" for r in rows):
        raise UsageError(f"none of the {len(rows)} point(s) could be predicted: {rows[0]['why']}")
    summary = validate.summarize(rows)
    in_sample = fitted_from(cal.doc, runs)
    doc = {
        "schema": "commbench.calibration.accuracy/1",
        "calibration": {"path": cal.source, "kind": cal.kind},
        "runs": [str(r.path) for r in runs],
        "extrapolate": args.extrapolate,
        "in_sample": in_sample,
        "summary": summary,
        "rows": rows,
    }
    if args.output:
        from commbench.results.rundir import write_json_output

        write_json_output(args.output, doc)
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print_rows(rows, summary, cal, args.steps, sys.stdout)
    say_in_sample(in_sample)
    if args.output:
        print(f"validation: {args.output}")
    return 0
