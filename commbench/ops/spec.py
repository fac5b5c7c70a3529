"""The seam every op module fills in: one `OpSpec` says all the suite knows about one op.

Modelled on nccl-tests, which keeps one small file per collective: the buffers a size S needs
in a group of p, the bus-bandwidth factor (doc/PERFORMANCE.md), the exact data to write and
expect, and the call. Here each op also carries its algorithm cost coefficients (Thakur,
Rabenseifner & Gropp 2005) and how it shrinks to a per-rank byte budget. S (`Step.nbytes`) is
the larger of one rank's input and output buffer, as in nccl-tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from commbench.dtypes import dtype_size
from commbench.ops.checkdata import Fill

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator, Fn
    from commbench.traffic.program import Step

# Algorithm families of Thakur, Rabenseifner & Gropp, "Optimization of Collective
# Communication Operations in MPICH" (IJHPCA 2005); the fitter fits one (alpha, beta) per model.
MODELS = ("ring", "tree", "rabenseifner", "pairwise")
POISON = 1000  # seed of the junk written into receive buffers before a check

# Rooted ops end with a zero-byte acknowledgement in the direction their data went, so every
# rank's clock covers the whole op (de Supinski & Karonis, "Accurately measuring MPI
# broadcasts in a computational grid", HPDC 1999): without it a broadcast root's eager send
# returns at once and a receiver that leaves the barrier late finds the data already there
# (8 B on 4 ranks here: 0.4 us per iteration against 7 us for a send/recv of the same ranks in
# some runs; back to back, where the root runs ahead of the data, 0.2-0.35x it in every run).
TO_ROOT = "to-root"  # broadcast: every receiver acks the root once it holds the data
FROM_ROOT = "from-root"  # reduce: the root acks every sender once it holds the sum
ACKS = (TO_ROOT, FROM_ROOT)

CostFn = Callable[[int], tuple[float, float]]
Fit = tuple["Step", float, int, bool]  # (step to run, time scale, chunks, extrapolated)


def lg(p: int) -> float:
    """ceil(log2 p): rounds of a recursive-doubling or binomial algorithm (0 for p = 1)."""
    return float(math.ceil(math.log2(p))) if p > 1 else 0.0


def frac(p: int) -> float:
    """(p-1)/p: the share of S a rank exchanges in a gather-like op; the bus factor of
    allgather, reduce_scatter and alltoall (nccl-tests PERFORMANCE.md)."""
    return (p - 1) / p


def collective_costs(**models: CostFn) -> dict[str, CostFn]:
    """A collective's (A, B) per model, with a group of one moving nothing under any model."""

    def alone_free(f: CostFn) -> CostFn:
        return lambda p: (0.0, 0.0) if p <= 1 else f(p)

    return {m: alone_free(f) for m, f in models.items()}


def one(p: int) -> float:
    """Bus factor 1: every byte of S crosses one link once (broadcast, reduce, send/recv)."""
    return 1.0


# Shared by ops whose algorithms move the same bytes in the same rounds (Thakur et al. 2005).
SHARD_COSTS = collective_costs(  # allgather and reduce_scatter: p shards of S/p
    ring=lambda p: (p - 1, frac(p)),
    tree=lambda p: (lg(p), frac(p)),
    rabenseifner=lambda p: (lg(p), frac(p)),
    pairwise=lambda p: (p - 1, frac(p)),
)
ROOTED_COSTS = collective_costs(  # broadcast and reduce: all of S to or from one root
    ring=lambda p: (p - 1, 1.0),
    tree=lambda p: (lg(p), lg(p)),
    rabenseifner=lambda p: (2 * lg(p), 2 * frac(p)),
    pairwise=lambda p: (p - 1, float(p - 1)),
)


def overlap_pct(overall_s: float, compute_s: float, pure_s: float) -> float:
    """OSU's overlap of a non-blocking op (osu_util's calculate_and_print_stats): the share of
    its pure communication time hidden behind the compute, 100 x (1 - (overall - compute) /
    pure), clipped to [0, 100]."""
    if pure_s <= 0:
        return 0.0
    return min(100.0, max(0.0, 100.0 * (1.0 - (overall_s - compute_s) / pure_s)))


@dataclass(frozen=True)
class Views:
    """Typed views, in one step's dtype, of the run's reused send and receive buffers."""

    comm: Communicator
    send_raw: Any
    recv_raw: Any
    dtype: str

    def send(self, nbytes: int) -> Any:
        return self.comm.view(self.send_raw, nbytes, self.dtype)

    def recv(self, nbytes: int, offset: int = 0) -> Any:
        return self.comm.view(self.recv_raw, nbytes, self.dtype, offset)


@dataclass
class InlineCheck:
    """Wrong elements counted inside the op itself (a schedule reuses its receive buffer)."""

    checking: bool = False
    wrong: int = 0


@dataclass(kw_only=True)
class Binding:
    """An op bound to this rank's buffers: `fn` is timed; around one checked call, `inputs` are
    written, `expected` compared, and `zero_after` reset (in-place sums keep growing)."""

    fn: Fn
    inputs: list[tuple[Any, Fill]]
    expected: list[tuple[Any, Fill]]
    zero_after: list[tuple[Any, Fill]] = field(default_factory=list)
    time_scale: float = 1.0  # pingpong reports half the round trip
    inline: InlineCheck | None = None
    checked_fn: Fn | None = None  # the checked call, where it differs from fn (barrier)
    compute: Any = None  # non-blocking ops: the compute stand-in's seconds cell (overlap %)
    ack: str | None = None  # rooted ops: the acknowledgement (ACKS) that ends the timed call


def same_buffers(step: Step, p: int) -> tuple[int, int]:
    """Send and receive buffers both hold S."""
    return step.nbytes, step.nbytes


def step_bytes(step: Step) -> int:
    """S as built."""
    return step.nbytes


def always_valid(step: Step) -> bool:
    """S is all the op needs."""
    return True


def no_sweep_fields(nbytes: int, p: int, peer: int) -> dict[str, Any]:
    """A sweep point is S alone."""
    return {}


@dataclass(frozen=True, kw_only=True)
class OpSpec:
    """One communication op. Hooks default to the plain case (S in, S out, S recorded)."""

    name: str
    doc: str
    bus_formula: str  # the busbw factor as nccl-tests PERFORMANCE.md writes it
    bus_factor: Callable[[int], float]  # busbw = algbw x bus_factor(p), p the group size
    bind: Callable[[Communicator, Step, Views], Binding]
    aliases: tuple[str, ...] = ()
    reduces: bool = False  # needs an arithmetic reduction (no fp16/bf16 on plain MPI)
    chunks: bool = False  # S splits evenly into p pieces
    per_rank: bool = False  # OSU and IMB size it per rank: S = p x their size (--per-rank-size)
    rooted: bool = False  # has a root (group position 0); nccl-tests prints it
    min_group: int = 1
    max_group: int | None = None
    costs: Mapping[str, CostFn] = field(default_factory=dict)  # model -> p -> (A, B)
    buffers: Callable[[Step, int], tuple[int, int]] = same_buffers  # (send, recv) bytes
    record_bytes: Callable[[Step], int] = step_bytes  # S as records report it
    priced_bytes: Callable[[Step], int] = step_bytes  # S at which a calibration prices it
    priced_from: tuple[str, ...] = ()  # other ops whose calibration series price this one
    shrink: Callable[[Step, int, int, int], Fit] | None = None  # None: S divided evenly
    valid: Callable[[Step], bool] = always_valid  # the step carries what the op needs
    sweep_fields: Callable[[int, int, int], dict[str, Any]] = no_sweep_fields
    built_by: str | None = None  # the pattern that builds it; `commbench run` cannot sweep it
    scheduled: bool = False  # per-position action lists, run and priced message by message
    backends: tuple[str, ...] | None = None  # the backends that bind it (None: all)
    sized: bool = True  # False: S means nothing (barrier): a sweep is one point of S = 0
    overlaps: bool = False  # non-blocking: also timed around a compute stand-in (overlap %)

    def cost(self, model: str, p: int) -> tuple[float, float]:
        """(A, B) under `model`: time = alpha * A + beta * B * S (Thakur et al. 2005)."""
        assert model in self.costs, f"{self.name} has no {model} cost model"
        a, b = self.costs[model](p)
        return float(a), float(b)

    def round_bytes(self, nbytes: int, p: int, dtype: str) -> int:
        """Round S down to what the op can move: whole elements, and p equal chunks where
        needed, as nccl-tests does (count = S / wordsize / p * p). Never below one chunk."""
        unit = dtype_size(dtype) * (p if self.chunks else 1)
        return max(unit, nbytes // unit * unit)

    def fit(self, step: Step, p: int, max_bytes: int | None) -> Fit:
        """`step` made to fit send + receive buffers within max_bytes per rank."""
        send, recv = self.buffers(step, p)
        if not max_bytes or send + recv <= max_bytes:
            return step, 1.0, 1, False
        k = math.ceil((send + recv) / max_bytes)
        if self.shrink is not None:
            return self.shrink(step, p, max_bytes, k)
        el = dtype_size(step.dtype)
        while True:
            nbytes = self.round_bytes(step.nbytes // k, p, step.dtype)
            new = step.with_(nbytes=nbytes)
            s, r = self.buffers(new, p)
            if s + r <= max_bytes or nbytes <= el * p:
                break
            k += 1
        return new, step.nbytes / nbytes, k, True
