"""Where an axis's groups sit on a cluster of equal nodes, from the mesh's strides alone: the
planner asks for every axis of every config, and listing the groups (ParallelLayout.info: every
rank of the job in tuples, 65,536 of them at the largest plan) cost it seconds and memory per
config. Equal to layout.GroupInfo and pp.stage_links on host_map(gpus, gpus_per_node)
(tests/test_plan_scale.py compares them).

A rank is sum_k c_k s_k (c_k its coordinate on mesh axis k, s_k the product of the faster axes'
degrees) and its node rank // g. A group fixes the other axes' coordinates (its base b) and
runs over its own axes' offsets O, so its nodes are b // g + (b mod g + O) // g: how many hosts
it spans depends on b mod g only, and those residues are at most g.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import prod

import numpy as np

from commbench.errors import UsageError
from commbench.traffic.layout import ENDS, SUB_AXIS, GroupInfo, Mesh, ParallelLayout


@dataclass(frozen=True)
class AxisPlacement:
    """GroupInfo's placement fields, without the groups."""

    axis: str
    size: int
    stride: int  # rank distance between neighbours, -1 when not uniform, 0 for one rank
    hosts_spanned: int  # the most hosts any one group touches
    link_class: str  # "intra" | "inter"


def _own(mesh: Mesh, axis: str) -> list[int]:
    """Indices of the axis's own mesh axes (`dp-cp`: both), as Mesh.groups names them."""
    names = axis.split("-")
    for n in names:
        if n not in mesh.axes:
            raise UsageError(f"unknown axis {n!r}: this layout has {', '.join(mesh.axes)}")
    return sorted({mesh.axes.index(n) for n in names})


def _residues(dims: tuple[int, ...], strides: list[int], axes: list[int], g: int) -> np.ndarray:
    """The values b mod g of the bases sum_{k in axes} c_k s_k (c_k < dims[k])."""
    res = np.zeros(1, dtype=np.int64)
    for k in axes:
        steps = np.arange(min(dims[k], g), dtype=np.int64) * strides[k]  # periodic mod g
        res = np.unique((res[:, None] + steps[None, :]) % g)
    return res


@lru_cache(maxsize=4096)
def _place(
    dims: tuple[int, ...], own: tuple[int, ...], g: int, ends: bool = False
) -> tuple[int, int, int]:
    """(size, stride, hosts spanned) of the groups over mesh axes `own` of a mesh of `dims`
    with g ranks per node; `ends`: only the first and last coordinate of the (one) own axis."""
    strides = [prod(dims[:k]) for k in range(len(dims))]
    offsets = np.zeros(1, dtype=np.int64)
    for k in own:
        coords = np.unique([0, dims[k] - 1]) if ends else np.arange(dims[k])
        offsets = (offsets[None, :] + coords.astype(np.int64)[:, None] * strides[k]).ravel()
    offsets.sort()
    size, stride = len(offsets), GroupInfo.stride_of(offsets.tolist())
    others = [k for k in range(len(dims)) if k not in own]
    spanned = 0
    for r in _residues(dims, strides, others, g).tolist():
        node = (r + offsets) // g  # nondecreasing: offsets are sorted
        spanned = max(spanned, 1 + int(np.count_nonzero(np.diff(node))))
    return size, stride, spanned


def axis_placement(layout: ParallelLayout, axis: str, gpus_per_node: int) -> AxisPlacement:
    """Size, stride, hosts spanned and link class of `axis`'s groups on nodes of
    `gpus_per_node` ranks (rank r on node r // gpus_per_node, as host_map numbers them)."""
    mesh = layout.mesh(axis)
    sub = SUB_AXIS.match(axis)
    if sub:  # the axis's dim split in two (a, dim / a): blocks are the first, across the second
        (k,) = _own(mesh, sub.group(1))
        a = int(sub.group(3))
        if mesh.dims[k] % a:
            raise UsageError(f"axis {axis!r}: {a} does not divide the size {mesh.dims[k]}")
        dims = (*mesh.dims[:k], a, mesh.dims[k] // a, *mesh.dims[k + 1 :])
        own_k = k if sub.group(2) == "in" else k + 1
        size, stride, spanned = _place(dims, (own_k,), gpus_per_node)
        return AxisPlacement(axis, size, stride, spanned, "intra" if spanned == 1 else "inter")
    ends = axis.endswith(ENDS)
    own = _own(mesh, axis[: -len(ENDS)] if ends else axis)
    size, stride, spanned = _place(mesh.dims, tuple(own), gpus_per_node, ends)
    return AxisPlacement(axis, size, stride, spanned, "intra" if spanned == 1 else "inter")


@lru_cache(maxsize=4096)
def _stage_links(dims: tuple[int, ...], k: int, g: int) -> tuple[str, ...]:
    """Link class of each stage pair along mesh axis k (see stage_links)."""
    strides = [prod(dims[:j]) for j in range(len(dims))]
    p = dims[k]
    others = [j for j in range(len(dims)) if j != k]
    res = _residues(dims, strides, others, g)
    node = (res[:, None] + np.arange(p, dtype=np.int64)[None, :] * strides[k]) // g
    pairs = [(i, i + 1) for i in range(p - 1)] + ([(p - 1, 0)] if p > 2 else [])
    return tuple("inter" if bool(np.any(node[:, a] != node[:, b])) else "intra" for a, b in pairs)


def stage_links(layout: ParallelLayout, axis: str, gpus_per_node: int) -> tuple[str, ...]:
    """pp.stage_links of a pipeline axis without its groups: the link class between stage i
    and i+1 for each i (and, p > 2, between the last and the first: interleaved 1F1B's ring), `inter`
    where any pipeline's two ranks sit on different nodes."""
    mesh = layout.mesh(axis)
    own = _own(mesh, axis)
    assert len(own) == 1, axis  # a pipeline runs along one axis
    return _stage_links(mesh.dims, own[0], gpus_per_node)
