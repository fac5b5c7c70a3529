"""nccl-tests logs (all_reduce_perf and friends) -> records.

Both layouts: the current one (`redop root time algbw busbw #wrong`, twice: out-of-place then
in-place) and the older one (no `root`, an `error` column holding the largest deviation
instead of a count). Each row gives one record per placement (`placement` field). The op comes
from the binary name in the log or the file name (`all_gather_perf ...`), else from --op, else
from the log's own busbw/algbw ratio with redop and root (nccl-tests PERFORMANCE.md factors);
the group size and link class from the `#  Rank N Group G Pid P on HOST device` lines (ranks
per group; one host = intra). Times are nccl-tests' mean over back-to-back iterations:
timing "pipelined" (or "blocking" when the log says blocking was enabled). A table of several
reductions (-o all) gives its sum rows only; one of several types (-d all), every row.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from commbench.errors import UsageError
from commbench.formats import log_problems
from commbench.formats.common import (
    Hints,
    Imported,
    count_cell,
    measured_record,
    number,
    read_lines,
    size_cell,
    time_cell,
)
from commbench.formats.log_problems import LAUNCHER_FAILURES, NCCL_TESTS_FAILURES
from commbench.formats.nccl_tests_log import BINARY, split_sections
from commbench.formats.nccl_tuning import regimes
from commbench.ops import OPS, bus_factor, canonical_op

TOOL = "nccl-tests"
BINARY_OPS = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "alltoall",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "sendrecv",
}
# an op word in a file name without `_perf` (`a100_2x4_allgather_polaris.txt`)
_NAME_OP = re.compile(
    r"(?<![A-Za-z])(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|sendrecv|broadcast)"
    r"(?![A-Za-z])",
    re.IGNORECASE,
)
TYPES = {
    "float": "float32",
    "float32": "float32",
    "half": "float16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "double": "float64",
    "float64": "float64",
    "int": "int32",
    "int32": "int32",
    "uint32": "uint32",
    "int8": "int8",
    "char": "int8",
    "uint8": "uint8",
    "int64": "int64",
    "uint64": "uint64",
}
# old layout: `error` is the largest deviation; above this it counts as wrong data
ERROR_TOLERANCE = {"float16": 1e-2, "bfloat16": 5e-2, "float32": 1e-5, "float64": 1e-12}
CHECKS = ("#wrong", "error")  # the check column: current layout, old layout
NCCL_TESTS_END = "nccl-tests' 'Out of bounds values' footer"  # what each table ends with


def _infer_op(rows: list[dict], p: int) -> str | None:
    """The op from busbw/algbw = nccl-tests' bus factor, with redop and root; None if unsure."""
    best = max(rows, key=lambda r: r["busbw"] or 0.0, default=None)
    if best is None or not best["algbw"] or not best["busbw"] or best["busbw"] < 0.05:
        return None
    ratio = best["busbw"] / best["algbw"]
    tol = 0.005 / best["algbw"] + 0.005 / best["busbw"] + 0.002  # 2-decimal printing
    reduces = best["redop"] not in (None, "none", "-")
    root = best["root"]  # None in the old layout
    unrooted = root is None or root < 0
    rooted = root is None or root >= 0
    cands = [
        op
        for op in BINARY_OPS.values()
        if OPS[op].reduces == reduces and (rooted if OPS[op].rooted else unrooted)
    ]
    ops = {op for op in cands if abs(ratio - (f := bus_factor(op, p))) <= tol * f}
    return ops.pop() if len(ops) == 1 else None


def _op_from_name(path: Path, n_sections: int, notes: list[str], where: str) -> str | None:
    """The op a file name says without naming a binary (`..._allgather_...`), with a note
    that says so: all_gather and reduce_scatter share the bus factor (p-1)/p, so their
    busbw/algbw ratio cannot tell them apart. None when the name says no one op."""
    found = {canonical_op(m.replace("_", "")) for m in _NAME_OP.findall(path.name)}
    if n_sections != 1 or len(found) != 1:
        return None
    op = found.pop()
    notes.append(
        f"{where}: the log names no binary: op {op} taken from the file name {path.name!r} "
        "(pass --op to override; all_gather and reduce_scatter share a bus factor)"
    )
    return op


def _timestamp_as_one_cell(header: list[str], tok: list[str]) -> list[str]:
    """`-S 1` logs end each row with a `timestamp` cell printed as date and time (two
    tokens, strftime "%Y-%m-%d %H:%M:%S"): make it one cell, as the header has it."""
    if header[-1:] == ["timestamp"] and len(tok) == len(header) + 1:
        return [*tok[:-2], f"{tok[-2]} {tok[-1]}"]
    return tok


def _columns(header: list[str], where: str) -> tuple[list[str], list[dict]]:
    """Leading column names and, per placement group, the index of time/algbw/busbw/check."""
    times = [i for i, h in enumerate(header) if h in ("time", "cputime")]
    if not times:
        raise UsageError(f"{where}: unknown nccl-tests layout (no time column in {header})")
    lead = header[: times[0]]
    if lead[:3] != ["size", "count", "type"]:
        raise UsageError(f"{where}: unknown nccl-tests layout (columns {header})")
    groups = []
    for i in times:
        names = header[i : i + 4]
        if names[1:3] != ["algbw", "busbw"] or len(names) < 4 or names[3] not in CHECKS:
            raise UsageError(f"{where}: unknown nccl-tests layout (columns {header})")
        groups.append({"time": i, "algbw": i + 1, "busbw": i + 2, "check": i + 3, "kind": names[3]})
    return lead, groups


def _wrong_count(cell: str, value: float | None, where: str) -> int:
    """A `#wrong` cell: nccl-tests prints it `%6g`, so a count past 999999 reads `1.04858e+06`
    (a whole number, rounded); N/A (-c 0) is 0."""
    if not value:
        return 0
    if value < 0 or not value.is_integer():
        raise UsageError(f"{where}: #wrong {cell!r} is not a count of elements")
    return int(value)


def _refuse_lone_processes(ranks: list[tuple[int, int, str, str]], where: str) -> None:
    """nccl-tests built without MPI=1 and started as N processes (srun -n N) runs N one-rank
    jobs, each printing a table of a collective among one rank, which measures none: a log of
    one rank, or of the same rank listed by several processes, is refused."""
    listed = Counter(rank for rank, *_ in ranks)
    rank, times = listed.most_common(1)[0] if listed else (0, 0)
    if times > 1:
        what = f"rank {rank} is listed {times} times: {times} processes each ran alone"
    elif len(listed) == 1:
        what = "the run has one rank"
    else:
        return
    raise UsageError(
        f"{where}: {what}, so the table measures no collective (nccl-tests built without "
        "MPI=1 and started as N processes prints one such table each): rebuild with "
        "'make MPI=1', or run one process over N GPUs with -g N"
    )


def _sum_rows(rows: list[dict], where: str, notes: list[str]) -> list[dict]:
    """The rows of one table that a fit can take: all of them, unless it sweeps several
    reductions (-o all: sum, prod, max, min, avg, mulsum at every size), where only the sum
    rows are kept, as commbench measures and prices sum, and a fit of them all would blend
    different ops as repeats of one; a note names the rest."""
    redops = list(dict.fromkeys(r["redop"] for r in rows))
    if len(redops) < 2:
        return rows
    kept = [r for r in rows if r["redop"] == "sum"]
    notes.append(
        f"{where}: the table sweeps reductions {', '.join(redops)} (-o all): the "
        f"{len(rows) - len(kept)} rows of {', '.join(op for op in redops if op != 'sum')} "
        "skipped, as commbench fits sum"
    )
    return kept


def parse(path: Path, hints: Hints) -> Imported:
    """Records of every row and placement in one nccl-tests log."""
    path = Path(path)
    lines = read_lines(path)
    problems = log_problems.scan(path, lines, NCCL_TESTS_FAILURES + LAUNCHER_FAILURES)
    sections, meta, env_lines = split_sections(path, lines)
    sections = [s for s in sections if s.header is not None or s.rows]
    if not sections:
        raise UsageError(
            log_problems.failed_before_rows(problems)
            or f"{path}: not a nccl-tests log (no '#  size  count  type ...' header line); "
            "give the tool's stdout"
        )
    out = Imported(meta={"tool": TOOL, **meta}, problems=problems)
    for sec in sections:  # a table without its footer: a job killed or out of time
        if sec.rows and not sec.concluded and problems.failure is None:
            log_problems.cut_short(path, sec.rows[-1][0], NCCL_TESTS_END, problems)
    name_hint = BINARY.search(path.name)
    hosts: list[str] = []
    last_row_line = max((n for s in sections for n, _ in s.rows), default=0)
    for sec in sections:
        where = f"{path}:{sec.start}"
        if sec.header is None:
            raise UsageError(f"{where}: rows without a column header line")
        lead, groups = _columns(sec.header, where)
        col = {name: i for i, name in enumerate(lead)}
        hosts = list(dict.fromkeys(hosts + [h for _, _, h, _ in sec.ranks]))
        _refuse_lone_processes(sec.ranks, where)
        # group size and link class from the rank lines
        by_group: dict[int, list[str]] = {}
        for _, group, h, _ in sec.ranks:
            by_group.setdefault(group, []).append(h)
        sizes = {len(v) for v in by_group.values()}
        if len(sizes) > 1:
            raise UsageError(f"{where}: groups of different sizes {sorted(sizes)} in one run")
        p_log = sizes.pop() if sizes else None
        p = hints.resolve(
            "group_size", p_log, where, "the log has no '#  Rank N Group G ... on HOST' lines"
        )
        spans = {len(set(v)) for v in by_group.values()}
        link, nodes = hints.shape(
            p,
            max(spans) if spans else None,
            where,
            "the log names no hosts",
        )
        # parse rows
        rows: list[dict[str, Any]] = []
        for n, tok in sec.rows:
            tok = _timestamp_as_one_cell(sec.header, tok)
            if len(tok) != len(sec.header):
                if n == last_row_line:
                    out.notes.append(f"{path}:{n}: truncated last row skipped")
                    continue
                raise UsageError(
                    f"{path}:{n}: row has {len(tok)} columns but the header has "
                    f"{len(sec.header)} ({' '.join(sec.header)})"
                )
            g0 = groups[0]
            rows.append(
                {
                    "line": n,
                    "tok": tok,
                    "redop": tok[col["redop"]] if "redop" in col else None,
                    "root": count_cell(tok[col["root"]], f"{path}:{n}", "root", -1)
                    if "root" in col
                    else None,
                    "algbw": number(tok[g0["algbw"]]),
                    "busbw": number(tok[g0["busbw"]]),
                }
            )
        rows = _sum_rows(rows, where, out.notes)
        binary = sec.binary or (name_hint.group(1) if name_hint and len(sections) == 1 else None)
        if binary is not None and binary not in BINARY_OPS:
            raise UsageError(
                f"{where}: {binary}_perf measures {binary}, which commbench does not model "
                f"(supported: {', '.join(f'{b}_perf' for b in BINARY_OPS)})"
            )
        op_log = BINARY_OPS.get(binary) if binary else None
        if op_log is None and hints.op is None:
            op_log = _op_from_name(path, len(sections), out.notes, where)
        if op_log is None and hints.op is None:
            op_log = _infer_op(rows, p)
        op = hints.resolve(
            "op",
            op_log,
            where,
            "the log does not name its binary (e.g. all_gather_perf) and its busbw/algbw "
            "ratio does not single out one op",
        )
        backend = hints.backend or "nccl"
        timing = "blocking" if sec.blocking else "pipelined"
        world = len(sec.ranks) or p
        by_size = regimes(path, sec.start, sec.tuning, op, p, meta["env"], env_lines, out.notes)
        for r in rows:
            tok = r["tok"]
            nbytes = size_cell(tok[col["size"]], f"{path}:{r['line']}")
            algorithm, protocol, forced = by_size.get(nbytes, by_size[-1])
            dtype = TYPES.get(tok[col["type"]].lower(), tok[col["type"]].lower())
            if hints.dtype is not None and hints.dtype != dtype:
                raise UsageError(
                    f"{path}:{r['line']}: the log says dtype {dtype} but --dtype is {hints.dtype}"
                )
            for placement, g in zip(sec.placements, groups):
                t = time_cell(tok[g["time"]], f"{path}:{r['line']}")
                if t is None:
                    continue  # N/A: this placement not run for this op
                check = tok[g["check"]]
                value = number(check)
                columns = {name: tok[i] for i, name in enumerate(lead)}
                columns.update(
                    time=tok[g["time"]],
                    algbw=tok[g["algbw"]],
                    busbw=tok[g["busbw"]],
                    **{g["kind"]: check},
                )
                if g["kind"] == "#wrong":
                    wrong = _wrong_count(check, value, f"{path}:{r['line']}")
                else:
                    tol = ERROR_TOLERANCE.get(dtype, 0.0)
                    wrong = int(value is not None and value > tol)
                out.records.append(
                    measured_record(
                        tool=TOOL,
                        path=path,
                        line=r["line"],
                        op=op,
                        nbytes=nbytes,
                        dtype=dtype,
                        group_size=p,
                        world_size=world,
                        link_class=link,
                        backend=backend,
                        time_us=t,
                        time_mean_us=t,
                        timing=timing,
                        columns=columns,
                        iters=sec.iters,
                        warmup=sec.warmup,
                        wrong=wrong,
                        checked=sec.check and value is not None,
                        placement=placement,
                        hosts_spanned=nodes,
                        count=count_cell(tok[col["count"]], f"{path}:{r['line']}", "count"),
                        algorithm=algorithm,
                        protocol=protocol,
                        forced=forced,
                    )
                )
        if sec.ranks:
            out.meta.setdefault("devices", sorted({d for *_, d in sec.ranks if d}))
    out.meta["hosts"] = hosts
    out.meta["world_size"] = max((r["world_size"] for r in out.records), default=None)
    return out
