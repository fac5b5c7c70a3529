"""The report's input from `commbench trace --results` runs: each traced job's op records,
its drawn step's spans (trace.json) and its shares and findings (meta.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from commbench.results.rundir import Run
from commbench.results.tracerecords import TIMELINE, TraceRecord
from commbench.tables import Column, TableSpec
from commbench.trace.findings import SLOW_FACTOR

AXES_TABLE = TableSpec(
    (
        Column("axis"),
        Column("ops"),
        Column("bytes"),
        Column("time", "(ms)", fmt=".3f"),
        Column("exposed", "(ms)", fmt=".3f"),
        Column(f"ops > {SLOW_FACTOR:g}x calibrated"),
    ),  # fmt: skip
    "Per parallel axis over every traced step and rank: ops, bytes (S, nccl-tests), the ops' "
    "time and its exposed part (no compute beside it), and the ops slower than "
    f"{SLOW_FACTOR:g}x what --calibration predicted (0 without one; the trace's finding).",
)


@dataclass
class TracedJob:
    run_id: str
    meta: dict
    ops: list[TraceRecord]
    step: int
    windows: dict[int, float] = field(default_factory=dict)  # rank -> step length (us)
    compute: dict[int, list[tuple[float, float]]] = field(default_factory=dict)

    def step_ops(self) -> list[TraceRecord]:
        want = None if self.step < 0 else self.step
        return [o for o in self.ops if o.step == want]


def traced_jobs(runs: list[Run]) -> tuple[list[TracedJob], list[str]]:
    out: list[TracedJob] = []
    notes: list[str] = []
    for run in runs:
        recs = [TraceRecord.from_json(r) for r in run.records if r.get("kind") == "trace"]
        if not recs:
            continue
        try:
            spans = json.loads((run.path / TIMELINE).read_text())
        except (OSError, ValueError):
            notes.append(f"{run.path.name}: no readable {TIMELINE}: its timeline has no compute")
            first = recs[0].step if recs[0].step is not None else -1
            spans = {"profiler_step": first, "ranks": {}}
        job = TracedJob(run.path.name, run.meta, recs, int(spans.get("profiler_step", -1)))
        for rank, got in (spans.get("ranks") or {}).items():
            job.windows[int(rank)] = float(got["window_us"])
            job.compute[int(rank)] = [(float(a), float(b)) for a, b in got["compute_us"]]
        out.append(job)
    return out, notes


def axis_rows(job: TracedJob) -> list[list]:
    """AXES_TABLE's rows, slowest axis first; bytes only of the ops whose size the trace gave
    (none: "-", as `commbench trace --json` says null), not 0."""
    rows: dict[str, list] = {}
    for o in job.ops:
        row = rows.setdefault(o.axis or "unknown", [o.axis or "unknown", 0, None, 0.0, 0.0, 0])
        row[1] += 1
        if o.sized:
            row[2] = (row[2] or 0) + o.bytes
        row[3] += o.time_us / 1e3
        row[4] += o.exposed_us / 1e3
        row[5] += 1 if o.predicted_us and o.time_us > SLOW_FACTOR * o.predicted_us else 0
    return sorted(rows.values(), key=lambda r: -r[3])
