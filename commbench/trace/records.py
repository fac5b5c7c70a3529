"""`commbench trace --results DIR`: the traced job as a run directory (results/ conventions):
meta.json (command trace, the job's layout, shares and findings), records.jsonl (a
TraceRecord per op) and trace.json, the spans `report` draws one step's timeline from (each
rank's step window and compute spans, times in us from the rank's step start)."""

from __future__ import annotations

import time
from pathlib import Path

from commbench.results.rundir import RunWriter, write_json_atomic
from commbench.results.tracerecords import TIMELINE, TraceRecord
from commbench.trace.findings import link_class
from commbench.trace.ops import CommOp
from commbench.trace.stats import Stats


def record(op: CommOp, world: int, backend: str, origin: float, nodes: tuple[int, ...],
           layout: str | None) -> TraceRecord:  # fmt: skip
    return TraceRecord(
        op=op.op,
        backend=backend,
        dtype=op.dtype or "unknown",
        bytes=op.bytes or 0,
        sized=op.bytes is not None,
        group_size=len(op.group_ranks) if op.group_ranks else 1,
        time_us=round(op.duration_us, 3),
        rank=op.rank,
        world_size=world,
        axis=op.axis,
        phase=op.phase,
        step=op.step,
        start_us=round(op.start_us - origin, 3),
        exposed_us=round(op.exposed_us or 0.0, 3),
        group_ranks=list(op.group_ranks) if op.group_ranks else None,
        algorithm=op.algorithm,
        protocol=op.protocol,
        link_class=link_class(op, nodes),
        predicted_us=None if op.predicted_us is None else round(op.predicted_us, 3),
        layout=layout,
    )


def write_run(root: str, run_id: str | None, ops: list[CommOp], st: Stats, head: dict,
              found: list[str], nodes: tuple[int, ...]) -> Path:  # fmt: skip
    """The run directory; the timeline step is the first traced step (or --step's)."""
    drawn = st.steps[0] if st.steps else -1
    meta = {
        "subcommand": "trace",
        "command": "commbench trace " + " ".join(head.get("paths", [])),
        "start_time": time.time(),
        "world_size": head["world"],
        "backend": head["backend"],
        "layout": head["layout"],
        "layout_how": head["layout_how"],
        "comm_share": st.comm_share,
        "exposed_share": st.exposed_share,
        "findings": found,
        "notes": head["notes"],
    }
    w = RunWriter.create(Path(root), "trace", meta, run_id)
    try:
        for op in ops:
            window = st.windows.get((op.rank, op.step if op.step is not None else -1))
            origin = window[0] if window else 0.0
            w.write(record(op, head["world"], head["backend"] or "unknown", origin, nodes,
                           head["layout"]).to_json())  # fmt: skip
        ranks = {}
        for (rank, n), (a, b) in sorted(st.windows.items()):
            if n == drawn:
                ranks[str(rank)] = {
                    "window_us": round(b - a, 3),
                    "compute_us": [[round(c - a, 3), round(d - a, 3)] for c, d in st.compute[(rank, n)]],
                }  # fmt: skip
        write_json_atomic(w.path / TIMELINE, {"profiler_step": drawn, "ranks": ranks})
    except BaseException as e:
        w.finish("failed", f"{type(e).__name__}: {e}")
        raise
    w.finish("complete")
    return w.path
