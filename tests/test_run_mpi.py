"""`commbench run` under real mpirun: every op on mpi and gloo, exact checks, complete records."""

from __future__ import annotations

import json

import pytest

from commbench.ops import bus_factor
from commbench.results.records import MEASURED_FIELDS
from commbench.results.rundir import read_run

from conftest import needs_torch, run_mpi, run_single

OPS = [
    "allreduce",
    "allgather",
    "reduce_scatter",
    "alltoall",
    "alltoallv",
    "broadcast",
    "reduce",
    "sendrecv",
]
FAST = ["--sizes", "8,1K,64K", "--iters", "5", "--warmup", "1"]


def check_run(tmp_path, run_id: str, op: str, world: int, group: int, backend: str):
    run = read_run(tmp_path / run_id)
    assert run.status == "complete"
    assert run.meta["backend"] == backend and run.meta["world_size"] == world
    assert len(run.records) == 3
    for rec in run.records:
        for field in MEASURED_FIELDS:
            assert field in rec, field
        assert rec["op"] == op and rec["backend"] == backend
        assert rec["wrong"] == 0, rec
        assert rec["group_size"] == group and rec["world_size"] == world
        assert rec["iters"] == 5 and rec["warmup"] == 1
        assert rec["time_min_us"] <= rec["time_us"] <= rec["time_p95_us"]
        assert rec["algbw_GBps"] == pytest.approx(rec["bytes"] / rec["time_us"] / 1e3, rel=1e-6)
        assert rec["busbw_GBps"] == pytest.approx(rec["algbw_GBps"] * bus_factor(op, group))


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_every_op_mpi(tmp_path, n):
    for op in OPS + (["pingpong"] if n == 2 else []):
        job = run_mpi(
            n,
            "run",
            op,
            *FAST,
            "--backend",
            "mpi",
            "--results",
            str(tmp_path),
            "--run-id",
            f"{op}-{n}",
        )
        assert job.returncode == 0, job.output
        assert "results:" in job.stdout and "#wrong" in job.stdout
        check_run(tmp_path, f"{op}-{n}", op, n, 2 if op == "pingpong" else n, "mpi")


@pytest.mark.mpi
@needs_torch
def test_every_op_gloo(tmp_path):
    for op in OPS:
        job = run_mpi(
            4,
            "run",
            op,
            *FAST,
            "--backend",
            "gloo",
            "--dtype",
            "bfloat16",
            "--results",
            str(tmp_path),
            "--run-id",
            op,
        )
        assert job.returncode == 0, job.output
        check_run(tmp_path, op, op, 4, 4, "gloo")


@pytest.mark.mpi
def test_groups_and_placement(tmp_path):
    job = run_mpi(
        4,
        "run",
        "allreduce",
        *FAST,
        "--group-size",
        "2",
        "--placement",
        "strided",
        "--ranks-per-node",
        "2",
        "--results",
        str(tmp_path),
        "--run-id",
        "g",
    )
    assert job.returncode == 0, job.output
    recs = read_run(tmp_path / "g").records
    assert all(r["groups"] == 2 and r["stride"] == 2 and r["link_class"] == "inter" for r in recs)
    assert all(len(r["per_group_us"]) == 2 for r in recs)


@pytest.mark.mpi
def test_isolated_and_pipelined(tmp_path):
    job = run_mpi(
        4,
        "run",
        "alltoall",
        *FAST,
        "--group-size",
        "2",
        "--isolated",
        "--timing",
        "pipelined",
        "--results",
        str(tmp_path),
        "--run-id",
        "iso",
    )
    assert job.returncode == 0, job.output
    recs = read_run(tmp_path / "iso").records
    assert all(r["isolated"] and r["timing"] == "pipelined" and r["wrong"] == 0 for r in recs)


def test_single_process(tmp_path):
    job = run_single("run", "allreduce", *FAST, "--results", str(tmp_path), "--run-id", "one")
    assert job.returncode == 0, job.output
    recs = read_run(tmp_path / "one").records
    assert [r["world_size"] for r in recs] == [1, 1, 1]
    meta = json.loads((tmp_path / "one" / "meta.json").read_text())
    assert meta["launcher"] == "single" and meta["status"] == "complete"
