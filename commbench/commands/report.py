"""Draw the report: PNG figures and one self-contained HTML page of runs, fits, validation and
plans.

    commbench report                                  # newest run of each kind in results/
    commbench report results/RUN1 results/RUN2 --calibration cal.json --plan plan.json -o out

Figures (each only when its data is there): bus bandwidth and latency vs message size per op
with the fitted alpha-beta model, its breakpoints and residuals; per-strategy step
communication time stacked by op; EP tokens per destination; the PP 1F1B timeline with its
bubble; predicted vs measured (validate); the planner's top configs split by axis. The page
lists the runs used (partial ones marked) and everything it could not draw, with the reason.
Reads records, calibrations and plans only: no transport is imported.
Without --calibration the runs are fitted in memory (said on the page); --no-fit skips that.
A plan file is what `commbench plan -o FILE` writes: "configs" best first, each with a label,
zero_stage and time_s {compute, bubble, tp, cp, ep, pp, dp_exposed, step}.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from commbench.commands.argtypes import DEFAULT_RESULTS, positive_int

HELP = "draw PNG figures and one self-contained HTML report of runs, fits and plans"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "runs",
        nargs="*",
        type=Path,
        metavar="RUN_DIR",
        help="run directories (default: the newest run of each kind under --results)",
    )
    p.add_argument(
        "--results",
        type=Path,
        default=DEFAULT_RESULTS,
        help="where to look for runs when none is given (default: %(default)s)",
    )
    p.add_argument(
        "--all",
        dest="every",
        action="store_true",
        help="every run under --results, not the newest of each kind",
    )
    p.add_argument(
        "--calibration", type=Path, default=None, help="calibration JSON to draw fits from"
    )
    p.add_argument(
        "--no-fit",
        dest="fit",
        action="store_false",
        help="without --calibration, draw measurements only (default: fit the runs in memory)",
    )
    p.add_argument(
        "--plan",
        dest="plans",
        type=Path,
        action="append",
        default=[],
        metavar="PLAN_JSON",
        help="planner output (commbench plan --json) to draw (repeatable)",
    )
    p.add_argument(
        "--top", type=positive_int, default=10, help="plan configs drawn (default: %(default)s)"
    )
    p.add_argument(
        "-o", "--output", type=Path, default=None, help="output directory (default: RESULTS/report)"
    )


def main(args: argparse.Namespace) -> int:
    from commbench.report import ReportOptions, build_report

    opts = ReportOptions(
        runs=list(args.runs),
        results=args.results,
        calibration=args.calibration,
        plans=list(args.plans),
        out=args.output or args.results / "report",
        fit=args.fit,
        every=args.every,
        top=args.top,
    )
    rep = build_report(opts)
    partial = [r.path.name for r in rep.runs if r.partial]
    print(
        f"# commbench report: {len(rep.runs)} run(s)"
        + (f" ({len(partial)} partial: {', '.join(partial)})" if partial else "")
        + f", {len(rep.figures)} figure(s)"
    )
    for f in rep.figures:
        print(f"#   {opts.out / 'figures' / (f.name + '.png')}: {f.title}")
    for m in rep.missing:
        print(f"# missing: {m}")
    print(f"report: {rep.html}")
    return 0
