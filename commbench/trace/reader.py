"""Read PyTorch profiler (Kineto) Chrome-trace files: one per rank, JSON or .json.gz, or a
folder of them, into RankTrace (rank, world, backend, process groups, events by kind).

The Kineto format is the one `torch.profiler.profile(...).export_chrome_trace()` writes and
HolisticTraceAnalysis reads (facebookresearch/HolisticTraceAnalysis, trace parser): a
`traceEvents` list of Chrome "X" events with `cat` (cpu_op, user_annotation, kernel,
cuda_runtime, ...), `ts`/`dur` in microseconds and `args`; a top-level `distributedInfo` with
backend, rank, world_size and (PyTorch >= 2.0) `pg_config`, the ranks of each process group
this rank belongs to. Every problem is a UsageError naming the file and what is missing.
"""

from __future__ import annotations

import gzip
import json
import zlib
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

from commbench.errors import UsageError

SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz", ".jsonl", ".log")


@dataclass(frozen=True)
class Event:
    """One complete ("X") event: name, category, thread, start and duration in us, args."""

    name: str
    cat: str
    pid: object
    tid: object
    ts: float
    dur: float
    args: dict

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass
class RankTrace:
    """One rank's trace: where it came from, its place in the job and its events."""

    path: str
    rank: int | None
    world: int | None
    backend: str | None
    groups: list[tuple[str, tuple[int, ...]]]  # (pg name, ranks) from pg_config
    events: list[Event] = field(default_factory=list)
    nccl_version: str | None = None
    host: str | None = None
    gloo_threads: list[int] = field(default_factory=list)  # pt_gloo_runloop thread ids, sorted
    descs: dict[tuple[int, ...], str] = field(default_factory=dict)  # sorted ranks -> pg_desc

    @property
    def label(self) -> str:
        return f"{self.path} (rank {self.rank})" if self.rank is not None else self.path


class Around:
    """Events of some kind per thread, sorted, to find those enclosing a moment quickly
    (bisect, then back over the few that can nest): a big trace has 100k CPU ops."""

    DEPTH = 8  # enclosing events looked back over (nesting of c10d / record_param_comms)

    def __init__(self, events: list[Event]) -> None:
        self.by_tid: dict[object, list[Event]] = {}
        for e in sorted(events, key=lambda e: e.ts):
            self.by_tid.setdefault(e.tid, []).append(e)
        self.starts = {t: [e.ts for e in es] for t, es in self.by_tid.items()}

    def enclosing(self, tid: object, ts: float, end: float | None = None) -> list[Event]:
        """The events on `tid` that contain [ts, end] (end defaults to ts), outermost first."""
        es = self.by_tid.get(tid)
        if not es:
            return []
        i = bisect_right(self.starts[tid], ts) - 1
        hi = ts if end is None else end
        found = [es[j] for j in range(i, max(-1, i - self.DEPTH), -1) if es[j].end >= hi]
        return found[::-1]


STEP = "ProfilerStep#"  # torch.profiler marks each step with such an event


def profiler_steps(events: list[Event]) -> list[tuple[int, Event]]:
    """(N, event) of each ProfilerStep#N event, in start order."""
    return [
        (int(e.name[len(STEP) :]), e)
        for e in sorted(events, key=lambda e: e.ts)
        if e.name.startswith(STEP) and e.name[len(STEP) :].isdigit()
    ]


def trace_files(paths: list[str]) -> list[Path]:
    """The trace files named, folders expanded to their *.json / *.json.gz files (sorted)."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(SUFFIXES))
            if not found:
                raise UsageError(f"{p}: no trace files (*.json, *.json.gz) in this folder")
            files += found
        elif p.is_file():
            files.append(p)
        else:
            raise UsageError(f"{p}: no such file or folder")
    return files


def _load_json(path: Path) -> dict:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise UsageError(f"{path}: cannot read the trace ({e}); truncated or not gzip") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: not a JSON trace ({e}); truncated?") from None
    if isinstance(doc, list):  # Chrome's bare array form
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise UsageError(f"{path}: no `traceEvents` list: not a Chrome/Kineto trace")
    return doc


def parse_ranks(value: object) -> tuple[int, ...] | None:
    """Ranks as pg_config (a list) or record_param_comms (the text `[0, 1]`) writes them."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if isinstance(value, list) and all(isinstance(r, int) for r in value):
        return tuple(value)
    return None


def read_trace(path: Path) -> RankTrace:
    """One rank's trace file, its complete events sorted by start time."""
    doc = _load_json(path)
    info = doc.get("distributedInfo") or {}
    if not isinstance(info, dict):
        raise UsageError(f"{path}: `distributedInfo` is not an object")
    groups = []
    descs: dict[tuple[int, ...], str] = {}
    for i, pg in enumerate(info.get("pg_config") or ()):
        ranks = parse_ranks(pg.get("ranks")) if isinstance(pg, dict) else None
        if ranks is None:
            raise UsageError(f"{path}: distributedInfo.pg_config[{i}] has no list of ranks")
        groups.append((str(pg.get("pg_name", i)), ranks))
        desc = pg.get("pg_desc")
        if isinstance(desc, str) and desc.startswith("mesh_"):  # a DeviceMesh dimension's
            descs.setdefault(tuple(sorted(ranks)), desc)
    events = []
    for e in doc["traceEvents"]:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        try:
            ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            continue
        args: dict = e["args"] if isinstance(e.get("args"), dict) else {}
        events.append(
            Event(
                str(e.get("name", "")),
                str(e.get("cat", "")),
                e.get("pid"),
                e.get("tid"),
                ts,
                dur,
                args,
            )  # fmt: skip
        )
    events.sort(key=lambda ev: (ev.ts, -ev.dur))
    gloo_threads = sorted({
        e["tid"] for e in doc["traceEvents"]
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "thread_name"
        and isinstance(e.get("tid"), int) and "pt_gloo_runloop" in str((e.get("args") or {}).get("name"))
    })  # fmt: skip
    rank, world = info.get("rank"), info.get("world_size")
    return RankTrace(
        str(path),
        rank if isinstance(rank, int) else None,
        world if isinstance(world, int) else None,
        info.get("backend") if isinstance(info.get("backend"), str) else None,
        groups,
        events,
        info.get("nccl_version") if isinstance(info.get("nccl_version"), str) else None,
        doc.get("host_name") if isinstance(doc.get("host_name"), str) else None,
        gloo_threads,
        descs,
    )


def read_job(paths: list[str]) -> list[RankTrace]:
    """Every rank's trace of one job, sorted by rank. Traces of different worlds or backends,
    or two traces of the same rank, are a UsageError (mixed jobs)."""
    traces = [read_trace(f) for f in trace_files(paths)]
    worlds = {t.world for t in traces if t.world is not None}
    if len(worlds) > 1:
        shown = ", ".join(f"{t.path}: world {t.world}" for t in traces)
        raise UsageError(f"traces of different jobs mixed ({shown})")
    backends = {t.backend for t in traces if t.backend}
    if len(backends) > 1:
        raise UsageError(f"traces of different backends mixed ({', '.join(sorted(backends))})")
    seen: dict[int, str] = {}
    for t in traces:
        if t.rank is None:
            continue
        if t.rank in seen:
            raise UsageError(f"{t.path}: rank {t.rank} again (also {seen[t.rank]}): mixed jobs?")
        if t.world is not None and not 0 <= t.rank < t.world:
            raise UsageError(f"{t.path}: rank {t.rank} outside the world of {t.world}")
        seen[t.rank] = t.path
    if len(traces) > 1 and any(t.rank is None for t in traces):
        missing = next(t.path for t in traces if t.rank is None)
        raise UsageError(f"{missing}: no distributedInfo.rank: cannot tell the ranks apart")
    return sorted(traces, key=lambda t: -1 if t.rank is None else t.rank)
