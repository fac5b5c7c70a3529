"""The record `commbench trace --results DIR` writes: one collective or p2p op of a profiled
training job, as the job ran it (not measured by commbench), so `report` can draw the job's
timeline and `validate --ops` can price it against a calibration (in-job vs microbenchmark).

The fields every record carries keep their meaning: `time_us` is the op's own time on its rank
(GPU kernel, gloo worker, else the CPU op), `bytes` S in the nccl-tests convention (0 with
`sized` false where the trace did not say), `group_size` the group's ranks (1 when unknown).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from commbench.results.records import JsonRecord

# beside records.jsonl: the drawn step's spans per rank (window and compute, us from its start)
TIMELINE = "trace.json"


@dataclass(kw_only=True)
class TraceRecord(JsonRecord):
    """One op of one rank of a traced job (`commbench trace`)."""

    kind: Literal["trace"] = "trace"
    op: str
    backend: str
    dtype: str  # "unknown" where the trace does not say
    bytes: int
    sized: bool  # false: the trace gave no size (older PyTorch), bytes is 0
    group_size: int
    time_us: float
    rank: int
    world_size: int
    axis: str | None
    phase: str | None  # forward | backward | optimizer, None where no annotation says
    step: int | None  # ProfilerStep#N
    start_us: float  # from the traced step's start on this rank
    exposed_us: float  # the part of time_us with no compute beside it on this rank
    group_ranks: list[int] | None
    algorithm: str | None  # NCCL's, from the kernel name
    protocol: str | None
    link_class: str  # intra | inter (from --ranks-per-node or the traces' host names)
    predicted_us: float | None  # --calibration's time for the same op, None without one
    layout: str | None  # the job's layout label (tp2-cp1-dp2-pp1), given or inferred
