"""A group as nodes x ranks per node (calibration/hierarchy.py): measured on 1 node x 8 and 2
nodes x 8, predicted on 8 nodes x 8. Synthetic ring all-reduce times whose latency steps split
as NCCL's tuning model splits them (intra steps at 2 us, inter steps at 20 us; bytes at the
inter link's rate)."""

from __future__ import annotations

import pytest
from fit_samples import collective_records, write_run

from commbench import calibration
from commbench.calibration.costmodels import coefficients
from commbench.calibration.hierarchy import chunk_ratio
from commbench.calibration.lines import Line, SeriesModel
from commbench.calibration.series_key import SeriesKey
from commbench.fit import calibrate
from commbench.fit.collect import collect, read_fit_runs
from commbench.fit.options import FitOptions

A_INTRA, A_INTER = 2e-6, 20e-6
B_INTRA, B_INTER = 1 / 200e9, 1 / 40e9


def truth(p: int, nodes: int, s: float) -> float:
    a, b = coefficients("ring", "allreduce", p)
    inter = coefficients("ring", "allreduce", nodes)[0] if nodes > 1 else 0.0
    beta = B_INTER if nodes > 1 else B_INTRA
    return A_INTRA * (a - inter) + A_INTER * inter + beta * b * s


@pytest.fixture(scope="module")
def cal(tmp_path_factory):
    root = tmp_path_factory.mktemp("hier")
    recs = []
    for p, nodes in ((8, 1), (16, 2)):
        link = "intra" if nodes == 1 else "inter"
        for r in collective_records(
            "allreduce", p, 0, 0, link=link, time_of=lambda s, p=p, n=nodes: truth(p, n, s)
        ):
            recs.append({**r, "hosts_spanned": nodes})
    doc, _, _ = calibrate.build(
        collect(read_fit_runs([write_run(root, "r", recs)])), FitOptions(bootstrap=0)
    )
    path = root / "cal.json"
    calibration.save(doc, path)
    return calibration.load(path)


@pytest.mark.parametrize("nbytes", [8 << 10, 64 << 20])
def test_eight_nodes_from_two_with_steps_apart(cal, nbytes):
    """Given the nodes, 8 x 8 is within 2% of the truth at 8 KiB (latency-bound) and 64 MiB;
    scaling by p alone (nodes unknown) counts every step as inter and misses small sizes by
    more than 15% (too fast)."""
    want = truth(64, 8, nbytes)
    got = cal.explain("allreduce", nbytes, 64, "inter", extrapolate=True, nodes=8)
    assert "intra- and inter-node steps apart" in got.method
    assert got.seconds == pytest.approx(want, rel=0.02)
    flat = cal.explain("allreduce", nbytes, 64, "inter", extrapolate=True)
    assert "intra- and inter-node" not in flat.method
    if nbytes == 8 << 10:
        assert flat.seconds < 0.85 * want


def test_measured_shape_is_reproduced(cal):
    """At the shape it was measured (2 x 8) the split changes nothing: the series itself."""
    got = cal.explain("allreduce", 1 << 20, 16, "inter", nodes=2)
    assert got.method == "measured segment"
    assert got.seconds == pytest.approx(truth(16, 2, 1 << 20), rel=1e-3)


def _series(op: str, p: int, nodes: int, time_of) -> SeriesModel:
    """A measured series of op on p ranks over `nodes` nodes, knots at 1 KiB .. 1 GiB."""
    sizes = [1 << k for k in range(10, 31)]
    line = Line(sizes[0], sizes[-1], 0.0, 1 / 30e9)
    key = SeriesKey("nccl", op, "inter", p, "float32")
    return SeriesModel(key, sizes[0], sizes[-1], (line,), ((nodes, p // nodes),),
                       tuple((s, time_of(s)) for s in sizes))  # fmt: skip


def _step(chunk: float) -> float:
    """A per-step cost no alpha-beta line follows: a latency floor, a protocol switch at
    64 KiB (a slower rate below it), the wire rate above."""
    return max(20e-6, chunk / (5e9 if chunk < 64 << 10 else 25e9))


@pytest.mark.parametrize(("op", "peers"), [("allgather", lambda p, g: p - 1),
                                           ("alltoall", lambda p, g: p - g)])  # fmt: skip
def test_ring_and_alltoall_scale_at_the_same_per_peer_chunk(op, peers):
    """8 nodes x 4 -> 256 x 4: each step's cost is read where the measured series had the
    same chunk S / p, and the steps on the NICs scale as p - 1 (ring) or p - g (all-to-all):
    exact on times that are a function of the chunk, where no fitted line is."""
    g = 4
    s = _series(op, 32, 8, lambda S: peers(32, g) * _step(S / 32))
    for nbytes in (1 << 20, 16 << 20, 1 << 30):
        ratio, method = chunk_ratio(s, op, (32, 8), (1024, 256), nbytes)
        want = peers(1024, g) * _step(nbytes / 1024)
        assert s.at(nbytes) * ratio == pytest.approx(want, rel=1e-6)
        assert "same per-peer chunk" in method


def test_chunk_rule_at_one_shape_of_ring_steps():
    """A ring all-reduce's 2 (p - 1) steps scale as p - 1 at the chunk (to_nodes takes it only
    where NCCL's model runs the ring at the target). Another GPUs-per-node shape, one node at
    either end, or an op with no ring steps (send/recv): not chunked."""
    s = _series("allgather", 32, 8, lambda S: 31 * _step(S / 32))
    ar = _series("allreduce", 32, 8, lambda S: 62 * _step(S / 32))
    got = chunk_ratio(ar, "allreduce", (32, 8), (1024, 256), 64 << 20)
    assert got is not None
    assert ar.at(64 << 20) * got[0] == pytest.approx(2046 * _step((64 << 20) / 1024), rel=1e-6)
    pairs = _series("sendrecv", 32, 8, lambda S: _step(S))
    assert chunk_ratio(pairs, "sendrecv", (32, 8), (1024, 256), 1 << 20) is None
    assert chunk_ratio(s, "allgather", (32, 8), (2048, 256), 1 << 20) is None  # 8 per node
    assert chunk_ratio(s, "allgather", (32, 8), (4, 1), 1 << 20) is None
    assert chunk_ratio(s, "allgather", (4, 1), (32, 8), 1 << 20) is None


def test_the_planners_pricer_scales_by_the_hosts_a_group_spans(cal):
    """Evaluator.price with the hosts one group spans takes the node path (intra- and
    inter-node steps apart) and carries its band; without them, group size alone; an intra
    group ignores them."""
    from commbench.calibration.pricing import Evaluator

    ev = Evaluator(cal, extrapolate=True)
    spans = ev.price("allreduce", 8 << 10, 64, "inter", "float32", nodes=8)
    flat = ev.price("allreduce", 8 << 10, 64, "inter", "float32")
    assert "intra- and inter-node steps apart" in spans.method and spans.band is not None
    assert spans.seconds == pytest.approx(truth(64, 8, 8 << 10), rel=0.02)
    assert flat.band is None and flat.seconds != spans.seconds
    lo, hi = spans.band
    assert spans.seconds is not None and lo < spans.seconds < hi
    intra = ev.price("allreduce", 8 << 10, 8, "intra", "float32", nodes=8)
    assert intra == ev.price("allreduce", 8 << 10, 8, "intra", "float32")
