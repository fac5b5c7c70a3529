"""Primitive sweeps, nccl-tests / OSU style, over group sizes and placements: the fitter's
input. Every op x size x group size {2, 4, ..., world} x placement (contiguous ranks, or
ranks world/g apart), each group size's groups all running at once. Sizes are S in the
nccl-tests convention (program.py), rounded to what each op can move.
"""

from __future__ import annotations

from dataclasses import dataclass

from commbench.dtypes import canonical_dtype
from commbench.errors import UsageError
from commbench.ops import OPS, op_spec, round_bytes
from commbench.sizes import sweep
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns.base import TrafficOptions, check_choice, sweep_axis
from commbench.traffic.program import Program, Step

NAME = "collectives"
PLACEMENTS = ("contiguous", "strided")
DEFAULT_OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "sendrecv")


@dataclass(frozen=True)
class Options(TrafficOptions):
    """Ops, sizes min_bytes..max_bytes times `factor`, group sizes (empty: powers of two up
    to the world, and the world), placements. dtype defaults to float32 (MPI reduces it)."""

    dtype: str = "float32"
    ops: tuple[str, ...] = DEFAULT_OPS
    min_bytes: int = 8
    max_bytes: int = 64 << 20
    factor: float = 4.0
    group_sizes: tuple[int, ...] = ()
    placements: tuple[str, ...] = PLACEMENTS

    def __post_init__(self) -> None:
        super().__post_init__()
        ops = tuple(op_spec(o).name for o in self.ops)
        if "p2p_schedule" in ops:
            raise UsageError("ops: p2p_schedule is built by the pp pattern")
        if not ops:
            raise UsageError("ops: give at least one op")
        object.__setattr__(self, "ops", ops)
        for p in self.placements:
            check_choice("placements", p, PLACEMENTS)
        if any(g < 1 for g in self.group_sizes):
            raise UsageError("group_sizes must be positive")
        sweep(self.min_bytes, self.max_bytes, self.factor)  # validates the range


def group_sizes(world: int, options: Options) -> list[int]:
    """The group sizes to sweep on `world` ranks (each must divide it)."""
    if options.group_sizes:
        for g in options.group_sizes:
            if world % g:
                raise UsageError(f"group_sizes: {g} does not divide the world size {world}")
        return sorted(set(options.group_sizes))
    sizes = {g for g in (2**i for i in range(1, world.bit_length())) if world % g == 0}
    return sorted(sizes | ({world} if world > 1 else set()))


def build(layout: ParallelLayout, model: ModelShape | None, options: Options) -> Program:
    """One Step per op x size x group size x placement (strided skipped where it equals
    contiguous: a group of the whole world)."""
    dtype = canonical_dtype(options.dtype)
    sizes = sweep(options.min_bytes, options.max_bytes, options.factor)
    steps: list[Step] = []
    for placement in options.placements:
        for g in group_sizes(layout.world, options):
            if placement == "strided" and g == layout.world and "contiguous" in options.placements:
                continue
            axis = sweep_axis(placement, g)
            for op in options.ops:
                spec = OPS[op]
                if g < spec.min_group or (spec.max_group and g > spec.max_group):
                    continue
                seen = set()
                for s in sizes:
                    nbytes = round_bytes(op, s, g, dtype)
                    if nbytes in seen:
                        continue
                    seen.add(nbytes)
                    split = None
                    if op == "alltoallv":
                        split = tuple(tuple([nbytes // g] * g) for _ in range(g))
                    steps.append(
                        Step(
                            op=op,
                            nbytes=nbytes,
                            axis=axis,
                            repeat=1,
                            phase="sweep",
                            dtype=dtype,
                            label=f"{op} {placement}",
                            split=split,
                        )
                    )
    return Program(NAME, tuple(steps), {"group_sizes": group_sizes(layout.world, options)})
