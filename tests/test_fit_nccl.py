"""NCCL's ring/tree choice as a library model (calibration/nccl_model.py, hierarchy.nccl_ratio)
against NCCL's tuning formulas written out by hand (src/graph/tuning.cc: ring latency
(nsteps - nInterSteps) x intra + nInterSteps x inter, nInterSteps = 2 (nNodes - 1) for an
all-reduce; tree 2 ((ppn - 1) x intra + log2i(nNodes) x inter), S up and down at 0.92 of the
ring's bus bandwidth), and the stored real nccl-tests pair (bench/transfer_nccl_log.py): one
cluster's 4-node log fitted, its 8-node log predicted."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from commbench.calibration.algorithms import NCCL, library_coefficients, library_of
from commbench.calibration.nccl_model import (
    NVLINK_PER_NET,
    Tuner,
    nccl_inter_latency,
    nccl_steps,
    nccl_time,
    nvlink_per_net,
    tree_correction,
)

from conftest import REPO


@pytest.mark.parametrize(("p", "nodes"), [(16, 2), (32, 4), (64, 8), (24, 3), (8, 1)])
def test_ring_and_tree_steps_are_nccls(p, nodes):
    ppn = p // nodes
    inter = 2 * (nodes - 1)
    assert nccl_steps("allreduce", "ring", p, nodes) == (
        2 * (p - 1) - inter,
        inter,
        2 * (p - 1) / p,
    )
    log2i = int(math.log2(nodes))  # NCCL's log2i rounds down: 3 nodes make 1 tree level
    assert nccl_steps("allreduce", "tree", p, nodes) == (2 * (ppn - 1), 2 * log2i, 2 / 0.92)
    for op in ("allgather", "reduce_scatter"):
        assert nccl_steps(op, "ring", p, nodes) == (p - 1 - (nodes - 1), nodes - 1, (p - 1) / p)
        assert nccl_steps(op, "tree", p, nodes) is None  # NCCL has no tree for them
    # all-to-all: every peer at once; the NIC carries the (p - ppn) / p of S bound off-node
    off = (p - ppn) / p if nodes > 1 else (p - 1) / p
    intra = ppn - 1 if nodes > 1 else p - 1
    assert nccl_steps("alltoall", "ring", p, nodes) == (intra, p - ppn, off)
    assert nccl_steps("alltoall", "tree", p, nodes) is None
    assert nccl_steps("sendrecv", "ring", p, nodes) == ((0, 1, 1) if nodes > 1 else (1, 0, 1))


def test_faster_algorithm_is_taken():
    """8 nodes x 8, inter step 10 us, NVLink 1 us, 40 GB/s: the tree's 6 inter steps beat the
    ring's 14 at 1 MiB even at half its bandwidth there (NCCL's correction), the ring's
    2 x 63/64 bytes beat the tree's 2 / 0.92 at 1 GiB."""
    inter, intra, beta = 10e-6, 1e-6, 1 / 40e9
    ring_small = 112 * intra + 14 * inter + beta * 2 * 63 / 64 * (1 << 20)
    tree_small = 14 * intra + 6 * inter + beta * 2 / 0.92 / 0.5 * (1 << 20)
    assert tree_small < ring_small
    assert nccl_time("allreduce", 64, 8, 1 << 20, inter, intra, beta) == pytest.approx(
        (tree_small, "tree")
    )
    t, alg = nccl_time("allreduce", 64, 8, 1 << 30, inter, intra, beta)
    assert alg == "ring" and t == pytest.approx(
        112 * intra + 14 * inter + beta * 2 * 63 / 64 * 2**30
    )
    # without an intra link, an NVLink hop costs NCCL's default 3.4/14 (ring), 4.0/14 (tree)
    t, alg = nccl_time("allreduce", 64, 8, 1 << 20, inter, None, beta)
    assert alg == "tree"
    assert t == pytest.approx(14 * 4.0 / 14 * inter + 6 * inter + beta * 2 / 0.92 / 0.5 * (1 << 20))


@pytest.mark.parametrize(
    ("nbytes", "factor"),
    [(1 << 10, 0.9), (64 << 10, 0.6), (1 << 20, 0.5), (4 << 20, 0.7), (16 << 20, 0.7),
     (256 << 20, 0.9), (512 << 20, 1.0), (1 << 30, 1.0), (1 << 34, 1.0)],
)  # fmt: skip
def test_the_tree_s_bandwidth_carries_nccl_s_correction_at_medium_sizes(nbytes, factor):
    """NCCL's tuner prices the tree at its bandwidth x treeCorrectionFactor (Simple row) of
    log2(S / 64) below 23: 0.5 at 1 MiB, none from 512 MiB; the ring is not corrected."""
    assert tree_correction(nbytes) == factor
    assert nccl_steps("allreduce", "tree", 64, 8, nbytes) == pytest.approx(
        (14, 6, 2 / 0.92 / factor)
    )
    assert nccl_steps("allreduce", "ring", 64, 8, nbytes) == nccl_steps("allreduce", "ring", 64, 8)


@pytest.mark.parametrize(
    ("version", "ring", "tree"),
    [("2.8.4-1", 3.4 / 9.6, 1.0), ("2.12.12", 3.4 / 28, 1.0), ("2.18.3", 3.4 / 14, 4 / 14),
     ("2.21.5+cuda12.4", 3.4 / 14, 1.0), ("2.29.2", 3.4 / 14, 4 / 14),
     ("2.4.8", 5.7 / 6.6, 28 / 50), (None, 3.4 / 14, 4 / 14), ("2.18.x", 3.4 / 14, 4 / 14)],
)  # fmt: skip
def test_an_nvlink_step_costs_what_the_runs_nccl_release_says(version, ring, tree):
    """tuning.cc hwLat, Simple: NVLink over network per step, by release (a tree's NVLink step
    costs as much as its network one in 2.8-2.17 and 2.19-2.22, 4 / 14 in 2.18.3 and 2.23+);
    a run naming no release gets the newest's. An intra-node step is priced at it where no
    intra link was measured: 16 nodes x 4 GPUs, 6 intra steps of the tree."""
    per_net = nvlink_per_net(version)
    assert per_net == pytest.approx({"ring": ring, "tree": tree})
    inter, beta = 10e-6, 1 / 20e9
    tuner = Tuner.of(("tree",), version)
    assert tuner.per_net == per_net
    t, alg = nccl_time("allreduce", 64, 16, 4096, inter, None, beta, tuner)
    assert alg == "tree"
    bytes_s = beta * 4096 * 2 / 0.92 / tree_correction(4096)
    assert t == pytest.approx(6 * tree * inter + 8 * inter + bytes_s)
    step = nccl_inter_latency("allreduce", (64, 16), 4096, t, None, beta, tuner)
    assert step == pytest.approx(inter)
    assert nvlink_per_net(None) is NVLINK_PER_NET


def test_the_correction_makes_nccl_run_the_ring_where_the_bare_tree_would_win():
    """16 nodes x 4, inter step 20 us, 10 GB/s, 8 MiB: uncorrected, the tree's 8 inter steps
    (against the ring's 30) would win by 0.2 ms; at 0.8 of its bandwidth it loses."""
    inter, intra, beta, s = 20e-6, 2e-6, 1 / 10e9, 8 << 20
    ring = 2 * 63 - 30, 30, 2 * 63 / 64
    bare_tree = 24 * intra + 8 * inter + beta * 2 / 0.92 * s
    assert bare_tree < ring[0] * intra + ring[1] * inter + beta * ring[2] * s
    t, alg = nccl_time("allreduce", 64, 16, s, inter, intra, beta)
    assert alg == "ring"
    assert t == pytest.approx(ring[0] * intra + ring[1] * inter + beta * ring[2] * s)


def test_inter_latency_makes_the_envelope_take_the_measured_time():
    for nbytes in (1 << 20, 1 << 24, 1 << 30):
        want = 300e-6 + nbytes / 40e9
        step = nccl_inter_latency("allreduce", (32, 4), nbytes, want, None, 1 / 80e9)
        got, _ = nccl_time("allreduce", 32, 4, nbytes, step, None, 1 / 80e9)
        assert got == pytest.approx(want)


def test_one_link_coefficients_are_the_ring_and_nccl_runs_get_the_model():
    assert library_coefficients(NCCL, "allreduce", 16, 1 << 20) == (30.0, 2 * 15 / 16)
    assert library_coefficients(NCCL, "alltoall", 4, 1 << 20) == (3.0, 0.75)  # fixed ring
    assert library_of("nccl", {}) == NCCL
    assert library_of("gloo", {}) is None


def load_bench():
    spec = importlib.util.spec_from_file_location(
        "transfer_nccl_log", REPO / "bench" / "transfer_nccl_log.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["transfer_nccl_log"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_stored_log_pair_imports_fits_and_predicts(tmp_path):
    """The bench's pipeline on the stored 4-node and 8-node logs: every >= 64 KiB point of the
    8-node log predicted, finite, each saying it extrapolated to 8 nodes from the 4 measured,
    by NCCL's model (its ring's sizes at the same per-peer chunk); the median it prints is the median of those rows' errors."""
    bench = load_bench()
    small = bench.import_log("4x8", tmp_path)
    large = bench.import_log("8x8", tmp_path)
    cal = tmp_path / "cal.json"
    bench.commbench("fit", str(small), "-o", str(cal))
    rows = bench.validate(cal, large)
    assert len(rows) == 28  # 14 sizes x 2 placements, 1 MiB .. 8 GiB
    for r in rows:
        assert r["nodes"] == 8 and r["group_size"] == 64 and r["extrapolated"], r
        assert r["reach"]["nodes_measured"] == [4] and r["reach"]["group_size_from"] == 32, r
        assert any(x in r["method"] for x in ("NCCL's ring/tree model", "runs the ring there")), r
        assert math.isfinite(r["abs_error"]), r
    scored = bench.score(rows)["allreduce"]
    errs = sorted(r["abs_error"] for r in rows)
    assert scored["median"] == pytest.approx((errs[13] + errs[14]) / 2)
    assert scored["max"] == errs[-1]
