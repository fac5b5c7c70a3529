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

from commbench import __version__, reportdata
from commbench.errors import UsageError
from commbench.figures import Figure
from commbench.figures.models import axis_order
from commbench.reporthtml import Num, Raw, Section, Table, badge, bullets, esc, page
from commbench.results import Run, read_run
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
        return None, "none (--no-fit)", False
    from commbench import calibrate
    from commbench.fit import FitOptions
    from commbench.fitdata import collect

    collected = collect([(r, []) for r in runs if r.records])
    if not collected.series:
        return None, "none (nothing in these runs can be fitted)", False
    doc, outcomes, _ = calibrate.build(collected, FitOptions(bootstrap=0))
    if not outcomes:
        return None, "none (no series has enough distinct sizes to fit)", False
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
                Num(f"{m['busbw_GBps']:.3g}"),
                Num(f"{m['median_rel_err']:.1%}"),
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
        return Num(f"{v * 1e3:.3f}") if v is not None else "-"

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
def build_report(opts: ReportOptions) -> Report:
    """Read the inputs, draw every figure that has data, write the PNGs and index.html."""
    from commbench.figures import collectives, models, strategies
    from commbench.pptimeline import timeline

    plans = [reportdata.load_plan(p) for p in opts.plans]  # bad files fail before any work
    runs, how, superseded = _runs(opts)
    cal, cal_how, in_sample = _calibration(opts, runs)
    missing: list[str] = []
    notes: list[str] = []
    figures: list[Figure] = []

    for r in runs:
        if r.partial:
            missing.append(
                f"run {r.path.name} is partial (status {r.status}): it shows the "
                f"{len(r.records)} record(s) written before it stopped"
            )
        if not r.records:
            missing.append(f"run {r.path.name} has no records: nothing of it can be drawn")

    # primitive ops
    curves, cnotes = reportdata.curves(runs, cal)
    notes += cnotes
    coll_blocks: list = []
    if cal is None:
        missing.append(
            f"no calibration ({cal_how}): fitted lines, residuals and validation not drawn"
        )
    by_op: dict[str, list] = {}
    for c in curves:
        by_op.setdefault(c.key.op, []).append(c)
    for op in sorted(by_op):
        cs = by_op[op]
        figures.append(collectives.bandwidth(op, cs))
        figures.append(collectives.latency(op, cs))
    if cal is not None:
        unfit: dict[str, list[str]] = {}
        for c in curves:
            if c.model is None:
                unfit.setdefault(c.missing, []).append(c.key.label())
        for why, labels in unfit.items():
            missing.append(f"no fit for {len(labels)} series ({why}): {'; '.join(labels)}")
    if not curves:
        missing.append(
            "no measured primitive op (collective or suite step records): no bandwidth or latency figure"
        )
    coll_blocks += [f for f in figures if f.section == "collectives"]
    if cal is not None and cal.doc.get("series"):
        coll_blocks += [series_table(cal)]
        if cal.doc.get("link_table"):
            coll_blocks.append(link_table(cal))

    # strategies
    rows, pnotes = reportdata.points(runs)
    notes += pnotes
    strat = [r for r in rows if r.pattern != "collectives"]
    strat_blocks: list = []
    if strat:
        f = strategies.step_breakdown(strat)
        figures.append(f)
        strat_blocks.append(f)
    else:
        missing.append(
            "no suite point of a strategy (tp, dp, zero, pp, cp, ep): no step-time figure"
        )
    if rows:
        strat_blocks.append(points_table(rows))
    loads = reportdata.ep_loads(strat)
    if loads:
        f = strategies.ep_load(loads)
        figures.append(f)
        strat_blocks.append(f)
    else:
        missing.append("no EP suite point: no tokens-per-destination figure")
    pp_rows = [r for r in strat if r.pattern == "pp" and r.complete]
    tls = [(r, timeline(r.record)) for r in pp_rows]
    tls = [(r, t) for r, t in tls if t is not None]
    for k, (_r, t) in enumerate(tls):
        f = strategies.pp_timeline(t, f"pp-timeline-{k + 1}")
        figures.append(f)
        strat_blocks.append(f)
    if not tls:
        missing.append("no PP suite point with pp > 1: no 1F1B timeline")

    # validation
    val_blocks: list = []
    vrows, vsummary, why = reportdata.validation(runs, cal)
    if vrows and reportdata.predicted_pairs(vrows):
        note = (
            "The calibration was fitted from these same runs, so this is an in-sample check"
            if in_sample
            else ""
        )
        f = models.predicted_vs_measured(vrows, note=note)
        figures.append(f)
        val_blocks += [f, *validation_tables(vrows, vsummary)]
    elif vrows:
        val_blocks += validation_tables(vrows, vsummary)
        missing.append("validation: no point could be predicted (see the table's status column)")
    else:
        missing.append(f"no predicted-vs-measured figure: {why}")

    # plans
    plan_blocks: list = []
    for k, plan in enumerate(plans):
        if not plan.configs:
            missing.append(f"plan {plan.source} has no configs")
            continue
        f = models.plan_top(plan, f"plan-{k + 1}", opts.top)
        figures.append(f)
        plan_blocks += [f, plan_table(plan, opts.top)]
    if not plans:
        missing.append(
            "no plan given (--plan FILE from `commbench plan --json`): no planner figure"
        )

    sections = _sections(
        runs,
        how,
        superseded,
        cal_how,
        opts,
        plans,
        missing,
        notes,
        coll_blocks,
        strat_blocks,
        val_blocks,
        plan_blocks,
    )
    html_text = page(
        "commbench report",
        f"generated {time.strftime('%Y-%m-%d %H:%M:%S %z')} by commbench {__version__} from "
        f"{len(runs)} run(s); {len(figures)} figure(s)",
        sections,
        "Conventions (nccl-tests): S = the larger of one rank's input and output buffer; "
        "algbw = S / t; busbw = algbw x 2(p-1)/p (all-reduce), (p-1)/p (all-gather, "
        "reduce-scatter, all-to-all), 1 (broadcast, reduce, send/recv); p = group size; "
        "GB = 1e9 B; sizes in binary units (KiB = 1024 B). t = median over iterations of the "
        "slowest rank of the group.",
    )
    out = _write(opts.out, figures, html_text)
    return Report(out, figures, runs, missing, notes)


def _sections(
    runs,
    how,
    superseded,
    cal_how,
    opts,
    plans,
    missing,
    notes,
    coll_blocks,
    strat_blocks,
    val_blocks,
    plan_blocks,
) -> list[Section]:
    inputs = Section("Inputs", anchor="inputs")
    inputs.blocks.append(f"Runs: {how}.")
    inputs.blocks.append(runs_table(runs))
    if superseded:
        inputs.blocks.append("Older runs of the same kind, not shown:")
        inputs.blocks.append(bullets(superseded))
    inputs.blocks.append(f"Calibration: {cal_how}.")
    if plans:
        inputs.blocks.append("Plans: " + ", ".join(p.source for p in plans) + ".")
    sections = [inputs]
    gaps = Section("What is missing", anchor="missing")
    gaps.blocks.append(bullets(missing or ["nothing: every figure had its data"], "missing"))
    if notes:
        gaps.blocks.append(bullets(notes))
    sections.append(gaps)
    for title, anchor, blocks, empty in (
        (
            "Collectives: bandwidth, latency and fits",
            "collectives",
            coll_blocks,
            "No measured primitive op in these runs.",
        ),
        (
            "Strategies: step communication, EP load, PP schedule",
            "strategies",
            strat_blocks,
            "No suite points in these runs.",
        ),
        (
            "Validation: predicted vs measured",
            "validation",
            val_blocks,
            "Not drawn (see What is missing).",
        ),
        ("Planner: top configs", "plans", plan_blocks, "No plan given (--plan FILE)."),
    ):
        sections.append(Section(title, blocks or [empty], anchor))
    return sections


def _write(out: Path, figures: list[Figure], html_text: str) -> Path:
    """index.html and figures/*.png under `out` (stale PNGs of an earlier report removed)."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out}: exists and is not a directory")
    figdir = out / FIGURES_DIR
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
    return path
