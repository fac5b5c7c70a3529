"""The report: runs + calibration + plans -> PNG figures and one self-contained index.html.

    from commbench.report import ReportOptions, build_report
    rep = build_report(ReportOptions(runs=[Path("results/r1")], out=Path("results/report")))

Reads records, calibrations and plan files only (never a transport). Every figure is made only
when its data is there; the page lists which runs were used (and why), their metadata with
partial runs marked, and everything it could not draw with the reason. Without --calibration
the series are fitted in memory from the runs shown (as `commbench fit` would, without the
bootstrap intervals) and the page says so; --no-fit draws measurements alone.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from commbench import __version__
from commbench.errors import UsageError
from commbench.report import check_inputs
from commbench.report import inputs as reportdata
from commbench.report.figures import Figure
from commbench.report.html import Block, Section, Table, bullets, page
from commbench.report.step_timeline import step_timelines, verifications
from commbench.report.tables import (
    calibration_blocks,
    outlier_table,
    plan_table,
    points_table,
    runs_table,
    validation_tables,
)
from commbench.results.rundir import Run, read_run
from commbench.traffic.patterns import Role

if TYPE_CHECKING:
    from commbench.calibration import Calibration

FIGURES_DIR = "figures"
MAX_STEP_TIMELINES = 8  # whole-step timelines drawn (the first points)


@dataclass(kw_only=True)
class ReportOptions:
    """What to report on and where to write it."""

    runs: list[Path] = field(default_factory=list)  # empty: the newest of each kind in results
    results: Path = Path("results")
    calibration: Path | None = None
    plans: list[Path] = field(default_factory=list)
    out: Path = Path("results/report")
    fit: bool = True  # fit in memory when no calibration is given
    every: bool = False  # every run under results, not the newest of each kind
    top: int = 10  # plan configs drawn


@dataclass
class Report:
    """What was written: the page, the figures (also as PNG files) and what is missing."""

    html: Path
    figures: list[Figure]
    runs: list[Run]
    missing: list[str]
    notes: list[str]


# ---- inputs --------------------------------------------------------------------------------
def _runs(opts: ReportOptions) -> tuple[list[Run], str, list[str]]:
    if opts.runs:
        reportdata.check_run_dirs(opts.runs)
        runs = [read_run(p) for p in opts.runs]
        return runs, "the run directories given on the command line", []
    runs, skipped = reportdata.select_runs(opts.results, opts.every)
    how = (
        f"every run under {opts.results}"
        if opts.every
        else f"the newest run of each kind under {opts.results} (kind: suite name, or op and "
        "group for sweeps; plus backend and world size)"
    )
    return runs, how, skipped


def _calibration(opts: ReportOptions, runs: list[Run]) -> tuple[Calibration | None, str, list[str]]:
    """(Calibration or None, how it was obtained, the ids of the runs it was fitted from:
    their points' validation is in-sample)."""
    from commbench import calibration

    if opts.calibration is not None:
        from commbench.calibration.document import fitted_from

        cal = calibration.load(opts.calibration)
        own = fitted_from(cal.doc, runs)
        how = f"{opts.calibration} ({cal.kind}, {len(cal.series)} series)"
        if own:
            how += f"; fitted from {', '.join(own)} of these runs: their points' check is in-sample"
        return cal, how, own
    if not opts.fit:
        return None, "--no-fit given", []
    from commbench.fit import calibrate
    from commbench.fit.collect import collect
    from commbench.fit.options import FitOptions

    collected = collect([(r, []) for r in runs if r.records])
    if not collected.series:
        return None, "nothing in these runs can be fitted", []
    doc, outcomes, _ = calibrate.build(collected, FitOptions(bootstrap=0))
    if not outcomes:
        return None, "no series has enough distinct sizes to fit", []
    how = (
        f"fitted by the report from the runs above ({len(outcomes)} series; pass "
        "--calibration FILE to use a saved one)"
    )
    own = [r.run_id for r in runs]
    return calibration.Calibration(doc, "the in-report fit"), how, own


# ---- building ------------------------------------------------------------------------------
CONVENTIONS = (
    "Conventions (nccl-tests): S = the larger of one rank's input and output buffer; "
    "algbw = S / t; busbw = algbw x 2(p-1)/p (all-reduce), (p-1)/p (all-gather, "
    "reduce-scatter, all-to-all), 1 (broadcast, reduce, send/recv); p = group size; "
    "GB = 1e9 B; sizes in binary units (KiB = 1024 B). t = median over iterations of the "
    "slowest rank of the group."
)


class _Builder:
    """Collects figures and what is missing while each section is drawn."""

    def __init__(
        self, runs: list[Run], cal: Calibration | None, in_sample: list[str], top: int
    ) -> None:
        self.runs, self.cal, self.in_sample, self.top = runs, cal, in_sample, top
        self.figures: list[Figure] = []
        self.missing: list[str] = []
        self.notes: list[str] = []

    def add(self, fig: Figure) -> Figure:
        self.figures.append(fig)
        return fig

    def run_gaps(self) -> None:
        for r in self.runs:
            if r.partial:
                self.missing.append(
                    f"run {r.path.name} is partial (status {r.status}): it shows the "
                    f"{len(r.records)} record(s) written before it stopped"
                )
            if not r.records:
                self.missing.append(f"run {r.path.name} has no records: nothing of it to draw")

    def collectives(self, cal_how: str) -> list[Block]:
        from commbench.report.figures import collectives

        curves, notes = reportdata.curves(self.runs, self.cal)
        self.notes += notes
        if not curves:
            unusable = [n for n in notes if "no usable point" in n]
            self.missing.append(
                f"no usable measured primitive op ({'; '.join(unusable)}): no bandwidth or "
                "latency figure"
                if unusable
                else "no measured primitive op (collective or suite step records): no "
                "bandwidth or latency figure"
            )
        if self.cal is None:
            self.missing.append(
                f"no calibration ({cal_how}): fitted lines, residuals and validation not drawn"
            )
        blocks: list[Block] = []
        by_op: dict[str, list] = {}
        for c in curves:
            by_op.setdefault(c.key.op, []).append(c)
        for op in sorted(by_op):
            blocks.append(self.add(collectives.bandwidth(op, by_op[op])))
            blocks.append(self.add(collectives.latency(op, by_op[op])))
        unfit: dict[str, list[str]] = {}
        for c in curves:
            if self.cal is not None and c.model is None:
                unfit.setdefault(c.missing, []).append(c.key.label())
        for why, labels in unfit.items():
            self.missing.append(f"no fit for {len(labels)} series ({why}): {'; '.join(labels)}")
        if self.cal is not None and self.cal.doc.get("series"):
            blocks += calibration_blocks(self.cal)
        return blocks

    def strategies(self) -> list[Block]:
        from commbench.report.figures import strategies
        from commbench.report.timeline import timeline

        rows, notes = reportdata.points(self.runs)
        self.notes += notes
        strat = [r for r in rows if reportdata.role(r.pattern) is not Role.SWEEP]
        blocks: list[Block] = []
        if strat:
            blocks.append(self.add(strategies.step_breakdown(strat)))
        else:
            self.missing.append(
                f"no suite point of a strategy ({', '.join(strategies.strategy_order())}): "
                "no step-time figure"
            )
        if rows:
            blocks.append(points_table(rows))
        loads = reportdata.ep_loads(strat)
        if loads:
            blocks.append(self.add(strategies.ep_load(loads)))
        else:
            self.missing.append("no EP suite point: no tokens-per-destination figure")
        pipelines = [r for r in strat if reportdata.role(r.pattern) is Role.PIPELINE]
        replays = (timeline(r.record, r.run_id) for r in pipelines if r.record is not None)
        tls = [t for t in replays if t is not None]
        for k, t in enumerate(tls):
            blocks.append(self.add(strategies.pp_timeline(t, f"pp-timeline-{k + 1}")))
        if not tls:
            self.missing.append("no PP suite point with pp > 1: no 1F1B timeline")
        steps = step_timelines(self.runs)
        for k, st in enumerate(steps[:MAX_STEP_TIMELINES]):
            blocks.append(self.add(strategies.step_timeline(st, f"step-timeline-{k + 1}")))
        if not steps:
            self.missing.append("no `suite step` or `plan --verify` point: no step timeline")
        return blocks

    def validation(self) -> list[Block]:
        from commbench.report.figures import models

        rows, summary, why = reportdata.validation(self.runs, self.cal)
        if not rows:
            self.missing.append(f"no predicted-vs-measured figure: {why}")
            return []
        if not reportdata.predicted_pairs(rows):
            self.missing.append("validate: no point could be predicted (see the status column)")
            return [*validation_tables(rows, summary)]
        own = sorted({str(r["run_id"]) for r in rows} & set(self.in_sample))
        note = (
            f"The calibration was fitted from {', '.join(own)}: an in-sample check of "
            "those points (how well it fits them, not how well it predicts)"
            if own
            else ""
        )
        return [
            self.add(models.predicted_vs_measured(rows, note=note)),
            *validation_tables(rows, summary),
        ]

    def checks(self) -> list[Block]:
        """Per check run: the pair-bandwidth heatmap, the outlier table and the verdict."""
        from commbench.report.figures.check import pair_heatmap

        found, notes = check_inputs.checks(self.runs)
        self.notes += notes
        blocks: list[Block] = []
        for k, (run_id, summary) in enumerate(found):
            if any(r.test == "pairs" for r in summary.results):
                blocks.append(self.add(pair_heatmap(run_id, summary, f"check-pairs-{k + 1}")))
            blocks += [outlier_table(run_id, summary), f"{run_id}: {summary.verdict()}"]
        if not found:
            self.missing.append("no `commbench check` run: no pair-bandwidth heatmap or outliers")
        return blocks

    def traces(self) -> list[Block]:
        """Per traced job: one step's timeline, the per-axis table and its findings."""
        from commbench.report import trace_inputs
        from commbench.report.figures.trace import timeline

        jobs, notes = trace_inputs.traced_jobs(self.runs)
        self.notes += notes
        blocks: list[Block] = []
        for k, job in enumerate(jobs):
            blocks.append(self.add(timeline(job, f"trace-{k + 1}")))
            blocks.append(Table(trace_inputs.AXES_TABLE, trace_inputs.axis_rows(job)))
            found = job.meta.get("findings") or []
            blocks.append(bullets([f"finding: {f}" for f in found] or ["no finding"]))
        if not jobs:
            self.missing.append("no `commbench trace --results` run: no traced job timeline")
        return blocks

    def plans(self, plans: list[reportdata.Plan]) -> list[Block]:
        from commbench.report.figures import models

        blocks: list[Block] = []
        for k, plan in enumerate(plans):
            if not plan.configs:
                self.missing.append(f"plan {plan.source} has no configs")
                continue
            blocks += [
                self.add(models.plan_top(plan, f"plan-{k + 1}", self.top)),
                plan_table(plan, self.top),
            ]
        if not plans:
            self.missing.append(
                "no plan given (--plan FILE from `commbench plan --json`): no planner figure"
            )
        checks = verifications(self.runs)
        blocks += [self.add(models.verify_ranking(v)) for v in checks]
        if not checks:
            self.missing.append("no `plan --verify` run: no predicted-vs-measured ranking")
        return blocks


def build_report(opts: ReportOptions) -> Report:
    """Read the inputs, draw every figure that has data, write the PNGs and index.html."""
    plans = [reportdata.load_plan(p) for p in opts.plans]  # bad files fail before any work
    runs, how, superseded = _runs(opts)
    cal, cal_how, in_sample = _calibration(opts, runs)
    b = _Builder(runs, cal, in_sample, opts.top)
    b.run_gaps()
    body = [
        Section("Collectives: bandwidth, latency and fits", b.collectives(cal_how), "collectives"),
        Section(
            "Strategies: step communication, EP load, PP schedule", b.strategies(), "strategies"
        ),
        Section("Validation: predicted vs measured", b.validation(), "validation"),
        Section("Cluster check: pair bandwidth and outliers", b.checks(), "check"),
        Section("Traced jobs: one step by axis", b.traces(), "trace"),
        Section("Planner: top configs", b.plans(plans), "plans"),
    ]
    for s in body:
        s.blocks = s.blocks or ["Nothing to show here: see What is missing."]
    inputs = Section("Inputs", [f"Runs: {how}.", runs_table(runs)], "inputs")
    if superseded:
        inputs.blocks += ["Older runs of the same kind, not shown:", bullets(superseded)]
    inputs.blocks.append(f"Calibration: {cal_how if cal is not None else f'none ({cal_how})'}.")
    if plans:
        inputs.blocks.append("Plans: " + ", ".join(p.source for p in plans) + ".")
    gaps = Section(
        "What is missing",
        [bullets(b.missing or ["nothing: every figure had its data"], "missing")],
        "missing",
    )
    if b.notes:
        gaps.blocks.append(bullets(b.notes))
    html_text = page(
        "commbench report",
        f"generated {time.strftime('%Y-%m-%d %H:%M:%S %z')} by commbench {__version__} from "
        f"{len(runs)} run(s); {len(b.figures)} figure(s)",
        [inputs, gaps, *body],
        CONVENTIONS,
    )
    out = _write(opts.out, b.figures, html_text)
    return Report(out, b.figures, runs, b.missing, b.notes)


def _write(out: Path, figures: list[Figure], html_text: str) -> Path:
    """index.html and figures/*.png under `out` (stale PNGs of an earlier report removed)."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out}: exists and is not a directory")
    figdir = out / FIGURES_DIR
    try:
        figdir.mkdir(parents=True, exist_ok=True)
        names = {f"{f.name}.png" for f in figures}
        for old in figdir.glob("*.png"):
            if old.name not in names:
                old.unlink()
        for f in figures:
            (figdir / f"{f.name}.png").write_bytes(f.png)
        path = out / "index.html"
        tmp = out / ".index.html.tmp"
        tmp.write_text(html_text, encoding="utf-8")
        tmp.replace(path)
    except OSError as e:
        with contextlib.suppress(OSError):  # a full disk leaves no half-written page behind
            (out / ".index.html.tmp").unlink(missing_ok=True)
        raise UsageError(f"-o {out}: cannot write the report ({e.strerror or e})") from None
    return path
