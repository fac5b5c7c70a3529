"""NCCL's own cost model (src/graph/tuning.cc): per (algorithm, protocol) time = latency +
S / bandwidth, the fastest taken; its ring and tree as steps inside and between nodes and a
byte factor, so a series measured at one (ranks, nodes) shape is priced at another."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from commbench.ops.spec import frac

# NCCL (src/graph/tuning.cc): time = latency + S / bandwidth per (algorithm, protocol), the
# fastest taken. Latency counts steps inside a node and between nodes apart: a ring all-reduce
# makes 2(p-1) steps of which 2(N-1) cross nodes; the tree 2((ppn-1) intra + log2(N) inter).
# The tree moves S up and S down at 0.92 of the ring's bus bandwidth (busBw * .92, ratio .5).
# Protocols (LL, LL128, Simple) are the series' own size regimes here, not modelled apart.
NCCL_ALGORITHMS = ("ring", "tree")
TREE_BW = 0.92
# NCCL's per-step latency of an NVLink hop over a network hop, Simple protocol (tuning.cc
# hwLat[NVLINK] / hwLat[NET], us): what an intra-node step costs against an inter-node one
# where the calibration measured no intra link. NCCL changed it across releases; by the first
# release of each setting (the tags of NVIDIA/nccl), the last the newest's:
NVLINK_PER_NET_BY_RELEASE: tuple[tuple[tuple[int, ...], dict[str, float]], ...] = (
    ((2, 5, 0), {"ring": 5.7 / 6.6, "tree": 28.0 / 50.0}),
    ((2, 7, 0), {"ring": 3.4 / 9.6, "tree": 28.0 / 50.0}),
    ((2, 8, 3), {"ring": 3.4 / 9.6, "tree": 28.0 / 28.0}),
    ((2, 12, 7), {"ring": 3.4 / 28.0, "tree": 28.0 / 28.0}),
    ((2, 14, 0), {"ring": 3.4 / 9.6, "tree": 28.0 / 28.0}),
    ((2, 18, 1), {"ring": 3.4 / 14.0, "tree": 28.0 / 28.0}),
    ((2, 18, 3), {"ring": 3.4 / 14.0, "tree": 4.0 / 14.0}),
    ((2, 19, 0), {"ring": 3.4 / 14.0, "tree": 28.0 / 28.0}),
    ((2, 23, 0), {"ring": 3.4 / 14.0, "tree": 4.0 / 14.0}),
)
NVLINK_PER_NET = NVLINK_PER_NET_BY_RELEASE[-1][1]


def nccl_release(version: str | None) -> tuple[int, ...] | None:
    """(major, minor, patch) of an NCCL version string ("2.21.5", "2.8.4-1", "2.18.3+cuda12.2"),
    None where it names no full release ("2.18.x")."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version or "")
    return None if m is None else tuple(map(int, m.groups()))


def nvlink_per_net(version: str | None) -> dict[str, float]:
    """NCCL's NVLink / network step latency in the release `version` names; the newest
    release's where it names none (nccl_release)."""
    release = nccl_release(version)
    if release is None:
        return NVLINK_PER_NET
    table = NVLINK_PER_NET_BY_RELEASE
    return next((r for first, r in reversed(table) if release >= first), table[0][1])


@dataclass(frozen=True)
class Tuner:
    """What NCCL's tuner chooses among, and whose constants price it: its algorithms (ring and
    tree, or the one a run's NCCL_ALGO pinned) and the release the runs name (None: the
    newest's)."""

    algorithms: tuple[str, ...] = NCCL_ALGORITHMS
    release: str | None = None

    @classmethod
    def of(cls, algorithms: tuple[str, ...], version: str | None) -> Tuner:
        """The tuner of the release `version` names; the newest's where it names no full
        release (nccl_release)."""
        return cls(algorithms, version if nccl_release(version) else None)

    @property
    def per_net(self) -> dict[str, float]:
        return nvlink_per_net(self.release)

    def constants(self) -> str:
        """Whose constants, as a method says it."""
        return f"NCCL {self.release}'s" if self.release else "NCCL's newest release's"


NCCL_CHOICE = Tuner()


# NCCL's treeCorrectionFactor, Simple row (src/graph/tuning.cc, the same from 2.8 to 2.30:
# "trees are not perfectly sticking to the model for medium sizes"): the tree's bandwidth x
# this at S = 64 B x 2^k, k = log2(S / 64), for k < 23 (64 B to 256 MiB); 1 from 512 MiB (the
# 24th entry of 2.29+ serves NVLS_TREE only). NCCL's tuner applies it before choosing, so from
# 64 KiB to 256 MiB it runs the ring at node counts where the uncorrected model would pick the
# tree (ABCI V100 at 16 and 32 nodes: the ring's times), and the tree again from 512 MiB
# (Polaris at 256 nodes). Simple: the protocol that carries the bytes across nodes; the
# series' small-size segments are the LL/LL128 regimes, where latency rules.
TREE_CORRECTION = (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5,
                   .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9)  # fmt: skip


def tree_correction(nbytes: float) -> float:
    """NCCL's correction of the tree's bandwidth at S bytes (TREE_CORRECTION)."""
    k = int(math.log2(max(nbytes, 64) / 64))
    return TREE_CORRECTION[k] if k < len(TREE_CORRECTION) else 1.0


NCCL_RING = {  # op -> (steps(p), byte factor(p)) of NCCL's ring; inter steps follow from nodes
    "allreduce": (lambda p: 2 * (p - 1), lambda p: 2 * frac(p)),
    "allgather": (lambda p: p - 1, frac),
    "reduce_scatter": (lambda p: p - 1, frac),
    "broadcast": (lambda p: p - 1, lambda p: 1.0),  # a chain, pipelined
    "reduce": (lambda p: p - 1, lambda p: 1.0),
}


def _nccl_alltoall(p: int, nodes: int) -> tuple[float, float, float]:
    """NCCL's all-to-all (grouped send/recv to every peer, all posted at once: nccl-tests
    alltoall.cu): g - 1 peers inside the node, p - g across it (g = p / nodes ranks per node).
    Its bytes are bound by the NIC: of S, (p - g) / p leave the node, so B is that share where
    the group spans nodes (per-NIC bytes; NVLink moves the rest faster), (p - 1) / p on one."""
    g = p // nodes
    if nodes == 1:
        return float(p - 1), 0.0, frac(p)
    return float(g - 1), float(p - g), (p - g) / p


def _nccl_sendrecv(p: int, nodes: int) -> tuple[float, float, float]:
    """nccl-tests sendrecv: every rank sends S to rank + 1 at once; one step, across a node
    boundary when the group spans nodes (the slowest pair sets the time), B = 1."""
    return (1.0, 0.0, 1.0) if nodes == 1 else (0.0, 1.0, 1.0)


NCCL_P2P = {"alltoall": _nccl_alltoall, "alltoallv": _nccl_alltoall, "sendrecv": _nccl_sendrecv}


def nccl_steps(
    op: str, alg: str, p: int, nodes: int, nbytes: float | None = None
) -> tuple[float, float, float] | None:
    """(intra-node steps, inter-node steps, byte factor B) of NCCL's `alg` for op on p ranks
    over `nodes` nodes (p / nodes per node); None where NCCL has no such algorithm. The tree's
    B at S = nbytes carries NCCL's correction (tree_correction), none where S is not given."""
    assert alg in NCCL_ALGORITHMS and 1 <= nodes <= max(p, 1), (alg, p, nodes)
    if p <= 1:
        return 0.0, 0.0, 0.0
    if alg == "tree":
        if op != "allreduce":
            return None
        inter = 2.0 * math.floor(math.log2(nodes))  # NCCL's log2i
        correction = 1.0 if nbytes is None else tree_correction(nbytes)
        return 2.0 * (p // nodes - 1), inter, 2.0 / TREE_BW / correction
    if op in NCCL_P2P:
        return NCCL_P2P[op](p, nodes)
    if op not in NCCL_RING:
        return None
    steps, factor = NCCL_RING[op]
    inter = 0.0 if nodes == 1 else float(2 * (nodes - 1) if op == "allreduce" else nodes - 1)
    return steps(p) - inter, inter, factor(p)


def nccl_time(
    op: str,
    p: int,
    nodes: int,
    nbytes: float,
    inter: float,
    intra: float | None,
    beta: float,
    tuner: Tuner = NCCL_CHOICE,
) -> tuple[float, str]:
    """(seconds, algorithm) of the fastest of the tuner's algorithms with an inter-node step
    of `inter` s, an intra-node one of `intra` (None: inter x its release's NVLink / network
    ratio) and beta s/byte."""
    best: tuple[float, str] | None = None
    for alg in tuner.algorithms:
        steps = nccl_steps(op, alg, p, nodes, nbytes)
        if steps is None:
            continue
        n_intra, n_inter, b = steps
        hop = tuner.per_net[alg] * inter if intra is None else intra
        t = hop * n_intra + inter * n_inter + beta * b * nbytes
        best = (t, alg) if best is None or t < best[0] else best
    assert best is not None, f"NCCL has no algorithm model for {op}"
    return best


def nccl_inter_latency(
    op: str,
    shape: tuple[int, int],
    nbytes: float,
    seconds: float,
    intra: float | None,
    beta: float,
    tuner: Tuner = NCCL_CHOICE,
) -> float:
    """The inter-node step latency under which the fastest of the tuner's algorithms (nccl_time)
    takes `seconds` at `shape` (ranks, nodes): each algorithm's own solution, the largest (the
    envelope rises with it, so it crosses `seconds` where the last algorithm does), at least 0."""
    p, nodes = shape
    out = 0.0
    for alg in tuner.algorithms:
        steps = nccl_steps(op, alg, p, nodes, nbytes)
        if steps is None:
            continue
        n_intra, n_inter, b = steps
        rest = seconds - beta * b * nbytes - (0.0 if intra is None else intra * n_intra)
        per = n_inter + (tuner.per_net[alg] * n_intra if intra is None else 0.0)
        if per > 0:
            out = max(out, rest / per)
    return out
