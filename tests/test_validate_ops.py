"""`commbench validate` on op sweeps: every record predicted, with how far it reached.

Synthetic runs (ring-model times, Thakur et al. 2005) on "2 nodes" (groups of 16 spanning 2
hosts) are fitted; a 4-node run (groups of 32 spanning 4 hosts) is validated against that
calibration, as a planner's transfer would be.
"""

from __future__ import annotations

import json

import pytest
from fit_samples import collective_records, write_run

from commbench import calibration, cli
from commbench.calibration import op_accuracy
from commbench.calibration.costmodels import model_time
from commbench.fit import calibrate
from commbench.fit.collect import collect, read_fit_runs
from commbench.fit.options import FitOptions

ALPHA, BETA = 5e-6, 1 / 12e9


def sweep(root, run_id, p, nodes, ops=("allreduce", "allgather")):
    recs = []
    for op in ops:
        for r in collective_records(
            op, p, 0, 0, link="inter",
            time_of=lambda s, op=op: model_time("ring", op, p, s, ALPHA, BETA),
        ):  # fmt: skip
            recs.append({**r, "hosts_spanned": nodes})
    return write_run(root, run_id, recs)


@pytest.fixture(scope="module")
def cal_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("ops")
    runs = [sweep(root, "two-nodes-8", 8, 2), sweep(root, "two-nodes-16", 16, 2)]
    doc, _, _ = calibrate.build(collect(read_fit_runs(runs)), FitOptions(bootstrap=0))
    path = root / "cal.json"
    calibration.save(doc, path)
    return path


def test_calibration_records_the_shapes_it_saw(cal_path):
    doc = json.loads(cal_path.read_text())
    shapes = {(s["group_size"], json.dumps(s["shapes"])) for s in doc["series"]}
    assert shapes == {
        (8, json.dumps([{"nodes": 2, "ranks_per_node": 4}])),
        (16, json.dumps([{"nodes": 2, "ranks_per_node": 8}])),
    }


def test_an_unseen_shape_says_how_far_it_reached(cal_path, tmp_path):
    """4 nodes x 8 from 2-node fits: scaled from p = 16 by the ring model (exact here), every
    row marked extrapolated with its reach; inside, a 16-rank record is 'measured'."""
    cal = calibration.load(cal_path)
    four = sweep(tmp_path, "four-nodes", 32, 4)
    rows = op_accuracy.compare([four], cal, extrapolate=True)
    assert rows and all(r["status"] == "ok" and r["extrapolated"] for r in rows)
    assert {r["reach"]["text"] for r in rows} == {"p from 16, nodes 4 (measured 2)"}
    assert max(r["abs_error"] for r in rows) < 0.01
    strict = op_accuracy.compare([four], cal)
    assert all(r["status"] == "not predicted" and "not measured" in r["why"] for r in strict)
    inside = op_accuracy.compare([cal_path.parent / "two-nodes-16"], cal)
    assert {r["reach"]["text"] for r in inside} == {"measured"}
    again = cal.explain("allreduce", 1 << 30, 16, "inter", extrapolate=True, nodes=2)
    assert again.reach.bytes_factor == pytest.approx((1 << 30) / (4 << 20))


def test_validate_takes_run_sweeps_with_json(cal_path, tmp_path, capsys):
    """A run with no suite points is validated op by op (it used to be refused); --json holds
    rows and a summary per op and shape; --min-bytes limits the summary."""
    four = sweep(tmp_path, "four-nodes", 32, 4)
    args = ["validate", "--calibration", str(cal_path), str(four), "--extrapolate"]
    assert cli.main([*args, "--json", "--min-bytes", "64K"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == op_accuracy.SCHEMA and doc["min_bytes"] == 64 << 10
    by = {(s["op"], s["group_size"], s["nodes"]): s for s in doc["summary"]}
    assert set(by) == {("allreduce", 32, 4), ("allgather", 32, 4)}
    n_large = sum(1 for r in doc["rows"] if r["op"] == "allreduce" and r["bytes"] >= 64 << 10)
    assert by[("allreduce", 32, 4)]["points"] == n_large == by[("allreduce", 32, 4)]["extrapolated"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "p from 16, nodes 4 (measured 2)" in out and "summary per op and shape" in out
    assert cli.main(args[:-1]) == 2  # strict: nothing measured at p = 32
    assert "pass --extrapolate" in capsys.readouterr().err


def test_two_runs_state_their_noise_floor_and_validate_uses_it(tmp_path, capsys):
    """The same sweep twice, the second 50% slower: the calibration states a noise floor of
    50% (median over sizes of max/min - 1), each series its repeat spread, and validate's band
    is max(20%, 50%). One run states none."""
    a = sweep(tmp_path, "a", 8, 1)
    slow = [
        {**r, "time_us": r["time_us"] * 1.5, "run_id": "b"}
        for r in (json.loads(x) for x in (a / "records.jsonl").read_text().splitlines())
    ]
    b = write_run(tmp_path, "b", slow)
    doc, _, _ = calibrate.build(collect(read_fit_runs([a, b])), FitOptions(bootstrap=0))
    assert doc["noise_floor"]["median_rel"] == pytest.approx(0.5)
    assert doc["noise_floor"]["runs"] == 2
    assert all(s["repeat_spread"] == pytest.approx(0.5) for s in doc["series"])
    path = tmp_path / "cal.json"
    calibration.save(doc, path)
    assert cli.main(["validate", "--calibration", str(path), str(a), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["band"] == pytest.approx(0.5)
    one, _, _ = calibrate.build(collect(read_fit_runs([a])), FitOptions(bootstrap=0))
    assert one["noise_floor"] is None and one["series"][0]["repeat_spread"] is None


def test_the_noise_floor_is_what_one_rerun_shows(tmp_path):
    """Four runs, 1.0, 1.1, 1.2 and 1.3 x: the floor is the median over pairs of runs of
    max/min - 1 (14%), what one rerun shows; the range of all four (30%), which only
    grows with the runs, overstated it."""
    a = sweep(tmp_path, "a", 8, 1)
    recs = [json.loads(x) for x in (a / "records.jsonl").read_text().splitlines()]
    runs = [a] + [
        write_run(tmp_path, k, [{**r, "time_us": r["time_us"] * f, "run_id": k} for r in recs])
        for k, f in (("b", 1.1), ("c", 1.2), ("d", 1.3))
    ]
    doc, _, _ = calibrate.build(collect(read_fit_runs(runs)), FitOptions(bootstrap=0))
    pairs = sorted([1.1, 1.2, 1.3, 1.2 / 1.1, 1.3 / 1.1, 1.3 / 1.2])
    want = (pairs[2] + pairs[3]) / 2 - 1
    assert doc["noise_floor"]["median_rel"] == pytest.approx(want)  # 14%, not the range's 30%


def test_an_op_priced_by_the_link_model_alone_says_so(cal_path):
    """alltoall was never measured: its price comes from the link model only, and the reach
    says that rather than 'measured'."""
    cal = calibration.load(cal_path)
    got = cal.explain("alltoall", 1 << 20, 16, "inter", extrapolate=True, nodes=2)
    assert got.extrapolated and got.reach.model_only and not got.reach.inside
    assert got.reach.describe() == "link model only"
