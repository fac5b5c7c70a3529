"""The analysis in order: read the ranks' traces, extract their ops, find gloo ops' groups,
attribute axes, add up shares. One function so the command, the report and tests share it."""

from __future__ import annotations

from dataclasses import dataclass, field

from commbench.errors import UsageError
from commbench.trace import inspector
from commbench.trace.axes import Attribution, attribute, mesh_axis
from commbench.trace.groups import match_groups, pool_hints
from commbench.trace.ops import CommOp, extract
from commbench.trace.reader import RankTrace, read_job, trace_files
from commbench.trace.stats import Stats, compute
from commbench.traffic.layout import DEFAULT_ORDER


@dataclass
class Job:
    traces: list[RankTrace]
    world: int
    ops: dict[int, list[CommOp]]
    attribution: Attribution
    stats: Stats
    head: dict = field(default_factory=dict)

    @property
    def ops_flat(self) -> list[CommOp]:
        return [o for r in sorted(self.ops) for o in self.ops[r]]


def analyse(paths: list[str], layout: str | None, step: int | None) -> Job:
    files = trace_files(paths)
    if files and all(inspector.is_inspector(f) for f in files):
        if step is not None:
            raise UsageError(f"--step {step}: NCCL Inspector logs ({files[0]}) mark no steps")
        traces, ops, world = inspector.read(files)
        return _finish(traces, ops, world, layout, step, paths, ["NCCL Inspector logs: no "
                       "dtype, algorithm, protocol, steps or compute (shares are of the ops' span)"])  # fmt: skip
    traces = read_job(paths)
    notes: list[str] = []
    found = next((t.world for t in traces if t.world is not None), None)
    if found is not None:
        world = found
    else:
        if layout is None:
            raise UsageError(f"{traces[0].path}: no distributedInfo (rank, world size, "
                             "process groups) and no --layout: give --layout tp=N,...")  # fmt: skip
        world = len(traces)
        notes.append(f"no distributedInfo: world taken as the {world} trace(s) given")
    ops = {(t.rank if t.rank is not None else 0): extract(t) for t in traces}
    if step is not None and not any(o.step == step for r in ops.values() for o in r):
        raise UsageError(f"--step {step}: no ProfilerStep#{step} with communication in "
                         f"{traces[0].path}{' ...' if len(traces) > 1 else ''}")  # fmt: skip
    unmatched = any(o.group_ranks is None and o.source != "kernel" for r in ops.values() for o in r)
    if unmatched:
        groups = {r: [g for _, g in t.groups] for r, t in zip(ops, traces)}
        order = {
            r: {
                tuple(sorted(g)): int(n) if n.isdigit() else i
                for i, (n, g) in reversed(list(enumerate(t.groups)))
            }
            for r, t in zip(ops, traces)
        }
        pools = {r: pool_hints(t.gloo_threads, groups[r]) for r, t in zip(ops, traces)}
        m = match_groups(ops, groups, world, order, pools)
        for op, alts in m.open_ops[:5]:
            notes.append(f"rank {op.rank} op {op.seq} ({op.op}): group open between "
                         + " and ".join(str(list(a)) for a in alts))  # fmt: skip
        if len(m.open_ops) > 5:
            notes.append(f"... {len(m.open_ops) - 5} more ops with their group open")
        if m.unmatched:
            notes.append(f"{len(m.unmatched)} gloo ops matched no group (a rank's trace missing?)")
        if m.searched_out:
            notes.append("the group search reached its bound: the assignment taken may be "
                         "neither the only one nor the best (give --layout and check the notes)")  # fmt: skip
        if len(traces) < world:
            notes.append(f"{len(traces)} of {world} ranks traced: groups matched on those only")
    return _finish(traces, ops, world, layout, step, paths, notes)


def _finish(traces: list[RankTrace], ops: dict[int, list[CommOp]], world: int,
            layout: str | None, step: int | None, paths: list[str], notes: list[str]) -> Job:  # fmt: skip
    n = sum(o.bytes is None for r in ops.values() for o in r)
    if n:
        notes.append(f"sizes unknown for {n} ops: no record_param_comms metadata (older PyTorch) "
                     "or a gloo trace without record_shapes")  # fmt: skip
    flat = [o for r in ops.values() for o in r]
    named = {g: a for t in traces for g, d in t.descs.items() if (a := mesh_axis(d))}
    attribution = attribute(flat, world, layout, named)
    if named:
        notes.append("axes named by the DeviceMesh groups: " + ", ".join(
            f"{list(g)} {a}" for g, a in sorted(named.items())[:6]))  # fmt: skip
    if attribution.how == "inferred":
        alt = (
            f"; also fits: {', '.join(attribution.alternatives)}"
            if attribution.alternatives
            else ""
        )
        notes.append(f"layout inferred from the groups seen: {attribution.layout.label()}{alt} "  # type: ignore[union-attr]
                     "(--layout to choose)")  # fmt: skip
    for g in attribution.unexplained[:3]:
        notes.append(f"group {list(g)} fits no layout of this world: its ops have no axis")
    if not any(o.group_ranks for o in flat) and flat:
        notes.append("no process-group ranks in the trace: axes unknown")
    stats = compute(traces, ops, step)
    if step is not None:  # groups were matched on every step; what is reported is this one
        ops = {r: [o for o in rops if o.step == step] for r, rops in ops.items()}
    head = {
        "files": len(traces),
        "paths": list(paths),
        "world": world,
        "backend": next((t.backend for t in traces if t.backend), None),
        "layout": _label(attribution),
        "layout_how": attribution.how,
        "notes": notes,
    }
    return Job(traces, world, ops, attribution, stats, head)


def _label(attribution: Attribution) -> str | None:
    """The layout's label, with its rank order when not Megatron's default."""
    lay = attribution.layout
    if lay is None:
        return None
    return lay.label() + ("" if lay.order == DEFAULT_ORDER else f" order {'-'.join(lay.order)}")
