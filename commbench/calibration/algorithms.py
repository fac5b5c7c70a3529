"""Which algorithm a library runs for (op, p, S), and what that algorithm costs: the cost
model of a link whose library is known, so a fit at one group size transfers to another.

A fixed model (costmodels: ring, tree, ...) assumes one algorithm everywhere. Open MPI does
not run one: its coll/tuned component picks per call from the group size and the message
size (`ompi/mca/coll/tuned/coll_tuned_decision_fixed.c`, Open MPI 5.0; the tables below are
its commutative-op rules, transcribed), and the algorithms it picks move very different bytes
(`ompi/mca/coll/base/coll_base_*.c`). On 3 ranks, all-reduce of 256 KiB and up runs
Rabenseifner's algorithm with the non-power-of-two fold: a half exchange, a half send, the
reduce-scatter and all-gather of the remaining 2 ranks and a full send back to the folded
rank, 3 S on the critical path against 1 S on 2 ranks and 1.5 S on 4. A fit of 2 ranks under
any one fixed model cannot know that; under this one the link's (alpha, beta) price the
algorithm each group size actually gets.

Coefficients are (A, B) as in costmodels: time = alpha A + beta B S, A the rounds on the
critical path, B the bytes one rank moves on its link per byte of S (the larger of send and
receive: links are full duplex). Ops the tables do not cover keep a fixed model (FALLBACK).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from commbench.calibration.nccl_model import nccl_steps
from commbench.ops import OPS
from commbench.ops.spec import frac, lg

OPENMPI = "openmpi-tuned"
NCCL = "nccl-tuning"
# the library models, beside the fixed ones: name -> the rules they transcribe
LIBRARIES = {
    OPENMPI: "Open MPI 5.0 coll/tuned fixed decision rules (commutative ops)",
    NCCL: "NCCL's tuning model (src/graph/tuning.cc): ring or tree, whichever is faster, with "
    "intra- and inter-node steps apart",
}
FALLBACK = {"broadcast": "tree"}  # the fixed model of an op the rules do not cover, else ring

# op -> rows (p below, ((bytes below, algorithm), ...)); None: no bound. The bytes compared
# are Open MPI's total_dsize: S for allreduce and reduce, one rank's block S / p for the others.
Rules = tuple[tuple[int | None, tuple[tuple[int | None, int], ...]], ...]
RULES: dict[str, Rules] = {
    "allreduce": (
        (4, ((8, 4), (4096, 3), (8192, 4), (16384, 3), (65536, 4), (262144, 5), (None, 6))),
        (8, ((16, 4), (8192, 3), (None, 6))),
        (16, ((8192, 3), (None, 6))),
        (32, ((64, 5), (4096, 3), (None, 6))),
        (64, ((128, 5), (None, 6))),
        (128, ((262144, 3), (None, 6))),
        (256, ((131072, 2), (262144, 3), (None, 6))),
        (512, ((4096, 2), (None, 6))),
        (2048, ((2048, 2), (16384, 3), (None, 6))),
        (4096, ((2048, 2), (4096, 5), (16384, 3), (None, 6))),
        (None, ((2048, 2), (16384, 5), (32768, 3), (None, 6))),
    ),
    "allgather": (
        (3, ((None, 6),)),
        (32, ((None, 3),)),
        (64, ((1024, 3), (65536, 5), (None, 4))),
        (128, ((512, 3), (65536, 5), (None, 4))),
        (256, ((512, 3), (131072, 5), (524288, 4), (1048576, 5), (None, 4))),
        (512, ((32, 3), (128, 2), (1024, 3), (131072, 5), (524288, 4), (1048576, 5), (None, 4))),
        (1024, ((64, 3), (256, 2), (2048, 3), (None, 5))),
        (2048, ((4, 3), (8, 2), (16, 3), (32, 2), (256, 3), (512, 2), (4096, 3), (None, 5))),
        (4096, ((32, 2), (128, 3), (512, 2), (4096, 3), (None, 5))),
        (None, ((2, 3), (8, 2), (16, 3), (512, 2), (4096, 3), (None, 5))),
    ),
    "alltoall": (
        (3, ((2, 2), (4, 5), (16, 2), (64, 5), (256, 2), (4096, 5), (32768, 2), (262144, 4),
             (1048576, 5), (None, 2))),
        (8, ((8192, 4), (16384, 1), (65536, 4), (524288, 1), (1048576, 2), (None, 1))),
        (16, ((262144, 4), (None, 1))),
        (32, ((4, 4), (512, 3), (8192, 4), (32768, 1), (262144, 4), (524288, 1), (None, 4))),
        (64, ((512, 3), (524288, 1), (None, 4))),
        (128, ((1024, 3), (2048, 1), (4096, 4), (262144, 1), (None, 2))),
        (256, ((1024, 3), (2048, 4), (262144, 1), (None, 2))),
        (512, ((1024, 3), (8192, 4), (32768, 1), (None, 2))),
        (1024, ((512, 3), (8192, 4), (16384, 1), (131072, 4), (262144, 1), (None, 2))),
        (2048, ((512, 3), (1024, 4), (2048, 1), (16384, 4), (262144, 1), (None, 4))),
        (4096, ((1024, 3), (4096, 4), (8192, 1), (131072, 4), (None, 1))),
        (None, ((2048, 3), (8192, 4), (16384, 1), (32768, 4), (65536, 1), (None, 4))),
    ),
    "reduce_scatter": (  # MPI_Reduce_scatter_block
        (4, ((4, 2), (8, 4), (16, 3), (128, 4), (256, 3), (4096, 4), (8192, 3), (131072, 4),
             (None, 1))),
        (8, ((8, 3), (32, 2), (256, 4), (8192, 3), (16384, 4), (1048576, 3), (None, 1))),
        (16, ((4, 1), (32, 3), (128, 4), (524288, 3), (4194304, 1), (None, 4))),
        (32, ((32, 1), (524288, 3), (2097152, 1), (4194304, 3), (None, 4))),
        (None, ((4, 3), (16, 1), (65536, 4), (262144, 1), (None, 4))),
    ),
    "reduce": (
        (4, ((8, 7), (16, 4), (32, 3), (262144, 1), (524288, 3), (1048576, 2), (None, 3))),
        (8, ((4096, 4), (65536, 2), (262144, 5), (524288, 1), (1048576, 5), (None, 1))),
        (16, ((8192, 4), (None, 5))),
        (32, ((4096, 4), (None, 5))),
        (256, ((None, 5),)),
        (512, ((8192, 5), (16384, 6), (None, 5))),
        (2048, ((None, 5),)),
        (4096, ((512, 5), (1024, 6), (8192, 5), (16384, 6), (None, 5))),
        (None, ((16, 5), (32, 6), (1024, 5), (2048, 6), (8192, 5), (16384, 6), (None, 5))),
    ),
}  # fmt: skip
RULES["alltoallv"] = RULES["alltoall"]  # priced as alltoall (S = the busiest send buffer)


def _pof2(p: int) -> tuple[int, float, int]:
    """(largest power of two <= p, its log2, whether p is not one: the fold step's flag)."""
    q = 1 << (p.bit_length() - 1)
    return q, float(q.bit_length() - 1), int(q != p)


def _allreduce(alg: int, p: int) -> tuple[float, float]:
    q, lq, fold = _pof2(p)
    if alg == 3:  # recursive doubling; a fold of the extra ranks before and after
        return lq + 2 * fold, lq + 2 * fold
    if alg in (4, 5):  # ring, segmented ring: reduce-scatter then all-gather
        return 2 * (p - 1), 2 * frac(p)
    if alg == 6:  # Rabenseifner; the fold: half exchange + half send, then a full send back
        return 2 * lq + 3 * fold, 2 * frac(q) + 2 * fold
    # 1 basic linear, 2 non-overlapping: a reduce to the root, then a broadcast (binomial)
    return 2 * lg(p), 2 * lg(p)


def _allgather(alg: int, p: int) -> tuple[float, float]:
    q, lq, fold = _pof2(p)
    if alg == 6:  # two procs: one exchange of the shard
        return 1.0, 0.5
    if alg == 3 and not fold:  # recursive doubling (non-powers of two run Bruck)
        return lq, frac(p)
    if alg in (2, 3):  # Bruck
        return lg(p), frac(p)
    if alg == 5 and p % 2 == 0:  # neighbour exchange (odd p runs the ring)
        return p / 2, frac(p)
    return p - 1, frac(p)  # ring (and 1, linear gather + broadcast, priced as it)


def _alltoall(alg: int, p: int) -> tuple[float, float]:
    if alg == 5:  # two procs
        return 1.0, 0.5
    if alg == 2:  # pairwise: p - 1 rounds of one block
        return p - 1, frac(p)
    if alg == 3:  # modified Bruck: lg p rounds of about half the buffer
        return lg(p), lg(p) / 2
    return 1.0, frac(p)  # linear, linear with a request limit: every block posted at once


def _reduce(alg: int, p: int) -> tuple[float, float]:
    """A reduce of S to the root, unsegmented (tuned passes segment size 0): the root's link
    takes every message a child sends it, a chain's depth adds its hops."""
    if alg in (1, 3):  # linear: p - 1 messages into the root; pipeline: a chain of p - 1 hops
        return p - 1, p - 1
    if alg == 2:  # chain, fanout 4: 4 children into the root, each a chain of the rest
        fan = min(p - 1, 4)
        return fan + math.ceil((p - 1) / fan) - 1, fan + math.ceil((p - 1) / fan) - 1
    if alg in (4, 6):  # (in-order) binary tree: two children per level
        depth = lg(p + 1) - 1
        return 2 * depth, 2 * depth
    if alg == 7:  # Rabenseifner: a reduce-scatter, then a gather to the root
        return 2 * lg(p), 2 * frac(p)
    return lg(p), lg(p)  # binomial


def _reduce_scatter(alg: int, p: int, nbytes: float = 0.0) -> tuple[float, float]:
    q, lq, fold = _pof2(p)
    if alg == 1:  # a reduce of all of S to rank 0 (by reduce's own rules), a linear scatter
        a, b = _reduce(chosen("reduce", p, nbytes) or 5, p)
        return a + 1, b + frac(p)
    if alg == 2:  # recursive doubling
        return lg(p), frac(p)
    # 3 recursive halving, 4 butterfly: on a power of two lg p rounds halving the vector;
    # else the extra ranks first fold all of S into a partner and get their block at the end
    return lq + 2 * fold, frac(q) + fold * (1 + 1 / p)


ALGORITHMS: dict[str, Callable[[int, int], tuple[float, float]]] = {
    "allreduce": _allreduce,
    "allgather": _allgather,
    "alltoall": _alltoall,
    "alltoallv": _alltoall,
    "reduce": _reduce,
}
NAMES = {
    "allreduce": {1: "basic linear", 2: "nonoverlapping", 3: "recursive doubling", 4: "ring",
                  5: "segmented ring", 6: "rabenseifner"},
    "allgather": {1: "linear", 2: "bruck", 3: "recursive doubling", 4: "ring", 5: "neighbor",
                  6: "two proc"},
    "alltoall": {1: "linear", 2: "pairwise", 3: "modified bruck", 4: "linear sync",
                 5: "two proc"},
    "reduce_scatter": {1: "basic linear", 2: "recursive doubling", 3: "recursive halving",
                       4: "butterfly"},
    "reduce": {1: "linear", 2: "chain", 3: "pipeline", 4: "binary", 5: "binomial",
               6: "in-order binary", 7: "rabenseifner"},
}  # fmt: skip
NAMES["alltoallv"] = NAMES["alltoall"]


def chosen(op: str, p: int, nbytes: float) -> int | None:
    """Open MPI's algorithm number for op of S = nbytes on p ranks, None for ops not covered."""
    rules = RULES.get(op)
    if rules is None or p < 2:
        return None
    total = nbytes if op in ("allreduce", "reduce") else nbytes / p
    row = next(r for below, r in rules if below is None or p < below)
    return next(alg for below, alg in row if below is None or total < below)


def algorithm_name(op: str, p: int, nbytes: float) -> str | None:
    alg = chosen(op, p, nbytes)
    return None if alg is None else NAMES[op][alg]


def switched(
    op: str, q: int, p: int, nbytes: float, lo: float, hi: float, library: str = OPENMPI
) -> str | None:
    """Why a series of q ranks cannot be scaled to p at S = nbytes by a ratio of this model: p
    runs another algorithm there, or the series' segment holding S (sizes lo..hi) spans an
    algorithm switch of q's (its line mixes two algorithms); None when neither. NCCL's choice
    depends on the nodes and the link's own terms: `nccl_ratio` makes it, never this."""
    if library == NCCL:
        return None
    at_q = {algorithm_name(op, q, x) for x in (lo, nbytes, hi)}
    at_p = algorithm_name(op, p, nbytes)
    if len(at_q) > 1:
        return f"group size {q} switches algorithm ({', '.join(sorted(map(str, at_q)))}) there"
    if at_p not in at_q:
        return f"group size {p} runs {at_p} there, {q} ran {at_q.pop()}"
    return None


def library_coefficients(library: str, op: str, p: int, nbytes: float) -> tuple[float, float]:
    """(A, B) of op on p ranks at S = nbytes under the algorithm `library` picks there."""
    assert library in LIBRARIES, library
    if p <= 1:
        return 0.0, 0.0
    if library == NCCL:  # on one link NCCL's tree never beats its ring (same steps, more bytes)
        ring = nccl_steps(op, "ring", p, 1)
        return OPS[op].cost(FALLBACK.get(op, "ring"), p) if ring is None else (ring[0], ring[2])
    alg = chosen(op, p, nbytes)
    if alg is None:
        return OPS[op].cost(FALLBACK.get(op, "ring"), p)
    if op == "reduce_scatter":  # its basic linear runs a reduce of S, chosen by S
        return _reduce_scatter(alg, p, nbytes)
    return ALGORITHMS[op](alg, p)


def library_of(backend: str, libraries: dict | None) -> str | None:
    """The library model for a run's backend from its meta.json `libraries`: NCCL's for nccl
    runs (measured or imported nccl-tests logs), Open MPI's rules for the mpi backend when the
    MPI library says Open MPI; None otherwise (no rules known)."""
    if backend == "nccl":
        return NCCL
    if backend != "mpi":
        return None
    mpi = str((libraries or {}).get("mpi") or "")
    return OPENMPI if mpi.startswith("Open MPI") else None
