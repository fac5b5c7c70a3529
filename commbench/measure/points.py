"""A suite's points measured in order under one Session: the loop `suite` and `plan --verify`
share. Every op of a point is checked and timed (Runner.measure); rank 0 writes each step
record as its op finishes and the point record after the point, so a crash keeps every
finished point on disk. The point records' builders load on rank 0 only (point_records.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: the records module loads on rank 0 alone
    from commbench.measure.replay import Replayed
    from commbench.measure.runner import TimingConfig
    from commbench.measure.session import Session
    from commbench.results.records import Measurement, PointTotals
    from commbench.traffic.execution import Measured
    from commbench.traffic.points import Point
    from commbench.traffic.suitefile import Suite


@dataclass(frozen=True)
class Done:
    """One measured point on rank 0: its plan, the records of its ops, their totals, and the
    point replayed as one timed Program (None unless asked)."""

    point: Point
    plan: list[Measured]
    records: list[Measurement]  # in plan order
    totals: PointTotals
    replayed: Replayed | None


def measure_points(
    s: Session,
    suite: Suite,
    points: Sequence[Point],
    plans: Sequence[list[Measured]],
    backend: str,
    timings: Sequence[TimingConfig] | None = None,
    whole: bool = False,
    on_step: Callable[[], None] | None = None,
) -> Iterator[Done]:
    """Collective: measure every point's plan (execution.plan of it) in order, with the
    runner's timing `timings[i]` for point i when given; `whole` replays each point's Program
    as one timed Program after its ops (measure/replay.py). Yields a Done per point on rank
    0; the other ranks take part and yield nothing. `on_step()` on rank 0 after each op
    measured (progress inside a point of hundreds of ops)."""
    assert s.runner is not None and len(plans) == len(points)
    if s.is_root:
        from commbench.measure.point_records import point_record, point_totals, step_record
    if whole:
        from commbench.measure.replay import replay
    s.runner.reserve([(m.step, m.info) for pl in plans for m in pl])
    for i, (pt, pl) in enumerate(zip(points, plans)):
        if timings is not None:
            s.runner.cfg = timings[i]
        records = []
        for m in pl:
            rec = s.runner.measure(m.step, m.info)
            if rec is not None:  # rank 0: every measurement, and the writer
                assert s.writer is not None
                records.append(rec)
                s.writer.write(step_record(suite, pt, m, rec, backend).to_json())
                if on_step is not None:
                    on_step()
        replayed = None
        if whole:
            with s.watchdog.guard(f"point {pt.index}: {pt.run.name} replayed whole"):
                replayed = replay(s.runner, pt.program, pl)
        if not s.is_root:
            continue
        totals = point_totals(pt, pl, records)
        assert s.writer is not None
        s.writer.write(point_record(suite, pt, totals, backend, pl).to_json())
        yield Done(pt, pl, records, totals, replayed)
