"""A Program's predicted time through a calibration: the one evaluation `plan` and `validate` share.

Each Step is priced as the suite would run it (the same Program is executed to measure it and
evaluated to predict it), by `Calibration.explain` at the step's S, group size
and link class, times its repeat. The rules, in order:

- backend: a reduction the calibration's backend cannot do in the step's dtype runs as float32
  (execution.substitute_dtype, as the suite does: MPI has no 16-bit reductions);
- dtype: a reduction is priced in its own dtype (strict: predict refuses another); a data-movement
  op (all-gather, all-to-all(v), broadcast, send/recv, pipeline messages) moves bytes whatever
  the element type, so when the calibration measured that op, link and group size only in other
  dtypes, the one of the same element size (else any) prices it by bytes, and the step says so;
- alltoallv: S is the busiest rank's bytes, the largest of any rank's send or receive total (the
  rank that finishes last under router skew; the calibration's all-to-all series take S = one
  rank's send buffer, as nccl-tests); each op says its own (OpSpec.priced_bytes, priced_from);
- p2p_schedule (a pipeline, OpSpec.scheduled): the per-position action lists are simulated
  (patterns.pp.simulate: fused groups of sends and receives, each complete when its sends are
  delivered and its receives arrived, compute as given, as the runner executes them), every
  message taking predict("sendrecv", bytes, 2, link of its stage pair): one pair of
  neighbours, intra-node where every pipeline's two stages share a node (pp.stage_links), so
  pp=4 over 2 nodes pays the inter link once, not three times; a record's link class
  (`link_classes`) prices every pair alike. Where the calibration also measured
  pingpong and the link's exchange takes over 1.5x its one-way time (a transport whose
  directions take turns: gloo), a message takes sendrecv's time / that ratio and the pair's
  two directions share one link in the simulation. The step's time is the makespan (it
  includes the schedule's own compute, like the suite's point records); its communication is
  the makespan minus the makespan with free messages, i.e. the message time left on the
  critical path.

Predictions are cached per (op, bytes, group size, link class, dtype), so a planner evaluating
thousands of configs prices each distinct message once. Pure: never imports a transport.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from commbench.calibration import Calibration, Prediction
from commbench.dtypes import DTYPE_SIZES, canonical_dtype_name
from commbench.errors import UsageError
from commbench.ops import OPS
from commbench.ops.p2p_schedule import schedule_of
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.patterns.base import resolve_axis
from commbench.traffic.patterns.pp import pair_index, stage_links, used_links
from commbench.traffic.program import Program, Step

DATA_MOVEMENT = tuple(name for name, spec in OPS.items() if not spec.reduces)
P2P_OP = "sendrecv"  # a pipeline message is priced as one send/recv between two neighbours
P2P_GROUP = 2
ONE_WAY_OP = "pingpong"  # half a round trip: one message in one direction
HALF_DUPLEX = 1.5  # sendrecv over pingpong above this: the link's directions take turns


@dataclass(frozen=True)
class Priced:
    """One cached prediction: seconds per op and how it was obtained (or why it could not be)."""

    seconds: float | None
    method: str
    extrapolated: bool = False
    notes: tuple[str, ...] = ()
    error: str | None = None
    band: tuple[float, float] | None = None  # seconds per op, beyond the measured node counts


@dataclass(kw_only=True)
class StepEstimate:
    """A Program step's prediction: per op, in total (x repeat) and the communication part."""

    index: int
    op: str
    axis: str
    phase: str
    label: str
    dtype: str  # the dtype the step was priced in
    nbytes: int  # S priced (alltoallv: the busiest rank's bytes; p2p_schedule: one message)
    repeat: float
    group_size: int
    link_class: str
    per_op_s: float | None
    total_s: float | None
    comm_s: float | None  # total_s, or for a schedule the message time on its critical path
    method: str
    extrapolated: bool = False
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    # total_s's band (calibration/band.py) where its groups span more nodes than were measured
    band_s: tuple[float, float] | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class ProgramEstimate:
    """Every step's estimate of one Program; totals are None when a step could not be priced."""

    pattern: str
    steps: list[StepEstimate]

    @property
    def error(self) -> str | None:
        return next((s.error for s in self.steps if s.error), None)

    @property
    def total_s(self) -> float | None:
        return None if self.error else sum(s.total_s for s in self.steps if s.total_s is not None)

    @property
    def comm_s(self) -> float | None:
        return None if self.error else sum(s.comm_s for s in self.steps if s.comm_s is not None)

    @property
    def extrapolated(self) -> bool:
        return any(s.extrapolated for s in self.steps)

    def comm_band_s(self) -> tuple[float, float] | None:
        """comm_s with every banded step (band_s) at the low end of its band, and at the high
        end; None where no step has a band or one could not be priced."""
        moves = [
            (s.band_s[0] - s.total_s, s.band_s[1] - s.total_s)
            for s in self.steps
            if s.band_s is not None and s.total_s is not None
        ]
        if not moves or self.comm_s is None:
            return None
        return self.comm_s + sum(m[0] for m in moves), self.comm_s + sum(m[1] for m in moves)


def busiest_bytes(step: Step) -> int:
    """S at which a step is priced: alltoallv the largest per-rank send or receive total."""
    return OPS[step.op].priced_bytes(step)


class Evaluator:
    """Prices Steps and Programs through one calibration, caching each distinct prediction.

    `backend` selects the calibration's backend (None: its only one); `extrapolate` is passed to
    Calibration.explain (see calibration.py for the rule)."""

    def __init__(
        self, calibration: Calibration, backend: str | None = None, extrapolate: bool = False
    ) -> None:
        self.cal = calibration
        self.extrapolate = extrapolate
        backends = calibration.backends
        if backend is None and len(backends) == 1:
            backend = backends[0]
        if backend is not None and backends and backend not in backends:
            raise UsageError(
                f"backend {backend!r} is not in {calibration.source} (it has {', '.join(backends)})"
            )
        self.backend = backend
        self._cache: dict[tuple, Priced] = {}
        self._free: dict[int, float] = {}
        self._keep: list = []
        self._links: dict[tuple, tuple[int, str, tuple[str, ...]]] = {}
        self._dtypes: dict[tuple, set[str]] = {}
        for s in calibration.series:
            k = s.key
            self._dtypes.setdefault((k.backend, k.op, k.link_class, k.group_size), set()).add(
                k.dtype
            )

    # ---- one op ----------------------------------------------------------------------------
    def measured_dtypes(self, op: str, p: int, link_class: str) -> set[str]:
        """dtypes the calibration measured op at group size p on link_class (this backend)."""
        ops = (op, *OPS[op].priced_from)
        out: set[str] = set()
        for (be, o, link, g), dts in self._dtypes.items():
            if o in ops and link == link_class and g == p and (self.backend in (None, be)):
                out |= dts
        return out

    def price_dtype(self, op: str, p: int, link_class: str, dtype: str) -> tuple[str, str | None]:
        """(dtype to ask predict for, note): a data-movement op measured only in other dtypes is
        priced by bytes from one of them (same element size first)."""
        measured = self.measured_dtypes(op, p, link_class)
        if not measured or dtype in measured or op not in DATA_MOVEMENT:
            return dtype, None
        size = DTYPE_SIZES.get(dtype)
        use = sorted(measured, key=lambda d: (DTYPE_SIZES.get(d) != size, d))[0]
        return use, f"{dtype} {op} priced by bytes from the {use} series (no reduction)"

    def price(
        self, op: str, nbytes: int, p: int, link_class: str, dtype: str, nodes: int | None = None
    ) -> Priced:
        """Seconds of one op (cached); a calibration that cannot price it gives `error`.
        `nodes`: the hosts one group spans, so an inter-node group is scaled from the node
        counts measured (calibration/hierarchy.py) and carries their band."""
        dtype = canonical_dtype_name(dtype)
        nodes = nodes if link_class == "inter" and nodes is not None and nodes > 1 else None
        key = (op, nbytes, p, link_class, dtype, nodes)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        use, note = self.price_dtype(op, p, link_class, dtype) if p > 1 else (dtype, None)
        try:
            pred: Prediction = self.cal.explain(
                op, nbytes, p, link_class, use, self.backend, self.extrapolate, nodes=nodes
            )
        except UsageError as e:
            priced = Priced(None, "not priced", error=str(e))
        else:
            notes = tuple(n for n in [note, *pred.notes] if n)
            priced = Priced(pred.seconds, pred.method, pred.extrapolated, notes, band=pred.band)
        self._cache[key] = priced
        return priced

    # ---- one step --------------------------------------------------------------------------
    def step(
        self,
        index: int,
        step: Step,
        size: int,
        link_class: str,
        stage_links: tuple[str, ...] | None = None,
        nodes: int | None = None,
    ) -> StepEstimate:
        """Estimate of one Program step run on groups of `size` over `link_class` spanning
        `nodes` hosts (None: not known); a p2p schedule's messages between positions i and i+1
        take `stage_links[i]` (None: all `link_class`)."""
        from commbench.traffic.execution import substitute_dtype

        run = step
        if self.backend is not None and size > 1 and step.op in OPS and OPS[step.op].reduces:
            run, _ = substitute_dtype(step, size, self.backend)
        base: dict[str, Any] = dict(
            index=index,
            op=step.op,
            axis=step.axis,
            phase=step.phase,
            label=step.label,
            dtype=run.dtype,
            repeat=step.repeat,
            group_size=size,
            link_class=link_class,
        )
        if OPS[step.op].scheduled:
            return self._schedule(step, base, stage_links)
        nbytes = busiest_bytes(run)
        pr = self.price(step.op, nbytes, size, link_class, run.dtype, nodes)
        if pr.error:
            return StepEstimate(
                **base,
                nbytes=nbytes,
                per_op_s=None,
                total_s=None,
                comm_s=None,
                method=pr.method,
                error=pr.error,
            )
        assert pr.seconds is not None  # priced without error
        total = pr.seconds * step.repeat
        notes = list(pr.notes)
        if run.dtype != step.dtype:
            notes.insert(0, f"{step.dtype} runs as {run.dtype} on {self.backend}")
        return StepEstimate(
            **base,
            nbytes=nbytes,
            per_op_s=pr.seconds,
            total_s=total,
            comm_s=total,
            method=pr.method,
            extrapolated=pr.extrapolated,
            notes=notes,
            band_s=(pr.band[0] * step.repeat, pr.band[1] * step.repeat) if pr.band else None,
        )

    def _schedule(
        self, step: Step, base: dict[str, Any], stage_links: tuple[str, ...] | None
    ) -> StepEstimate:
        """Simulate a p2p schedule with every message priced as a neighbour send/recv over the
        link of its stage pair."""
        from commbench.traffic.patterns.pp import simulate

        schedule = schedule_of(step)
        links = stage_links or (base["link_class"],) * len(schedule)
        links = used_links(schedule, links)  # the last-to-first pair only if a message wraps
        sizes = sorted({a.nbytes for acts in schedule for a in acts if a.kind == "send"})
        priced = {
            (n, link): self.price(P2P_OP, n, P2P_GROUP, link, step.dtype)
            for n in sizes
            for link in sorted(set(links))
        }
        failed = [p for p in priced.values() if p.error]
        used = [p for p in priced.values() if not p.error]
        nbytes = step.nbytes  # one message (record_bytes would be the busiest position's sum)
        if failed:
            return StepEstimate(
                **base,
                nbytes=nbytes,
                per_op_s=None,
                total_s=None,
                comm_s=None,
                method="not priced",
                error=f"pipeline messages: {failed[0].error}",
            )
        seconds = {k: p.seconds for k, p in priced.items() if p.seconds is not None}
        half = self._half_duplex(sorted(set(links)), max(sizes, default=0), step.dtype)
        for (n, link), t in seconds.items():
            if link in half:
                seconds[n, link] = t / half[link]  # one direction alone: the one-way time

        def message_s(src: int, dst: int, nbytes: int) -> float:
            return seconds[nbytes, links[pair_index(src, dst)]]

        shared = frozenset(i for i, link in enumerate(links) if link in half)
        makespan, _ = simulate(schedule, message_s, half_duplex=shared)
        free = self._free.get(id(schedule))
        if free is None:  # the makespan with free messages depends on the schedule only
            free = self._free[id(schedule)] = simulate(schedule, 0.0)[0]
            self._keep.append(schedule)  # keep the id valid while cached
        total = makespan * step.repeat
        first = used[0] if used else Priced(0.0, "no messages")
        return StepEstimate(
            **base,
            nbytes=nbytes,
            per_op_s=makespan,
            total_s=total,
            comm_s=(makespan - free) * step.repeat,
            method=f"1F1B simulated, messages by {P2P_OP} p=2 per stage pair "
            f"({'-'.join(links)}): {first.method}",
            extrapolated=any(p.extrapolated for p in used),
            notes=sorted({n for p in used for n in p.notes}),
        )

    def _pipeline_links(
        self, layout: ParallelLayout, axis: str
    ) -> tuple[int, str, tuple[str, ...]]:
        """(group size, link class, link per stage pair) of a pipeline axis (cached: the
        planner prices every config's pipeline at several micro-batch counts)."""
        key = (layout, layout.nodes, axis)
        hit = self._links.get(key)
        if hit is None:
            info = resolve_axis(layout, axis)
            hit = self._links[key] = (
                info.size,
                info.link_class,
                stage_links(info.groups, layout.nodes),
            )
        return hit

    def _half_duplex(self, links: list[str], nbytes: int, dtype: str) -> dict[str, float]:
        """Links whose two directions take turns, and by how much: where the calibration
        measured pingpong (one way) beside sendrecv (both ways at once) and the exchange of
        the largest message took more than HALF_DUPLEX x the one-way time (gloo across
        emulated nodes: 2x; Open MPI with its eager limit raised: 1x), sendrecv / pingpong."""
        out = {}
        for link in links:
            if not nbytes or not self.measured_dtypes(ONE_WAY_OP, P2P_GROUP, link):
                continue
            one = self.price(ONE_WAY_OP, nbytes, P2P_GROUP, link, dtype)
            both = self.price(P2P_OP, nbytes, P2P_GROUP, link, dtype)
            if one.seconds and both.seconds and both.seconds > HALF_DUPLEX * one.seconds:
                out[link] = both.seconds / one.seconds
        return out

    # ---- one program -----------------------------------------------------------------------
    def program(
        self,
        program: Program,
        layout: ParallelLayout,
        link_classes: dict[str, str] | None = None,
        placement: Callable[[str], tuple[int, str, int]] | None = None,
        pipeline_links: Callable[[str], tuple[int, str, tuple[str, ...]]] | None = None,
    ) -> ProgramEstimate:
        """Estimate every step of `program` on `layout`; `link_classes` (axis -> class, e.g. from
        a point record) overrides the layout's own placement; `placement` (axis -> size, link
        class, hosts one group spans) and `pipeline_links` (axis -> size, link class, link per
        stage pair) give it without listing the layout's groups (the planner's)."""
        steps = []
        seen: dict[str, tuple[int, str, int]] = {}
        for i, st in enumerate(program.steps):
            if OPS[st.op].scheduled and not (link_classes and st.axis in link_classes):
                where3 = (pipeline_links or partial(self._pipeline_links, layout))(st.axis)
                steps.append(self.step(i, st, *where3))
                continue
            where = seen.get(st.axis)
            if where is None:
                if placement is not None:
                    where = placement(st.axis)
                else:
                    info = resolve_axis(layout, st.axis)
                    where = (info.size, info.link_class, info.hosts_spanned)
                if link_classes and st.axis in link_classes:
                    where = (where[0], link_classes[st.axis], where[2])
                seen[st.axis] = where
            steps.append(self.step(i, st, where[0], where[1], nodes=where[2]))
        return ProgramEstimate(program.pattern, steps)
