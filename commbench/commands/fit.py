"""Fit alpha-beta link models to runs and write a calibration JSON planners can call.

    commbench fit results/RUN [RUN...] -o calibration.json

Per series (backend, op, link class, group size, dtype, timing, placement): piecewise
time = alpha + beta x bytes by relative-error least squares, segments found by the data
(exact segmentation, BIC), outliers down-weighted (Huber, Tukey), with R^2 on log-time,
median/max relative error, leave-one-size-out error and bootstrap 95% intervals; a point is an
outlier only if its neighbouring sizes disagree. Then a link table per (backend, link class,
timing) under the ring, tree, rabenseifner and pairwise models (Thakur, Rabenseifner & Gropp
2005), best model marked: per-op terms per size regime fitted across group sizes on
log(pred/t), and a line shared by all ops (fit/links.py).
Records with wrong > 0 are left out and counted; partial runs are accepted and said so.
Suite `step` records are fitted like `commbench run` records (their bytes and time_us are the
op the runner measured); suite `point` records (a whole training step, op "program") and
pipeline schedules are not primitive ops: they are ignored and counted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from commbench.commands.argtypes import positive_int

HELP = "fit alpha-beta models to runs and write a calibration JSON"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories to fit")
    p.add_argument(
        "-o", "--output", default=None, help="write the calibration JSON here (validated)"
    )
    g = p.add_argument_group("fit options")
    g.add_argument(
        "--max-segments",
        type=positive_int,
        default=5,
        help="most segments per series (default: %(default)s)",
    )
    g.add_argument(
        "--min-sizes",
        type=positive_int,
        default=3,
        help="distinct sizes a segment and a series need (default: %(default)s; >= 3)",
    )
    g.add_argument(
        "--penalty",
        type=float,
        default=2.0,
        help="multiplier of the BIC parameter penalty; higher = fewer segments "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--bootstrap",
        type=int,
        default=200,
        help="bootstrap resamples for the 95%% intervals, 0 = none (default: %(default)s)",
    )
    g.add_argument("--no-robust", dest="robust", action="store_false", help="plain WLS fit")
    g.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: %(default)s)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary lines")


def print_report(
    doc: dict,
    quiet: bool = False,
    partial_notes: Sequence[str] = (),
    warnings: Sequence[str] = (),
) -> None:
    """The calibration's series table, skipped series and link table, nccl-tests style; a
    partial run's note (results.Run.partial_note: why it is partial, what was kept) under its
    line."""
    import dataclasses

    from commbench.calibration.series_key import SeriesKey
    from commbench.tables import (
        LINK_LEGEND,
        LINKS,
        SERIES,
        Table,
        link_notes,
        link_rows,
        series_rows,
    )

    runs = doc["provenance"]["runs"]
    used = sum(r["records_used"] for r in runs)
    total = sum(r["records"] for r in runs)
    print(f"# commbench fit: {len(runs)} run(s), {used} of {total} records used")
    for r in runs:
        state = "complete" if not r["partial"] else f"PARTIAL ({r['status']})"
        hosts = ",".join(r.get("hosts", []) or []) or "?"
        tool = f", imported from {r['source']['tool']}" if r.get("source") else ""
        print(
            f"#   {r['run_id']}: {state}, {r['records_used']}/{r['records']} records, "
            f"backend {r.get('backend', '?')}, world {r.get('world_size', '?')} on {hosts}{tool}"
        )
    for note in partial_notes:
        print(f"#   {note}")
    for why, n in doc["ignored"].items():
        print(f"#   ignored {n} record(s): {why}")
    wrong = sum(s["excluded_wrong"] for s in doc["series"]) + sum(
        s["excluded_wrong"] for s in doc["skipped"]
    )
    notime = sum(s["excluded_time"] for s in doc["series"]) + sum(
        s["excluded_time"] for s in doc["skipped"]
    )
    if wrong or notime:
        print(f"#   left out {wrong} point(s) with wrong > 0, {notime} with no positive time")
    if not quiet:
        print("#")
        print(f"# {SERIES.caption}")
        rows = series_rows(doc["series"])
        op, *rest = SERIES.columns  # as wide as its longest cell (`allreduce(in) RING/LL128`)
        width = max([op.width, *(len(r[0]) for r in rows)])
        t = Table([dataclasses.replace(op, width=width), *rest])
        for row in rows:
            t.row(*row)
    for s in doc["skipped"]:
        print(f"# not fitted: {SeriesKey.from_dict(s).label()}: {s['reason']}")
    if doc["link_table"] and not quiet:
        print("#")
        print(f"# {LINKS.caption}")
        t = Table(LINKS.columns)
        for row in link_rows(doc["link_table"]):
            t.row(*row)
        print(f"# {LINK_LEGEND}")
        for line in link_notes(doc["link_table"]):
            print(f"#   {line}")
    for s in doc["link_skipped"]:
        print(f"# no link model for {s['backend']}/{s['link_class']}/{s['timing']}: {s['reason']}")
    for n in doc["notes"]:
        if n not in warnings:  # those go to stderr as warnings
            print(f"# note: {n}")


def main(args: argparse.Namespace) -> int:
    from commbench import calibration
    from commbench.errors import UsageError
    from commbench.fit import calibrate
    from commbench.fit.collect import collect, read_fit_runs
    from commbench.fit.options import FitOptions
    from commbench.fit.settings import mixed_settings

    if args.min_sizes < 3:
        raise UsageError("--min-sizes must be at least 3 (a line through 2 sizes has no check)")
    if args.bootstrap < 0:
        raise UsageError("--bootstrap must be 0 or more")
    if not args.penalty > 0:
        raise UsageError("--penalty must be positive")
    opts = FitOptions(
        min_sizes=args.min_sizes,
        max_segments=args.max_segments,
        penalty=args.penalty,
        robust=args.robust,
        bootstrap=args.bootstrap,
        seed=args.seed,
    )
    runs = read_fit_runs(args.runs)
    collected = collect(runs)
    if not collected.series:
        why = "; ".join(f"{n} x {w}" for w, n in collected.ignored.items()) or "none"
        raise UsageError(
            f"no usable records in {', '.join(args.runs)} (ignored: {why}): nothing to fit"
        )
    doc, outcomes, links = calibrate.build(collected, opts)
    partial = [note for run, _ in runs if (note := run.partial_note()) is not None]
    mixed = mixed_settings(doc["provenance"]["runs"])  # also among the doc's notes
    print_report(doc, args.quiet, partial, mixed)
    for warning in mixed:
        print(f"commbench: warning: {warning}", file=sys.stderr)
    if not outcomes:  # every series is in doc["skipped"] with its reason: name the first
        s, more = doc["skipped"][0], len(doc["skipped"]) - 1
        raise UsageError(
            f"no series could be fitted: {s['op']} p={s['group_size']} {s['link_class']}: "
            f"{s['reason']}" + (f" (and {more} more, see 'not fitted' above)" if more else "")
        )
    if args.output:
        path = calibration.save(doc, args.output)
        print(f"calibration: {path} ({len(doc['series'])} series, {len(links)} link(s))")
    else:
        print("# (not written: pass -o FILE to save the calibration)")
    return 0
