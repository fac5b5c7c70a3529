"""A long 1F1B schedule's estimate from short simulations: its makespan is a max-plus linear
system in the micro-batches m, affine once the schedule is periodic, so the planner simulates
a few micro-batches and extends (Planner.evaluate; `exact` simulates in full)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from commbench.calibration.pricing import ProgramEstimate
from commbench.errors import UsageError
from commbench.plan.placement import stage_links
from commbench.plan.search import Config
from commbench.traffic.layout import ParallelLayout

if TYPE_CHECKING:
    from commbench.plan.planner import Planner


def extend(
    planner: Planner, name: str, cfg: Config, layout: ParallelLayout, sim: ProgramEstimate
) -> ProgramEstimate:
    """The 1F1B estimate at the config's m from short simulations. Its makespan is a
    max-plus linear system in m, affine once the schedule is periodic: T(m) = T(b) +
    (m - b)/k x (T(b+k) - T(b)), checked at runtime on T(b+2k). Tried in turn: from b =
    min(p, PP_BASE) by k = 1 where every stage pair has one link class (checked on p = 8
    to 128, compute/message ratios 0.001 to 1000, first and last stage's compute x0.5 to
    x1.3: affine from m = 8 on); from b = p by 1; from b = p + m mod p by p (the rule
    before: 6p micro-batches simulated where 3 x 8 now do, 16K GPUs in seconds); else the
    full schedule."""
    p, m = cfg.pp, cfg.micro_batches
    m1 = planner.pp_simulated(cfg)
    if m1 == m or sim.error:
        return sim
    links = stage_links(layout, "pp", planner.req.gpus_per_node)
    tries = [(m1, 1)] if len(set(links)) <= 1 else []
    tries += [(p, 1), (p + m % p, p)]
    for base, period in tries:
        ext = _extend(planner, name, cfg, layout, sim if base == m1 else None, base, period)
        if ext is not None:
            return ext
    return planner.price(planner.pp_program(name, cfg, m), layout)


def _extend(
    planner: Planner,
    name: str,
    cfg: Config,
    layout: ParallelLayout,
    sim: ProgramEstimate | None,
    base: int,
    period: int,
) -> ProgramEstimate | None:
    """The estimate at `base` micro-batches (`sim`, or priced here) extended to the
    config's m by `period`, or an estimate that could not be priced; None when m - base
    is not a multiple of the period or T(base), T(base+k), T(base+2k) are not equally
    spaced (the schedule is not yet periodic there)."""
    m = cfg.micro_batches
    if (m - base) % period or base + 2 * period > m:
        return None
    try:
        ests = [
            sim
            if k == 0 and sim is not None
            else planner.price(planner.pp_program(name, cfg, base + k * period), layout)
            for k in (0, 1, 2)
        ]
    except UsageError:  # a schedule that takes no such micro-batch count (interleaved: p | m)
        return None
    bad = next((e for e in ests if e.error), None)
    if bad is not None:
        return bad
    T, C = [], []
    for e in ests:
        assert e.total_s is not None and e.comm_s is not None  # priced: no step failed
        T.append(e.total_s)
        C.append(e.comm_s)
    tol = 1e-9 * max(T)
    if abs((T[2] - T[1]) - (T[1] - T[0])) > tol or abs((C[2] - C[1]) - (C[1] - C[0])) > tol:
        return None
    k = (m - base) // period
    st = ests[0].steps[0]
    total, comm = T[0] + k * (T[1] - T[0]), C[0] + k * (C[1] - C[0])
    ext = replace(
        st,
        label=st.label.replace(f"m={base}", f"m={m}"),
        per_op_s=total,
        total_s=total,
        comm_s=comm,
        method=st.method + f" (simulated at m={base},{base + period},{base + 2 * period}, "
        f"extended by period {period})",
    )
    return ProgramEstimate(ests[0].pattern, [ext])
