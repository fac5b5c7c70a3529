"""Faults in the middle of `commbench suite`: a rank killed, a signal to mpirun, an exception.

The suite (written below) is three points on 4 ranks: an allreduce sweep (8 sizes), a TP
training step of a tiny model, an allgather sweep (8 sizes). COMMBENCH_FAULT counts the
runner's measured steps across the whole suite, so "mid-suite" is exact: the fault lands in
the third point, after the first two points (their steps and point records) and two of its
own steps are on disk. Each run must then read back intact, hold exactly those records in
order, and be accepted by `commbench fit` (which fits the allreduce sweep and says the run is
partial). Open MPI's handling of signals is described in test_reliability_faults.py.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from reliability import (
    FAST_POINTS,
    check_fit_accepts,
    check_intact,
    reliability_counts,  # noqa: F401
    start,
    wait_for_records,
)

from commbench.traffic.execution import plan
from commbench.traffic.points import expand
from commbench.traffic.suitefile import load_suite

pytestmark = pytest.mark.mpi

DOWN_S = 20  # as in test_reliability_faults.py
SUITE = """\
description: reliability faults mid-suite (tiny)
runs:
  - pattern: collectives
    name: sweep-allreduce
    options: {ops: [allreduce], min_bytes: 8, max_bytes: 1K, factor: 2, group_sizes: [WORLD],
              placements: [contiguous]}
  - pattern: tp
    models: [{name: tiny, layers: 2, hidden: 64, ffn_hidden: 128, heads: 4, vocab: 256,
              seq_len: 16}]
    degrees: {tp: 2}
  - pattern: collectives
    name: sweep-allgather
    options: {ops: [allgather], min_bytes: 64, max_bytes: 8K, factor: 2, group_sizes: [WORLD],
              placements: [contiguous]}
"""
INTO_LAST = 2  # the fault strikes after this many steps of the last point


def write_suite(tmp_path: Path, world: int) -> Path:
    path = tmp_path / "faults.yaml"
    path.write_text(SUITE.replace("WORLD", str(world)))
    return path


def steps_per_point(path: Path, world: int, backend: str = "mpi") -> list[int]:
    """Measured steps of each point, as `commbench suite` will run them (the same plan)."""
    return [
        len(plan(pt.program, pt.layout, backend, 128 << 20))
        for pt in expand(load_suite(path), world)
    ]


def expected_kinds(per_point: list[int], steps_done: int) -> list[str]:
    """The record kinds on disk once `steps_done` steps finished: each finished point's steps
    then its point record; the current point's finished steps."""
    kinds: list[str] = []
    for n in per_point:
        take = min(n, steps_done)
        kinds += ["step"] * take
        steps_done -= take
        if take < n:
            break
        kinds.append("point")
    return kinds


def suite_args(tmp_path: Path, suite: Path, run_id: str, *extra: str) -> tuple[str, ...]:
    return ("suite", str(suite), *FAST_POINTS, "--results", str(tmp_path), "--run-id", run_id,
            *extra)  # fmt: skip


def check_suite_run(run_dir: Path, kinds: list[str]):
    """Intact (reliability.check_intact), exactly these records in this order, every point
    record naming its point, then accepted by fit as a partial run."""
    run = check_intact(run_dir)
    assert [r["kind"] for r in run.records] == kinds, [r["kind"] for r in run.records]
    points = [r for r in run.records if r["kind"] == "point"]
    assert [p["point"] for p in points] == list(range(1, len(points) + 1))
    for rec in run.records:
        assert rec["kind"] == "point" or rec["wrong"] == 0
    assert run.partial
    check_fit_accepts(run_dir)
    return run


@pytest.fixture
def suite4(tmp_path):
    """The suite for 4 ranks, its steps per point, the fault's step and the records before it."""
    path = write_suite(tmp_path, 4)
    per_point = steps_per_point(path, 4)
    assert len(per_point) == 3 and per_point[-1] > INTO_LAST
    fault_at = sum(per_point[:-1]) + INTO_LAST
    return path, per_point, fault_at, expected_kinds(per_point, fault_at)


def test_kill9_of_a_rank_mid_suite(tmp_path, suite4):
    """The issue's case for suites: SIGKILL a non-zero rank while the suite is mid-point."""
    path, _, fault_at, kinds = suite4
    job = start(4, *suite_args(tmp_path, path, "k9"),
                fault=f"rank=0,point={fault_at},kind=delay,seconds=60")  # fmt: skip
    wait_for_records(tmp_path / "k9", len(kinds), job)
    job.kill_rank(2)
    t_kill = time.monotonic()
    out, _ = job.finish(timeout=60)
    assert out.returncode != 0, out.output
    assert time.monotonic() - t_kill < 60
    run = check_suite_run(tmp_path / "k9", kinds)
    assert run.status == "interrupted"


def test_exception_on_one_rank_mid_suite(tmp_path, suite4):
    path, _, fault_at, kinds = suite4
    job = start(4, *suite_args(tmp_path, path, "raise"),
                fault=f"rank=3,point={fault_at},kind=raise")  # fmt: skip
    out, elapsed = job.down_after(tmp_path / "raise", len(kinds))
    assert out.returncode == 3 and elapsed < DOWN_S, out.output
    assert "commbench: rank 3: error: InjectedFault" in out.stderr
    assert "Traceback" not in out.output
    run = check_suite_run(tmp_path / "raise", kinds)
    assert run.status == "failed" and run.meta["error"].startswith("rank 3: InjectedFault")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_mpirun_mid_suite(tmp_path, suite4, sig):
    """Ctrl-C or SIGTERM to mpirun: the ranks get SIGTERM, then SIGKILL 0.25 s later; the run
    is marked interrupted at once and keeps every finished step and point."""
    path, _, fault_at, kinds = suite4
    job = start(4, *suite_args(tmp_path, path, sig.name),
                fault=f"rank=1,point={fault_at},kind=delay,seconds=60")  # fmt: skip
    wait_for_records(tmp_path / sig.name, len(kinds), job)
    t_signal = time.monotonic()
    job.signal(sig)
    out, _ = job.finish(timeout=30)
    assert out.returncode != 0 and time.monotonic() - t_signal < 10, out.output
    run = check_suite_run(tmp_path / sig.name, kinds)
    assert run.status == "interrupted" and run.meta["stop_signal"] == "SIGTERM", run.meta


def test_sigusr1_to_mpirun_stops_the_suite_gracefully(tmp_path, suite4):
    """SIGUSR1 reaches every rank: the current step finishes and is kept, then the suite stops
    before the next one, with status interrupted and exit 130."""
    path, per_point, fault_at, kinds = suite4
    job = start(4, *suite_args(tmp_path, path, "usr1"),
                fault=f"rank=1,point={fault_at},kind=delay,seconds=2")  # fmt: skip
    wait_for_records(tmp_path / "usr1", len(kinds), job)
    # as in test_reliability_faults: the records file shows the last record before rank 0's
    # fsync returns and it agrees to start the next step, so a signal at once can land between
    # steps; rank 1 then sits in its 2 s delay, so 1 s later the signal lands inside the step
    time.sleep(1.0)
    job.signal(signal.SIGUSR1)
    out, _ = job.finish(timeout=60)
    assert out.returncode == 130, out.output
    kinds = expected_kinds(per_point, fault_at + 1)
    assert f"# interrupted: stopped after {len(kinds)} records" in out.stdout
    run = check_suite_run(tmp_path / "usr1", kinds)
    assert run.status == "interrupted" and run.meta["stop_signal"] == "SIGUSR1"


# ---- longer variants ----


@pytest.mark.slow
def test_kill9_mid_suite_8_ranks(tmp_path):
    path = write_suite(tmp_path, 8)
    per_point = steps_per_point(path, 8)
    fault_at = sum(per_point[:-1]) + INTO_LAST
    kinds = expected_kinds(per_point, fault_at)
    job = start(8, *suite_args(tmp_path, path, "k9"),
                fault=f"rank=0,point={fault_at},kind=delay,seconds=90")  # fmt: skip
    wait_for_records(tmp_path / "k9", len(kinds), job, timeout=120)
    job.kill_rank(5)
    out, _ = job.finish(timeout=90)
    assert out.returncode != 0, out.output
    check_suite_run(tmp_path / "k9", kinds)


@pytest.mark.slow
def test_gloo_peer_killed_mid_suite(tmp_path):
    """On torch.distributed gloo: a peer SIGKILLed mid-suite fails the survivors at once."""
    pytest.importorskip("torch")
    path = write_suite(tmp_path, 4)
    per_point = steps_per_point(path, 4, "gloo")
    fault_at = sum(per_point[:-1]) + INTO_LAST
    kinds = expected_kinds(per_point, fault_at)
    job = start(4, *suite_args(tmp_path, path, "g9", "--backend", "gloo"),
                fault=f"rank=2,point={fault_at},kind=sigkill")  # fmt: skip
    out, elapsed = job.down_after(tmp_path / "g9", len(kinds), timeout=120)
    assert out.returncode != 0 and elapsed < DOWN_S, out.output
    check_suite_run(tmp_path / "g9", kinds)


@pytest.mark.slow
def test_kill9_at_random_moments_of_a_suite(tmp_path):
    """No chosen step: kill a random non-zero rank at a random time of the smoke suite, three
    times (with more iterations, so the suite is still running). Whatever was written reads
    back (a torn last line allowed: mpirun may SIGKILL rank 0 mid-write), points in order."""
    import random

    rng = random.Random(11)
    for k in range(3):
        run_id = f"rnd{k}"
        job = start(4, "suite", "smoke", "--iters", "20", "--warmup", "1", "--results",
                    str(tmp_path), "--run-id", run_id)  # fmt: skip
        wait_for_records(tmp_path / run_id, 1, job, timeout=120)
        time.sleep(rng.uniform(0.0, 1.5))
        victims = [r for r in job.rank_pids() if r != 0]
        if victims:
            job.kill_rank(rng.choice(victims))
        out, _ = job.finish(timeout=90)
        if out.returncode == 0:
            continue
        run = check_intact(tmp_path / run_id, allow_torn=True)
        points = [r["point"] for r in run.records if r["kind"] == "point"]
        assert points == list(range(1, len(points) + 1))
