"""The library's own algorithm choice (calibration/algorithms.py): Open MPI 5.0's coll/tuned
fixed rules, each algorithm's rounds and bytes, and a 2-rank fit that transfers to 3 ranks.

The synthetic link: alpha 20 us per round, 50 MB/s (400 Mbit/s, the emulated nodes' rate).
Times follow the steps of Open MPI's coll_base_allreduce.c and coll_base_reduce_scatter_block.c
as written out by hand in each test, not the module's own coefficients."""

from __future__ import annotations

import pytest
from fit_samples import collective_records, write_run

from commbench import calibration
from commbench.calibration.algorithms import (
    OPENMPI,
    algorithm_name,
    chosen,
    library_coefficients,
    library_of,
)
from commbench.fit import calibrate
from commbench.fit.collect import collect, read_fit_runs
from commbench.fit.options import FitOptions

ALPHA, BETA = 20e-6, 1 / 50e6
OMPI = {"libraries": {"mpi": "Open MPI v5.0.11, package: Open MPI ..."}}
SIZES = tuple(1024 << k for k in range(13))  # 1 KiB .. 4 MiB, factor 2


@pytest.mark.parametrize(
    ("op", "p", "nbytes", "alg"),
    [
        ("allreduce", 2, 65535, 4),  # p < 4: ring below 64 KiB
        ("allreduce", 2, 65536, 5),  # segmented ring below 256 KiB
        ("allreduce", 3, 262143, 5),
        ("allreduce", 3, 262144, 6),  # then Rabenseifner
        ("allreduce", 4, 8192, 6),  # p < 8, 8 KiB and up: Rabenseifner
        ("allreduce", 4, 8191, 3),  # recursive doubling below
        ("allgather", 2, 1 << 20, 6),  # two procs
        ("allgather", 3, 1 << 20, 3),  # recursive doubling (Bruck on 3)
        ("allgather", 40, 40 * 65536, 4),  # 32..63 ranks, blocks of 64 KiB and up: ring
        ("alltoall", 4, 4 * 65536, 1),  # blocks of 64 KiB .. 512 KiB: linear
        ("alltoall", 4, 4 * 524288, 2),  # pairwise
        ("reduce_scatter", 2, 262140, 4),  # blocks below 128 KiB: butterfly
        ("reduce_scatter", 2, 262144, 1),  # basic linear (reduce, then scatter)
        ("reduce_scatter", 4, 4 * 1048575, 3),  # recursive halving
    ],
)
def test_rules_are_open_mpi_5_fixed_decisions(op, p, nbytes, alg):
    """coll_tuned_decision_fixed.c: allreduce compares S, the others one rank's block S / p."""
    assert chosen(op, p, nbytes) == alg


def test_broadcast_is_not_covered():
    assert chosen("broadcast", 4, 1 << 20) is None
    assert library_coefficients(OPENMPI, "broadcast", 4, 1 << 20) == (2.0, 2.0)  # binomial


@pytest.mark.parametrize(
    ("p", "want"),
    [(2, (2.0, 1.0)), (4, (4.0, 1.5)), (3, (5.0, 3.0)), (6, (7.0, 3.5)), (8, (6.0, 1.75))],
)
def test_rabenseifner_folds_the_extra_ranks(p, want):
    """Rabenseifner on p ranks, q the power of two below: 2 lg q rounds moving 2 (q-1)/q S,
    plus on p != q the fold (a half exchange and a half send: S) and the full result sent back
    to the folded rank (S), 3 rounds."""
    assert library_coefficients(OPENMPI, "allreduce", p, 1 << 20) == pytest.approx(want)


def test_library_from_the_run_meta():
    assert library_of("mpi", OMPI["libraries"]) == OPENMPI
    assert library_of("mpi", {"mpi": "MPICH Version: 4.2.0"}) is None
    assert library_of("gloo", OMPI["libraries"]) is None
    assert library_of("mpi", None) is None


def allreduce_truth(p: int, s: float) -> float:
    """Open MPI's allreduce on p in {2, 3} ranks: recursive doubling (lg p rounds of S) at
    4..8 KiB and 1..4 KiB (here from 1 KiB), else below 256 KiB the (segmented) ring, 2(p-1)
    rounds of S/p each way; from 256 KiB Rabenseifner, on 3 ranks with the fold."""
    if p == 2 and (s < 4096 or 8192 <= s < 16384):
        return ALPHA + BETA * s
    if s < 262144:
        return ALPHA * 2 * (p - 1) + BETA * 2 * (p - 1) / p * s
    if p == 2:
        return ALPHA * 2 + BETA * s  # a reduce-scatter and an all-gather of S/2
    return ALPHA * 5 + BETA * (s / 2 + s / 2 + s / 2 + s / 2 + s)  # fold, 2 ranks, send back


def fitted(tmp_path, op, truth, meta):
    recs = collective_records(op, 2, 0, 0, link="inter", sizes=SIZES, time_of=truth)
    recs = [{**r, "hosts_spanned": 2} for r in recs]
    doc, _, _ = calibrate.build(
        collect(read_fit_runs([write_run(tmp_path, "r", recs, meta=meta)])),
        FitOptions(bootstrap=0),
    )
    path = tmp_path / "cal.json"
    calibration.save(doc, path)
    return doc, calibration.load(path)


@pytest.mark.parametrize("nbytes", [64 << 10, 1 << 20, 4 << 20])
def test_two_ranks_predict_three_under_the_library(tmp_path, nbytes):
    """Fitted on 2 ranks of an Open MPI run, 3-rank all-reduce is within 3% at 64 KiB (ring)
    and at 1 and 4 MiB (Rabenseifner's fold: 3 S on the critical path, 3x the 2-rank time);
    without the library (the old form: a fixed model) the large sizes miss by over 40%."""
    doc, cal = fitted(tmp_path, "allreduce", lambda s: allreduce_truth(2, s), OMPI)
    assert doc["link_table"][0]["library"]["name"] == OPENMPI
    want = allreduce_truth(3, nbytes)
    got = cal.explain("allreduce", nbytes, 3, "inter", extrapolate=True)
    assert got.model == OPENMPI
    assert got.seconds == pytest.approx(want, rel=0.03)
    old, cal_old = fitted(tmp_path / "old", "allreduce", lambda s: allreduce_truth(2, s), {})
    assert "library" not in old["link_table"][0]
    flat = cal_old.explain("allreduce", nbytes, 3, "inter", extrapolate=True)
    if nbytes >= 262144:
        assert abs(flat.seconds / want - 1) > 0.4


def reduce_scatter_truth(p: int, s: float) -> float:
    """Reduce_scatter_block on 2 ranks: butterfly below blocks of 128 KiB (one exchange of S/2),
    basic linear from there (a reduce of S to rank 0, then a scatter of S/2)."""
    assert p == 2
    if s / 2 < 131072:
        return ALPHA + BETA * s / 2
    return ALPHA * 2 + BETA * (s + s / 2)


def test_a_switch_between_the_sizes_is_priced_by_the_model(tmp_path):
    """3 ranks at S = 3 x 87380 run the butterfly with the fold while the 2-rank series' segment
    there measured basic linear: scaling that time by a ratio of models at S mixes the two
    (2.6x too slow before); the model prices the 3 ranks' algorithm itself."""
    _, cal = fitted(tmp_path, "reduce_scatter", lambda s: reduce_scatter_truth(2, s), OMPI)
    nbytes = 3 * 87380
    assert algorithm_name("reduce_scatter", 3, nbytes) == "butterfly"
    # fold all of S into a partner, halve the vector between 2, hand the folded rank its block
    want = ALPHA * 3 + BETA * (nbytes + nbytes / 2 + nbytes / 3)
    got = cal.explain("reduce_scatter", nbytes, 3, "inter", extrapolate=True)
    assert "runs butterfly there" in got.method or "switches algorithm" in got.method
    assert got.seconds == pytest.approx(want, rel=0.05)


def test_an_op_the_library_does_not_explain_keeps_the_fixed_model(tmp_path):
    """A reduce_scatter with no jump where Open MPI switches to reduce + scatter (3x the link
    bytes of the butterfly), as on shared memory: the library fits it worse than the fixed
    models, so it does not price it and predict scales by the best fixed model."""
    doc, cal = fitted(tmp_path, "reduce_scatter", lambda s: ALPHA + BETA * s / 2, OMPI)
    lib = doc["link_table"][0]["library"]
    best = doc["link_table"][0]["models"][doc["link_table"][0]["best_model"]]
    assert lib["per_op_median_rel_err"]["reduce_scatter"] > 1.25 * best["median_rel_err"] + 0.02
    assert "reduce_scatter" not in lib["priced_ops"]
    got = cal.explain("reduce_scatter", 1 << 20, 4, "inter", extrapolate=True)
    assert got.model == doc["link_table"][0]["best_model"]


def test_runs_that_disagree_on_the_library_get_none(tmp_path):
    """Two mpi runs, one on Open MPI and one on MPICH, fitted together: no library model (the
    rules of one would price the other's times)."""
    recs = collective_records("allreduce", 2, ALPHA, BETA, link="inter", sizes=SIZES)
    runs = [
        write_run(tmp_path, "ompi", recs, meta=OMPI),
        write_run(tmp_path, "mpich", recs, meta={"libraries": {"mpi": "MPICH Version: 4.2"}}),
    ]
    assert calibrate.run_libraries(collect(read_fit_runs(runs[:1]))) == {"mpi": OPENMPI}
    assert calibrate.run_libraries(collect(read_fit_runs(runs))) == {}


@pytest.mark.parametrize(
    ("p", "want"),
    [(4, (4.0, 3.75)), (3, (3.0, 2 + 2 / 3)), (2, (2.0, 1.5))],
)
def test_reduce_scatter_basic_linear_runs_the_reduce_its_rules_pick(p, want):
    """Reduce_scatter_block's basic linear at 4 MiB is MPI_Reduce of S to rank 0, then a
    scatter of (p-1)/p S. Tuned's reduce rules at 4 MiB: 4 ranks linear (3 S into the root),
    3 ranks pipeline unsegmented (2 hops of S), 2 ranks one message."""
    assert chosen("reduce_scatter", p, 4 << 20) == 1
    assert library_coefficients(OPENMPI, "reduce_scatter", p, 4 << 20) == pytest.approx(want)


def test_the_library_prices_an_op_only_where_it_fits_as_well_from_64k_up_too():
    """The 2-rank reduce_scatter of a sweep here: the library as good as the ring over all
    sizes (small sizes dominate the count) but 12.8% from 64 KiB against the ring's 3.6%."""
    from commbench.fit.linkentry import LinkEntry, ModelFit

    def fit(all_sizes: dict[str, float], large: dict[str, float]) -> ModelFit:
        return ModelFit(alpha_s=1e-6, beta_s_per_byte=1e-10, points=40, outliers=0,
                        below_latency=0, median_rel_err=0.05, max_rel_err=0.2, r2_log=0.99,
                        shared_median_rel_err=0.1, per_op_median_rel_err=all_sizes,
                        per_op_large_median_rel_err=large)  # fmt: skip

    ring = fit(
        {"reduce_scatter": 0.05, "allreduce": 0.04}, {"reduce_scatter": 0.036, "allreduce": 0.02}
    )
    lib = fit(
        {"reduce_scatter": 0.05, "allreduce": 0.04}, {"reduce_scatter": 0.128, "allreduce": 0.022}
    )
    entry = LinkEntry(backend="mpi", link_class="intra", timing="per-iteration", group_sizes=[2],
                      ops=["allreduce", "reduce_scatter"], points=40, best_model="ring", ties=[],
                      models={"ring": ring}, library="openmpi-tuned", library_fit=lib)  # fmt: skip
    assert entry.library_ops() == ["allreduce"]
