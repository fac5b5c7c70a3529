"""A group as nodes x ranks per node (calibration/hierarchy.py): measured on 1 node x 8 and 2
nodes x 8, predicted on 8 nodes x 8. Synthetic ring all-reduce times whose latency steps split
as NCCL's tuning model splits them (intra steps at 2 us, inter steps at 20 us; bytes at the
inter link's rate)."""

from __future__ import annotations

import pytest
from fit_samples import collective_records, write_run

from commbench import calibration
from commbench.calibration.costmodels import coefficients
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
