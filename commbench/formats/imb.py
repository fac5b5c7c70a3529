"""Intel MPI Benchmarks (IMB-MPI1) logs -> records.

Each `# Benchmarking NAME` block with `# #processes = N` holds a table whose header names its
columns (`#bytes #repetitions t_min[usec] t_max[usec] t_avg[usec] [Mbytes/sec] [defects]`, or
`t[usec]` for PingPong). time_us is t_max, the slowest rank, as commbench times a collective;
t_min/t_avg stay in the source columns. Timing: IMB-MPI1 barriers after every repetition of a
collective (`-sync 1`, its default) outside the timed call and divides the sum, so collectives
are "per-iteration"; PingPong, PingPing and Sendrecv time back-to-back exchanges
("pipelined"). `Multi-NAME` blocks (`-multi 0|1`: G groups of P processes at once) import as
NAME on groups of P. IMB message lengths are per call: Allgather(v), Alltoall(v), Gather and
Scatter move #bytes per peer, so S = p x #bytes; Reduce_scatter's #bytes is the whole input
(= S). IMB prints no host names, so --link-class fills that in.
"""

from __future__ import annotations

import re
from pathlib import Path

from commbench.errors import UsageError
from commbench.formats import log_problems
from commbench.formats.common import (
    MPI_DTYPES,
    Hints,
    Imported,
    is_count,
    measured_record,
    number,
    read_lines,
    size_cell,
    time_cell,
)
from commbench.ops import OPS

TOOL = "imb"
# IMB benchmark -> (op, S = #bytes x p?)
BENCHMARKS = {
    "pingpong": ("pingpong", False),
    "sendrecv": ("sendrecv", False),
    "allreduce": ("allreduce", False),
    "reduce": ("reduce", False),
    "reduce_scatter": ("reduce_scatter", False),
    "reduce_scatter_block": ("reduce_scatter", False),
    "allgather": ("allgather", True),
    "allgatherv": ("allgatherv", True),
    "alltoall": ("alltoall", True),
    "alltoallv": ("alltoallv", True),
    "bcast": ("broadcast", False),
    "gather": ("gather", True),
    "scatter": ("scatter", True),
}
BACK_TO_BACK = ("pingpong", "pingping", "sendrecv")  # no barrier between repetitions
_MULTI = re.compile(r"^#\s*\(\s*(\d+)\s+groups?\s+of\s+(\d+)\s+process")


def timing_of(benchmark: str) -> str:
    """IMB's timing as commbench labels it: a collective barriers after every repetition
    (IMB_do_n_barriers with -sync 1) and is per-iteration; exchanges run back to back."""
    return "pipelined" if benchmark.lower() in BACK_TO_BACK else "per-iteration"


def multi_groups(line: str) -> tuple[int, int] | None:
    """(groups, processes per group) of a Multi- block's `( G groups of P processes ... )`."""
    m = _MULTI.match(line)
    return (int(m.group(1)), int(m.group(2))) if m else None


_BENCH = re.compile(r"^#\s*Benchmarking\s+(\S+)")
_PROCS = re.compile(r"^#\s*#processes\s*=\s*(\d+)")
_WAITING = re.compile(r"^#\s*\(\s*(\d+)\s+additional process")
_DATATYPE = re.compile(r"^#\s*MPI_Datatype\s*:\s*(\S+)")
_RED_DATATYPE = re.compile(r"^#\s*MPI_Datatype for reductions\s*:\s*(\S+)")
_VERSION = re.compile(r"Intel\(R\) MPI Benchmarks\s+(\S+?),?\s")


class _Block:
    def __init__(self, line: int, name: str) -> None:
        self.line = line
        self.name = name
        self.procs: int | None = None
        self.waiting = 0
        self.columns: list[str] | None = None
        self.rows: list[tuple[int, list[str]]] = []
        self.groups = 1  # Multi- blocks: groups running at once


_FINALIZE = "All processes entering MPI_Finalize"  # IMB's last line: the run ended


def _blocks(lines: list[str], meta: dict) -> list[_Block]:
    blocks: list[_Block] = []
    for n, raw in enumerate(lines, 1):
        s = raw.strip()
        if m := _VERSION.search(s):
            meta.setdefault("imb_version", m.group(1))
        if m := _RED_DATATYPE.match(s):
            meta["reduction_datatype"] = m.group(1).lower()
        elif m := _DATATYPE.match(s):
            meta["datatype"] = m.group(1).lower()
        elif m := _BENCH.match(s):
            blocks.append(_Block(n, m.group(1).removeprefix("Multi-")))
        elif not blocks:
            continue
        elif multi := multi_groups(s):
            blocks[-1].groups, blocks[-1].procs = multi
        elif m := _PROCS.match(s):
            blocks[-1].procs = int(m.group(1))
        elif m := _WAITING.match(s):
            blocks[-1].waiting = int(m.group(1))
        elif s.startswith("#bytes") or s.startswith("# bytes"):
            blocks[-1].columns = s.replace("# bytes", "#bytes").split()
        elif s and is_count(s.split()[0]) and blocks[-1].columns is not None:
            blocks[-1].rows.append((n, s.split()))
    return blocks


def parse(path: Path, hints: Hints) -> Imported:
    """Records of every supported benchmark block in one IMB-MPI1 log."""
    path = Path(path)
    meta: dict = {"tool": TOOL}
    lines = read_lines(path)
    problems = log_problems.scan(path, lines)
    blocks = _blocks(lines, meta)
    if not any(b.rows for b in blocks) and problems.failure:
        raise UsageError(log_problems.failed_before_rows(problems))
    if not blocks:
        raise UsageError(f"{path}: not an IMB log (no '# Benchmarking NAME' block)")
    out = Imported(meta=meta, problems=problems)
    last = max((n for b in blocks for n, _ in b.rows), default=0)
    if last and problems.failure is None and not any(_FINALIZE in line for line in lines):
        log_problems.cut_short(path, last, f"IMB's '# {_FINALIZE}' line", problems)
    for blk in blocks:
        where = f"{path}:{blk.line}"
        key = blk.name.lower()
        if key not in BENCHMARKS:
            out.notes.append(f"{where}: IMB {blk.name} skipped (commbench does not model it)")
            continue
        op, per_peer = BENCHMARKS[key]
        if blk.columns is None:
            raise UsageError(f"{where}: no '#bytes #repetitions ...' header in this block")
        p = hints.resolve(
            "group_size", blk.procs, where, "the block has no '# #processes = N' line"
        )
        link, nodes = hints.shape(p, None, where, "IMB logs do not say which hosts ran")
        mpi_type = meta.get("reduction_datatype" if OPS[op].reduces else "datatype")
        if mpi_type in MPI_DTYPES:
            dtype = hints.resolve("dtype", MPI_DTYPES[mpi_type], where, "")
        else:  # IMB's defaults: MPI_FLOAT for reductions, MPI_BYTE otherwise
            dtype = hints.dtype or ("float32" if OPS[op].reduces else "int8")
        cols = blk.columns
        tcol = (
            "t_max[usec]" if "t_max[usec]" in cols else ("t[usec]" if "t[usec]" in cols else None)
        )
        if tcol is None or "#bytes" not in cols:
            raise UsageError(f"{where}: unknown IMB layout (columns {' '.join(cols)})")
        for n, tok in blk.rows:
            if len(tok) != len(cols):
                if n == last:
                    out.notes.append(f"{path}:{n}: truncated last row skipped")
                    continue
                raise UsageError(
                    f"{path}:{n}: row has {len(tok)} columns but the header has {len(cols)} "
                    f"({' '.join(cols)})"
                )
            cells = dict(zip(cols, tok))
            size = size_cell(cells["#bytes"], f"{path}:{n}")
            t = time_cell(cells[tcol], f"{path}:{n}")
            if t is None:
                out.notes.append(f"{path}:{n}: no time in this row, skipped")
                continue
            defects = number(cells.get("defects", "0")) or 0
            reps = cells.get("#repetitions")
            out.records.append(
                measured_record(
                    tool=TOOL,
                    path=path,
                    line=n,
                    op=op,
                    nbytes=size * p if per_peer else size,
                    dtype=dtype,
                    group_size=p,
                    world_size=p * blk.groups + blk.waiting,
                    groups=blk.groups,
                    link_class=link,
                    hosts_spanned=nodes,
                    backend=hints.backend or "mpi",
                    time_us=t,
                    timing=timing_of(blk.name),
                    columns={**cells, "benchmark": blk.name},
                    iters=int(reps) if reps and is_count(reps) else None,
                    wrong=int(defects > 0),
                    checked="defects" in cells,
                )
            )
    if not out.records:
        raise UsageError(f"{path}: no benchmark in this IMB log is one commbench models")
    out.meta["world_size"] = max(r["world_size"] for r in out.records)
    return out
