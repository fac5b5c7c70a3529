"""A suite `pp` point as a 1F1B timeline: which stage runs which pass when, and the bubble.

The point's Program is rebuilt (patterns.rebuild) and its p2p_schedule actions replayed with
the model of pp.simulate (a compute takes its seconds, a send never blocks and its message
arrives `message_s` later, a receive waits for it), keeping each pass's start and end. Compute
comes from the point's synthetic compute_ms; the message time is the one value that makes the
replayed step as long as the measured one (bisection; the makespan grows with it). A point run
without synthetic compute is drawn in units of one forward pass (backward = backward_factor).
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.traffic.patterns import pp, pp_interleaved


@dataclass(frozen=True)
class Pass:
    """One forward (F) or backward (B) pass of a micro-batch on a stage, [start, end)."""

    stage: int
    direction: str
    micro_batch: int
    start: float
    end: float


@dataclass(kw_only=True)
class Timeline:
    """The replayed schedule of one point and what it says about the bubble."""

    label: str
    stages: int
    micro_batches: int
    passes: list[Pass]
    makespan: float
    message_s: float
    unit: str  # "s": seconds from the run; "forward": units of one forward pass
    bubble_theory: float
    bubble_measured: float | None
    measured_s: float | None
    note: str = ""
    schedule: str = "1F1B"  # or "interleaved 1F1B v=V"
    formula: str = "(p-1)/(m+p-1)"  # the theory's bubble

    def idle_fraction(self, stage: int) -> float:
        """Share of the makespan a stage spends not computing (its bubble)."""
        busy = sum(p.end - p.start for p in self.passes if p.stage == stage)
        return 1.0 - busy / self.makespan if self.makespan > 0 else 0.0


def _pass_of(acts, k: int, v: int = 1) -> tuple[str, int]:
    """(F|B, micro-batch) of compute action k: the tag of the receive just before it (a pass
    is recv, compute, send), else of the send just after it (the first/last stage); in an
    interleaved schedule (v model chunks) the compute's own tag, 2 (micro-batch v + chunk) +
    direction."""
    if v > 1:
        tag = acts[k].tag
    elif k > 0 and acts[k - 1].kind == "recv":
        tag = acts[k - 1].tag
    else:
        assert k + 1 < len(acts) and acts[k + 1].kind == "send", "compute without a message"
        tag = acts[k + 1].tag
    direction, micro = tag % 2, tag // 2 // v  # pp.tag, pp_interleaved.tag (v = 1: the same)
    return ("F" if direction == pp.FWD else "B"), micro


def replay(schedule, message_s: float, v: int = 1) -> tuple[list[Pass], float]:
    """Every compute of `schedule` (per-stage Action tuples; v model chunks a stage) as a
    Pass, and the makespan (pp.simulate's model, so the drawing and the planner agree)."""
    passes: list[Pass] = []

    def record(stage: int, k: int, start: float, end: float) -> None:
        direction, micro = _pass_of(schedule[stage], k, v)
        passes.append(Pass(stage, direction, micro, start, end))

    makespan, _ = pp.simulate(schedule, message_s, on_compute=record)
    return passes, makespan


def message_time(schedule, measured_s: float, iters: int = 60, v: int = 1) -> float:
    """The per-message time at which the replay lasts `measured_s` (0 if compute alone does)."""
    if replay(schedule, 0.0, v)[1] >= measured_s:
        return 0.0
    lo, hi = 0.0, measured_s
    for _ in range(iters):
        mid = (lo + hi) / 2
        if replay(schedule, mid, v)[1] < measured_s:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def timeline(point: dict, run: str = "") -> Timeline | None:
    """The timeline of a suite `pp` point record of run `run`; None when it has no pipeline
    (pp = 1)."""
    from commbench.traffic import patterns

    _layout, _model, options, program = patterns.rebuild(point)
    for step in program.steps:
        if step.schedule is not None:
            sched = step.schedule
            break
    else:
        return None
    p, m = len(sched), options.micro_batches
    v = getattr(options, "virtual_stages", 1)
    measured = point.get("time_us")
    measured_s = measured * 1e-6 if isinstance(measured, (int, float)) else None
    has_compute = any(a.kind == "compute" for acts in sched for a in acts)
    cfg = point.get("config", {})
    label = (
        f"{point.get('model') or '-'} {cfg.get('label', '')} m={m} (run {point.get('run_id', '?')})"
    )
    if has_compute and measured_s:
        msg = message_time(sched, measured_s, v=v)
        unit, note = "s", ""
    else:
        sched = (
            pp.schedule(p, m, step.nbytes, 1.0, options.backward_factor)
            if v == 1
            else pp_interleaved.schedule(p, m, v, step.nbytes, v, options.backward_factor * v)
        )  # a chunk pass is 1/v of a stage's forward: units of one chunk forward
        msg, unit = 0.0, "forward"
        note = (
            "run without synthetic compute: passes drawn in units of one forward pass "
            f"(backward = {options.backward_factor:g}), messages instantaneous"
        )
    passes, makespan = replay(sched, msg, v)
    bubble = point.get("bubble_measured")
    return Timeline(
        label=label,
        stages=p,
        micro_batches=m,
        passes=passes,
        makespan=makespan,
        message_s=msg,
        unit=unit,
        bubble_theory=pp_interleaved.bubble_fraction(p, m, v),  # v = 1: pp's (p-1)/(m+p-1)
        bubble_measured=bubble if isinstance(bubble, (int, float)) else None,
        measured_s=measured_s,
        note=note,
        schedule="1F1B" if v == 1 else f"interleaved 1F1B v={v}",
        formula="(p-1)/(m+p-1)" if v == 1 else "(p-1)/(v m+p-1)",
    )
