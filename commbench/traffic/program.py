"""Traffic as data: the Step / Program a pattern builds (the ops themselves: commbench.ops).

`nbytes` S is the larger of one rank's input and output buffer (nccl-tests PERFORMANCE.md), so
numbers compare directly. A Program is what one training step sends; the runner executes it to
measure it, the calibration evaluates it to predict it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from commbench.dtypes import dtype_size
from commbench.ops import OPS


@dataclass(frozen=True)
class Action:
    """One entry of a p2p schedule: send to / receive from position+peer, or compute."""

    kind: str  # "send" | "recv" | "compute"
    peer: int = 0  # offset along the axis (+1 = next stage)
    nbytes: int = 0
    seconds: float = 0.0
    tag: int = 0

    def __post_init__(self) -> None:
        assert self.kind in ("send", "recv", "compute"), self.kind


@dataclass(frozen=True, kw_only=True)
class Step:
    """One communication op of a training step, executed `repeat` times on the groups of `axis`.

    `nbytes` is S per rank in the nccl-tests convention. `split[src][dst]` gives the bytes of an
    all-to-all-v within a group (group positions); `peer` is the send/recv offset; `schedule`
    holds per-position action lists for op `p2p_schedule` (e.g. a 1F1B pipeline).
    """

    op: str
    nbytes: int
    axis: str = "world"
    repeat: float = 1
    phase: str = "forward"
    dtype: str = "bfloat16"
    label: str = ""
    split: tuple[tuple[int, ...], ...] | None = None
    peer: int = 1
    ring: bool = True
    schedule: tuple[tuple[Action, ...], ...] | None = None
    extrapolated: bool = False

    def __post_init__(self) -> None:
        assert self.op in OPS, self.op
        assert self.nbytes > 0, self.nbytes
        assert self.repeat > 0, self.repeat
        assert OPS[self.op].valid(self), self

    @property
    def count(self) -> int:
        """Elements in the S-sized buffer."""
        return self.nbytes // dtype_size(self.dtype)

    @property
    def total_bytes(self) -> float:
        """S x repeat: the bytes this step accounts for in one training step."""
        return self.nbytes * self.repeat

    def with_(self, **changes: Any) -> Step:
        """A copy with some fields changed (dataclasses.replace)."""
        return replace(self, **changes)


@dataclass(frozen=True)
class Program:
    """The ordered steps one training step produces, with the layout-independent context."""

    pattern: str
    steps: tuple[Step, ...]
    meta: dict = field(default_factory=dict)

    def axes(self) -> list[str]:
        """Axes used, in first-use order."""
        return list(dict.fromkeys(s.axis for s in self.steps))
