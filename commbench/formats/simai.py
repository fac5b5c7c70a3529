"""SimAI-Analytical inputs: a training step's workload file and the bus bandwidths it prices with.

Formats from SimAI's own reader and AICB's writer (aliyun/SimAI
astra-sim-alibabacloud/astra-sim/workload/Workload.cc, system/AstraParamParse.hh, calbusbw.cc;
aliyun/aicb workload_generator/SimAI_training_workload_generator.py):

- workload: a header `HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: TP ep: EP pp: PP
  vpp: V ga: M all_gpus: W checkpoints: 0 checkpoint_initiates: 0 pp_comm: BYTES`, the row count,
  then rows of 12 whitespace-separated fields `name depen fwd_ns fwd_type fwd_bytes ig_ns ig_type
  ig_bytes wg_ns wg_type wg_bytes wg_update_ns`. The slot decides the group: a plain type in the
  forward or input-grad slot runs on TP, in the weight-grad slot on DP; `_EP` runs on EP and
  `_DP_EP` on the expert data-parallel group. Bytes are S in the nccl-tests convention (SimAI
  times an all-reduce as S x 2(p-1)/p / busbw), bandwidths GB/s with 1 GB = 2^30 B (Common.hh).
- network: `-nv` (intra busbw) and `-nic` (busbw per NIC) for the current binary, and a
  `busbw.yaml` (a title line, then TP/DP/EP sections of allreduce/allgather/reducescatter/alltoall
  and PP busbw) for SimAI versions that read `-busbw`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import zip_longest

from commbench.ops import OPS
from commbench.traffic.program import Step

GIB = float(1 << 30)
COMM_TYPES = {
    "allreduce": "ALLREDUCE",
    "allgather": "ALLGATHER",
    "reduce_scatter": "REDUCESCATTER",
    "alltoall": "ALLTOALL",
    "alltoallv": "ALLTOALL",
}
YAML_OPS = {"allreduce": "allreduce", "allgather": "allgather",
            "reduce_scatter": "reducescatter", "alltoall": "alltoall"}  # fmt: skip
COMPUTE_NS = 1  # commbench has no per-layer compute: AICB's placeholder without AIOB
UPDATE_NS = 100  # AICB's default wg_update time


@dataclass(frozen=True)
class Comm:
    """One collective in one slot of a SimAI row."""

    kind: str  # ALLREDUCE, ALLGATHER_EP, ...
    nbytes: int
    name: str


@dataclass(frozen=True)
class Row:
    name: str
    fwd: Comm | None
    ig: Comm | None
    wg: Comm | None

    def line(self) -> str:
        cells = [self.name, "-1"]
        for c in (self.fwd, self.ig, self.wg):
            cells += [str(COMPUTE_NS), c.kind if c else "NONE", str(c.nbytes if c else 0)]
        return "\t".join([*cells, str(UPDATE_NS)])


def group_of(axis: str) -> str | None:
    """SimAI's group for a Step axis: TP, DP, EP, DP_EP, or None (not expressible: cp, pp)."""
    parts = set(axis.split("-"))
    if "edp" in parts:
        return "DP_EP"
    if "ep" in parts:
        return "EP"
    if "dp" in parts:
        return "DP"  # the gradient group, cp folded in (dp-cp) as ZeRO shards over it
    if parts == {"tp"}:
        return "TP"
    return None


def rows(steps: Iterable[Step]) -> tuple[list[Row], list[str]]:
    """SimAI rows for a step Program's Steps (each repeated `repeat` times), and what cannot be
    written. TP and EP traffic goes to the forward or input-grad slot by phase, DP and DP_EP to
    the weight-grad slot; the three slots fill independently, in Program order, so the rows
    hold every byte in as few rows as the busiest slot needs."""
    slots: dict[str, list[Comm]] = {"fwd": [], "ig": [], "wg": []}
    skipped: dict[str, float] = {}
    rounded = 0.0
    for st in steps:
        kind, group = COMM_TYPES.get(st.op), group_of(st.axis)
        n = round(st.repeat)
        rounded += abs(n - st.repeat) * st.nbytes
        if kind is None or group is None or n < 1:
            why = f"{st.op} on {st.axis}"
            skipped[why] = skipped.get(why, 0) + st.total_bytes
            continue
        if group in ("TP", "EP"):
            slot = "fwd" if st.phase == "forward" else "ig"
            kind += "_EP" if group == "EP" else ""
        else:
            slot, kind = "wg", kind + ("_DP_EP" if group == "DP_EP" else "")
        name = (
            "_".join((st.label or f"{st.axis} {st.op}").split()).replace("(", "").replace(")", "")
        )
        slots[slot] += [Comm(kind, st.nbytes, f"{st.axis}_{name}")] * n
    out = [
        Row(next(c.name for c in (f, i, w) if c), f, i, w)
        for f, i, w in zip_longest(slots["fwd"], slots["ig"], slots["wg"])
    ]
    notes = [f"{why}: {b / 1e9:.3g} GB per step not written (SimAI has no such group "
             "or op)" for why, b in sorted(skipped.items())]  # fmt: skip
    if rounded:
        notes.append(f"fractional repeats rounded to whole rows: {rounded / 1e9:.3g} GB off")
    return out, notes


def workload_text(
    out: list[Row], *, tp: int, ep: int, pp: int, micro_batches: int, gpus: int, pp_bytes: int
) -> str:
    """The workload file: header, row count, rows (vpp 1: the non-interleaved 1F1B)."""
    header = (
        f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {tp} ep: {ep} pp: {pp} "
        f"vpp: 1 ga: {micro_batches} all_gpus: {gpus} checkpoints: 0 checkpoint_initiates: 0 "
        f"pp_comm: {pp_bytes if pp > 1 else 0}"
    )
    return "\n".join([header, str(len(out)), *(r.line() for r in out)]) + "\n"


def busbw_GiBps(op: str, nbytes: float, p: int, seconds: float) -> float:
    """nccl-tests bus bandwidth, GB/s as SimAI reads it (2^30 B)."""
    return nbytes / seconds * OPS[op].bus_factor(p) / GIB


def busbw_yaml(
    steps: Iterable[Step],
    where: Callable[[str], tuple[int, str]],
    price: Callable[[str, int, int, str], float],
    pp_bytes: int,
    pp_where: tuple[int, str] | None,
) -> str:
    """busbw.yaml for the step: per section and op, the bus bandwidth the calibration predicts
    for the largest message of that op on that group (as `plan` prices it); null where the
    step has none. `where(axis)` is (group size, link class), `price(op, S, p, link)` seconds."""
    largest: dict[tuple[str, str], tuple[int, str]] = {}
    for st in steps:
        group, op = group_of(st.axis), "alltoall" if st.op == "alltoallv" else st.op
        if group is None or op not in YAML_OPS:
            continue
        section = "EP" if group == "DP_EP" else group
        have = largest.get((section, op))
        if have is None or st.nbytes > have[0]:
            largest[(section, op)] = (st.nbytes, st.axis)
    lines = ["commbench"]
    for section in ("TP", "DP", "EP"):
        lines.append(f"{section}:")
        for op, key in YAML_OPS.items():
            got = largest.get((section, op))
            value = "null"
            if got is not None:
                p, link = where(got[1])
                value = format(busbw_GiBps(op, got[0], p, price(op, got[0], p, link)), ".6g")
            lines.append(f"  {key},: {value}")
    lines.append("PP:")
    value = "null"
    if pp_where is not None and pp_bytes:
        value = format(busbw_GiBps("sendrecv", pp_bytes, 2, price("sendrecv", pp_bytes, 2,
                                                                   pp_where[1])), ".6g")  # fmt: skip
    lines.append(f"  busbw: {value}")
    return "\n".join(lines) + "\n"
