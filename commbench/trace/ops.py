"""Every collective and p2p op of one rank's trace, in commbench's op names and the nccl-tests
S convention (docs/design.md "Bytes and bandwidth").

Three shapes of trace, tried in this order:
  * NCCL with metadata (PyTorch >= 2.0): `record_param_comms` CPU events carry `Collective
    name`, `In/Out msg nelems`, `dtype` and `Process Group Ranks`; the NCCL kernel they
    launched (same `External id`) gives the GPU time, the algorithm and the protocol.
  * NCCL without metadata (older PyTorch): only the kernels, whose names say the op, algorithm,
    protocol and element type (`ncclKernel_AllReduce_RING_LL_Sum_float`, NCCL >= 2.19
    `ncclDevKernel_AllReduce_Sum_f32_RING_LL`); sizes and groups are unknown.
  * gloo on CPU: `c10d::allreduce_`-style operator events (input shapes with record_shapes) on
    the issuing thread, each followed by its `gloo:all_reduce`-style execution on a gloo
    worker thread, whose span is the op's time; groups are found later by matching ranks.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_right
from dataclasses import dataclass, field

from commbench.dtypes import DTYPE_SIZES, canonical_dtype_name
from commbench.trace.reader import Around, Event, RankTrace, parse_ranks, profiler_steps

# record_param_comms' `Collective name` and the c10d operator names -> commbench op names
RPC_OPS = {
    "allreduce": "allreduce", "allreduce_coalesced": "allreduce", "all_reduce": "allreduce",
    "allgather": "allgather", "_allgather_base": "allgather", "all_gather": "allgather",
    "allgather_into_tensor_coalesced": "allgather", "allgather_coalesced": "allgather",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all": "alltoall", "alltoall": "alltoall", "alltoall_base": "alltoall",
    "all_to_allv": "alltoallv", "alltoallv": "alltoallv",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "send": "sendrecv", "recv": "sendrecv", "recv_any_source": "sendrecv", "barrier": "barrier",
}  # fmt: skip
NOT_COMM = {"wait", "coalesced", "init", "abort"}  # record_param_comms names that move nothing
KERNEL_OPS = {
    "AllReduce": "allreduce", "AllGather": "allgather", "ReduceScatter": "reduce_scatter",
    "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "sendrecv", "Send": "sendrecv",
    "Recv": "sendrecv", "AllToAll": "alltoall",
}  # fmt: skip
ALGORITHMS = (
    "COLLNET_DIRECT",
    "COLLNET_CHAIN",
    "NVLS_TREE",
    "COLLNET",
    "NVLS",
    "RING",
    "TREE",
    "PAT",
)
PROTOCOLS = ("LL128", "LL", "SIMPLE")
TYPE_NAMES = {
    "float": "float32", "f32": "float32", "half": "float16", "f16": "float16", "__half": "float16",
    "bfloat16": "bfloat16", "__nv_bfloat16": "bfloat16", "bf16": "bfloat16", "double": "float64",
    "f64": "float64", "int8_t": "int8", "i8": "int8", "uint8_t": "uint8", "u8": "uint8",
    "int32_t": "int32", "i32": "int32", "int": "int32", "int64_t": "int64", "i64": "int64",
    "long": "int64", "long int": "int64", "c10::bfloat16": "bfloat16", "c10::half": "float16",
    "unsigned char": "uint8", "signed char": "int8", "bool": "uint8", "byte": "uint8",
}  # fmt: skip
EXTRA_SIZES = {"int64": 8, "uint8": 1}
# the gloo: events each op runs as (gloo has no reduce-scatter of its own: an all-reduce)
GLOO_RUNS = {
    "allreduce": ("all_reduce",), "reduce_scatter": ("all_reduce", "reduce_scatter"),
    "allgather": ("all_gather",), "alltoall": ("all_to_all",), "alltoallv": ("all_to_all",),
    "broadcast": ("broadcast",), "reduce": ("reduce",), "gather": ("gather",),
    "scatter": ("scatter",), "sendrecv": ("send", "recv"), "barrier": ("barrier", "all_reduce"),
}  # fmt: skip
P2P = "sendrecv"


@dataclass
class CommOp:
    """One collective or p2p op on one rank. Times in us; None where the trace does not say."""

    rank: int
    seq: int  # position among this rank's ops, in issue order
    op: str
    bytes: int | None
    dtype: str | None
    group_ranks: tuple[int, ...] | None
    start_us: float  # when it ran (GPU kernel, gloo worker), else the CPU op
    duration_us: float
    cpu_us: float  # when the CPU issued it (step and phase are read here)
    algorithm: str | None = None
    protocol: str | None = None
    peer: int | None = None  # p2p: the other side's rank in the group (gloo: as c10d wrote it)
    direction: str | None = None  # p2p: send | recv
    step: int | None = None
    phase: str | None = None
    source: str = "cpu"  # kernel | cpu | gloo
    exec_tid: object = None  # the thread or stream it ran on (gloo: one pool per group)
    cpu_tid: object = None  # the thread that issued it
    axis: str | None = None
    predicted_us: float | None = None  # a calibration's time for the same op (--calibration)
    exposed_us: float | None = None  # the part of its time with no compute beside it (stats)
    notes: list[str] = field(default_factory=list)

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us

    @property
    def signature(self) -> tuple:
        """What the peers of one collective agree on (gloo matching)."""
        return (self.op, self.bytes, self.dtype)


def dtype_of(name: object) -> str | None:
    """A dtype as a trace spells it (`Float`, `c10::BFloat16`, `float`) in commbench's names."""
    if not isinstance(name, str) or not name:
        return None
    key = name.strip().lower()
    return TYPE_NAMES.get(key) or canonical_dtype_name(key)


def dtype_bytes(dtype: str | None) -> int | None:
    if dtype is None:
        return None
    return DTYPE_SIZES.get(dtype) or EXTRA_SIZES.get(dtype)


def parse_kernel(name: str) -> tuple[str | None, str | None, str | None, str | None] | None:
    """(op, algorithm, protocol, dtype) of an NCCL kernel name, None if it is not one."""
    base = name.split("(")[0]
    m = re.match(r"ncclDevKernel_|ncclKernel_", base)
    if not m:
        return None
    tokens = base[m.end() :].split("_")
    op = KERNEL_OPS.get(tokens[0]) if tokens else None
    rest = "_".join(tokens[1:])
    algorithm = next((a for a in ALGORITHMS if re.search(rf"(^|_){a}(_|$)", rest)), None)
    protocol = next((p for p in PROTOCOLS if re.search(rf"(^|_){p}(_|$)", rest)), None)
    dtype = next((TYPE_NAMES[t] for t in tokens[1:] if t in TYPE_NAMES), None)
    if op == P2P:
        dtype = None  # NCCL's p2p kernels move bytes (int8_t) whatever the tensor held
    return op, algorithm, protocol, dtype


def _nelems(dims: object) -> int | None:
    """Elements of one `Input Dims` entry: a shape, or a list of shapes (a TensorList)."""
    if not isinstance(dims, list) or not dims:
        return None
    if all(isinstance(d, int) for d in dims):
        return math.prod(dims)
    if all(isinstance(d, list) for d in dims):
        sizes = [_nelems(d) for d in dims]
        return sum(s for s in sizes if s is not None) or None
    return None


def rpc_bytes(op: str, args: dict, esize: int | None) -> int | None:
    """S from record_param_comms' element counts: the larger of in and out (all-gather's
    output, reduce-scatter's input), all-to-all the send buffer."""
    n_in, n_out = args.get("In msg nelems"), args.get("Out msg nelems")
    if esize is None or not isinstance(n_in, int) or not isinstance(n_out, int):
        return None
    return (n_in if op in ("alltoall", "alltoallv") else max(n_in, n_out)) * esize


class _Index:
    """Per-thread CPU events sorted by start, to find what encloses a moment (phase, step)."""

    def __init__(self, events: list[Event]) -> None:
        self.steps = profiler_steps(events)
        self.step_ts = [e.ts for _, e in self.steps]
        self.by_tid: dict[object, list[Event]] = {}
        for e in events:
            if e.cat in ("cpu_op", "user_annotation", "python_function"):
                self.by_tid.setdefault(e.tid, []).append(e)

    def step_of(self, ts: float) -> int | None:
        i = bisect_right(self.step_ts, ts) - 1
        if i >= 0 and ts <= self.steps[i][1].end:
            return self.steps[i][0]
        return None

    def phase_of(self, tid: object, ts: float) -> str | None:
        """forward / backward / optimizer from the events enclosing `ts` on thread `tid`
        (module and autograd annotations: `## backward ##`, `autograd::engine::...`)."""
        names = [e.name.lower() for e in self.by_tid.get(tid, ()) if e.ts <= ts <= e.end]
        for word, phase in (("backward", "backward"), ("autograd", "backward"),
                            ("optimizer", "optimizer"), ("forward", "forward")):  # fmt: skip
            if any(word in n for n in names):
                return phase
        return None


def extract(trace: RankTrace) -> list[CommOp]:
    """The ops of one rank's trace, whichever shape it has (module docstring)."""
    rank = trace.rank if trace.rank is not None else 0
    index = _Index(trace.events)
    rpcs = [e for e in trace.events if e.name == "record_param_comms"]
    kernels = [e for e in trace.events if e.cat == "kernel" and parse_kernel(e.name)]
    if any("Collective name" in e.args for e in rpcs):
        ops = _from_rpc(rank, rpcs, kernels)
    elif kernels:
        ops = _from_kernels(rank, trace.events, kernels)
    else:
        ops = _from_c10d(rank, trace.events)
    for i, op in enumerate(sorted(ops, key=lambda o: o.cpu_us)):
        op.seq = i
        op.step = index.step_of(op.cpu_us)
        op.phase = index.phase_of(op.cpu_tid, op.cpu_us)
    return sorted(ops, key=lambda o: o.seq)


def _from_rpc(rank: int, rpcs: list[Event], kernels: list[Event]) -> list[CommOp]:
    by_ext = {k.args.get("External id"): k for k in kernels}
    ops = []
    for e in rpcs:
        name = str(e.args.get("Collective name", ""))
        if name in NOT_COMM or name not in RPC_OPS:
            continue
        op = RPC_OPS[name]
        dtype = dtype_of(e.args.get("dtype"))
        k = by_ext.get(e.args.get("External id"))
        parsed = parse_kernel(k.name) if k is not None else None
        c = CommOp(
            rank, 0, op, rpc_bytes(op, e.args, dtype_bytes(dtype)), dtype,
            parse_ranks(e.args.get("Process Group Ranks")),
            k.ts if k else e.ts, k.dur if k else e.dur, e.ts,
            parsed[1] if parsed else None, parsed[2] if parsed else None,
            direction=name if op == P2P else None, source="kernel" if k else "cpu",
            exec_tid=k.tid if k else e.tid, cpu_tid=e.tid,
        )  # fmt: skip
        ops.append(c)
    return ops


def _from_kernels(rank: int, events: list[Event], kernels: list[Event]) -> list[CommOp]:
    """Older PyTorch: one op per NCCL kernel; the CPU launch (same correlation) dates it, and
    the c10d operator around the launch names it where the kernel cannot (alltoall runs as
    SendRecv)."""
    launches = {
        e.args.get("correlation"): e
        for e in events
        if e.cat == "cuda_runtime" and e.name.startswith("cudaLaunchKernel")
    }
    c10d = Around([e for e in events if e.name.startswith("c10d::")])
    ops = []
    for k in kernels:
        op, algorithm, protocol, dtype = parse_kernel(k.name)  # type: ignore[misc]
        launch = launches.get(k.args.get("correlation"))
        cpu = launch.ts if launch is not None else k.ts
        if launch is not None:
            around = c10d.enclosing(launch.tid, cpu)
            if around:
                named = RPC_OPS.get(around[-1].name[len("c10d::") :].rstrip("_"))
                op = named if named and named != "barrier" else op
        c = CommOp(rank, 0, op or "unknown", None, dtype, None, k.ts, k.dur, cpu,
                   algorithm, protocol, source="kernel", exec_tid=k.tid,
                   cpu_tid=launch.tid if launch is not None else None)  # fmt: skip
        c.notes.append("size unknown: the trace has no record_param_comms metadata")
        ops.append(c)
    return ops


def _c10d_bytes(op: str, args: dict) -> tuple[int | None, int | None]:
    """(elements S counts, p2p peer) of a c10d operator from its `Input Dims`."""
    dims = args.get("Input Dims") or []
    counts = [c for d in dims[:2] if (c := _nelems(d)) is not None]
    if not counts:
        return None, None
    n = counts[-1] if op in ("alltoall", "alltoallv") and len(counts) > 1 else max(counts)
    peer = None
    if op == P2P:
        concrete = args.get("Concrete Inputs") or []
        try:
            peer = int(concrete[2])
        except (IndexError, ValueError):
            peer = None
    return n, peer


def _from_c10d(rank: int, events: list[Event]) -> list[CommOp]:
    """gloo: c10d operators on the issuing threads, each paired with the first later gloo
    execution event of its kind not yet taken (gloo runs a group's work in order on its own
    threads; ops issued at once to two groups may start in either order)."""
    execs = [e for e in events if e.name.startswith("gloo:")]
    taken: set[int] = set()
    ops = []
    for e in events:
        if not e.name.startswith("c10d::"):
            continue
        base = e.name[len("c10d::") :].rstrip("_")
        op = RPC_OPS.get(base)
        if op is None:
            continue
        n, peer = _c10d_bytes(op, e.args)
        if op == "alltoall" and any(
            c not in ("", "[]") for c in (e.args.get("Concrete Inputs") or [])[3:5]
        ):
            op = "alltoallv"
        names = GLOO_RUNS.get(op, ())
        run = next(
            (i for i, x in enumerate(execs)
             if i not in taken and x.ts >= e.ts and x.name[len("gloo:") :] in names),
            None,
        )  # fmt: skip
        x = execs[run] if run is not None else None
        if run is not None:
            taken.add(run)
        types = (x.args.get("Input type") if x else None) or e.args.get("Input type") or []
        dtype = next((d for t in types if (d := dtype_of(t)) and dtype_bytes(d)), None)
        esize = dtype_bytes(dtype)
        c = CommOp(
            rank, 0, op, n * esize if n is not None and esize else None, dtype, None,
            x.ts if x else e.ts, x.dur if x else e.dur, e.ts, peer=peer,
            direction=base if op == P2P else None, source="gloo" if x else "cpu",
            exec_tid=x.tid if x else e.tid, cpu_tid=e.tid,
        )  # fmt: skip
        if op == "barrier":
            c.bytes = 0
        ops.append(c)
    return ops
