"""Longer reliability variants (pytest -m slow): 8 ranks, rendezvous hangs, torchrun, and
SIGKILLs at random moments rather than at a chosen point."""

from __future__ import annotations

import random
import signal
import time

import pytest
from reliability import (
    FAST_POINTS,
    check_fit_accepts,
    check_intact,
    meta,
    reliability_counts,  # noqa: F401
    run_args,
    sizes,
    start,
    wait_for_records,
)

from conftest import needs_torch

pytestmark = [pytest.mark.slow, pytest.mark.mpi]


def test_kill9_mid_run_8_ranks(tmp_path):
    job = start(8, *run_args(tmp_path, "k9"), fault="rank=0,point=3,kind=delay,seconds=90")
    wait_for_records(tmp_path / "k9", 3, job, timeout=120)
    assert len(job.rank_pids()) == 8
    job.kill_rank(5)
    out, elapsed = job.finish(timeout=90)
    assert out.returncode != 0 and elapsed < 120, out.output
    check_intact(tmp_path / "k9", points=3)
    check_fit_accepts(tmp_path / "k9")


def test_sigint_to_mpirun_8_ranks(tmp_path):
    job = start(8, *run_args(tmp_path, "int"), fault="rank=3,point=2,kind=delay,seconds=90")
    wait_for_records(tmp_path / "int", 2, job, timeout=120)
    job.signal(signal.SIGINT)
    out, _ = job.finish(timeout=60)
    assert out.returncode != 0
    run = check_intact(tmp_path / "int", points=2)
    assert run.status == "interrupted"


def test_exception_on_last_rank_8_ranks(tmp_path):
    job = start(8, *run_args(tmp_path, "r7"), fault="rank=7,point=1,kind=raise")
    out, _ = job.finish(timeout=120)
    assert out.returncode == 3, out.output
    assert meta(tmp_path, "r7")["error"].startswith("rank 7: InjectedFault")
    check_intact(tmp_path / "r7", points=1)


@pytest.mark.parametrize("backend", ["mpi", pytest.param("gloo", marks=needs_torch)])
def test_hang_before_rendezvous(tmp_path, backend):
    """A rank that never reaches the rendezvous (MPI start-up or torch's TCP store)."""
    timeout = 5
    job = start(
        2,
        *run_args(tmp_path, "rdv", 3, "--backend", backend, "--timeout", str(timeout)),
        fault="rank=1,point=start,kind=hang",
    )
    out, elapsed = job.finish(timeout=90)
    assert out.returncode == 3, out.output
    assert f"no progress for {timeout} s in start-up (rendezvous)" in out.stderr
    assert elapsed < timeout + 30  # start-up includes importing torch on 2 shared cores


@needs_torch
def test_torchrun_peer_killed(tmp_path):
    """No MPI at all: gloo sees the dead peer's socket close, the survivor fails at once."""
    job = start(
        2,
        *run_args(tmp_path, "trk", 4, "--backend", "gloo"),
        fault="rank=1,point=3,kind=sigkill",
        launcher="torchrun",
    )
    out, elapsed = job.finish(timeout=120)
    assert out.returncode != 0
    run = check_intact(tmp_path / "trk", points=3)
    assert run.status == "failed" and "Connection" in run.meta["error"], run.meta
    check_fit_accepts(tmp_path / "trk")


@needs_torch
def test_torchrun_sigint_is_graceful(tmp_path):
    """torchrun forwards SIGINT to its workers and waits: the current point finishes."""
    job = start(
        2,
        *run_args(tmp_path, "trint", 5, "--backend", "gloo"),
        fault="rank=1,point=2,kind=delay,seconds=3",
        launcher="torchrun",
    )
    wait_for_records(tmp_path / "trint", 2, job, timeout=120)
    job.signal(signal.SIGINT)
    job.finish(timeout=120)
    run = check_intact(tmp_path / "trint", points=3)
    assert run.status == "interrupted" and run.meta["stop_signal"] == "SIGINT"


def test_kill9_at_random_moments(tmp_path):
    """No chosen point: kill a random non-zero rank at a random time, five times. Rank 0 may be
    SIGKILLed mid-write by mpirun's teardown, so a torn last line is allowed (and skipped)."""
    rng = random.Random(7)
    for k in range(5):
        run_id = f"rnd{k}"
        job = start(
            4,
            "run",
            "allreduce",
            *sizes(80),
            *FAST_POINTS,
            "--results",
            str(tmp_path),
            "--run-id",
            run_id,
        )
        wait_for_records(tmp_path / run_id, 1, job, timeout=120)
        time.sleep(rng.uniform(0.0, 1.5))
        victims = [r for r in job.rank_pids() if r != 0]
        if victims:  # else the run already ended: nothing to strike
            job.kill_rank(rng.choice(victims))
        out, elapsed = job.finish(timeout=90)
        if out.returncode == 0:  # the run finished before the kill landed
            continue
        assert elapsed < 120
        check_intact(tmp_path / run_id, allow_torn=True)
