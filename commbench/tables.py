"""Tables described once and rendered twice: a description is columns (header, unit, width,
format) and a caption; rank 0's console prints it fixed-width in the nccl-tests spirit (`#`
header lines), the report as HTML. Also the descriptions both `commbench fit` and the report
print: the series fits and the link table of a calibration.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from commbench.nccl_names import label as regime_label
from commbench.sizes import format_size

Format = str | Callable[[Any], str]


@dataclass(frozen=True)
class Column:
    """A table column: header, unit line, width (console) and a format for values (a format
    spec, or a function of the value); no value (None or "") reads "-"."""

    header: str
    unit: str = ""
    width: int = 0
    fmt: Format = ""

    @property
    def title(self) -> str:
        """Header and unit on one line, as the HTML table heads a column."""
        return f"{self.header} {self.unit}" if self.unit else self.header

    def text(self, value: Any) -> str:
        if value is None or value == "":
            return "-"
        if callable(self.fmt):
            return self.fmt(value)
        return format(value, self.fmt) if self.fmt else str(value)

    def cell(self, value: Any) -> str:
        return self.text(value).rjust(self.width)


@dataclass(frozen=True)
class TableSpec:
    """A table's description: its columns, and a caption saying what the numbers are."""

    columns: tuple[Column, ...]
    caption: str = ""


class Table:
    """Prints a header once, then one row per call, flushing so progress shows live."""

    def __init__(self, columns: Sequence[Column], out: TextIO | None = None) -> None:
        self.columns = columns
        self.out = out or sys.stdout
        self._started = False

    def header(self) -> None:
        self.out.write("#" + " ".join(c.header.rjust(c.width) for c in self.columns)[1:] + "\n")
        self.out.write("#" + " ".join(c.unit.rjust(c.width) for c in self.columns)[1:] + "\n")
        self._started = True

    def row(self, *values: Any) -> None:
        if not self._started:
            self.header()
        self.out.write(" ".join(c.cell(v) for c, v in zip(self.columns, values)) + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        self.out.write(f"# {text}\n")
        self.out.flush()


# ---- a calibration's tables, printed by `commbench fit` and drawn by the report ---------------
SERIES = TableSpec(
    (
        Column("op", "", 14),
        Column("p", "", 4),
        Column("link", "", 5),
        Column("dtype", "", 8),
        Column("backend", "", 7),
        Column("timing", "", 13),
        Column("seg", "", 3),
        Column("bytes", "(range)", 19),
        Column("alpha", "(us)", 9, ".2f"),
        Column("alpha95", "(us)", 17),
        Column("algbw", "(GB/s)", 8, ".3g"),
        Column("busbw", "(GB/s)", 8, ".3g"),
        Column("R2", "log", 6, ".3f"),
        Column("err", "med", 6, ".1%"),
        Column("err", "max", 6, ".1%"),
        Column("loso", "med", 6, ".1%"),
        Column("pts", "", 4),
        Column("out", "", 4),
    ),
    "series fits: time = alpha + beta*bytes per segment; bw = 1/beta (GB/s = 1e9 B/s); "
    "err = |pred-t|/t (median, max of all points); loso = leave-one-size-out median; "
    "op RING/SIMPLE: its runs pinned that NCCL algorithm/protocol, op (RING/LL): NCCL chose, "
    "and the log says this segment ran in it",
)


def series_rows(series: list[dict]) -> list[list]:
    """One SERIES row per segment of a calibration's series; an in-place series' op reads
    `op(in)`, one of a pinned NCCL regime `op RING/SIMPLE`, a segment of NCCL's choice that
    the log says ran in one regime `op (RING/LL)`. Fields only a measured fit has (errors,
    intervals) read "-" when absent."""
    rows = []
    for row in series:
        name = row["op"] + ("" if row["placement"] == "out-of-place" else "(in)")
        regime = regime_label(row.get("algorithm", ""), row.get("protocol", ""))
        for k, s in enumerate(row["segments"]):
            seen = s.get("regime")
            op = f"{name} {regime}" if regime else f"{name} ({seen})" if seen else name
            ci = s.get("alpha_ci95")
            rows.append(
                [
                    op,
                    row["group_size"],
                    row["link_class"],
                    row["dtype"],
                    row["backend"],
                    row["timing"],
                    k + 1,
                    f"{format_size(s['bytes_min'])}..{format_size(s['bytes_max'])}",
                    s["alpha_s"] * 1e6,
                    f"{ci[0] * 1e6:.2f}..{ci[1] * 1e6:.2f}" if ci else None,
                    s.get("algbw_GBps"),
                    s.get("busbw_GBps"),
                    s.get("r2_log"),
                    s.get("median_rel_err"),
                    s.get("max_rel_err"),
                    s.get("loso_median_rel_err"),
                    s.get("points"),
                    s.get("outliers"),
                ]
            )
    return rows


LINKS = TableSpec(
    (
        Column("backend", "", 8),
        Column("link", "", 5),
        Column("timing", "", 13),
        Column("model", "", 12),
        Column("alpha", "(us)", 9, ".2f"),
        Column("busbw", "(GB/s)", 9, ".3g"),
        Column("err", "med", 6, ".1%"),
        Column("err", "max", 7, ".1%"),
        Column("R2", "log", 6, ".3f"),
        Column("pts", "", 5),
        Column("best", "", 4),
    ),
    "link table: time = alpha*A(op,p) + beta*B(op,p)*S (Thakur et al. 2005) with per-op, "
    "per-size-regime terms fitted across group sizes; alpha and busbw (= 1/beta) are the line "
    "shared by all ops (for ops not measured), err is of the per-op terms",
)
# A link whose best model misses its points by more than this (median relative error) has no
# model that explains it: it is shown as the least bad ("?"), never as best.
LINK_FIT_OK = 0.25
LINK_LEGEND = (
    "best: * (= ties within 1%; the first of ring, tree, rabenseifner, pairwise wins a tie); "
    f"?: the least bad where no model is within {LINK_FIT_OK:.0%} median error; L: the "
    "library's own algorithm choice (predict scales group sizes by it); group sizes and ops "
    "per link:"
)


def _fits(entry: dict) -> bool:
    """The link's best model explains its points (a reference's models carry no errors)."""
    err = entry["models"][entry["best_model"]].get("median_rel_err")
    return err is None or err <= LINK_FIT_OK


def link_rows(link_table: list[dict]) -> list[list]:
    """One LINKS row per algorithm model of each link of a calibration's link table, the best
    marked * and its ties =; a reference's models lack the fit's errors (read "-")."""
    rows = []
    for e in link_table:
        models = dict(e["models"])
        if e.get("library"):  # the library's own algorithm choice (marked L), beside them
            models[e["library"]["name"]] = e["library"]
        for name, m in models.items():
            best = "*" if _fits(e) else "?"
            mark = best if name == e["best_model"] else ("=" if name in e.get("ties", []) else "")
            mark = "L" if name not in e["models"] else mark
            rows.append(
                [
                    e["backend"],
                    e["link_class"],
                    e["timing"],
                    name,
                    m["alpha_s"] * 1e6,
                    m.get("busbw_GBps"),  # None: beta 0 (flat or falling times)
                    m.get("median_rel_err"),
                    m.get("max_rel_err"),
                    m.get("r2_log"),
                    m.get("points"),
                    mark,
                ]
            )
    return rows


def link_notes(link_table: list[dict]) -> list[str]:
    """Per link: the group sizes and ops it was fitted over, its note, and per op under the
    best model the largest regime's busbw and the median error from 64 KiB up."""
    out = []
    for e in link_table:
        out.append(
            f"{e['backend']}/{e['link_class']}/{e['timing']}: p = {e.get('group_sizes', [])}, "
            f"ops = {', '.join(e.get('ops', []))}"
            + (f" ({e['note']})" if e.get("note") else "")
            + (
                ""
                if _fits(e)
                else f" (no model fits: the least bad, {e['best_model']}, misses by "
                f"{e['models'][e['best_model']]['median_rel_err']:.0%} median; do not price from it)"
            )
        )
        best = e["models"][e["best_model"]]
        large = best.get("per_op_large_median_rel_err", {})
        lib = (e.get("library") or {}).get("per_op_large_median_rel_err", {})
        for op, lines in sorted(best.get("terms", {}).items()):
            beta = lines[-1]["beta_s_per_byte"]
            bw = f"{1 / beta / 1e9:.3g} GB/s" if beta > 0 else "-"
            err = f", err from 64 KiB up {large[op]:.1%}" if op in large else ""
            err += f" ({e['library']['name']}: {lib[op]:.1%})" if op in lib else ""
            out.append(f"  {op}: {len(lines)} regime(s), top busbw {bw}{err}")
        if best.get("below_latency"):
            out.append(
                f"  {best['below_latency']} point(s) faster than half the p2p latency rejected"
            )
    return out
