"""The OSU/IMB-style ops under real mpirun: pingpong's two buffers, each new op checked exactly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from commbench.results.rundir import read_run

from conftest import REPO, job_env, mpirun_path, run_mpi

FAST = ["--sizes", "8,1K,64K", "--iters", "5", "--warmup", "1"]


@pytest.mark.mpi
@pytest.mark.parametrize("native", ["1", "0"])
def test_pingpong_sends_and_receives_through_two_buffers(native):
    """Fails on the one-buffer form: rank 0 would find its own pattern echoed back."""
    cmd = [mpirun_path(), "-n", "2", "--oversubscribe", sys.executable, "tests/pingpong_job.py"]
    p = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=120,
        env=job_env({"COMMBENCH_NATIVE": native}),
        cwd=REPO,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    loop = "native" if native == "1" else "python"
    assert p.stdout.count(f"pingpong two buffers ok, loop {loop}") == 2, p.stdout


@pytest.mark.mpi
def test_buffer_modes_are_recorded_and_fitted_apart(tmp_path):
    """hugepage (default), plain pages and off-cache each checked exactly, recorded, and kept
    in their own fitted series."""
    from commbench.fit.collect import collect, read_fit_runs

    for run_id, extra in (
        ("huge", ()),
        ("plain", ("--buffers", "plain")),
        ("cold", ("--off-cache",)),
    ):
        job = run_mpi(2, "run", "allreduce", *FAST, "--backend", "mpi", *extra,
                      "--results", str(tmp_path), "--run-id", run_id)  # fmt: skip
        assert job.returncode == 0, job.output
    want = {"huge": "hugepage", "plain": "plain", "cold": "hugepage+off-cache"}
    for run_id, buffers in want.items():
        recs = read_run(tmp_path / run_id).records
        assert [r["buffers"] for r in recs] == [buffers] * 3
        assert all(r["wrong"] == 0 for r in recs)
    got = collect(read_fit_runs([tmp_path / r for r in want]))
    assert sorted(k.buffers for k in got.series) == sorted(want.values())


@pytest.mark.mpi
def test_buffer_flags_refused_where_they_mean_nothing(tmp_path):
    job = run_mpi(2, "run", "allreduce", "--off-cache", "--timing", "pipelined",
                  "--results", str(tmp_path))  # fmt: skip
    assert job.returncode == 2 and "--off-cache" in job.output
    assert "Traceback" not in job.output
