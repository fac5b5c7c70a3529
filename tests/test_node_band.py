"""NCCL's all-to-all and send/recv across node counts (per-NIC bytes) and the band of a
prediction beyond the measured node counts (calibration.band): pure logic."""

from __future__ import annotations

import math

import pytest

from commbench.calibration.band import FLOOR, PRIOR_BW, PRIOR_LAT, band_terms
from commbench.calibration.hierarchy import nccl_ratio
from commbench.calibration.lines import Line


def test_alltoall_bytes_scale_with_the_share_that_leaves_the_node():
    """At 1 GiB the time is the NIC's: from 2 x 4 ((8 - 4) / 8 = 1/2 of S off-node) to
    8 x 4 (28 / 32) the time grows by 1.75; latency steps add little there."""
    s = float(1 << 30)
    beta = 1 / 5e9  # 5 GB/s per NIC byte
    got = nccl_ratio(None, "alltoall", (8, 2), (32, 8), s, (beta * 0.5, (4, 40e-6)))
    assert got is not None
    assert got[0] == pytest.approx(1.75, rel=0.01)


def test_sendrecv_does_not_grow_with_nodes_past_two():
    s = float(1 << 30)
    got = nccl_ratio(None, "sendrecv", (16, 2), (80, 10), s, (0.02 / s, (4, 20e-6)))
    assert got is not None and got[0] == pytest.approx(1.0, rel=1e-3)


def node_band(*args, **kw) -> tuple[float, str]:
    """(w, why): band_terms' half-width under the default priors and its why."""
    terms, why = band_terms(*args, **kw)
    return terms.width(), why


def test_band_from_one_node_count_is_the_stated_prior_over_the_reach():
    w, why = node_band(1.0, 2, 8, [])
    assert w == pytest.approx(PRIOR_BW * 2)
    assert "prior" in why and "only 2 nodes measured" in why
    assert node_band(1.0, 2, 8, [], latency_share=1.0)[0] == pytest.approx(PRIOR_LAT * 2)
    assert node_band(1.0, 8, 8, [])[0] == FLOOR  # no reach: the floor


def test_band_from_two_counts_extends_their_disagreement_over_the_reach():
    """Scaled from 2 nodes the prediction at 256 is 1.3 s, from 8 it is 1.0 s: 30% over 2
    doublings, 15% a doubling, 5 doublings from 8 to 256: +-75%."""
    w, why = node_band(1.0, 8, 256, [(2, 1.3)])
    assert w == pytest.approx(max(0.15, PRIOR_BW) * math.log2(256 / 8))
    assert "2+8 nodes" in why and "30%" in why
    # nearer than the counts are apart: never below what they moved
    assert node_band(1.0, 8, 16, [(2, 1.3)])[0] == pytest.approx(0.3)


def test_export_notes_name_the_measured_node_counts_and_the_band():
    from commbench.calibration.band import export_notes

    doc = {
        "series": [
            {"link_class": "inter", "shapes": [{"nodes": 2, "ranks_per_node": 4}]},
            {"link_class": "inter", "shapes": [{"nodes": 8, "ranks_per_node": 4}]},
            {"link_class": "intra", "shapes": [{"nodes": 1, "ranks_per_node": 4}]},
        ]
    }
    (note,) = export_notes(doc)
    assert note.startswith("inter: measured at 2+8 nodes")
    assert f"band of +-{PRIOR_BW:.0%} per doubling" in note
    assert export_notes({"series": []}) == []


def test_plan_note_only_beyond_the_measured_hosts():
    from commbench.calibration.band import plan_note

    doc = {"series": [{"link_class": "inter", "shapes": [{"nodes": 2}, {"nodes": 8}]}]}
    assert plan_note(doc, "dp", "inter", 8) is None
    assert plan_note(doc, "tp", "intra", 64) is None  # nothing measured across nodes there
    note = plan_note(doc, "dp", "inter", 32)
    assert note is not None and "2.0 doublings beyond" in note
    assert f"band of +-{2 * PRIOR_BW:.0%} (calibration/band.py)" in note


def _series(p: int, nodes: int, beta: float):
    from commbench.calibration.lines import SeriesModel
    from commbench.calibration.series_key import SeriesKey

    key = SeriesKey("nccl", "allreduce", "inter", p, "float32", "pipelined")
    return SeriesModel(key, 4, 1 << 30, (Line(4, 1 << 30, 20e-6, beta),), ((nodes, p // nodes),))


def test_gpus_per_node_trend_of_the_bus_bandwidth():
    """10 x 1 and 10 x 2 measured, the per-rank bandwidth (B / beta) doubling with the GPUs
    per node (a NIC per GPU): 10 x 8 is read 4x the 10 x 2 one; a bandwidth that fell with
    the GPUs is held (slope clamped at 0); another node count or a measured shape: None."""
    from commbench.calibration.hierarchy import per_node_scale

    b1 = 1.0 / 50e9  # beta per byte of S at 10 x 1, B = 2 (p - 1) / p
    s1, s2 = _series(10, 10, b1 * 2 * 9 / 10), _series(20, 10, b1 / 2 * 2 * 19 / 20)
    scale, note = per_node_scale([s1, s2], s2, "allreduce", (80, 10), 1 << 30)
    assert scale == pytest.approx(4.0, rel=1e-6) and "1+2 measured on 10 nodes" in note
    slow = _series(20, 10, b1 * 2 * 2 * 19 / 20)  # half the bandwidth at 2 GPUs per node
    assert per_node_scale([s1, slow], slow, "allreduce", (80, 10), 1 << 30)[0] == 1.0
    assert per_node_scale([s1, s2], s2, "allreduce", (160, 20), 1 << 30) is None
    assert per_node_scale([s1, s2], s2, "allreduce", (20, 10), 1 << 30) is None


def test_the_notes_state_the_band_the_calibration_records():
    """export and plan --explain state the priors a calibration was written with
    (`node_band`), as its predictions use them, not the module's defaults."""
    from commbench.calibration.band import export_notes, plan_note

    doc = {
        "series": [{"link_class": "inter", "shapes": [{"nodes": 2}, {"nodes": 4}]}],
        "node_band": {"bytes_per_doubling": 0.5, "latency_per_doubling": 0.5, "floor": 0.05},
    }
    (note,) = export_notes(doc)
    assert "measured at 2+4 nodes" in note and "band of +-50% per doubling" in note
    got = plan_note(doc, "dp", "inter", 16)  # 2 doublings beyond 4 nodes
    assert got is not None and "band of +-100%" in got
    assert plan_note(doc, "dp", "inter", 4) is None and plan_note(doc, "dp", "intra", 16) is None
