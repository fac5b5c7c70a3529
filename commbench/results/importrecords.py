"""The record `commbench import` writes: one row (one placement) of another tool's log
(nccl-tests, OSU, IMB) with the fields `commbench run` writes, what the tool does not measure
null, and where it came from (`source`); an nccl-tests row also the NCCL regime the log says
it ran in (formats/nccl_tuning.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from commbench.results.records import JsonRecord


@dataclass(kw_only=True)
class ImportSource(JsonRecord):
    """Where an imported record comes from: the tool, the log's file and line, its cells."""

    tool: str
    file: str
    line: int
    columns: dict[str, str]


@dataclass(kw_only=True)
class ImportedRecord(JsonRecord):
    """A row of another tool's log (nccl-tests, OSU, IMB) with the fields `commbench run`
    writes; what the tool does not measure is null."""

    # the NCCL regime, where the log says it (not written when None: logs that do not, and
    # records imported before it was kept)
    OMIT_NONE = ("algorithm", "protocol", "forced")

    kind: Literal["collective"] = "collective"
    op: str
    dtype: str
    bytes: int
    count: int | None
    axis: str = "group"
    group_size: int
    groups: int | None = None
    stride: int | None = None
    hosts_spanned: int | None
    link_class: str
    world_size: int
    iters: int | None
    warmup: int | None
    time_us: float | None
    time_mean_us: float | None
    time_min_us: float | None = None
    time_p95_us: float | None = None
    algbw_GBps: float | None
    busbw_GBps: float | None
    wrong: int
    checked: bool
    timing: str
    isolated: bool | None = None
    buffers: str = "tool"  # the tool's own (nccl-tests: device memory; OSU, IMB: malloc'd pages)
    placement: str  # out-of-place | in-place
    backend: str
    label: str
    source: ImportSource
    # NCCL's algorithm and protocol at this size (nccl_names spelling: RING, LL128), from a
    # `NCCL_DEBUG_SUBSYS=TUNING` line for the size or an NCCL_ALGO / NCCL_PROTO that pins one
    algorithm: str | None = None
    protocol: str | None = None
    # which of them the run's NCCL_ALGO / NCCL_PROTO pinned ("algorithm", "protocol"): a
    # measurement condition the fitter keys series by; absent where NCCL chose
    forced: list[str] | None = None
