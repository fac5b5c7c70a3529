"""GPU timing arithmetic (pre-roll length, _sleep cycles) and what every run writes about
how it timed: the GPU timer in meta.json and each rank's device identity."""

from __future__ import annotations

import json

import pytest

from commbench.measure.runner import TimingConfig
from commbench.measure.transport.base import ENQUEUE, GPU_TIMERS, PRE_ROLL
from commbench.measure.transport.gputime import (
    PRE_ROLL_MAX_S,
    PRE_ROLL_MIN_S,
    preroll_seconds,
    sleep_cycles,
)

from conftest import needs_torch, run_mpi, run_single


def test_preroll_hides_a_few_times_the_enqueue_within_bounds():
    assert preroll_seconds(0.0) == PRE_ROLL_MIN_S
    assert preroll_seconds(25e-6) == pytest.approx(max(PRE_ROLL_MIN_S, 75e-6))
    assert preroll_seconds(1e-3) == pytest.approx(3e-3)  # a slow host still hidden
    assert preroll_seconds(1.0) == PRE_ROLL_MAX_S
    for enqueue in (1e-6, 30e-6, 2e-3, 10e-3):
        assert preroll_seconds(enqueue) > enqueue


def test_sleep_cycles_follow_the_measured_rate_not_an_assumed_clock():
    h200 = 1.98e9
    assert sleep_cycles(1e-3, h200) == 1_980_000  # 1.4 GHz would have slept 29% short
    assert sleep_cycles(1e-3, 1.4e9) == 1_400_000
    assert sleep_cycles(0.0, h200) == 1
    with pytest.raises(AssertionError):
        sleep_cycles(1e-3, 0.0)


def test_the_gpu_timer_is_a_choice_defaulting_to_pre_roll():
    assert GPU_TIMERS == (PRE_ROLL, ENQUEUE)
    assert TimingConfig().gpu_timer == PRE_ROLL
    with pytest.raises(AssertionError):
        TimingConfig(gpu_timer="wallclock")
    job = run_single("run", "allreduce", "--gpu-timer", "wallclock")
    assert job.returncode == 2 and "invalid choice: 'wallclock'" in job.stderr


def test_meta_records_the_timer_and_every_ranks_device(tmp_path):
    job = run_mpi(
        2, "run", "allreduce", "--sizes", "8", "--iters", "2", "--gpu-timer", "enqueue",
        "--results", str(tmp_path), "--run-id", "m", "--backend", "mpi",
    )  # fmt: skip
    assert job.returncode == 0, job.output
    meta = json.loads((tmp_path / "m" / "meta.json").read_text())
    assert meta["gpu_timer"] == "enqueue"
    assert [(d["local_rank"], d["device"]) for d in meta["devices"]] == [(0, "cpu"), (1, "cpu")]
    assert all(d["host"] == meta["hosts"][0] for d in meta["devices"])


@needs_torch
def test_gloo_records_say_python_loop(tmp_path):
    job = run_mpi(
        2, "run", "allreduce", "--sizes", "8", "--iters", "2", "--backend", "gloo",
        "--results", str(tmp_path), "--run-id", "g", timeout=120,
    )  # fmt: skip
    assert job.returncode == 0, job.output
    rec = json.loads((tmp_path / "g" / "records.jsonl").read_text().splitlines()[0])
    assert rec["loop"] == "python" and rec["wrong"] == 0
    meta = json.loads((tmp_path / "g" / "meta.json").read_text())
    assert [d["device"] for d in meta["devices"]] == ["cpu", "cpu"]
