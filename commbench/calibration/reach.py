"""How far a prediction reached beyond what its calibration measured: bytes, group size, nodes.

A planner asks about configs nobody ran (64 GPUs from a 16-GPU sweep, 8 nodes from 2), and the
models transfer only so far, so every prediction says how far it went: the factor between the
bytes asked for and the measured sizes of the series used, the measured group size it was
scaled from, and the node counts that series was measured at next to the nodes asked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class Reach:
    """Distance of one prediction from the measurements behind it (1 / None / (): none)."""

    bytes_factor: float = 1.0  # > 1: nbytes this many times beyond the measured sizes
    group_size_from: int | None = None  # scaled from this measured group size
    nodes: int | None = None  # the nodes one group spans, as asked
    nodes_measured: tuple[int, ...] = ()  # node counts the series used was measured at
    model_only: bool = False  # no series: the link model (or a reference statement) alone

    @property
    def nodes_factor(self) -> float:
        """nodes / the nearest measured node count (or its inverse), 1 when measured or
        unknown."""
        want = self.nodes
        if want is None or not self.nodes_measured or want in self.nodes_measured:
            return 1.0
        near = min(self.nodes_measured, key=lambda n: abs(math.log(n / want)))
        return max(want / near, near / want)

    @property
    def inside(self) -> bool:
        return (
            not self.model_only
            and self.bytes_factor == 1.0
            and self.group_size_from is None
            and self.nodes_factor == 1
        )

    def as_dict(self) -> dict:
        return {
            "bytes_factor": self.bytes_factor,
            "group_size_from": self.group_size_from,
            "nodes": self.nodes,
            "nodes_measured": list(self.nodes_measured),
            "nodes_factor": self.nodes_factor,
            "model_only": self.model_only,
        }

    def describe(self) -> str:
        """e.g. `bytes x4, p from 16, nodes 8 (measured 2)`; `measured` when inside."""
        parts = ["link model only"] if self.model_only else []
        if self.bytes_factor != 1.0:
            parts.append(f"bytes x{self.bytes_factor:.3g}")
        if self.group_size_from is not None:
            parts.append(f"p from {self.group_size_from}")
        if self.nodes_factor != 1.0:
            measured = ",".join(map(str, self.nodes_measured))
            parts.append(f"nodes {self.nodes} (measured {measured})")
        return ", ".join(parts) or "measured"


def bytes_factor(nbytes: float, lo: int, hi: int) -> float:
    """How many times nbytes lies beyond [lo, hi] (1 inside)."""
    if nbytes > hi:
        return nbytes / max(hi, 1)
    if nbytes < lo:
        return lo / max(nbytes, 1)
    return 1.0


def group_nodes(rec: dict, link_class: str) -> int | None:
    """Hosts one group of a record spans: its hosts_spanned, 1 on an intra link, else
    unknown (an imported log without host lines or --ranks-per-node)."""
    hosts = rec.get("hosts_spanned")
    if type(hosts) is int and hosts >= 1:
        return hosts
    return 1 if link_class == "intra" else None
