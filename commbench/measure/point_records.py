"""A suite point's records from its measured steps: the point's totals and breakdown, the
pattern's facts about it, one StepRecord per measured step and the PointRecord.

Pure (no communication): `commbench suite` measures the plan and prints; this says what the
measurements add up to and what is written.
"""

from __future__ import annotations

from typing import Any

from commbench.ops import record_bytes
from commbench.results.records import (
    LayoutConfig,
    Measurement,
    OpShare,
    PointRecord,
    PointStep,
    PointTotals,
    StepRecord,
    fields_of,
)
from commbench.traffic import patterns
from commbench.traffic.execution import Measured, bus_bytes
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.patterns.base import Fact
from commbench.traffic.points import Point
from commbench.traffic.suitefile import Suite


def layout_config(lay: ParallelLayout) -> LayoutConfig:
    """The `config` of a point's records: its degrees, rank order and label."""
    assert lay.dp is not None  # derived from the world when the layout was built
    return LayoutConfig(
        world=lay.world,
        tp=lay.tp,
        cp=lay.cp,
        ep=lay.ep,
        dp=lay.dp,
        pp=lay.pp,
        edp=lay.edp,
        order="-".join(lay.order),
        label=lay.label(),
    )


def point_totals(point: Point, plan: list[Measured], results: list[Measurement]) -> PointTotals:
    """Per-point totals from the measured steps: time, bytes, bus bandwidth, breakdown."""
    prog = point.program
    time_us = bus = nbytes = 0.0
    wrong = 0
    breakdown: dict[str, OpShare] = {}
    steps = []
    for m, rec in zip(plan, results):
        per_op = rec.time_us * m.scale
        wrong += rec.wrong
        for i in m.indices:
            st = prog.steps[i]
            total = per_op * st.repeat
            b = record_bytes(st) * st.repeat
            time_us += total
            nbytes += b
            bus += bus_bytes(st, m.info.size) * st.repeat
            row = breakdown.setdefault(f"{st.op}@{st.axis}", OpShare())
            row.time_us += total
            row.bytes += b
            row.ops += st.repeat
            steps.append(
                PointStep(
                    index=i,
                    op=st.op,
                    axis=st.axis,
                    phase=st.phase,
                    label=st.label,
                    dtype=st.dtype,
                    bytes=record_bytes(st),
                    repeat=st.repeat,
                    group_size=m.info.size,
                    link_class=m.info.link_class,
                    time_us=per_op,
                    total_us=total,
                    measured_bytes=rec.bytes,
                    measured_dtype=rec.dtype,
                    chunks=m.chunks,
                    scale=m.scale,
                    extrapolated=m.extrapolated,
                )
            )
    steps.sort(key=lambda s: s.index)
    t = time_us * 1e-6
    return PointTotals(
        time_us=time_us,
        bytes=int(nbytes),
        algbw_GBps=nbytes / t / 1e9 if t > 0 else 0.0,
        busbw_GBps=bus / t / 1e9 if t > 0 else 0.0,
        wrong=wrong,
        extrapolated=any(m.extrapolated for m in plan),
        breakdown=breakdown,
        steps=steps,
    )


def point_facts(point: Point, totals: PointTotals) -> list[Fact]:
    """The pattern's facts about the point (the measured pipeline bubble, the MoE imbalance)."""
    spec = patterns.get(point.program.pattern)
    return spec.point_facts(point.program.meta, totals.time_us * 1e-6)


def step_record(
    suite: Suite, point: Point, m: Measured, rec: Measurement, backend: str
) -> StepRecord:
    """A measured step: the runner's fields plus where it comes from in the suite."""
    prog = point.program
    st = prog.steps[m.indices[0]]
    return StepRecord(
        **fields_of(rec),
        backend=backend,
        suite=suite.name,
        run=point.run.name,
        point=point.index,
        pattern=prog.pattern,
        model=point.model.name if point.model else None,
        config=layout_config(point.layout),
        label=st.label,
        phases=list(dict.fromkeys(prog.steps[i].phase for i in m.indices)),
        program_steps=list(m.indices),
        program_bytes=record_bytes(st),
        program_dtype=st.dtype,
        repeat=m.repeat,
        chunks=m.chunks,
        scale=m.scale,
        extrapolated=m.extrapolated,
        note=m.note,
        time_total_us=rec.time_us * m.scale * m.repeat,
    )


def point_record(
    suite: Suite, point: Point, totals: PointTotals, backend: str, plan: list[Measured]
) -> PointRecord:
    """A point: enough to rebuild its Program (patterns.rebuild) and compare predictions."""
    prog = point.program
    facts: dict[str, Any] = {  # the fields FACT_FIELDS names
        f.key: f.value for f in point_facts(point, totals) if f.key in PointRecord.FACT_FIELDS
    }
    dtypes = [s.dtype for s in prog.steps]
    return PointRecord(
        backend=backend,
        dtype=max(set(dtypes), key=dtypes.count),
        group_size=point.layout.world,
        world_size=point.layout.world,
        suite=suite.name,
        run=point.run.name,
        point=point.index,
        pattern=prog.pattern,
        model=point.model.name if point.model else None,
        model_shape=point.model.to_dict() if point.model else None,
        config=layout_config(point.layout),
        options=point.options.to_dict(),
        swept=point.swept,
        link_classes={m.info.axis: m.info.link_class for m in plan},
        meta=prog.meta,
        **fields_of(totals),
        steps_total=len(prog.steps),
        measured_steps=len(plan),
        **facts,
    )
