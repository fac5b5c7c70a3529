"""`commbench report` of a `plan --verify` run directory.

Without --calibration, `plan --verify` measures a quick collectives sweep and then the configs'
step Programs into one run directory. Both numbered their points from 1, so the report's step
timeline took the sweep's 78 step records for the first config's Program (a few steps) and
indexed past its end: an IndexError, exit 3, and `make report` failed once such a run sat in
results/.
"""

from __future__ import annotations

import json
import shutil

import pytest

from commbench.report.inputs import points
from commbench.report.step_timeline import point_key, step_timelines
from commbench.results.rundir import read_run

from conftest import run_mpi, run_single

TINY = "tiny:layers=2,hidden=256,ffn_hidden=512,heads=8,kv_heads=4,vocab=1024,seq_len=256"


def _renumbered_as_before(src, dst) -> None:
    """`dst`: the run `src` as the old plan --verify wrote it, every point numbered from 1
    again after the sweep's (a run already on disk must still draw)."""
    shutil.copytree(src, dst)
    recs = [json.loads(ln) for ln in (dst / "records.jsonl").read_text().splitlines()]
    first = min(r["point"] for r in recs if r.get("run") != "calibration" and "point" in r)
    for r in recs:
        if r.get("run") not in (None, "calibration") and "point" in r:
            r["point"] -= first - 1
    (dst / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


@pytest.mark.mpi
def test_report_draws_a_verify_run_with_its_quick_sweep(tmp_path):
    job = run_mpi(
        2, "plan", "--model", TINY, "--gpus", "2", "--gpus-per-node", "2", "--global-batch",
        "4", "--verify", "1", "--rounds", "1", "--budget", "0.01", "--backend", "mpi",
        "--results", str(tmp_path), "--run-id", "v", timeout=300,
    )  # fmt: skip
    assert job.returncode == 0, job.output[-3000:]
    recs = [json.loads(ln) for ln in (tmp_path / "v" / "records.jsonl").read_text().splitlines()]
    by_run = {}
    for r in recs:
        if r.get("kind") == "point":
            by_run.setdefault(r["run"], set()).add(r["point"])
    sweep, configs = by_run.pop("calibration"), set().union(*by_run.values())
    assert not sweep & configs, by_run  # one run directory, one numbering
    _renumbered_as_before(tmp_path / "v", tmp_path / "old")
    for name in ("v", "old"):
        run = read_run(tmp_path / name)
        (timeline,) = step_timelines([run])  # the config's step, not the sweep's
        steps = [r for r in run.records if r.get("kind") == "step" and r["run"] != "calibration"]
        assert {i for s in steps for i in s["program_steps"]} == set(range(len(timeline.spans)))
        rows, _ = points([run])
        assert sorted(r.pattern for r in rows) == ["collectives", "step"]
        assert len({point_key(r.record) for r in rows}) == 2
        out = run_single("report", str(tmp_path / name), "-o", str(tmp_path / f"rep-{name}"))
        assert out.returncode == 0, out.output[-2000:]
        assert (tmp_path / f"rep-{name}" / "index.html").exists()
