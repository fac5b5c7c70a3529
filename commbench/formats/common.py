"""What every importer shares: user hints (flags), the record it writes, dtype names.

Flags fill what a log does not say; a flag that contradicts the log is an error, so an import
never silently mislabels a measurement.
"""

from __future__ import annotations

import codecs
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from commbench.dtypes import DTYPE_SIZES, canonical_dtype_name
from commbench.errors import UsageError
from commbench.formats.log_problems import Problems
from commbench.limits import MAX_DIGITS, shown
from commbench.ops import SWEEP_OPS, bus_factor, canonical_op
from commbench.results.importrecords import ImportedRecord, ImportSource

# MPI datatype names (OSU "# Datatype:", IMB "MPI_Datatype") -> dtype names
MPI_DTYPES = {
    "mpi_char": "int8",
    "mpi_signed_char": "int8",
    "mpi_unsigned_char": "uint8",
    "mpi_byte": "int8",
    "mpi_int": "int32",
    "mpi_float": "float32",
    "mpi_double": "float64",
    "mpi_long": "int64",
    "mpi_long_long": "int64",
}
# element sizes of dtypes commbench does not run but logs carry (nccl-tests' fp8 names too)
EXTRA_DTYPE_SIZES = {"uint8": 1, "uint32": 4, "int64": 8, "uint64": 8, "f8e4m3": 1, "f8e5m2": 1}
LINK_CLASSES = ("intra", "inter")
# no tool prints a message over 1 PiB (nccl-tests' largest are GiB): a larger size cell is a
# corrupt or hand-made row, and a record of it would price every size near it
MAX_IMPORT_BYTES = 1 << 50
# a bandwidth column's unit as its header states it, `Bandwidth (GB/s)`: bytes per second
_RATE_UNIT = re.compile(r"\b([KMGT]?)(i?)(B|b)(?:ytes)?/s(?:ec)?\b")
_PREFIX = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}


@dataclass(frozen=True)
class Hints:
    """`commbench import` flags: used where the log is silent, checked where it is not."""

    op: str | None = None
    group_size: int | None = None
    dtype: str | None = None
    backend: str | None = None
    link_class: str | None = None
    ranks_per_node: int | None = None  # the node shape, for logs that print no host lines

    def __post_init__(self) -> None:
        if self.op is not None:
            op = canonical_op(self.op)
            if op not in SWEEP_OPS:
                raise UsageError(f"--op {self.op!r}: choose from {', '.join(SWEEP_OPS)}")
            object.__setattr__(self, "op", op)
        if self.dtype is not None:
            object.__setattr__(self, "dtype", canonical_dtype_name(self.dtype))
            if dtype_size(self.dtype) is None:
                raise UsageError(f"--dtype {self.dtype!r}: {_KNOWN_DTYPES}")
        if self.link_class is not None and self.link_class not in LINK_CLASSES:
            raise UsageError(f"--link-class {self.link_class!r}: choose intra or inter")

    def shape(
        self, group_size: int, hosts_log: int | None, where: str, why_needed: str
    ) -> tuple[str, int | None]:
        """(link class, hosts one group spans): from the log's host lines where it has them,
        else from --ranks-per-node (a group of p ranks placed contiguously spans ceil(p / N)
        nodes), checked against --link-class; else --link-class alone (hosts unknown)."""
        nodes = hosts_log
        if self.ranks_per_node is not None:
            derived = -(-group_size // self.ranks_per_node)
            if hosts_log is not None and hosts_log != derived:
                raise UsageError(
                    f"{where}: the log's group spans {hosts_log} host(s) but --ranks-per-node "
                    f"{self.ranks_per_node} makes {group_size} ranks span {derived}"
                )
            nodes = derived
        link_log = None if nodes is None else ("inter" if nodes > 1 else "intra")
        return self.resolve("link_class", link_log, where, why_needed), nodes

    def resolve(self, name: str, from_log, where: str, why_needed: str):
        """The log's value if it has one (a conflicting flag is an error), else the flag's."""
        flag = getattr(self, name)
        if from_log is not None:
            if flag is not None and flag != from_log:
                raise UsageError(
                    f"{where}: the log says {name.replace('_', '-')} {from_log} but "
                    f"--{name.replace('_', '-')} is {flag}"
                )
            return from_log
        if flag is None:
            raise UsageError(f"{where}: {why_needed}: pass --{name.replace('_', '-')}")
        return flag


@dataclass
class Imported:
    """Records parsed from one log plus what the log says about the run."""

    records: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: Problems = field(default_factory=Problems)  # failure and warning lines


def dtype_size(dtype: str) -> int | None:
    return DTYPE_SIZES.get(dtype) or EXTRA_DTYPE_SIZES.get(dtype)


def measured_record(
    *,
    tool: str,
    path: Path,
    line: int,
    op: str,
    nbytes: int,
    dtype: str,
    group_size: int,
    world_size: int,
    link_class: str,
    backend: str,
    time_us: float | None,
    timing: str,
    columns: dict,
    iters: int | None = None,
    warmup: int | None = None,
    wrong: int = 0,
    checked: bool = False,
    placement: str = "out-of-place",
    time_mean_us: float | None = None,
    hosts_spanned: int | None = None,
    count: int | None = None,
    groups: int | None = None,
    algorithm: str | None = None,
    protocol: str | None = None,
    forced: list[str] | None = None,
) -> dict:
    """A record with the fields `commbench run` writes; what the tool does not measure is null."""
    size = dtype_size(dtype)
    if count is None and size:
        count = nbytes // size
    algbw = nbytes / (time_us * 1e-6) / 1e9 if time_us and time_us > 0 else None
    factor = bus_factor(op, group_size)
    return ImportedRecord(
        op=op,
        dtype=dtype,
        bytes=int(nbytes),
        count=count,
        group_size=group_size,
        groups=groups,
        hosts_spanned=hosts_spanned,
        link_class=link_class,
        world_size=world_size,
        iters=iters,
        warmup=warmup,
        time_us=time_us,
        time_mean_us=time_mean_us,
        algbw_GBps=algbw,
        busbw_GBps=algbw * factor if algbw is not None else None,
        wrong=wrong,
        checked=checked,
        timing=timing,
        placement=placement,
        backend=backend,
        label=f"{tool} {op}",
        source=ImportSource(tool=tool, file=str(path), line=line, columns=columns),
        algorithm=algorithm,
        protocol=protocol,
        forced=forced or None,
    ).to_json()


def number(text: str) -> float | None:
    """A table cell as a float; N/A and the like are None."""
    try:
        return float(text)
    except ValueError:
        return None


def is_count(text: str) -> bool:
    """ASCII digits only (what starts a table row): str.isdigit() also takes '²', which int()
    refuses."""
    return text.isascii() and text.isdigit()


# what the tools print in a time cell for a measurement not taken (nccl-tests: N/A)
NOT_RUN = ("n/a", "na", "-", "--")


def time_cell(text: str, where: str) -> float | None:
    """A time cell in microseconds: None where the tool printed that it took none (NOT_RUN:
    N/A, not run), else a finite number >= 0; any other text (a damaged `1.2.3`), a negative,
    nan or overflowing time is a UsageError naming the line (results.read_run would refuse
    the record it made, and a row dropped as N/A is a row lost without a word)."""
    t = number(text)
    if t is None and text.strip().lower() not in NOT_RUN:
        raise UsageError(f"{where}: time {text!r} is not a number of microseconds (nor N/A)")
    if t is not None and not (math.isfinite(t) and t >= 0):
        raise UsageError(f"{where}: time {text!r} is not a number of microseconds >= 0")
    return t


def size_cell(text: str, where: str) -> int:
    """A row's size cell (is_count: ASCII digits) in bytes, at most MAX_IMPORT_BYTES: a digit
    run past that is refused before int() is tried (Python's int() raises past 4300 digits,
    which was an internal error instead of a line naming the row)."""
    if len(text) > MAX_DIGITS or int(text) > MAX_IMPORT_BYTES:
        raise _absurd_size(where, text)
    return int(text)


def _absurd_size(where: str, nbytes: str) -> UsageError:
    return UsageError(
        f"{where}: size {shown(nbytes)} B is over {MAX_IMPORT_BYTES >> 50} PiB, more than any "
        "tool measures: a corrupt row"
    )


def count_cell(text: str, where: str, what: str, least: int = 0) -> int:
    """An integer cell >= least (count, #wrong; root from -1): else a UsageError naming the
    line."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least:
        raise UsageError(f"{where}: {what} {text!r} is not an integer >= {least}")
    return value


# what a launcher writes before each line of a rank's output: srun --label (`0: `), Open MPI's
# mpirun --tag-output (`[1,0]<stdout>: `)
_LAUNCHER_PREFIX = re.compile(r"^(?:\s*\d+: |\[\d+,\d+\]<std(?:out|err)>: ?)")


def read_lines(path: Path) -> list[str]:
    """The file's lines, each without the prefix a launcher tags a rank's output with (line
    numbers kept: a message's file:line points at the file as it is). A byte-order mark is
    dropped (an editor's UTF-8 BOM hid the first line's title or `# nThread` line), and one of
    UTF-16 (what Windows PowerShell's `>` writes) decodes the file as UTF-16."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    utf16 = raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    text = raw.decode("utf-16" if utf16 else "utf-8-sig", errors="replace")
    return [_LAUNCHER_PREFIX.sub("", line, count=1) for line in text.splitlines()]


_KNOWN_DTYPES = (
    "commbench knows no element size for it (known: "
    f"{', '.join(sorted({*DTYPE_SIZES, *EXTRA_DTYPE_SIZES}))})"
)


def rate_unit(column: str, where: str, default: float = 1e6) -> float:
    """Bytes per second of one unit of a bandwidth column, from the unit its header states
    (`Bandwidth (GB/s)`: 1e9; KiB/s: 1024; Gb/s: bits, 1e9 / 8); `default` (OSU's MB/s, MB =
    1e6 B) where the header names none. A unit the header states but this cannot read is a
    UsageError: a guess would scale every time by 1000."""
    m = _RATE_UNIT.search(column)
    if m is None:
        if "/s" in column:
            raise UsageError(f"{where}: unknown bandwidth unit in column {column!r}")
        return default
    prefix, binary, unit = m.groups()
    scale = float((1024 if binary else 1000) ** _PREFIX[prefix])
    return scale / 8 if unit == "b" else scale


def vet(path: Path, imported: Imported, lines: list[str]) -> Imported:
    """Checks every importer shares, after its parse: a record's dtype has an element size and
    its size is one a tool can have measured (else one UsageError naming the line), and a
    line in the log that looks like a row but was none (a size cell that is a number but not
    a byte count: `4.0e3`, `-16`) is named in a note, so no row is dropped without a word."""
    for r in imported.records:
        where = f"{path}:{r['source']['line']}"
        if dtype_size(r["dtype"]) is None:
            raise UsageError(f"{where}: dtype {r['dtype']!r}: {_KNOWN_DTYPES}")
        if r["bytes"] > MAX_IMPORT_BYTES:  # a cell within it, scaled (OSU's per-peer sizes x p)
            raise _absurd_size(where, str(r["bytes"]))
    for n, line in enumerate(lines, 1):
        s = line.strip()
        first = s.split(maxsplit=1)[0] if s else ""
        if re.match(r"[-+]?\.?\d", first) and number(first) is not None and not is_count(first):
            imported.notes.append(
                f"{path}:{n}: not a row (size cell {first!r} is not a byte count), skipped"
            )
    return imported
