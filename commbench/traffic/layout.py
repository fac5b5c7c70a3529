"""Parallel layout: the rank grid, the groups of each axis, and where each group sits.

Rank order follows Megatron-LM's RankGenerator: global_rank = tp + t*(cp + c*(dp + d*pp)),
so TP is contiguous (inside a node) and DP/PP are strided. Experts reuse the dp x cp ranks
as tp-ep-edp-pp (Megatron's expert rank generator, edp = cp*dp/ep). A group is labelled
with its size, stride, the hosts it spans and its link class (`intra` one host, else `inter`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from enum import StrEnum
from functools import cached_property
from math import prod

import numpy as np

from commbench.errors import UsageError


class Axis(StrEnum):
    """The axis names meshes and Steps use; members equal their strings, so records and suite
    files spelling "tp" keep working."""

    TP = "tp"  # tensor parallel
    CP = "cp"  # context parallel
    EP = "ep"  # expert parallel
    DP = "dp"  # data parallel
    PP = "pp"  # pipeline parallel
    PP_ENDS = "pp_ends"  # the first and last stage of each pipeline (Megatron's embedding group)
    EDP = "edp"  # expert data parallel: replicas of each expert shard
    GROUP = "group"  # a primitive sweep's group (sweep_mesh)
    REST = "rest"  # the sweep mesh's other axis
    WORLD = "world"  # every rank


ENDS = "_ends"  # `pp_ends`: the first and last rank of each group of the axis before it
# `cp_in2`: each cp group cut into blocks of 2 consecutive positions; `cp_out2`: the positions
# 2 apart, one from each block (Megatron's hierarchical context-parallel groups, a2a inside a
# block, p2p across blocks: parallel_state.create_hierarchical_groups)
SUB_AXIS = re.compile(r"^([a-z]+)_(in|out)(\d+)$")

DEFAULT_ORDER = (Axis.TP, Axis.CP, Axis.EP, Axis.DP, Axis.PP)
EXPERT_AXES = (Axis.TP, Axis.EP, Axis.EDP, Axis.PP)


def parse_order(value: object, where: str) -> tuple[Axis, ...]:
    """An axis order, fastest-varying first: `tp-cp-ep-dp-pp` text or a tuple of names, a
    permutation of DEFAULT_ORDER. `where` starts the error (`--order`, `FILE: runs[0].order:`)."""
    names = tuple(value.split("-")) if isinstance(value, str) else value
    if not isinstance(names, tuple) or sorted(map(str, names)) != sorted(DEFAULT_ORDER):
        shown = "-".join(map(str, value)) if isinstance(value, tuple) else value
        raise UsageError(f"{where} {shown!r} is not a permutation of {'-'.join(DEFAULT_ORDER)}")
    return tuple(Axis(n) for n in names)


@dataclass(frozen=True)
class GroupInfo:
    """Placement of the groups of one axis: they all share size, stride and span in a regular grid."""

    axis: str
    groups: tuple[tuple[int, ...], ...]
    size: int
    stride: int  # rank distance between neighbours, -1 when not uniform
    hosts_spanned: int  # the most hosts any one group touches
    link_class: str  # "intra" | "inter"

    @staticmethod
    def stride_of(members: list[int]) -> int:
        """Rank distance between a group's neighbours (ascending ranks): -1 when not uniform,
        0 for one rank."""
        steps = {b - a for a, b in zip(members, members[1:])}
        return steps.pop() if len(steps) == 1 else (0 if len(members) == 1 else -1)

    def as_record(self) -> dict:
        """The placement fields every record carries."""
        return {
            "axis": self.axis,
            "group_size": self.size,
            "groups": len(self.groups),
            "stride": self.stride,
            "hosts_spanned": self.hosts_spanned,
            "link_class": self.link_class,
        }


def host_map(
    world: int, hosts: Sequence[str] | None = None, ranks_per_node: int | None = None
) -> tuple[int, ...]:
    """Node index of every rank: from `--ranks-per-node`, else from the gathered host names."""
    if ranks_per_node:
        return tuple(r // ranks_per_node for r in range(world))
    if hosts is None:
        return (0,) * world
    assert len(hosts) == world, (len(hosts), world)
    index: dict[str, int] = {}
    return tuple(index.setdefault(h, len(index)) for h in hosts)


@dataclass(frozen=True)
class Mesh:
    """A rank grid: named axes, fastest-varying first (`("tp", "cp", "dp", "pp")`)."""

    axes: tuple[Axis, ...]
    dims: tuple[int, ...]
    nodes: tuple[int, ...] = ()  # node index per rank, empty = one node

    def __post_init__(self) -> None:
        assert len(self.axes) == len(self.dims) and all(d >= 1 for d in self.dims)
        assert not self.nodes or len(self.nodes) == self.world

    @property
    def world(self) -> int:
        return prod(self.dims)

    @cached_property
    def grid(self) -> np.ndarray:
        """grid[a_last, ..., a_first] = rank (C order, so the first axis varies fastest)."""
        return np.arange(self.world).reshape(tuple(reversed(self.dims)))

    def groups(self, axis: str) -> tuple[tuple[int, ...], ...]:
        """Rank lists of the groups along `axis`; `"dp-cp"` joins axes (positions follow the
        mesh order, so a joined group lists its ranks in ascending order); `<axis>_ends` keeps
        the first and last rank of each of the axis's groups (`pp_ends`: Megatron-LM's
        embedding group, parallel_state._EMBEDDING_GLOBAL_RANKS = pipeline ranks [0] and [-1]);
        `<axis>_in<a>` / `<axis>_out<a>` its blocks of a consecutive positions / the positions
        a apart (SUB_AXIS)."""
        if axis.endswith(ENDS):
            base = axis[: -len(ENDS)]
            if "-" in base:
                raise UsageError(f"axis {axis!r}: {ENDS} follows one axis, not {base!r}")
            return tuple(tuple(dict.fromkeys((g[0], g[-1]))) for g in self.groups(base))
        sub = SUB_AXIS.match(axis)
        if sub:
            full, kind, a = self.groups(sub.group(1)), sub.group(2), int(sub.group(3))
            size = len(full[0])
            if a < 1 or size % a:
                raise UsageError(
                    f"axis {axis!r}: {a} does not divide the {sub.group(1)} size {size}"
                )
            if kind == "in":
                return tuple(g[i : i + a] for g in full for i in range(0, size, a))
            return tuple(g[j::a] for g in full for j in range(a))
        names = axis.split("-")
        for n in names:
            if n not in self.axes:
                raise UsageError(f"unknown axis {n!r}: this layout has {', '.join(self.axes)}")
        names = sorted(set(names), key=self.axes.index)
        # numpy axis index of mesh axis i is (n_axes - 1 - i)
        np_axes = [len(self.axes) - 1 - self.axes.index(n) for n in names]
        rest = [i for i in range(len(self.axes)) if i not in np_axes]
        # the selected axes go last, the first-named (fastest) at the very end
        moved = np.transpose(self.grid, rest + list(reversed(np_axes)))
        size = prod(self.dims[self.axes.index(n)] for n in names)
        return tuple(tuple(int(r) for r in row) for row in moved.reshape(-1, size))

    @cached_property
    def _infos(self) -> dict[str, GroupInfo]:
        return {}

    def info(self, axis: str) -> GroupInfo:
        """Groups of `axis` with size, stride, hosts spanned and link class, worked out once
        per axis (the mesh is frozen; a suite's points ask for the same axes step after step)."""
        got = self._infos.get(axis)
        if got is None:
            got = self._infos[axis] = self._info(axis)
        return got

    def _info(self, axis: str) -> GroupInfo:
        groups = self.groups(axis)
        first = groups[0]
        stride = GroupInfo.stride_of(list(first))
        nodes = self.nodes or (0,) * self.world
        spanned = max(len({nodes[r] for r in g}) for g in groups)
        return GroupInfo(
            axis, groups, len(first), stride, spanned, "intra" if spanned == 1 else "inter"
        )

    def coord(self, rank: int, axis: str) -> int:
        """Position of `rank` along `axis`."""
        i = self.axes.index(axis)
        return rank // prod(self.dims[:i]) % self.dims[i]


@dataclass(frozen=True)
class ParallelLayout:
    """Validated (tp, cp, ep, dp, pp) degrees over a world of ranks, Megatron order by default.

    tp*cp*dp*pp must equal the world; ep divides cp*dp (experts are sharded over the ranks
    that hold data-parallel replicas, as Megatron-Core does with expert_tensor_parallel = tp).
    """

    world: int
    _: KW_ONLY  # the degrees and the rest by keyword: ParallelLayout(16, tp=4)
    tp: int = 1
    cp: int = 1
    ep: int = 1
    # None: derived from the world; an int once constructed, hence typed int
    dp: int = None  # type: ignore[assignment]
    pp: int = 1
    order: tuple[Axis, ...] = DEFAULT_ORDER  # text names are accepted and become Axis
    nodes: tuple[int, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for name in ("world", "tp", "cp", "ep", "pp"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} must be a positive integer, got {value!r}")
        object.__setattr__(self, "order", parse_order(tuple(self.order), "order"))
        model = self.tp * self.cp * self.pp
        if self.dp is None:
            if self.world % model:
                raise UsageError(
                    f"tp*cp*pp = {self.tp}*{self.cp}*{self.pp} = {model} does not divide "
                    f"the world size {self.world}"
                )
            object.__setattr__(self, "dp", self.world // model)
        if self.dp < 1 or model * self.dp != self.world:
            raise UsageError(
                f"tp*cp*dp*pp = {self.tp}*{self.cp}*{self.dp}*{self.pp} = {model * self.dp} "
                f"does not equal the world size {self.world}"
            )
        if (self.cp * self.dp) % self.ep:
            raise UsageError(f"ep={self.ep} must divide cp*dp = {self.cp * self.dp}")

    @property
    def degrees(self) -> dict[Axis, int]:
        return {
            Axis.TP: self.tp,
            Axis.CP: self.cp,
            Axis.EP: self.ep,
            Axis.DP: self.dp,
            Axis.PP: self.pp,
        }

    @property
    def edp(self) -> int:
        """Expert data-parallel degree: replicas of each expert shard."""
        return self.cp * self.dp // self.ep

    def label(self) -> str:
        """Compact config name, `tp4-cp2-dp2-pp1` (ep only when > 1)."""
        parts = [f"tp{self.tp}", f"cp{self.cp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts += [f"dp{self.dp}", f"pp{self.pp}"]
        return "-".join(parts)

    @cached_property
    def dense(self) -> Mesh:
        """The tp/cp/dp/pp mesh in the configured order (ep dropped: it is not a dense axis)."""
        axes = tuple(a for a in self.order if a != Axis.EP)
        return Mesh(axes, tuple(self.degrees[a] for a in axes), self.nodes)

    @cached_property
    def expert(self) -> Mesh:
        """The tp/ep/edp/pp mesh that expert (MoE) traffic runs on."""
        dims = {Axis.TP: self.tp, Axis.EP: self.ep, Axis.EDP: self.edp, Axis.PP: self.pp}
        return Mesh(EXPERT_AXES, tuple(dims[a] for a in EXPERT_AXES), self.nodes)

    def mesh(self, axis: str) -> Mesh:
        """The mesh `axis` lives on: `ep` and `edp` the expert one, the rest the dense one."""
        if any(a in (Axis.EP, Axis.EDP) for a in axis.split("-")):
            return self.expert
        return self.dense

    def info(self, axis: str) -> GroupInfo:
        """Groups of `axis`, on its mesh."""
        return self.mesh(axis).info(axis)

    def groups(self, axis: str) -> tuple[tuple[int, ...], ...]:
        return self.info(axis).groups


def sweep_mesh(
    world: int, group_size: int, placement: str = "contiguous", nodes: tuple[int, ...] = ()
) -> Mesh:
    """Groups of `group_size` for `commbench run`: contiguous ranks (axis "group") or strided."""
    if group_size < 1 or world % group_size:
        raise UsageError(f"group size {group_size} does not divide the world size {world}")
    rest = world // group_size
    if placement == "contiguous":
        return Mesh((Axis.GROUP, Axis.REST), (group_size, rest), nodes)
    if placement == "strided":
        return Mesh((Axis.REST, Axis.GROUP), (rest, group_size), nodes)
    raise UsageError(f"unknown placement {placement!r}: choose contiguous or strided")
