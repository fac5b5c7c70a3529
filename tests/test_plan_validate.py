"""validate end to end: a primitive sweep and the smoke suite really measured under mpirun (4
ranks, mpi backend), a calibration fitted from the sweep, every smoke point predicted by the
planner's evaluator and compared; plan with that measured calibration; bad input."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from commbench import calibration
from commbench.calibration import accuracy as validate
from commbench.calibration import reference

from conftest import run_mpi, run_single

SWEEP = """\
description: primitive sweep for the validate test (tiny sizes, few iterations)
timing: {budget: 0.01, min_iters: 3, max_iters: 8}
max_bytes: 16M
runs:
  - pattern: collectives
    options:
      ops: [allreduce, allgather, reduce_scatter, alltoall, sendrecv]
      min_bytes: 64
      max_bytes: 4M
      factor: 4
"""
ROW_KEYS = {"pattern", "config", "model", "measured_s", "predicted_s", "rel_error", "status", "why",
            "run_id", "point", "steps", "abs_error", "options"}  # fmt: skip


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    suite = root / "sweep.yaml"
    suite.write_text(SWEEP)
    for name, what in (("sweep", str(suite)), ("smoke", "smoke")):
        job = run_mpi(
            4, "suite", what, "--backend", "mpi", "--results", str(root), "--run-id", name,
            timeout=300,
        )  # fmt: skip
        assert job.returncode == 0, job.output
    cal = root / "cal.json"
    job = run_single("fit", str(root / "sweep"), "-o", str(cal), "-q", timeout=120)
    assert job.returncode == 0, job.output
    return root, cal


def test_compare_predicts_every_strategy_point(measured):
    root, cal_path = measured
    cal = calibration.load(cal_path)
    rows = validate.compare([root / "smoke"], cal)
    assert len(rows) == 15  # the smoke suite on 4 ranks: decode needs 8
    assert all(ROW_KEYS <= set(r) for r in rows)
    ok = {r["pattern"] for r in rows if r["status"] == "ok"}
    assert {"tp", "dp", "zero", "pp", "cp", "ep", "prefill"} <= ok
    for r in rows:
        if r["status"] != "ok":
            assert r["predicted_s"] is None and r["why"]
            continue
        assert r["measured_s"] > 0 and r["predicted_s"] > 0
        assert r["rel_error"] == pytest.approx(
            (r["predicted_s"] - r["measured_s"]) / r["measured_s"]
        )
        # the point is the sum of its steps, measured and predicted alike
        assert sum(s["predicted_s"] for s in r["steps"]) == pytest.approx(r["predicted_s"])
        assert sum(s["measured_s"] for s in r["steps"]) == pytest.approx(r["measured_s"])
    # the smoke sweep's 8-byte ops lie below the fitted sizes (64 B..4 MiB): said, not guessed
    coll = next(r for r in rows if r["pattern"] == "collectives")
    assert coll["status"] == "not predicted" and "outside the measured sizes" in coll["why"]
    pp = next(r for r in rows if r["pattern"] == "pp")
    assert pp["steps"][0]["method"].startswith("1F1B simulated")
    # with extrapolation every point gets a prediction, marked as extrapolated
    rows_x = validate.compare([root / "smoke"], cal, extrapolate=True)
    coll_x = next(r for r in rows_x if r["pattern"] == "collectives")
    assert coll_x["status"] == "ok" and coll_x["predicted_extrapolated"]
    summary = validate.summarize(rows)
    by = {s["pattern"]: s for s in summary}
    assert set(by) == {r["pattern"] for r in rows}
    for s in summary:
        assert {"pattern", "points", "median_abs_error", "max_abs_error"} <= set(s)
    assert by["tp"]["points"] == 2 and by["collectives"]["points"] == 0
    assert by["tp"]["max_abs_error"] >= by["tp"]["median_abs_error"] >= 0


def test_validate_command_text_and_json(measured, tmp_path):
    root, cal = measured
    job = run_single("validate", "--calibration", str(cal), str(root / "smoke"), "--steps")
    assert job.returncode == 0, job.output
    assert "summary per pattern" in job.stdout and "not predicted:" in job.stdout
    out = tmp_path / "validation.json"
    job = run_single(
        "validate", "--calibration", str(cal), str(root / "smoke"), "--json", "-o", str(out)
    )
    assert job.returncode == 0, job.output
    doc = json.loads(job.stdout)
    assert doc["schema"] == "commbench.calibration.accuracy/1"
    assert json.loads(out.read_text())["summary"] == doc["summary"]
    assert len(doc["rows"]) == 15


def test_plan_with_the_measured_calibration(measured):
    _, cal = measured
    tiny = "tiny:layers=4,hidden=256,ffn_hidden=512,heads=8,kv_heads=4,vocab=1024,seq_len=256"
    job = run_single(
        "plan", "--model", tiny, "--gpus", "4", "--gpus-per-node", "4", "--global-batch", "8",
        "--calibration", str(cal),
    )  # fmt: skip
    assert job.returncode == 0, job.output
    assert "[measured]" in job.stdout and "communication only" in job.stdout
    # four "nodes" of one GPU: the calibration measured intra links only, and says which is missing
    job = run_single(
        "plan", "--model", tiny, "--gpus", "4", "--gpus-per-node", "1", "--global-batch", "8",
        "--calibration", str(cal),
    )  # fmt: skip
    assert job.returncode == 2 and "inter links" in job.stderr, job.output


def test_validate_bad_input_exits_2(measured, tmp_path):
    root, cal = measured
    empty = tmp_path / "empty-run"
    empty.mkdir()
    (empty / "records.jsonl").write_text("")
    cases = [
        ([str(empty)], "no suite point records"),
        ([str(tmp_path / "missing")], "no such run directory"),
    ]
    for runs, message in cases:
        job = run_single("validate", "--calibration", str(cal), *runs)
        assert job.returncode == 2 and message in job.stderr, job.output
    # the shipped reference is an nccl statement: an mpi run cannot be priced by it
    with resources.as_file(reference.shipped_path()) as ref:
        job = run_single("validate", "--calibration", str(ref), str(root / "smoke"))
    assert job.returncode == 2 and "could be predicted" in job.stderr and "mpi" in job.stderr
