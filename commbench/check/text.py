"""The console form of a check's Summary: the rank map, the pair matrix, per-host medians, the
group results, expectations, the outlier table and the verdict (pure text)."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from typing import TextIO

from commbench.check.summary import Result, Summary

MATRIX_MAX_RANKS = 32  # larger jobs print the host x host matrix


def _gb(v: float | None) -> str:
    return "." if v is None else f"{v:.4g}"


def matrix_lines(summary: Summary, max_ranks: int) -> list[str]:
    """Pair bandwidth, rank x rank up to `max_ranks` ranks, else host x host medians."""
    m = summary.matrix()
    n = len(m)
    if n <= max_ranks:
        labels = [str(i) for i in range(n)]
        cells = [["-" if i == j else _gb(m[i][j]) for j in range(n)] for i in range(n)]
        title = "pair bandwidth (GB/s, one direction, both at once; . not measured), rank x rank"
    else:
        hosts = list(dict.fromkeys(r.host for r in summary.ranks))
        labels = hosts
        cells = []
        for h in hosts:
            row = []
            for g in hosts:
                vals: list[float] = [
                    v
                    for i, ri in enumerate(summary.ranks)
                    for j, rj in enumerate(summary.ranks)
                    if ri.host == h and rj.host == g and (v := m[i][j]) is not None
                ]
                row.append(_gb(statistics.median(vals)) if vals else ".")
            cells.append(row)
        title = "pair bandwidth (GB/s, median over the ranks' pairs), host x host"
    w = max(6, *(len(c) for row in cells for c in row), *(len(x) for x in labels))
    head = " " * w + " " + " ".join(x.rjust(w) for x in labels)
    return [f"# {title}", head] + [
        labels[i].rjust(w) + " " + " ".join(c.rjust(w) for c in row) for i, row in enumerate(cells)
    ]


def _result_line(r: Result) -> str:
    exp = f"{_gb(r.expected_GBps):>9} {r.pct:>7.1f}%" if r.pct is not None else f"{'-':>9} {'-':>8}"
    hosts = sorted(set(r.hosts))
    where = ",".join(hosts) if len(hosts) <= 2 else f"{len(hosts)} hosts: {hosts[0]}, ..."
    return (
        f"{r.test:<6} {r.op:<9} {r.link_class:<5} {r.group_size:>4} {where:<28} "
        f"{_gb(r.GBps):>9} {exp} {r.status}"
    )


def print_summary(
    summary: Summary, max_ranks: int = MATRIX_MAX_RANKS, out: TextIO | None = None
) -> None:
    w = (out or sys.stdout).write
    w("# rank -> host, local rank, device\n")
    for i, r in enumerate(summary.ranks[:max_ranks]):
        w(f"{i:>5}  {r.host:<24} {r.local_rank:>3}  {r.device}\n")
    if len(summary.ranks) > max_ranks:
        w(f"  ... {len(summary.ranks) - max_ranks} more in check.json\n")
    if any(r.test == "pairs" for r in summary.results):
        w("\n" + "\n".join(matrix_lines(summary, max_ranks)) + "\n")
    j = summary.judgement
    for cls, scores in sorted(j.host_scores.items()):
        shown = ", ".join(f"{h} {_gb(v)}" for h, v in scores.items())
        w(f"# {cls} pairs, median GB/s per host: {shown}\n")
    groups = [r for r in summary.results if r.test != "pairs"]
    head = (
        f"{'test':<6} {'op':<9} {'link':<5} {'p':>4} {'hosts':<28} {'busbw':>9} "
        f"{'expected':>9} {'%':>8} status\n"
    )
    if groups:
        w("\n# groups (busbw GB/s)\n" + head)
        for res in groups:
            w(_result_line(res) + "\n")
    w("\n" + expectation_lines(summary.results))
    w("\n" + outlier_table(summary))
    for note in summary.notes + j.notes:
        w(f"# note: {note}\n")
    w(f"\n{summary.verdict()}\n")


def expectation_lines(results: Sequence[Result]) -> str:
    """Per test, op and link class: how many results, the worst % of expected, how many fail."""
    keys = dict.fromkeys((r.test, r.op, r.link_class) for r in results)
    lines = [
        f"# expectations\n{'test':<6} {'op':<9} {'link':<5} {'n':>4} {'worst%':>8} {'below':>5}  source\n"
    ]
    for key in keys:
        rs = [r for r in results if (r.test, r.op, r.link_class) == key]
        checked = [r for r in rs if r.pct is not None]
        worst = f"{min(r.pct for r in checked if r.pct is not None):.1f}" if checked else "-"
        below = sum(r.status == "below" for r in rs)
        src = checked[0].source if checked else rs[0].source
        lines.append(
            f"{key[0]:<6} {key[1]:<9} {key[2]:<5} {len(rs):>4} {worst:>8} {below:>5}  {src}\n"
        )
    return "".join(lines)


def outlier_table(summary: Summary) -> str:
    f = summary.judgement.findings
    if not f:
        return "# outliers: none\n"
    lines = [
        f"# outliers\n{'level':<6} {'test':<16} {'link':<5} {'GB/s':>9} {'peers':>9} {'ratio':>6} {'z':>7}  where\n"
    ]
    for x in f:
        lines.append(
            f"{x.level:<6} {x.test:<16} {x.link_class:<5} {_gb(x.GBps):>9} "
            f"{_gb(x.peer_median_GBps):>9} {x.ratio:>6.2f} {x.z:>7.1f}  {x.where}\n"
        )
    return "".join(lines)
