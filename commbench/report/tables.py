"""The report's tables: the runs shown, a calibration's series fits and link table (as
`commbench fit` prints them), the suite points, validation and a plan's top configs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from commbench import tables
from commbench.report import inputs as reportdata
from commbench.report.figures.models import axis_order
from commbench.report.html import Raw, Table, badge, bullets, esc
from commbench.results.rundir import Run
from commbench.sizes import format_size
from commbench.tables import Column, TableSpec
from commbench.traffic import patterns

if TYPE_CHECKING:
    from commbench.check.summary import Summary


def _versions(meta: dict) -> str:
    libs = meta.get("libraries") or {}
    parts = [f"{k} {str(v).split(',')[0].strip()}" for k, v in libs.items() if v]
    if meta.get("python"):
        parts.insert(0, f"python {meta['python']}")
    if meta.get("commbench_version"):
        parts.insert(0, f"commbench {meta['commbench_version']}")
    return "; ".join(parts) or "-"


RUNS = TableSpec(
    tuple(
        Column(h)
        for h in (
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
        )
    )  # fmt: skip
)


def runs_table(runs: list[Run]) -> Table:
    rows: list[list[Any]] = []
    partial = set()
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
                m.get("start_time_iso"),
                ", ".join(m.get("hosts") or []),
                m.get("world_size"),
                m.get("ranks_per_node"),
                m.get("backend"),
                _versions(m) + (f"; {nccl}" if nccl else ""),
                (m.get("git_revision") or "")[:10],
            ]
        )
    return Table(RUNS, rows, partial)


def calibration_blocks(cal: Any) -> list[Table | Raw | str]:
    """The series fits and, when the calibration has one, its link table with the group sizes
    and ops of each link: the tables `commbench fit` prints."""
    out: list[Table | Raw | str] = [Table(tables.SERIES, tables.series_rows(cal.doc["series"]))]
    links = cal.doc.get("link_table")
    if links:
        out += [
            Table(tables.LINKS, tables.link_rows(links)),
            tables.LINK_LEGEND,
            bullets(tables.link_notes(links)),
        ]
    return out


def _facts(r: reportdata.PointRow) -> str:
    """The row's notes and its pattern's facts about the point (the pipeline bubble, the MoE
    imbalance), from the point record."""
    out = list(r.notes)
    spec = patterns.PATTERNS.get(r.pattern)
    if r.record is not None and spec is not None:
        facts = spec.point_facts(r.record.get("meta") or {}, r.time_us * 1e-6)
        out += [f.text() for f in facts]
    return "; ".join(out)


POINTS = TableSpec(
    (
        Column("run"),
        Column("point"),
        Column("pattern"),
        Column("model"),
        Column("config"),
        Column("options"),
        Column("comm", "(ms)", fmt=".3f"),
        Column("bytes/rank", fmt=format_size),
        Column("busbw", "(GB/s)", fmt=".3f"),
        Column("#wrong"),
        Column("scaled"),  # measured as a chunk, time x count (records: `extrapolated`)
        Column("notes"),
    ),
    "Suite points: comm = sum over the Program's steps of median time (slowest rank) x repeat; "
    "bytes = S x repeat per rank; busbw = bus bytes / comm. Highlighted: points without their "
    "point record (run cut short).",
)


def points_table(rows: list[reportdata.PointRow]) -> Table:
    out = [
        [
            r.run_id,
            r.index,
            r.pattern,
            r.model,
            r.config,
            r.options,
            r.time_us / 1e3,
            r.bytes or None,
            r.busbw_GBps,
            r.wrong,
            "yes" if r.extrapolated else None,
            _facts(r),
        ]
        for r in rows
    ]
    return Table(POINTS, out, {i for i, r in enumerate(rows) if not r.complete})


def _number(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) else None


VALIDATION_SUMMARY = TableSpec(
    (
        Column("pattern"),
        Column("points"),
        Column("median |error|", fmt=".1%"),
        Column("max |error|", fmt=".1%"),
    ),
    "Per pattern: relative error (predicted - measured) / measured.",
)
VALIDATION = TableSpec(
    (
        Column("pattern"),
        Column("config"),
        Column("model"),
        Column("measured", "(ms)", fmt=".3f"),
        Column("predicted", "(ms)", fmt=".3f"),
        Column("error", fmt="+.1%"),
        Column("status"),
    )
)


def validation_tables(rows: list[dict], summary: list[dict]) -> list[Table]:
    def ms(v: Any) -> float | None:
        s = _number(v)
        return None if s is None else s * 1e3

    summ = [
        [s.get("pattern"), s.get("points"), s.get("median_abs_error"), s.get("max_abs_error")]
        for s in summary
    ]
    detail = [
        [
            r.get("pattern"),
            r.get("config"),
            r.get("model"),
            ms(r.get("measured_s")),
            ms(r.get("predicted_s")),
            _number(r.get("rel_error")),
            r.get("status"),
        ]
        for r in rows
    ]
    return [Table(VALIDATION_SUMMARY, summ), Table(VALIDATION, detail)]


def plan_table(plan: reportdata.Plan, top: int) -> Table:
    axes = axis_order({a for c in plan.configs for a in c.comm_s})
    ms = ".4g"
    spec = TableSpec(
        (
            Column("rank"),
            Column("config"),
            Column("step", "(ms)", fmt=ms),
            Column("comm", "(ms)", fmt=ms),
            *(Column(a, "(ms)", fmt=ms) for a in axes),
            Column("compute", "(ms)", fmt=ms),
            Column("bubble", "(ms)", fmt=ms),
        )
    )

    def v(s: float | None) -> float | None:
        return None if s is None else s * 1e3

    rows = [
        [c.rank, c.label, v(c.step_s), v(c.comm_total)]
        + [v(c.comm_s.get(a)) for a in axes]
        + [v(c.compute_s), v(c.bubble_s)]
        for c in plan.configs[:top]
    ]
    return Table(spec, rows)


OUTLIERS = TableSpec(
    tuple(
        Column(h, u)
        for h, u in (
            ("level", ""),
            ("test", ""),
            ("link", ""),
            ("where", ""),
            ("hosts", ""),
            ("ranks", ""),
            ("devices", ""),
            ("bandwidth", "(GB/s)"),
            ("peers' median", "(GB/s)"),
            ("ratio", ""),
            ("z", ""),
        )
    )  # fmt: skip
)


def outlier_table(run_id: str, summary: Summary) -> Table | str:
    """The slow nodes, ranks, links and groups `commbench check` names (check/outliers)."""
    found = summary.judgement.findings
    if not found:
        return (
            f"{run_id}: no outlier (every pair and group within its peers of the same link class)"
        )
    rows = [
        [f.level, f.test, f.link_class, f.where, ", ".join(f.hosts),
         ", ".join(map(str, f.ranks)), ", ".join(f.devices), f"{f.GBps:.4g}",
         f"{f.peer_median_GBps:.4g}", f"{f.ratio:.2f}", f"{f.z:.1f}"]
        for f in found
    ]  # fmt: skip
    return Table(OUTLIERS, rows)
