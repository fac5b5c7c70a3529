"""The OSU/IMB-style ops under real mpirun: pingpong's two buffers, each new op checked exactly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from commbench.ops import OPS
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


COLLECTIVES = ["barrier", "gather", "scatter", "allgatherv", "iallreduce"]


def checked_run(tmp_path, n: int, op: str, *extra: str) -> list[dict]:
    run_id = f"{op}-{n}-{len(extra)}"
    job = run_mpi(n, "run", op, *FAST, "--backend", "mpi", *extra,
                  "--results", str(tmp_path), "--run-id", run_id)  # fmt: skip
    assert job.returncode == 0, job.output
    recs = read_run(tmp_path / run_id).records
    assert recs and all(r["op"] == op and r["wrong"] == 0 and r["checked"] for r in recs), recs
    for r in recs:
        assert r["rank_min_us"] <= r["rank_avg_us"] <= r["rank_max_us"]
    return recs


def check_collectives(tmp_path, n: int) -> None:
    for op in COLLECTIVES:
        recs = checked_run(tmp_path, n, op)
        if op == "barrier":
            assert [(r["bytes"], r["algbw_GBps"]) for r in recs] == [(0, 0.0)]
        else:
            first = max(8, 4 * n) if OPS[op].chunks else 8  # n chunks of one float32 at least
            assert [r["bytes"] for r in recs] == [first, 1024, 65536]
        if op == "iallreduce":
            for r in recs:
                assert 0.0 <= r["overlap_pct"] <= 100.0
                assert r["compute_us"] > 0 and r["overall_us"] > 0
        else:
            assert "overlap_pct" not in recs[0]


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_osu_collectives_pass_their_exact_check(tmp_path, n):
    check_collectives(tmp_path, n)


@pytest.mark.mpi
@pytest.mark.slow
def test_osu_collectives_pass_their_exact_check_on_8_ranks(tmp_path):
    check_collectives(tmp_path, 8)


@pytest.mark.mpi
@pytest.mark.parametrize("native", ["1", "0"])
def test_bandwidth_windows_pass_their_exact_check(tmp_path, native):
    env = {"COMMBENCH_NATIVE": native}
    for op in ("bw", "bibw"):
        job = run_mpi(2, "run", op, *FAST, "--columns", "osu", "--results", str(tmp_path),
                      "--run-id", op, env=env)  # fmt: skip
        assert job.returncode == 0, job.output
        assert "Bandwidth" in job.stdout and "Avg Latency" in job.stdout
        recs = read_run(tmp_path / op).records
        assert [r["wrong"] for r in recs] == [0, 0, 0]
        assert {r["loop"] for r in recs} == {"native" if native == "1" else "python"}
    # osu_mbw_mr: bw on every pair at once, position i paired with i + world/2
    recs = checked_run(tmp_path, 4, "bw", "--group-size", "2", "--placement", "strided")
    assert all(r["groups"] == 2 and r["stride"] == 2 for r in recs)


@pytest.mark.mpi
def test_osu_ops_refused_on_backends_that_lack_them(tmp_path):
    job = run_mpi(2, "run", "gather", "--backend", "gloo", "--results", str(tmp_path))
    assert job.returncode == 2 and "mpi backend only" in job.output, job.output


@pytest.mark.mpi
def test_one_stalled_probe_iteration_does_not_shrink_the_point():
    """Fails on the max-of-2 probe: the point would get 5 iterations instead of ~2000."""
    cmd = [mpirun_path(), "-n", "2", "--oversubscribe", sys.executable, "tests/probe_job.py"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=job_env(), cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("probe ok") == 2, p.stdout
