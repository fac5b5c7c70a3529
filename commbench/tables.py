"""Rank 0's tables, in the nccl-tests spirit: fixed-width columns, `#` header lines."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass(frozen=True)
class Column:
    """A table column: header, unit line, width and a format spec for values."""

    header: str
    unit: str
    width: int
    fmt: str = ""

    def cell(self, value: Any) -> str:
        if value is None or value == "":
            text = "-"
        elif self.fmt:
            text = format(value, self.fmt)
        else:
            text = str(value)
        return text.rjust(self.width)


class Table:
    """Prints a header once, then one row per call, flushing so progress shows live."""

    def __init__(self, columns: list[Column], out: TextIO | None = None) -> None:
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
