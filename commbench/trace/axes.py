"""Which parallel axis each op belongs to: its group's ranks against the groups a layout makes.

A layout comes from `--layout tp=8,pp=4,...` in Megatron-LM's rank order (RankGenerator:
tp fastest, then cp, dp, pp; experts as tp-ep-edp-pp); torchtitan builds its device mesh as
[pp, dp_replicate, dp_shard, cp, tp], the same order with tp innermost, so `--framework`
changes nothing for the dense axes. Without --layout the layout is inferred: every grid of
the world's divisors whose axis groups explain every group seen, the op kinds breaking ties
(all-to-all is ep, p2p is pp, a collective on a strided group dp rather than cp or pp).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from commbench.errors import UsageError
from commbench.trace.ops import P2P, CommOp
from commbench.traffic.layout import DEFAULT_ORDER, Axis, ParallelLayout, parse_order

AXES = (Axis.TP, Axis.CP, Axis.DP, Axis.EDP, Axis.EP, Axis.PP)
ALLTOALL = ("alltoall", "alltoallv")


@dataclass
class Attribution:
    layout: ParallelLayout | None
    how: str  # "given" | "inferred" | "none"
    alternatives: list[str]
    unexplained: list[tuple[int, ...]]


def parse_layout(text: str, world: int) -> ParallelLayout:
    """`tp=2,dp=2` (dp defaults to what is left) over `world` ranks; `order=tp-pp-cp-ep-dp`
    for Megatron's other rank orders (fastest first; default tp-cp-ep-dp-pp)."""
    degrees: dict[str, int] = {}
    order: tuple[Axis, ...] = DEFAULT_ORDER
    for part in filter(None, text.split(",")):
        name, _, value = (s.strip() for s in part.partition("="))
        if name == "order":
            order = parse_order(value, "--layout order")
            continue
        if name not in ("tp", "cp", "ep", "dp", "pp") or not value.isdigit():
            raise UsageError(
                f"--layout: {part!r} is not AXIS=N (axes tp, cp, ep, dp, pp) or order=..."
            )
        degrees[name] = int(value)
    return ParallelLayout(world, order=order, **degrees)  # type: ignore[arg-type]


def axis_groups(layout: ParallelLayout) -> dict[tuple[int, ...], list[str]]:
    """Each group's sorted ranks -> the axes whose groups it is (degree > 1 only)."""
    out: dict[tuple[int, ...], list[str]] = {}
    for axis in AXES:
        degree = layout.edp if axis == Axis.EDP else layout.degrees.get(axis, 1)
        if degree <= 1:
            continue
        for g in layout.groups(axis):
            out.setdefault(tuple(sorted(g)), []).append(str(axis))
    return out


def _pick(op: CommOp, axes: list[str]) -> str:
    if op.op in ALLTOALL and "ep" in axes:
        return "ep"
    if op.op == P2P and "pp" in axes:
        return "pp"
    return axes[0]


def axis_of(op: CommOp, table: dict[tuple[int, ...], list[str]], world: int) -> str | None:
    """The axis of one op; `world` for the whole world when no axis is; None if unknown."""
    if op.group_ranks is None:
        return None
    g = tuple(sorted(op.group_ranks))
    if g in table:
        return _pick(op, table[g])
    if op.op == P2P and len(g) == 2:  # a pair: the axis whose group holds both
        holders = [a for grp, axes in table.items() if set(g) <= set(grp) for a in axes]
        if holders:
            return _pick(op, list(dict.fromkeys(holders)))
    if len(g) == world:
        return "world"
    return None


def mesh_axis(desc: object) -> str | None:
    """The axis a DeviceMesh group's description names (`mesh_tp`, `mesh_dp_shard` -> dp):
    torch's init_device_mesh calls each dimension's group `mesh_<dim name>`."""
    if not isinstance(desc, str) or not desc.startswith("mesh_"):
        return None
    name = desc[len("mesh_") :]
    for axis in ("tp", "cp", "pp", "ep"):
        if name == axis or name.startswith(axis + "_"):
            return axis
    return "dp" if name.startswith(("dp", "fsdp", "hsdp")) else None


def _fit_penalty(ops: list[CommOp], table: dict, world: int, named: dict) -> int | None:
    """None if some group is not one of the layout's; else how unlikely the names are."""
    penalty = 0
    for op in ops:
        axis = axis_of(op, table, world)
        if axis is None:
            return None
        want = named.get(tuple(sorted(op.group_ranks or ())))
        if want is not None and want != axis and not (want == "dp" and axis == "edp"):
            penalty += 2  # the mesh named this group otherwise
        if op.op in ALLTOALL and axis != "ep":
            penalty += 1
        if (op.op == P2P) != (axis == "pp"):
            penalty += 1
        if axis == "cp":
            penalty += 1  # dp is the likelier reading of a strided collective group
    return penalty


def infer(
    ops: list[CommOp], world: int, named: dict | None = None
) -> tuple[ParallelLayout | None, list[ParallelLayout]]:
    """The layouts (Megatron order) that explain every group seen, best first."""
    seen = [o for o in ops if o.group_ranks is not None]
    divisors = [d for d in range(1, world + 1) if world % d == 0]
    scored = []
    for tp, cp, pp in itertools.product(divisors, repeat=3):
        if world % (tp * cp * pp):
            continue
        dp = world // (tp * cp * pp)
        a2a = any(o.op in ALLTOALL for o in seen)  # no all-to-all: no reason to name an ep
        for ep in (d for d in divisors if (cp * dp) % d == 0 and (a2a or d == 1)):
            layout = ParallelLayout(world, tp=tp, cp=cp, ep=ep, pp=pp)
            table = axis_groups(layout)
            penalty = _fit_penalty(seen, table, world, named or {})
            if penalty is None:
                continue
            used = {axis_of(o, table, world) for o in seen}
            unused = sum(1 for g, axes in table.items() if not set(axes) & used)
            scored.append(((penalty, unused, ep > 1, -dp), layout))
    scored.sort(key=lambda x: x[0])
    if not scored:
        return None, []
    best = [lay for s, lay in scored if s[:2] == scored[0][0][:2]]  # as likely by the groups
    return best[0], best[1:]


def attribute(
    ops: list[CommOp], world: int, layout_text: str | None, named: dict | None = None
) -> Attribution:
    """Set each op's axis; a given layout that leaves a group unexplained is a UsageError.
    `named`: group ranks -> axis from DeviceMesh group names (mesh_axis), which win over the
    layout for their groups (all-to-all on a named dp group stays ep)."""
    named = named or {}
    if not any(o.group_ranks for o in ops):
        return Attribution(parse_layout(layout_text, world) if layout_text else None,
                           "given" if layout_text else "none", [], [])  # fmt: skip
    if layout_text:
        layout = parse_layout(layout_text, world)
        how, alts = "given", []
    else:
        found, others = infer(ops, world, named)
        if found is None:
            seen = sorted({o.group_ranks for o in ops if o.group_ranks is not None})
            return Attribution(None, "none", [], seen)
        layout, how, alts = found, "inferred", [o.label() for o in others]
    table = axis_groups(layout)
    unexplained = []
    for op in ops:
        op.axis = axis_of(op, table, world)
        want = named.get(tuple(sorted(op.group_ranks or ())))
        if want is not None and not (op.op in ALLTOALL and op.axis == "ep"):
            op.axis = want
        if op.axis is None and op.group_ranks is not None:
            unexplained.append(tuple(op.group_ranks))
    if unexplained and layout_text:
        g = unexplained[0]
        raise UsageError(
            f"--layout {layout_text} ({layout.label()}) does not match the groups seen: "
            f"group {list(g)} is no axis's group in Megatron's rank order"
        )
    return Attribution(layout, how, alts, sorted(set(unexplained)))
