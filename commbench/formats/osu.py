"""OSU Micro-Benchmarks logs (osu_latency, osu_bw, osu_bibw, osu_allreduce, ...) -> records.

Each `# OSU MPI <Name> Test vX` header starts a table; the `# Size ...` line names its columns
(Avg Latency(us), and with -f Min/Max Latency(us) and Iterations; Latency (us); Bandwidth
(MB/s) with MB = 1e6, or the unit the header states: GB/s, KiB/s). OSU does not print how many
processes ran a collective or on which hosts, so --group-size and --link-class fill that in.
Sizes follow OSU's per-call counts and are converted to nccl-tests S: allgather and
alltoall(v) sizes are per peer, so S = p x size.
Collectives barrier between timed iterations (timing "per-iteration"; time = Avg Latency, the
mean over ranks); osu_latency is half a ping-pong round trip (op pingpong, "pipelined"); osu_bw
and osu_bibw stream windows of messages under one timer (ops bw and bibw, "pipelined"; time per
message = size / bandwidth, bibw's bandwidth both ways together, as commbench's bibw). Many
pairs at once: osu_multi_lat (pingpong on world/2 pairs; it prints no pair count, so
--group-size gives its processes) and osu_mbw_mr (bw on the `[ pairs: N ]` it prints, the
aggregate MB/s shared by the pairs).
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
    rate_unit,
    read_lines,
    size_cell,
    time_cell,
)
from commbench.ops import OPS

TOOL = "osu"
_TITLE = re.compile(r"^#\s*OSU\s+(\S+)\s+(.+?)\s+Test(?:\s+v(\S+))?\s*$", re.IGNORECASE)
_DTYPE = re.compile(r"^#\s*Datatype:\s*(\w+)", re.IGNORECASE)
# normalised test name -> (op, S = size x p?, timing)
TESTS = {
    "latency": ("pingpong", False, "pipelined"),
    "bandwidth": ("bw", False, "pipelined"),
    "bidirectionalbandwidth": ("bibw", False, "pipelined"),
    "multilatency": ("pingpong", False, "pipelined"),
    "multiplebandwidthmessagerate": ("bw", False, "pipelined"),
    "gatherlatency": ("gather", True, "per-iteration"),
    "scatterlatency": ("scatter", True, "per-iteration"),
    "allreducelatency": ("allreduce", False, "per-iteration"),
    "reducelatency": ("reduce", False, "per-iteration"),
    "reducescatterlatency": ("reduce_scatter", False, "per-iteration"),
    "broadcastlatency": ("broadcast", False, "per-iteration"),
    "bcastlatency": ("broadcast", False, "per-iteration"),
    "allgatherlatency": ("allgather", True, "per-iteration"),
    "allgathervlatency": ("allgatherv", True, "per-iteration"),
    "alltoalllatency": ("alltoall", True, "per-iteration"),
    "alltoallpersonalizedexchangelatency": ("alltoall", True, "per-iteration"),
    "alltoallvlatency": ("alltoallv", True, "per-iteration"),
    "alltoallvpersonalizedexchangelatency": ("alltoallv", True, "per-iteration"),
}
POINT_TO_POINT = ("latency", "bandwidth", "bidirectionalbandwidth")
MANY_PAIRS = ("multilatency", "multiplebandwidthmessagerate")
_PAIRS = re.compile(r"^#\s*\[\s*pairs:\s*(\d+)\s*\]", re.IGNORECASE)


def pairs_of(line: str) -> int | None:
    """The pair count osu_mbw_mr prints (`# [ pairs: 2 ] [ window size: 64 ]`)."""
    m = _PAIRS.match(line)
    return int(m.group(1)) if m else None


def many_pairs(key: str, pairs: int | None, hints: Hints, where: str) -> int:
    """Pairs of a many-pairs test: printed (osu_mbw_mr), else --group-size processes / 2."""
    if pairs is not None:
        return pairs
    procs = hints.resolve(
        "group_size", None, where, "osu_multi_lat does not print its pairs (processes / 2)"
    )
    if procs % 2:
        raise UsageError(f"{where}: osu_multi_lat pairs processes: --group-size {procs} is odd")
    return procs // 2


def _norm(name: str) -> str:
    return re.sub(r"[^a-z]", "", name.lower())


class _Table:
    def __init__(self, line: int, suite: str, name: str, version: str | None) -> None:
        self.line = line
        self.suite = suite
        self.name = name
        self.version = version
        self.dtype: str | None = None
        self.columns: list[str] | None = None
        self.rows: list[tuple[int, list[str]]] = []
        self.pairs: int | None = None  # osu_mbw_mr's printed pair count


def _tables(path: Path, lines: list[str]) -> list[_Table]:
    tables: list[_Table] = []
    for n, raw in enumerate(lines, 1):
        s = raw.strip()
        if m := _TITLE.match(s):
            tables.append(_Table(n, m.group(1), m.group(2), m.group(3)))
        elif not tables:
            continue
        elif m := _DTYPE.match(s):
            tables[-1].dtype = m.group(1).lower().rstrip(".")
        elif (pairs := pairs_of(s)) is not None:
            tables[-1].pairs = pairs
        elif re.match(r"^#\s*Size\b", s):
            tables[-1].columns = re.split(r"\s{2,}", s.lstrip("#").strip())
        elif s and is_count(s.split()[0]) and tables[-1].columns is not None:
            tables[-1].rows.append((n, s.split()))
    return tables


def _cells(columns: list[str], tok: list[str]) -> dict[str, str] | None:
    """Map a row onto the header; column names may contain single spaces."""
    if len(tok) != len(columns):
        return None
    return dict(zip(columns, tok))


def parse(path: Path, hints: Hints) -> Imported:
    """Records of every table in one OSU log."""
    path = Path(path)
    lines = read_lines(path)
    problems = log_problems.scan(path, lines)
    tables = _tables(path, lines)
    if not any(t.rows for t in tables) and problems.failure:
        raise UsageError(log_problems.failed_before_rows(problems))
    if not tables:
        raise UsageError(f"{path}: not an OSU log (no '# OSU MPI ... Test' title line)")
    out = Imported(meta={"tool": TOOL}, problems=problems)
    last = max((n for t in tables for n, _ in t.rows), default=0)
    for tab in tables:
        where = f"{path}:{tab.line}"
        key = _norm(tab.name)
        if key.startswith("nonblocking") or key not in TESTS:
            raise UsageError(
                f"{where}: OSU test '{tab.name}' is not imported (supported: osu_latency, "
                "osu_bw, osu_bibw, osu_multi_lat, osu_mbw_mr, osu_allreduce, osu_reduce, "
                "osu_reduce_scatter, osu_bcast, osu_gather, osu_scatter, osu_allgather(v), "
                "osu_alltoall(v))"
            )
        if tab.columns is None:
            raise UsageError(f"{where}: no '# Size ...' column header after the title")
        op, per_peer, timing = TESTS[key]
        out.meta.setdefault("osu_version", tab.version)
        out.meta.setdefault("suite", tab.suite)
        p2p = key in POINT_TO_POINT
        groups = many_pairs(key, tab.pairs, hints, where) if key in MANY_PAIRS else 1
        p = 2 if groups > 1 or key in MANY_PAIRS else None
        if p is None:
            p = hints.resolve(
                "group_size",
                2 if p2p else None,
                where,
                f"OSU logs do not say how many processes ran osu_{op}",
            )
        link, nodes = hints.shape(
            p,
            None,
            where,
            "OSU logs do not say which hosts ran the test",
        )
        if tab.dtype is not None:
            if tab.dtype not in MPI_DTYPES:
                raise UsageError(f"{where}: unknown OSU datatype {tab.dtype}")
            dtype, dtype_source = MPI_DTYPES[tab.dtype], "log"
            dtype = hints.resolve("dtype", dtype, where, "")
        elif hints.dtype is not None:
            dtype, dtype_source = hints.dtype, "--dtype"
        else:  # OMB before 7 reduced MPI_FLOAT and moved MPI_CHAR
            dtype, dtype_source = ("float32" if OPS[op].reduces else "int8"), "OMB default"
        cols = tab.columns
        lat = next((c for c in cols if c.lower().startswith(("avg latency", "latency"))), None)
        bw = next((c for c in cols if "bandwidth" in c.lower() or c == "MB/s"), None)
        if lat is None and bw is None:
            raise UsageError(f"{where}: unknown OSU layout (columns {cols})")
        per_unit = rate_unit(bw, where) if bw is not None else 0.0  # B/s: MB/s unless stated
        for n, tok in tab.rows:
            cells = _cells(cols, tok)
            if cells is None:
                if n == last:
                    out.notes.append(f"{path}:{n}: truncated last row skipped")
                    continue
                raise UsageError(
                    f"{path}:{n}: row has {len(tok)} columns but the header has {len(cols)} "
                    f"({', '.join(cols)})"
                )
            size = size_cell(cells[cols[0]], f"{path}:{n}")
            if lat is not None:
                t = time_cell(cells[lat], f"{path}:{n}")
            else:
                assert bw is not None  # a layout has a latency or a bandwidth column
                rate = number(cells[bw])
                t = None
                if rate and rate > 0:  # osu_mbw_mr: the pairs share the aggregate
                    t = size / (rate * per_unit / groups) * 1e6
            if t is None:
                out.notes.append(f"{path}:{n}: no time in this row, skipped")
                continue
            valid = cells.get("Validation")
            iters = cells.get("Iterations")
            out.records.append(
                measured_record(
                    tool=TOOL,
                    path=path,
                    line=n,
                    op=op,
                    nbytes=size * p if per_peer else size,
                    dtype=dtype,
                    group_size=p,
                    world_size=p * groups,
                    groups=groups,
                    link_class=link,
                    hosts_spanned=nodes,
                    backend=hints.backend or "mpi",
                    time_us=t,
                    time_mean_us=t if lat is not None else None,
                    timing=timing,
                    columns={**cells, "dtype_source": dtype_source, "test": tab.name},
                    iters=int(iters) if iters and is_count(iters) else None,
                    wrong=int(valid is not None and valid.lower().startswith("fail")),
                    checked=valid is not None,
                )
            )
    return out
