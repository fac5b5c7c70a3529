"""Shares and totals of a job's communication: per axis and phase (count, bytes, time, achieved
bus bandwidth), the step's communication share and its exposed share, and the slowest rank of
each collective with the skew between ranks.

Exposed communication is the time a rank communicates while it computes nothing (the union of
its ops' spans minus the union of its compute spans), as HolisticTraceAnalysis's comm/compute
overlap reads it (facebookresearch/HolisticTraceAnalysis, `get_comm_comp_overlap`). Compute is
the non-NCCL GPU kernels where the trace has kernels, else the `aten::` CPU ops outside any
communication op. Shares are of the step: ProfilerStep#N's span (stretched to the last op it
issued), each rank and step added up; busbw follows nccl-tests (docs/design.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from commbench.ops import OPS
from commbench.trace.ops import CommOp, parse_kernel
from commbench.trace.reader import Around, RankTrace, profiler_steps

Span = tuple[float, float]
COMM_CPU = ("c10d::", "record_param_comms", "nccl:", "gloo:")


def union(spans: list[Span]) -> list[Span]:
    out: list[Span] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def length(spans: list[Span]) -> float:
    return sum(b - a for a, b in spans)


def minus(spans: list[Span], cut: list[Span]) -> list[Span]:
    """Parts of `spans` (a union) outside `cut` (a union)."""
    out = []
    for a, b in spans:
        start = a
        for c, d in cut:
            if d <= start or c >= b:
                continue
            if c > start:
                out.append((start, c))
            start = max(start, d)
        if start < b:
            out.append((start, b))
    return out


def compute_spans(trace: RankTrace) -> list[Span]:
    """What the rank computed (module docstring), as a union of spans."""
    kernels = [e for e in trace.events if e.cat == "kernel"]
    if kernels:
        return union([(e.ts, e.end) for e in kernels if parse_kernel(e.name) is None])
    comm = Around([e for e in trace.events if e.name.startswith(COMM_CPU)])
    workers = {e.tid for e in trace.events if e.name.startswith("gloo:")}
    spans = []
    for e in trace.events:
        if e.cat != "cpu_op" or not e.name.startswith("aten::") or e.tid in workers:
            continue
        if comm.enclosing(e.tid, e.ts, e.end):  # work of a communication op, not compute
            continue
        spans.append((e.ts, e.end))
    return union(spans)


def steps_of(trace: RankTrace) -> dict[int, Span]:
    return {n: (e.ts, e.end) for n, e in profiler_steps(trace.events)}


@dataclass
class AxisTotals:
    count: int = 0
    bytes: int = 0
    time_us: float = 0.0
    exposed_us: float = 0.0
    bus_bytes: float = 0.0  # sum of S x busbw factor, over the ops whose S is known
    sized_time_us: float = 0.0
    sized: int = 0  # ops whose S the trace gave

    @property
    def busbw_gbps(self) -> float | None:
        return self.bus_bytes / self.sized_time_us / 1e3 if self.sized_time_us > 0 else None

    def as_json(self) -> dict:
        return {
            "count": self.count,
            "bytes": self.bytes if self.sized else None,
            "time_us": round(self.time_us, 3),
            "exposed_us": round(self.exposed_us, 3),
            "busbw_gbps": None if self.busbw_gbps is None else round(self.busbw_gbps, 4),
        }


@dataclass
class Stats:
    axes: dict[str, AxisTotals] = field(default_factory=dict)
    phases: dict[tuple[str, str], AxisTotals] = field(default_factory=dict)
    step_us: float = 0.0
    comm_us: float = 0.0
    exposed_us: float = 0.0
    steps: list[int] = field(default_factory=list)
    skew: list[dict] = field(default_factory=list)  # per collective instance seen on >1 rank
    windows: dict[tuple[int, int], Span] = field(default_factory=dict)  # (rank, step) -> span
    compute: dict[tuple[int, int], list[Span]] = field(default_factory=dict)  # clipped to it

    @property
    def comm_share(self) -> float | None:
        return self.comm_us / self.step_us if self.step_us > 0 else None

    @property
    def exposed_share(self) -> float | None:
        return self.exposed_us / self.step_us if self.step_us > 0 else None


def _add(t: AxisTotals, op: CommOp, exposed: float) -> None:
    t.count += 1
    t.time_us += op.duration_us
    t.exposed_us += exposed
    if op.bytes is not None:
        t.sized += 1
        t.bytes += op.bytes
    if op.bytes is not None and op.duration_us > 0:
        p = len(op.group_ranks) if op.group_ranks else 2
        t.bus_bytes += op.bytes * OPS[op.op].bus_factor(p) if op.op in OPS else op.bytes
        t.sized_time_us += op.duration_us


def compute(traces: list[RankTrace], ops: dict[int, list[CommOp]], step: int | None) -> Stats:
    """Per-axis totals and shares over the ranks' steps (only `step` when given)."""
    st = Stats()
    for t in traces:
        rank = t.rank if t.rank is not None else 0
        rops = [o for o in ops.get(rank, []) if step is None or o.step == step]
        compute_u = compute_spans(t)
        windows = steps_of(t)
        if step is not None:
            windows = {k: v for k, v in windows.items() if k == step}
        if not windows and rops:  # no step markers: the traced span is the step
            windows = {-1: (min(o.start_us for o in rops), max(o.end_us for o in rops))}
        for n, (a, b) in sorted(windows.items()):
            mine = [o for o in rops if o.step == n or n == -1]
            end = max([b] + [o.end_us for o in mine])
            comm = union([(o.start_us, o.end_us) for o in mine])
            cut = [(c, d) for c, d in compute_u if d > a and c < end]
            st.windows[(rank, n)] = (a, end)
            st.compute[(rank, n)] = [(max(c, a), min(d, end)) for c, d in cut]
            st.step_us += end - a
            st.comm_us += length(comm)
            st.exposed_us += length(minus(comm, cut))
            if n >= 0 and n not in st.steps:
                st.steps.append(n)
            for o in mine:
                exposed = o.exposed_us = length(minus([(o.start_us, o.end_us)], cut))
                _add(st.axes.setdefault(o.axis or "unknown", AxisTotals()), o, exposed)
                key = (o.axis or "unknown", o.phase or "unknown")
                _add(st.phases.setdefault(key, AxisTotals()), o, exposed)
    st.steps.sort()
    st.skew = _skew(ops, step)
    return st


def _skew(ops: dict[int, list[CommOp]], step: int | None) -> list[dict]:
    """Each collective seen on more than one rank: the k-th op of a group on every member is
    one collective; the rank that started it last held the others up (its skew)."""
    instances: dict[tuple, list[CommOp]] = {}
    for rops in ops.values():
        count: dict[tuple, int] = {}
        for o in rops:
            if o.group_ranks is None or (step is not None and o.step != step):
                continue
            g = tuple(sorted(o.group_ranks))
            k = count[g] = count.get(g, -1) + 1
            instances.setdefault((g, k), []).append(o)
    out = []
    for (g, k), members in instances.items():
        if len(members) < 2:
            continue
        last = max(members, key=lambda o: o.start_us)
        first = min(o.start_us for o in members)
        out.append({
            "op": last.op, "axis": last.axis, "group_ranks": list(g), "index": k,
            "slowest_rank": last.rank, "skew_us": round(last.start_us - first, 3),
            "duration_us": {o.rank: round(o.duration_us, 3) for o in members},
        })  # fmt: skip
    return sorted(out, key=lambda d: -d["skew_us"])
