"""Table descriptions rendered twice: the fixed-width console text (exact bytes) and the HTML
cells; the fit's series and link tables read the same, headers in the same order, in
`commbench fit`'s output and in the report, built from one calibration fitted here from
synthetic records (stated alpha-beta lines, no timing measured)."""

from __future__ import annotations

import io
import re

from fit_samples import collective_records, write_run

from commbench import calibration, tables
from commbench.commands.fit import print_report
from commbench.fit import calibrate
from commbench.fit.collect import collect, read_fit_runs
from commbench.fit.options import FitOptions
from commbench.report.html import Table as HTMLTable
from commbench.report.html import table_html
from commbench.report.tables import calibration_blocks
from commbench.tables import Column, Table, TableSpec


def test_console_table_is_fixed_width_with_hash_headers():
    out = io.StringIO()
    t = Table(
        [Column("size", "(B)", 6), Column("time", "(us)", 8, ".2f"), Column("ok", "", 3)], out
    )
    t.row(8, 1.234, "")
    t.row(1024, None, "yes")
    t.note("done")
    assert out.getvalue() == (
        "# size     time  ok\n"
        "#  (B)     (us)    \n"
        "     8     1.23   -\n"
        "  1024        - yes\n"
        "# done\n"
    )


def test_column_formats_and_html_cells():
    spec = TableSpec(
        (
            Column("name"),
            Column("bytes", fmt=lambda b: f"{b // 1024} KiB"),
            Column("err", fmt=".1%"),
        ),
        "a caption",
    )
    html = table_html(HTMLTable(spec, [["a", 2048, 0.25], ["b", None, None]], partial={1}))
    assert "<p>a caption</p>" in html
    assert "<th>name</th><th>bytes</th><th>err</th>" in html
    assert '<tr><td>a</td><td class="num">2 KiB</td><td class="num">25.0%</td></tr>' in html
    assert '<tr class=partial><td>b</td><td class="num">-</td><td class="num">-</td></tr>' in html
    assert Column("alpha", "(us)").title == "alpha (us)" and Column("op").title == "op"


def fitted(tmp_path) -> dict:
    """A calibration doc of an out-of-place and an in-place allreduce and an allgather."""
    recs = (
        collective_records("allreduce", 4, 1e-5, 1e-9)
        + [
            {**r, "placement": "in-place"}
            for r in collective_records("allreduce", 4, 1.2e-5, 1.1e-9)
        ]
        + collective_records("allgather", 2, 5e-6, 2e-9)
    )
    run = write_run(tmp_path, "r", recs)
    doc, outcomes, _ = calibrate.build(collect(read_fit_runs([str(run)])), FitOptions(bootstrap=0))
    assert len(outcomes) == 3
    return doc


def console_table(text: str, caption: str) -> tuple[list[str], list[str], list[str]]:
    """(header words, unit words, row lines) of the table printed under `# caption`."""
    lines = text.splitlines()
    at = lines.index(f"# {caption}")
    rows = []
    for line in lines[at + 3 :]:
        if line.startswith("#"):
            break
        rows.append(line)
    return lines[at + 1][1:].split(), lines[at + 2][1:].split(), rows


def html_table(html: str) -> tuple[list[str], list[list[str]]]:
    heads = re.findall(r"<th>(.*?)</th>", html)
    rows = [
        re.findall(r"<td[^>]*>(.*?)</td>", tr) for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", html)
    ]
    return heads, [r for r in rows if r]


def test_fit_series_and_link_tables_read_the_same_in_console_and_report(tmp_path, capsys):
    doc = fitted(tmp_path)
    print_report(doc)
    text = capsys.readouterr().out
    series, links, legend, notes = calibration_blocks(calibration.Calibration(doc, "here"))

    words, units, rows = console_table(text, tables.SERIES.caption)
    heads, cells = html_table(table_html(series))
    assert heads[:8] == ["op", "p", "link", "dtype", "backend", "timing", "seg", "bytes (range)"]
    assert [h.split(" ")[0] for h in heads] == words  # same headers, same order
    assert [h.split(" ", 1)[1] for h in heads if " " in h] == units
    assert series.spec.caption == tables.SERIES.caption
    # the placement: an in-place series reads op(in) in both, beside its out-of-place twin
    assert sorted(r.split()[0] for r in rows) == ["allgather", "allreduce", "allreduce(in)"]
    assert sorted(c[0] for c in cells) == ["allgather", "allreduce", "allreduce(in)"]
    for line, row in zip(rows, cells):
        assert line.split() == " ".join(row).split()  # the same cells

    words, units, rows = console_table(text, tables.LINKS.caption)
    heads, cells = html_table(table_html(links))
    assert [h.split(" ")[0] for h in heads] == words
    assert [h.split(" ", 1)[1] for h in heads if " " in h] == units
    assert [line.split() for line in rows] == cells
    assert f"# {legend}" in text
    for note in re.findall(r"<li>(.*?)</li>", notes.html):
        assert f"#   {note}" in text
