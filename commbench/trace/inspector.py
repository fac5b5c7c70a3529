"""NCCL Inspector output read as a job's ops: the JSONL that NCCL's inspector profiler plugin
(nccl ext-profiler/inspector, NCCL_INSPECTOR_ENABLE=1) writes, one object per completed
collective per communicator: `header` (communicator id, this rank's place in it, n_ranks,
nnodes), `metadata` (hostname, pid, dump time) and `coll_perf` (coll, coll_sn,
coll_msg_size_bytes, coll_exec_time_us, coll_timing_source, bandwidths; with
NCCL_INSPECTOR_DUMP_VERBOSE=1 `event_trace_ts` with the collective's start time).

Sizes: the plugin's message size is one rank's count x type size, so S (nccl-tests) is it x
n_ranks for all-gather and reduce-scatter, as the plugin's own bandwidth does. Groups: a
record names its communicator, not its ranks; each process (hostname, pid) is placed in the
world by the communicator with the most ranks, and a communicator's group is the world ranks
of the processes that report it. No dtype, algorithm, protocol, step or compute is recorded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from commbench.errors import UsageError
from commbench.trace.ops import P2P, CommOp
from commbench.trace.reader import RankTrace

INSPECTOR_OPS = {
    "AllReduce": "allreduce", "AllGather": "allgather", "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": P2P, "Send": P2P, "Recv": P2P,
}  # fmt: skip
TIMES_RANKS = ("allgather", "reduce_scatter")


@dataclass
class _Row:
    comm: str
    comm_rank: int
    n_ranks: int
    process: tuple[str, int]
    coll: dict = field(default_factory=dict)


def is_inspector(path: Path) -> bool:
    """Whether a file's first object is an NCCL Inspector record (has `coll_perf`)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.lstrip()[:1] == b"{" and b'"coll_perf"' in head


def _objects(path: Path) -> list[dict]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read the NCCL Inspector log ({e})") from None
    dec, pos = json.JSONDecoder(), 0
    out: list[dict] = []
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        try:
            obj, pos = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}: not NCCL Inspector JSON at line {e.lineno} ({e.msg}); "
                             "truncated?") from None  # fmt: skip
        out.append(obj)


def _row(obj: object, path: Path, i: int) -> _Row:
    try:
        head, meta, coll = obj["header"], obj["metadata"], obj["coll_perf"]  # type: ignore[index]
        return _Row(str(head["id"]), int(head["rank"]), int(head["n_ranks"]),
                    (str(meta.get("hostname", "")), int(meta.get("pid", 0))), dict(coll))  # fmt: skip
    except (TypeError, KeyError, ValueError):
        raise UsageError(f"{path}: record {i + 1} lacks header.id/rank/n_ranks, metadata or "
                         "coll_perf (not NCCL Inspector output)") from None  # fmt: skip


def read(files: list[Path]) -> tuple[list[RankTrace], dict[int, list[CommOp]], int]:
    """(one RankTrace per process, its ops, the world size) from Inspector logs."""
    rows = [_row(o, f, i) for f in files for i, o in enumerate(_objects(f))]
    if not rows:
        raise UsageError(f"{files[0]}: no NCCL Inspector records")
    world = max(r.n_ranks for r in rows)
    where: dict[tuple[str, int], int] = {}
    for r in rows:
        if r.n_ranks == world:
            if where.get(r.process, r.comm_rank) != r.comm_rank:
                raise UsageError(f"process {r.process}: two ranks in world communicators "
                                 "(logs of different jobs mixed?)")  # fmt: skip
            where[r.process] = r.comm_rank
    members: dict[str, set[int]] = {}
    for r in rows:
        if r.process in where:
            members.setdefault(r.comm, set()).add(where[r.process])
    ops: dict[int, list[CommOp]] = {}
    for r in rows:
        rank = where.get(r.process)
        if rank is None:
            continue  # a process with no world communicator: it cannot be placed
        name = INSPECTOR_OPS.get(str(r.coll.get("coll")))
        if name is None:
            continue
        size = r.coll.get("coll_msg_size_bytes")
        nbytes = int(size) * (r.n_ranks if name in TIMES_RANKS else 1) if size is not None else None
        group = members.get(r.comm, set())
        ts = (r.coll.get("event_trace_ts") or {}).get("coll_start_ts")
        op = CommOp(
            rank, 0, name, nbytes, None,
            tuple(sorted(group)) if len(group) == r.n_ranks else None,
            float(ts or 0.0), float(r.coll.get("coll_exec_time_us") or 0.0), float(ts or 0.0),
            source="kernel" if str(r.coll.get("coll_timing_source", "")).startswith("kernel") else "cpu",
        )  # fmt: skip
        op.seq = int(r.coll.get("coll_sn") or 0)
        if op.group_ranks is None:
            op.notes.append(f"communicator {r.comm}: {len(group)} of its {r.n_ranks} ranks logged")
        ops.setdefault(rank, []).append(op)
    traces = []
    for process, rank in sorted(where.items(), key=lambda kv: kv[1]):
        traces.append(RankTrace(f"{process[0]}:{process[1]}", rank, world, "nccl", [],
                                host=process[0] or None))  # fmt: skip
        rops = sorted(ops.get(rank, []), key=lambda o: (o.start_us, o.seq))
        for i, o in enumerate(rops):
            o.seq = i
        ops[rank] = rops
    return traces, ops, world
