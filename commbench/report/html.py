"""The report page: one self-contained HTML file (inline CSS, figures as base64 PNG data URIs,
no script, no network), built from sections of tables, figures and notes.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from commbench.report.figures import Figure
from commbench.tables import Column, TableSpec

CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 0;
  color: #1d2430; background: #fafbfc; line-height: 1.45; }
main { max-width: 1180px; margin: 0 auto; padding: 12px 28px 40px; }
h1 { font-size: 1.7em; margin: 0.6em 0 0.2em; }
h2 { font-size: 1.3em; margin-top: 1.8em; border-bottom: 2px solid #d5dbe3; padding-bottom: 4px; }
h3 { font-size: 1.08em; margin: 1.3em 0 0.4em; }
p.sub { color: #55606e; margin-top: 0; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.86em; background: #fff; }
th, td { border: 1px solid #d5dbe3; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #eef1f5; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.partial td { background: #fff4e0; }
.badge { display: inline-block; padding: 0 6px; border-radius: 4px; font-size: 0.85em;
  font-weight: 600; }
.badge.partial { background: #f5a623; color: #fff; }
.badge.complete { background: #3a9a5b; color: #fff; }
.missing { background: #fff8e6; border-left: 4px solid #f5a623; padding: 6px 14px; }
.missing li { margin: 2px 0; }
figure { margin: 1em 0 1.6em; background: #fff; border: 1px solid #d5dbe3; padding: 10px; }
figure img { max-width: 100%; height: auto; display: block; }
figcaption { font-size: 0.9em; color: #3a4452; margin-top: 6px; }
figcaption b { color: #1d2430; }
code { font-size: 0.92em; background: #eef1f5; padding: 0 3px; border-radius: 3px; }
.scroll { overflow-x: auto; }
footer { color: #55606e; font-size: 0.85em; margin-top: 2em; }
"""


@dataclass
class Table:
    """A table description and its rows of values (a Raw value is trusted HTML); `partial`
    rows are highlighted."""

    spec: TableSpec
    rows: Sequence[Sequence[Any]]
    partial: set[int] = field(default_factory=set)


@dataclass
class Section:
    """A heading and its blocks, in order: text (str, HTML-escaped), Table, Figure, or Raw."""

    title: str
    blocks: list[Block] = field(default_factory=list)
    anchor: str = ""


@dataclass
class Raw:
    """Trusted HTML built by this module's helpers."""

    html: str


Block = str | Table | Figure | Raw


def esc(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _cell(col: Column, v: Any) -> str:
    """A cell as its column formats it; numbers (and formatted columns) right-aligned."""
    if isinstance(v, Raw):
        return f"<td>{v.html}</td>"
    if col.fmt or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return f'<td class="num">{esc(col.text(v))}</td>'
    return f"<td>{esc(col.text(v))}</td>"


def table_html(t: Table) -> str:
    cols = t.spec.columns
    head = "".join(f"<th>{esc(c.title)}</th>" for c in cols)
    body = "\n".join(
        f"<tr{' class=partial' if i in t.partial else ''}>"
        f"{''.join(_cell(c, v) for c, v in zip(cols, row))}</tr>"
        for i, row in enumerate(t.rows)
    )
    cap = f"<p>{esc(t.spec.caption)}</p>" if t.spec.caption else ""
    return f'{cap}<div class="scroll"><table><thead><tr>{head}</tr></thead>\n<tbody>{body}</tbody></table></div>'


def figure_html(f: Figure) -> str:
    data = base64.b64encode(f.png).decode("ascii")
    return (
        f'<figure id="fig-{esc(f.name)}"><img src="data:image/png;base64,{data}" '
        f'alt="{esc(f.title)}"><figcaption><b>{esc(f.title)}.</b> {esc(f.caption)} '
        f"<i>(file {esc(f.name)}.png)</i></figcaption></figure>"
    )


def badge(status: str, partial: bool) -> Raw:
    cls = "partial" if partial else "complete"
    text = f"PARTIAL ({status})" if partial else status
    return Raw(f'<span class="badge {cls}">{esc(text)}</span>')


def bullets(items: Iterable[str], cls: str = "") -> Raw:
    lis = "".join(f"<li>{esc(i)}</li>" for i in items)
    return Raw(f'<ul class="{cls}">{lis}</ul>' if cls else f"<ul>{lis}</ul>")


def page(title: str, subtitle: str, sections: list[Section], footer: str) -> str:
    """The whole document."""
    toc = " · ".join(f'<a href="#{esc(s.anchor)}">{esc(s.title)}</a>' for s in sections if s.anchor)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>",
        f"<h1>{esc(title)}</h1><p class=sub>{esc(subtitle)}</p><p>{toc}</p>",
    ]
    for s in sections:
        out.append(
            f'<h2 id="{esc(s.anchor)}">{esc(s.title)}</h2>'
            if s.anchor
            else f"<h3>{esc(s.title)}</h3>"
        )
        for b in s.blocks:
            if isinstance(b, Table):
                out.append(table_html(b))
            elif isinstance(b, Figure):
                out.append(figure_html(b))
            elif isinstance(b, Raw):
                out.append(b.html)
            else:
                out.append(f"<p>{esc(b)}</p>")
    out.append(f"<footer>{esc(footer)}</footer></main></body></html>")
    return "\n".join(out) + "\n"
