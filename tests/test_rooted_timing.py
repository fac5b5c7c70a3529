"""Rooted ops timed to their completion at the last rank (a zero-byte acknowledgement), under
real mpirun: the old form's 8 B broadcast and reduce read under the send/recv latency of the
same ranks, the acknowledged form does not; records say which acknowledgement a point had."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from commbench.results.rundir import read_run

from conftest import REPO, job_env, mpirun_path, needs_torch, run_mpi


def rooted_job(n: int, op: str, mode: str) -> dict:
    cmd = [mpirun_path(), "-n", str(n), "--oversubscribe", sys.executable, "tests/rooted_job.py"]
    p = subprocess.run(
        [*cmd, op, mode], capture_output=True, text=True, timeout=120, env=job_env(), cwd=REPO
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.mpi
@pytest.mark.parametrize(("n", "op"), [(2, "broadcast"), (4, "broadcast"), (4, "reduce")])
def test_old_rooted_time_is_below_the_p2p_latency_and_the_acknowledged_one_is_not(n, op):
    """Back-to-back calls (nccl-tests' loop): without the acknowledgement a broadcast root's
    eager sends, or reduce's senders, run ahead of the data, so one call reads a fraction of a
    message latency (here 0.2-0.35x the ring send/recv of the same ranks on 4, 0.3-0.6x on 2);
    acknowledged, each call holds at least one message each way (1.35-2.9x)."""
    got = rooted_job(n, op, "pipelined")
    assert got["loop"] == "native", got
    assert got["ack"] == ("to-root" if op == "broadcast" else "from-root"), got
    assert got["old_us"] < got["p2p_us"], got
    assert got["new_us"] >= got["p2p_us"], got


@pytest.mark.mpi
@pytest.mark.parametrize("native", ["1", "0"])
def test_records_say_which_acknowledgement_and_the_check_still_runs(tmp_path, native):
    for op in ("broadcast", "reduce", "allreduce"):
        job = run_mpi(
            3,
            *("run", op, "--sizes", "8,4K", "--iters", "5", "--warmup", "1"),
            *("--results", str(tmp_path), "--run-id", op),
            env={"COMMBENCH_NATIVE": native},
        )
        assert job.returncode == 0, job.output
        records = read_run(tmp_path / op).records
        assert len(records) == 2
        want = {"broadcast": "to-root", "reduce": "from-root"}.get(op)
        for r in records:
            assert ("ack" in r) == (want is not None), r  # absent, not null, where none
            assert r.get("ack") == want and r["checked"] and r["wrong"] == 0, r
            assert r["loop"] == ("native" if native == "1" else "python"), r


@pytest.mark.mpi
@needs_torch
def test_gloo_acknowledges_through_a_fused_group(tmp_path):
    """torch.distributed has no MPI-style zero-byte send: the acknowledgement is a one-element
    fused group (the same call NCCL gets on the device), checked data and records as on mpi."""
    for op, ack in (("broadcast", "to-root"), ("reduce", "from-root")):
        job = run_mpi(
            2,
            *("run", op, "--backend", "gloo", "--sizes", "8,64K", "--iters", "5"),
            *("--warmup", "1", "--results", str(tmp_path), "--run-id", op),
        )
        assert job.returncode == 0, job.output
        records = read_run(tmp_path / op).records
        assert [r["ack"] for r in records] == [ack, ack], records
        assert all(r["wrong"] == 0 and r["checked"] and r["backend"] == "gloo" for r in records)
