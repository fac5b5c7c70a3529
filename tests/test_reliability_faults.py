"""A rank that fails, dies, hangs or is signalled mid-run: the job ends, the run stays readable.

Every job is a real `mpirun` (torchrun for one slow variant) of `commbench run allreduce` over a
handful of tiny points; COMMBENCH_FAULT (commbench/measure/faults.py) makes one rank misbehave at a
chosen point, so "mid-run" is exact: points before it are on disk, the rest never start.

What Open MPI 5's mpirun does, and these tests rely on: a rank exiting non-zero, aborting or
killed makes it send every other rank SIGCONT, then SIGTERM, then SIGKILL 0.25 s apart; SIGINT,
SIGTERM or SIGHUP to mpirun does the same (it does not forward SIGINT); SIGUSR1/SIGUSR2 are
forwarded to every rank as they are.
"""

from __future__ import annotations

import signal
import time

import pytest
from reliability import (
    check_fit_accepts,
    check_intact,
    meta,
    reliability_counts,  # noqa: F401
    run_args,
    start,
    wait_for_records,
)

from conftest import needs_torch

pytestmark = pytest.mark.mpi

DOWN_S = 20  # a failing job is gone this soon after its fault (typically < 1 s; 2 busy cores)


# ---- an exception or a crash on one rank ----


def test_exception_on_one_rank_fails_the_job(tmp_path):
    job = start(4, *run_args(tmp_path, "raise"), fault="rank=2,point=3,kind=raise")
    out, elapsed = job.down_after(tmp_path / "raise", 3)
    assert out.returncode == 3, out.output
    assert elapsed < DOWN_S
    assert "commbench: rank 2: error: InjectedFault" in out.stderr
    assert "Traceback" not in out.output
    m = meta(tmp_path, "raise")
    assert m["status"] == "failed" and m["error"].startswith("rank 2: InjectedFault"), m
    check_intact(tmp_path / "raise", points=3)
    check_fit_accepts(tmp_path / "raise")


@pytest.mark.parametrize("kind", ["exit", "sigkill"])
def test_crash_of_one_rank_ends_the_job(tmp_path, kind):
    job = start(4, *run_args(tmp_path, kind), fault=f"rank=1,point=3,kind={kind}")
    out, elapsed = job.down_after(tmp_path / kind, 3)
    assert out.returncode != 0 and elapsed < DOWN_S, out.output
    run = check_intact(tmp_path / kind, points=3)
    # rank 0 only sees the launcher's SIGTERM: the crash left it no word
    assert run.status == "interrupted" and run.meta["stop_signal"] == "SIGTERM", run.meta
    check_fit_accepts(tmp_path / kind)


def test_kill9_of_a_rank_mid_run(tmp_path):
    """The issue's case: SIGKILL one non-zero rank from outside while the job is mid-run."""
    # rank 0 lingers at point 3, so the job is mid-run, with 3 points on disk, when we strike
    job = start(4, *run_args(tmp_path, "k9"), fault="rank=0,point=3,kind=delay,seconds=60")
    wait_for_records(tmp_path / "k9", 3, job)
    assert sorted(job.rank_pids()) == [0, 1, 2, 3]
    job.kill_rank(2)
    t_kill = time.monotonic()
    out, _ = job.finish(timeout=60)
    assert out.returncode != 0, out.output
    assert time.monotonic() - t_kill < 60
    run = check_intact(tmp_path / "k9", points=3)
    assert run.partial and run.status == "interrupted"
    check_fit_accepts(tmp_path / "k9")


def test_kill9_of_rank0_keeps_finished_points(tmp_path):
    job = start(2, *run_args(tmp_path, "k0"), fault="rank=0,point=3,kind=sigkill")
    out, elapsed = job.down_after(tmp_path / "k0", 3)
    assert out.returncode != 0 and elapsed < DOWN_S, out.output
    run = check_intact(tmp_path / "k0", points=3)
    assert run.status == "running"  # the writer died without a word: still readable, partial
    check_fit_accepts(tmp_path / "k0")


def test_usage_error_on_every_rank_mid_run(tmp_path):
    """Bad input found late by every rank alike: one line from rank 0, status 2, run failed."""
    job = start(4, *run_args(tmp_path, "uall"), fault="rank=all,point=2,kind=usage")
    out, elapsed = job.down_after(tmp_path / "uall", 2)
    assert out.returncode == 2 and elapsed < DOWN_S, out.output
    lines = [x for x in out.stderr.splitlines() if x.startswith("commbench: error")]
    assert lines == [
        "commbench: error: injected fault 'usage' on every rank at point 2 (COMMBENCH_FAULT)"
    ], out.stderr
    m = check_intact(tmp_path / "uall", points=2).meta
    assert m["status"] == "failed" and "injected fault 'usage'" in m["error"]


def test_usage_error_on_one_rank_mid_run(tmp_path):
    """Bad input only one rank sees (a file missing on one node): that rank says so."""
    job = start(4, *run_args(tmp_path, "u1"), fault="rank=1,point=2,kind=usage")
    out, elapsed = job.down_after(tmp_path / "u1", 2)
    assert out.returncode == 2 and elapsed < DOWN_S, out.output
    assert "commbench: rank 1: error: injected fault 'usage' on rank 1" in out.stderr
    m = check_intact(tmp_path / "u1", points=2).meta
    assert m["status"] == "failed" and m["error"].startswith("rank 1: injected fault"), m


# ---- signals ----


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_mpirun_marks_interrupted(tmp_path, sig):
    """Ctrl-C (or SIGTERM) to mpirun: ranks get SIGTERM and 0.25 s later SIGKILL. The run is
    marked interrupted at once and keeps every finished point."""
    job = start(2, *run_args(tmp_path, sig.name), fault="rank=1,point=3,kind=delay,seconds=60")
    wait_for_records(tmp_path / sig.name, 3, job)
    t_signal = time.monotonic()
    job.signal(sig)
    out, _ = job.finish(timeout=30)
    assert out.returncode != 0 and time.monotonic() - t_signal < 10, out.output
    run = check_intact(tmp_path / sig.name, points=3)
    assert run.status == "interrupted" and run.meta["stop_signal"] == "SIGTERM", run.meta
    check_fit_accepts(tmp_path / sig.name)


def test_sigusr1_to_mpirun_stops_gracefully(tmp_path):
    """SIGUSR1 reaches every rank as is: the current point finishes, then the job stops."""
    job = start(2, *run_args(tmp_path, "usr1"), fault="rank=1,point=2,kind=delay,seconds=3")
    wait_for_records(tmp_path / "usr1", 2, job)
    # Point 2 is current once both ranks agreed to start it; rank 0 gets there as soon as its
    # write of record 2 is durable (fsync), which the file shows before it returns. Rank 1 then
    # sits in its 3 s delay, so a signal 1 s later lands inside point 2.
    time.sleep(1.0)
    job.signal(signal.SIGUSR1)
    out, _ = job.finish(timeout=60)
    assert out.returncode == 130, out.output
    assert "# interrupted: stopped after 3 records" in out.stdout
    run = check_intact(tmp_path / "usr1", points=3)
    assert run.status == "interrupted" and run.meta["stop_signal"] == "SIGUSR1"
    check_fit_accepts(tmp_path / "usr1")


@pytest.mark.parametrize("rank,kind", [(1, "sigint"), (0, "sigterm")])
def test_signal_to_one_rank_stops_all(tmp_path, rank, kind):
    """A signal to a single rank (not via mpirun): every rank stops after the current point."""
    job = start(4, *run_args(tmp_path, kind), fault=f"rank={rank},point=2,kind={kind}")
    out, elapsed = job.down_after(tmp_path / kind, 3)
    assert out.returncode == 130 and elapsed < DOWN_S, out.output
    run = check_intact(tmp_path / kind, points=3)
    assert run.status == "interrupted"
    check_fit_accepts(tmp_path / kind)


# ---- a hang: the watchdog ----


@pytest.mark.parametrize("backend", ["mpi", pytest.param("gloo", marks=needs_torch)])
def test_hang_on_one_rank_is_aborted_after_timeout(tmp_path, backend):
    timeout = 5
    job = start(
        2 if backend == "gloo" else 4,
        *run_args(tmp_path, "hang", 6, "--backend", backend, "--timeout", str(timeout)),
        fault="rank=1,point=2,kind=hang",
    )
    out, waited = job.down_after(tmp_path / "hang", 2)
    assert out.returncode == 3, out.output
    assert waited < timeout + 10, f"aborted {waited:.1f} s after the hang"
    assert f"no progress for {timeout} s in point 3" in out.stderr  # numbered as tables are
    assert "rank 1 never reached point 3 (it is at point 2)" in out.stderr
    m = meta(tmp_path, "hang")
    assert m["status"] == "failed" and "no progress" in m["error"]
    check_intact(tmp_path / "hang", points=2)


# ---- gloo: the same containment through torch.distributed ----


@needs_torch
def test_gloo_exception_on_one_rank(tmp_path):
    job = start(
        2, *run_args(tmp_path, "graise", 4, "--backend", "gloo"), fault="rank=1,point=2,kind=raise"
    )
    out, elapsed = job.down_after(tmp_path / "graise", 2, timeout=90)
    assert out.returncode == 3 and elapsed < DOWN_S, out.output
    m = meta(tmp_path, "graise")
    assert m["status"] == "failed" and m["error"].startswith("rank 1: InjectedFault"), m
    check_intact(tmp_path / "graise", points=2)


@needs_torch
def test_gloo_peer_killed(tmp_path):
    """A gloo peer killed mid-run: the survivors fail at once (connection reset), no hang."""
    job = start(
        2, *run_args(tmp_path, "gkill", 4, "--backend", "gloo"), fault="rank=1,point=3,kind=sigkill"
    )
    out, elapsed = job.down_after(tmp_path / "gkill", 3, timeout=90)
    assert out.returncode != 0 and elapsed < DOWN_S, out.output
    run = check_intact(tmp_path / "gkill", points=3)
    assert run.partial
    check_fit_accepts(tmp_path / "gkill")
