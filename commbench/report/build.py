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

import time
from dataclasses import dataclass, field
from pathlib import Path

from commbench import __version__
from commbench.errors import UsageError
from commbench.report import inputs as reportdata
from commbench.report.figures import Figure
from commbench.report.figures.models import axis_order
from commbench.report.html import Num, Raw, Section, Table, badge, bullets, esc, page
from commbench.results.rundir import Run, read_run
from commbench.sizes import format_size

FIGURES_DIR = "figures"


@dataclass
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


def _calibration(opts: ReportOptions, runs: list[Run]):
    """(Calibration or None, how it was obtained, in_sample)."""
    from commbench import calibration

    if opts.calibration is not None:
        cal = calibration.load(opts.calibration)
        return cal, f"{opts.calibration} ({cal.kind}, {len(cal.series)} series)", False
    if not opts.fit:
        return None, "--no-fit given", False
    from commbench.fit import calibrate
    from commbench.fit.collect import collect
    from commbench.fit.series import FitOptions

    collected = collect([(r, []) for r in runs if r.records])
    if not collected.series:
        return None, "nothing in these runs can be fitted", False
    doc, outcomes, _ = calibrate.build(collected, FitOptions(bootstrap=0))
    if not outcomes:
        return None, "no series has enough distinct sizes to fit", False
    how = (
        f"fitted by the report from the runs above ({len(outcomes)} series; pass "
        "--calibration FILE to use a saved one)"
    )
    return calibration.Calibration(doc, "the in-report fit"), how, True


# ---- tables --------------------------------------------------------------------------------
def _versions(meta: dict) -> str:
    libs = meta.get("libraries") or {}
    parts = [f"{k} {str(v).split(',')[0].strip()}" for k, v in libs.items() if v]
    if meta.get("python"):
        parts.insert(0, f"python {meta['python']}")
    if meta.get("commbench_version"):
        parts.insert(0, f"commbench {meta['commbench_version']}")
    return "; ".join(parts) or "-"


def runs_table(runs: list[Run]) -> Table:
    rows, partial = [], set()
    for i, r in enumerate(runs):
        m = r.meta
        if r.partial:
            partial.add(i)
        env = m.get("env") or {}
        nccl = ", ".join(f"{k}={v}" for k, v in env.items() if k.startswith("NCCL_"))
        rows.append(
            [
                r.path.name,
                reportdata.run_kind(r),
                Raw(f"<code>{esc(m.get('command', '-'))}</code>"),
                badge(r.status, r.partial),
                len(r.records),
                m.get("start_time_iso", "-"),
                ", ".join(m.get("hosts") or []) or "-",
                m.get("world_size", "-"),
                m.get("ranks_per_node", "-"),
                m.get("backend", "-"),
                _versions(m) + (f"; {nccl}" if nccl else ""),
                (m.get("git_revision") or "-")[:10],
            ]
        )
    return Table(
        [
            "run",
            "kind",
            "command",
            "status",
            "records",
            "started",
            "hosts",
            "world",
            "ranks/node",
            "backend",
            "versions",
            "git",
        ],
        rows,
        partial,
    )


def series_table(cal) -> Table:
    rows = []
    for row in cal.doc["series"]:
        for k, s in enumerate(row["segments"]):
            bw = s.get("busbw_GBps")
            rows.append(
                [
                    row["op"],
                    row["group_size"],
                    row["link_class"],
                    row["dtype"],
                    row["backend"],
                    row["timing"],
                    k + 1,
                    f"{format_size(s['bytes_min'])} .. {format_size(s['bytes_max'])}",
                    Num(f"{s['alpha_s'] * 1e6:.2f}"),
                    Num(f"{bw:.3g}" if bw is not None else "-"),
                    Num(f"{s['median_rel_err']:.1%}"),
                    Num(f"{s['max_rel_err']:.1%}"),
                    s["points"],
                ]
            )
    return Table(
        [
            "op",
            "p",
            "link",
            "dtype",
            "backend",
            "timing",
            "segment",
            "bytes",
            "alpha (us)",
            "busbw (GB/s)",
            "median |err|",
            "max |err|",
            "points",
        ],
        rows,
        caption="Fitted segments, t = alpha + beta x S; busbw = factor(op, p) / beta in GB/s "
        "(1e9 B/s); errors are relative, |fit - measured| / measured.",
    )


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def link_table(cal) -> Table:
    rows = []
    for e in cal.doc.get("link_table", []):
        m = e["models"][e["best_model"]]
        rows.append(
            [
                e["backend"],
                e["link_class"],
                e["timing"],
                e["best_model"],
                Num(f"{m['alpha_s'] * 1e6:.2f}"),
                Num(_fmt(m.get("busbw_GBps"), ".3g")),  # None: beta 0 (flat or falling times)
                Num(_fmt(m.get("median_rel_err"), ".1%")),  # absent from a reference
                ", ".join(map(str, e.get("group_sizes", []))),
                e.get("note") or "",
            ]
        )
    return Table(
        [
            "backend",
            "link",
            "timing",
            "best model",
            "alpha (us)",
            "busbw (GB/s)",
            "median |err|",
            "group sizes",
            "note",
        ],
        rows,
        caption="Link table: one alpha and bus bandwidth per link class under the best algorithm "
        "model (Thakur, Rabenseifner & Gropp 2005).",
    )


def _extras(r: reportdata.PointRow) -> str:
    rec = r.record or {}
    meta = rec.get("meta") or {}
    out = list(r.notes)
    if r.pattern == "pp" and rec.get("bubble_measured") is not None:
        out.append(
            f"bubble {rec['bubble_measured']:.1%} measured, {meta.get('bubble_fraction', 0):.1%} "
            f"theory; includes {meta.get('compute_s', 0) * 1e3:.3g} ms synthetic compute"
        )
    if r.pattern == "ep" and "imbalance" in meta:
        out.append(
            f"imbalance {meta['imbalance']:.2f}, router {meta.get('router_imbalance', 0):.2f}, "
            f"dropped {meta.get('dropped_fraction', 0):.1%}"
        )
    return "; ".join(out)


def points_table(rows: list[reportdata.PointRow]) -> Table:
    out, partial = [], set()
    for i, r in enumerate(rows):
        if not r.complete:
            partial.add(i)
        out.append(
            [
                r.run_id,
                r.index,
                r.pattern,
                r.model,
                r.config,
                r.options,
                Num(f"{r.time_us / 1e3:.3f}"),
                Num(format_size(r.bytes) if r.bytes else "-"),
                Num(f"{r.busbw_GBps:.3f}" if r.busbw_GBps is not None else "-"),
                r.wrong,
                "yes" if r.extrapolated else "-",
                _extras(r),
            ]
        )
    return Table(
        [
            "run",
            "point",
            "pattern",
            "model",
            "config",
            "options",
            "comm (ms)",
            "bytes/rank",
            "busbw (GB/s)",
            "#wrong",
            "extrapolated",
            "notes",
        ],
        out,
        partial,
        caption="Suite points: comm = sum over the Program's steps of median time (slowest rank) "
        "x repeat; bytes = S x repeat per rank; busbw = bus bytes / comm. Highlighted: points "
        "without their point record (run cut short).",
    )


def validation_tables(rows: list[dict], summary: list[dict]) -> list[Table]:
    def ms(v):
        return Num(f"{v * 1e3:.3f}") if isinstance(v, (int, float)) else "-"

    def pct(v):
        return Num(f"{v:+.1%}") if isinstance(v, (int, float)) else "-"

    summ = Table(
        ["pattern", "points", "median |error|", "max |error|"],
        [
            [
                s.get("pattern"),
                s.get("points"),
                Num(f"{s['median_abs_error']:.1%}")
                if s.get("median_abs_error") is not None
                else "-",
                Num(f"{s['max_abs_error']:.1%}") if s.get("max_abs_error") is not None else "-",
            ]
            for s in summary
        ],
        caption="Per pattern: relative error (predicted - measured) / measured.",
    )
    detail = Table(
        ["pattern", "config", "model", "measured (ms)", "predicted (ms)", "error", "status"],
        [
            [
                r.get("pattern"),
                r.get("config"),
                r.get("model"),
                ms(r.get("measured_s")),
                ms(r.get("predicted_s")),
                pct(r.get("rel_error")),
                r.get("status", ""),
            ]
            for r in rows
        ],
    )
    return [summ, detail]


def plan_table(plan: reportdata.Plan, top: int) -> Table:
    axes = axis_order({a for c in plan.configs for a in c.comm_s})

    def ms(v):
        return Num(f"{v * 1e3:.4g}" if v is not None else "-")

    return Table(
        ["rank", "config", "step (ms)", "comm (ms)"]
        + [f"{a} (ms)" for a in axes]
        + ["compute (ms)", "bubble (ms)"],
        [
            [c.rank, c.label, ms(c.step_s), ms(c.comm_total)]
            + [ms(c.comm_s.get(a)) for a in axes]
            + [ms(c.compute_s), ms(c.bubble_s)]
            for c in plan.configs[:top]
        ],
    )


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

    def __init__(self, runs: list[Run], cal, in_sample: bool, top: int) -> None:
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

    def collectives(self, cal_how: str) -> list:
        from commbench.report.figures import collectives

        curves, notes = reportdata.curves(self.runs, self.cal)
        self.notes += notes
        if not curves:
            self.missing.append(
                "no measured primitive op (collective or suite step records): no bandwidth "
                "or latency figure"
            )
        if self.cal is None:
            self.missing.append(
                f"no calibration ({cal_how}): fitted lines, residuals and validation not drawn"
            )
        blocks: list = []
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
            blocks.append(series_table(self.cal))
            if self.cal.doc.get("link_table"):
                blocks.append(link_table(self.cal))
        return blocks

    def strategies(self) -> list:
        from commbench.report.figures import strategies
        from commbench.report.timeline import timeline

        rows, notes = reportdata.points(self.runs)
        self.notes += notes
        strat = [r for r in rows if r.pattern != "collectives"]
        blocks: list = []
        if strat:
            blocks.append(self.add(strategies.step_breakdown(strat)))
        else:
            self.missing.append(
                "no suite point of a strategy (tp, dp, zero, pp, cp, ep): no step-time figure"
            )
        if rows:
            blocks.append(points_table(rows))
        loads = reportdata.ep_loads(strat)
        if loads:
            blocks.append(self.add(strategies.ep_load(loads)))
        else:
            self.missing.append("no EP suite point: no tokens-per-destination figure")
        tls = [timeline(r.record, r.run_id) for r in strat if r.pattern == "pp" and r.complete]
        tls = [t for t in tls if t is not None]
        for k, t in enumerate(tls):
            blocks.append(self.add(strategies.pp_timeline(t, f"pp-timeline-{k + 1}")))
        if not tls:
            self.missing.append("no PP suite point with pp > 1: no 1F1B timeline")
        return blocks

    def validation(self) -> list:
        from commbench.report.figures import models

        rows, summary, why = reportdata.validation(self.runs, self.cal)
        if not rows:
            self.missing.append(f"no predicted-vs-measured figure: {why}")
            return []
        if not reportdata.predicted_pairs(rows):
            self.missing.append("validate: no point could be predicted (see the status column)")
            return validation_tables(rows, summary)
        note = (
            "The calibration was fitted from these same runs: an in-sample check"
            if self.in_sample
            else ""
        )
        return [
            self.add(models.predicted_vs_measured(rows, note=note)),
            *validation_tables(rows, summary),
        ]

    def plans(self, plans: list[reportdata.Plan]) -> list:
        from commbench.report.figures import models

        blocks: list = []
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
        raise UsageError(f"-o {out}: cannot write the report ({e.strerror or e})") from None
    return path
