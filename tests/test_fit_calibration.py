"""Calibration: build from runs, schema validation, predict() inside/outside the measured range.

The runs are synthetic (stated link alpha/beta under the ring model of Thakur et al. 2005,
no noise unless said), written as `commbench run` writes them.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
from fit_samples import collective_records, write_run

from commbench import calibration
from commbench.calibration.costmodels import model_time
from commbench.calibration.lines import Line, predict_segments, predict_series
from commbench.errors import UsageError
from commbench.fit import calibrate
from commbench.fit.collect import collect, read_fit_runs
from commbench.fit.options import FitOptions

A_INTRA, B_INTRA = 2e-6, 1 / 10e9  # per step alpha, per byte beta of the intra link
A_INTER, B_INTER = 10e-6, 1 / 2e9


def ring(op, p, n, a=A_INTRA, b=B_INTRA):
    return model_time("ring", op, p, n, a, b)


def ring_records(op, p, link="intra", **kw):
    a, b = (A_INTRA, B_INTRA) if link == "intra" else (A_INTER, B_INTER)
    return collective_records(
        op, p, 0.0, 0.0, link=link, time_of=lambda s: ring(op, p, s, a, b), **kw
    )


@pytest.fixture(scope="module")
def cal_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    recs = []
    for p in (2, 4, 8):
        recs += ring_records("allreduce", p)
    for p in (4, 8):
        recs += ring_records("allgather", p)
    recs += ring_records("alltoall", 4)
    recs += ring_records("allreduce", 8, link="inter")
    recs += ring_records("allreduce", 16, link="inter")
    bad = ring_records("allgather", 2)[:5]
    bad[1]["wrong"] = 4
    recs += bad
    recs.append({**recs[0], "kind": "point", "op": "program"})
    a = write_run(root, "sweep-a", recs[: len(recs) // 2])
    b = write_run(root, "sweep-b", recs[len(recs) // 2 :], status="interrupted")
    doc, _, _ = calibrate.build(collect(read_fit_runs([a, b])), FitOptions(bootstrap=50))
    path = root / "cal.json"
    calibration.save(doc, path)
    return path


@pytest.fixture(scope="module")
def cal(cal_path):
    return calibration.load(cal_path)


def test_document_layout_and_provenance(cal):
    doc = cal.doc
    assert doc["schema_version"] == 1 and doc["kind"] == "measured"
    runs = {r["run_id"]: r for r in doc["provenance"]["runs"]}
    assert runs["sweep-b"]["partial"] and not runs["sweep-a"]["partial"]
    assert doc["provenance"]["partial_runs"] == ["sweep-b"]
    assert runs["sweep-a"]["env"] == {"NCCL_ALGO": "Ring"}
    assert runs["sweep-a"]["hosts"] == ["synthetic-host"]
    # the short allgather p=2 series: 5 rows, 1 with wrong > 0 left out and counted
    ag2 = [s for s in doc["series"] if s["op"] == "allgather" and s["group_size"] == 2]
    assert ag2 and ag2[0]["excluded_wrong"] == 1 and ag2[0]["points"] == 4
    assert doc["ignored"] == {"point records of op 'program' (not a primitive collective)": 1}
    seg = doc["series"][0]["segments"][0]
    for k in ("r2_log", "median_rel_err", "max_rel_err", "loso_median_rel_err", "alpha_ci95"):
        assert k in seg


def test_series_fit_is_exact_on_noise_free_data(cal):
    for s in cal.doc["series"]:
        assert len(s["segments"]) == 1, s
        seg = s["segments"][0]
        op, p = s["op"], s["group_size"]
        a, b = (A_INTRA, B_INTRA) if s["link_class"] == "intra" else (A_INTER, B_INTER)
        assert seg["alpha_s"] == pytest.approx(ring(op, p, 0, a, b), rel=1e-6)
        slope = ring(op, p, 1.0, a, b) - ring(op, p, 0, a, b)
        assert seg["beta_s_per_byte"] == pytest.approx(slope, rel=1e-6)


def test_link_table_recovers_the_ring_link(cal):
    links = {(e["link_class"]): e for e in cal.doc["link_table"]}
    intra = links["intra"]
    assert intra["best_model"] == "ring"
    ring_fit = intra["models"]["ring"]
    assert ring_fit["alpha_s"] == pytest.approx(A_INTRA, rel=1e-3)
    assert ring_fit["busbw_GBps"] == pytest.approx(10.0, rel=1e-3)
    assert ring_fit["median_rel_err"] < 1e-6
    assert intra["models"]["tree"]["median_rel_err"] > 0.01  # the data tells them apart
    assert intra["group_sizes"] == [2, 4, 8]
    assert links["inter"]["models"]["ring"]["busbw_GBps"] == pytest.approx(2.0, rel=1e-3)


def test_link_table_names_tree_when_the_data_is_tree(tmp_path):
    """Synthetic data from the recursive-doubling model over p = 2..16: tree fits best."""
    recs = []
    for p in (2, 4, 8, 16):
        for op in ("allreduce", "allgather"):
            recs += collective_records(
                op, p, 0, 0, time_of=lambda s, op=op, p=p: model_time("tree", op, p, s, 3e-6, 1e-10)
            )
    doc, _, links = calibrate.build(
        collect(read_fit_runs([write_run(tmp_path, "tree", recs)])), FitOptions(bootstrap=0)
    )
    assert links[0].best_model == "tree"
    assert links[0].models["tree"].alpha_s == pytest.approx(3e-6, rel=1e-3)


def test_predict_inside_the_measured_range(cal):
    for op, p, n in (("allreduce", 4, 1 << 20), ("allgather", 8, 12345), ("alltoall", 4, 64)):
        assert cal.predict(op, n, p, "intra", dtype="float32") == pytest.approx(
            ring(op, p, n), rel=1e-6
        )
    e = cal.explain("allreduce", 1 << 20, 8, "inter")
    assert e.method == "measured segment" and not e.extrapolated and e.kind == "measured"
    assert e.seconds == pytest.approx(ring("allreduce", 8, 1 << 20, A_INTER, B_INTER), rel=1e-6)


def test_knots_give_the_measurements_and_the_lines_shape_between_them():
    seg = Line(8, 1 << 20, 1e-6, 1e-10)
    t = {1024: 2e-6, 4096: 1e-6}  # measured: above the line, then below it
    knots = sorted(t.items())
    for b, want in knots:
        assert predict_series([seg], knots, b) == pytest.approx(want)
    line = lambda b: 1e-6 + 1e-10 * b  # noqa: E731
    f = 0.5  # 2048 is halfway in log size
    ratio = (t[1024] / line(1024)) ** (1 - f) * (t[4096] / line(4096)) ** f
    assert predict_series([seg], knots, 2048) == pytest.approx(line(2048) * ratio)
    # beyond the ends: the line scaled to the nearest measurement
    assert predict_series([seg], knots, 64) == pytest.approx(line(64) * t[1024] / line(1024))
    assert predict_series([seg], knots, 1 << 20) == pytest.approx(
        line(1 << 20) * t[4096] / line(4096)
    )
    assert predict_series([seg], [], 2048) == pytest.approx(line(2048))


def test_across_a_segment_boundary_the_knots_set_the_level():
    """A cliff between 8 and 16 KiB (the second segment's line 3x the first's): at 12000 B,
    in the second segment, the price is the two measurements interpolated log-log times the
    line's curvature (<= 1), not the upper line itself (6.6 us against 4.1 us interpolated)."""
    low, high = Line(8, 8192, 1e-6, 1e-10), Line(16384, 1 << 20, 3e-6, 3e-10)
    knots = [(8192, 1e-6 + 1e-10 * 8192), (16384, 3 * (1e-6 + 1e-10 * 16384))]
    got = predict_series([low, high], knots, 12000)
    f = math.log(12000 / 8192) / math.log(2)
    interp = knots[0][1] ** (1 - f) * knots[1][1] ** f
    assert 0.95 * interp <= got <= interp


def test_noisy_series_predicts_its_medians_and_the_line_between_them(tmp_path):
    """At a measured size the calibration gives that size's measurement; between two sizes
    the line's shape at the level of the two measurements around it."""
    recs = collective_records("allreduce", 4, 5e-6, 1e-10, noise=0.1, seed=3)
    doc, _, _ = calibrate.build(collect(read_fit_runs([write_run(tmp_path, "n", recs)])),
                                FitOptions(bootstrap=0))  # fmt: skip
    cal = calibration.Calibration(doc)
    for r in recs:
        assert cal.predict("allreduce", r["bytes"], 4, "intra") == pytest.approx(
            r["time_us"] * 1e-6,
            rel=1e-5,  # time_us as the record rounds it
        )
    (series,) = cal.series
    lo, hi = recs[10], recs[11]
    mid = int((lo["bytes"] * hi["bytes"]) ** 0.5)
    line = predict_segments(series.segments, mid)
    ratios = [r["time_us"] * 1e-6 / predict_segments(series.segments, r["bytes"]) for r in (lo, hi)]
    assert cal.predict("allreduce", mid, 4, "intra") == pytest.approx(
        line * (ratios[0] * ratios[1]) ** 0.5, rel=1e-5
    )


def test_alltoallv_uses_the_alltoall_series(cal):
    assert cal.predict("alltoallv", 4096, 4, "intra") == pytest.approx(
        ring("alltoall", 4, 4096), rel=1e-6
    )


def test_group_of_one_costs_nothing(cal):
    assert cal.predict("allreduce", 1 << 30, 1, "inter") == 0.0


def test_outside_the_range_refuses_then_extrapolates(cal):
    big = 1 << 30  # measured up to 4 MiB
    with pytest.raises(UsageError, match="outside the measured sizes 8 B..4 MiB"):
        cal.predict("allreduce", big, 8, "intra")
    e = cal.explain("allreduce", big, 8, "intra", extrapolate=True)
    assert e.extrapolated and "nearest segment" in e.method
    assert e.seconds == pytest.approx(ring("allreduce", 8, big), rel=1e-6)


def test_unmeasured_group_size_scales_by_the_link_model(cal):
    with pytest.raises(UsageError, match="group size 16: not measured .*covers: allreduce"):
        cal.predict("allreduce", 1 << 20, 16, "intra")
    e = cal.explain("allreduce", 1 << 20, 16, "intra", extrapolate=True)
    assert "scaled from group size 8 by the ring model" == e.method
    assert e.seconds == pytest.approx(ring("allreduce", 16, 1 << 20), rel=1e-3)
    # up to the planner's 1024 ranks: sensible (the ring model's growth) and monotone
    times = [
        cal.predict("allreduce", 1 << 20, p, "intra", extrapolate=True) for p in (16, 64, 1024)
    ]
    assert times == sorted(times)
    assert times[-1] == pytest.approx(ring("allreduce", 1024, 1 << 20), rel=1e-3)


def test_unmeasured_op_uses_the_link_model(cal):
    with pytest.raises(UsageError, match="not measured"):
        cal.predict("reduce_scatter", 1 << 20, 8, "intra")
    e = cal.explain("reduce_scatter", 1 << 20, 8, "intra", extrapolate=True)
    assert e.method == "link ring model" and e.series is None
    assert e.seconds == pytest.approx(ring("reduce_scatter", 8, 1 << 20), rel=1e-3)
    inter = cal.predict("sendrecv", 1 << 20, 2, "inter", extrapolate=True)
    assert inter == pytest.approx(A_INTER + B_INTER * (1 << 20), rel=1e-3)


def test_unmeasured_dtype(cal):
    with pytest.raises(UsageError, match="dtype bfloat16"):
        cal.predict("allreduce", 4096, 8, "intra", dtype="bf16")
    e = cal.explain("allreduce", 4096, 8, "intra", dtype="bf16", extrapolate=True)
    assert "dtype float32 measured" in e.method
    assert e.seconds == pytest.approx(ring("allreduce", 8, 4096), rel=1e-6)


def test_unmeasured_link_class_is_refused_even_when_extrapolating(cal):
    with pytest.raises(UsageError, match="nothing was measured on nvlink links"):
        cal.predict("allreduce", 4096, 8, "nvlink", extrapolate=True)


def test_bad_arguments(cal):
    with pytest.raises(UsageError, match="unknown op"):
        cal.predict("allscatter", 8, 2, "intra")
    with pytest.raises(UsageError, match="group_size"):
        cal.predict("allreduce", 8, 0, "intra")
    with pytest.raises(UsageError, match="nbytes"):
        cal.predict("allreduce", -1, 2, "intra")


def test_coverage_lists_what_is_measured(cal):
    cov = {(c["op"], c["link_class"], c["group_size"]): c for c in cal.coverage()}
    assert set(cov) == {
        ("allreduce", "intra", 2),
        ("allreduce", "intra", 4),
        ("allreduce", "intra", 8),
        ("allgather", "intra", 2),
        ("allgather", "intra", 4),
        ("allgather", "intra", 8),
        ("alltoall", "intra", 4),
        ("allreduce", "inter", 8),
        ("allreduce", "inter", 16),
    }
    assert cov[("alltoall", "intra", 4)]["bytes_min"] == 8
    assert cov[("alltoall", "intra", 4)]["bytes_max"] == 4 << 20
    assert cov[("allgather", "intra", 2)]["bytes_max"] == 128  # 5 rows, one wrong
    assert cal.ops == ["allgather", "allreduce", "alltoall"]
    assert cal.link_classes == ["inter", "intra"]
    text = cal.describe(op="allreduce")
    assert "allreduce intra p=2,4,8 float32 mpi 8 B..4 MiB" in text
    assert "allreduce inter p=8,16" in text


def test_several_backends_need_a_choice(tmp_path):
    recs = collective_records("allreduce", 4, 1e-5, 1e-9) + collective_records(
        "allreduce", 4, 2e-5, 1e-9, backend="gloo"
    )
    doc, _, _ = calibrate.build(collect(read_fit_runs([write_run(tmp_path, "r", recs)])))
    cal = calibration.Calibration(doc)
    with pytest.raises(UsageError, match="several backends \\(gloo, mpi\\): pass backend="):
        cal.predict("allreduce", 1024, 4, "intra")
    assert cal.predict("allreduce", 1024, 4, "intra", backend="gloo") == pytest.approx(
        2e-5 + 1024e-9, rel=1e-6
    )


# ---- schema ----------------------------------------------------------------------------------


def test_schema_ships_with_the_package():
    s = calibration.schema()
    assert s["properties"]["kind"]["enum"] == ["measured", "reference"]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("kind"), "'kind' is a required property"),
        (lambda d: d.update(kind="guess"), "kind"),
        (lambda d: d["series"][0]["segments"][0].update(alpha_s=-1.0), "alpha_s"),
        (lambda d: d["series"][0].pop("group_size"), "group_size"),
        (lambda d: d["series"][0]["segments"][0].pop("r2_log"), "r2_log"),
        (lambda d: d["provenance"].pop("runs"), "runs"),
        (lambda d: d["link_table"][0].update(best_model="magic"), "best_model"),
        (lambda d: d.update(schema_version=2), "schema_version 2"),
        (lambda d: d["series"][0].update(bytes_max=1), "disagree with its segments"),
        (lambda d: d["series"].append(copy.deepcopy(d["series"][0])), "a second series"),
        (lambda d: d["series"][0]["knots"].reverse(), "knots: sizes not strictly ascending"),
        (lambda d: d["series"][0]["knots"][0].update(seconds=0.0), "seconds"),
    ],
)
def test_bad_calibrations_fail_validation(cal, tmp_path, mutate, message):
    doc = copy.deepcopy(cal.doc)
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match=message) as err:
        calibration.load(path)
    assert str(path) in str(err.value)


def test_not_json_names_the_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "schema_version": 1,\n  "kind": oops\n}\n')
    with pytest.raises(UsageError, match=r"broken.json:3: not valid JSON"):
        calibration.load(path)


def reference_doc() -> dict:
    """A reference calibration as the planner issue will ship one: stated numbers, sources."""
    return {
        "schema_version": 1,
        "kind": "reference",
        "created": "2026-01-01T00:00:00",
        "provenance": {"sources": [{"title": "a stated anchor for the test"}]},
        "series": [],
        "link_table": [
            {
                "backend": "nccl",
                "link_class": "intra",
                "timing": "per-iteration",
                "best_model": "ring",
                "models": {"ring": {"alpha_s": 3e-6, "beta_s_per_byte": 1 / 400e9}},
            }
        ],
    }


def test_reference_calibration_is_a_model_not_a_measurement(tmp_path):
    path = tmp_path / "ref.json"
    path.write_text(json.dumps(reference_doc()))
    ref = calibration.load(path)
    e = ref.explain("allreduce", 1 << 20, 8, "intra")
    assert e.kind == "reference" and e.method == "reference ring model" and not e.extrapolated
    assert e.seconds == pytest.approx(ring("allreduce", 8, 1 << 20, 3e-6, 1 / 400e9))
    with pytest.raises(UsageError, match="is a reference calibration, not measured"):
        calibration.load(path, kind="measured")
    bad = reference_doc()
    bad["provenance"] = {"runs": []}
    path.write_text(json.dumps(bad))
    with pytest.raises(UsageError, match="sources"):
        calibration.load(path)


def test_measured_calibration_needs_diagnostics(cal, tmp_path):
    doc = copy.deepcopy(cal.doc)
    doc["link_table"][0]["models"]["ring"].pop("median_rel_err")
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="median_rel_err"):
        calibration.load(path)


@pytest.mark.parametrize("slower, noted", [(1.0, False), (2.0, True)])
def test_contiguous_and_strided_groups_are_checked_to_agree(tmp_path, slower, noted):
    """One series holding contiguous (stride 1) and strided (stride 4) groups: their spread is
    stated, and a note says when they disagree (2x) rather than fitting one line through
    both silently."""
    recs = [{**r, "stride": 1} for r in ring_records("allreduce", 4)]
    recs += [
        {**r, "stride": 4, "time_us": r["time_us"] * slower} for r in ring_records("allreduce", 4)
    ]
    run = write_run(tmp_path, "placements", recs)
    doc, _, _ = calibrate.build(collect(read_fit_runs([run])), FitOptions(bootstrap=0))
    assert doc["series"][0]["placement_spread"] == pytest.approx(slower - 1)
    said = [n for n in doc["notes"] if "contiguous and strided groups disagree" in n]
    assert bool(said) == noted
