"""Measurements under load: a point's iteration count survives a preempted probe.

On a loaded 2-core box `run pingpong --sizes 64K,1M` gave the 64 KiB point 14-16 iterations in
2 of 3 runs (2000 in the third): the probe that sizes a point to its `--budget` took descheduled
iterations for the op's cost. COMMBENCH_FAULT's `preempt` kind (commbench/measure/faults.py)
deschedules every probe iteration of one point on one rank, the worst case of that: the count
must still come out of what the timed iterations cost, not out of the probe.
"""

from __future__ import annotations

import json

import pytest
from reliability import reliability_counts, start  # noqa: F401

from commbench.measure.faults import Injector, parse

pytestmark = pytest.mark.mpi


def test_preempt_fault_delays_only_its_rank_and_points_probe():
    fault = parse("rank=1,point=0,kind=preempt,seconds=0.02")
    assert Injector(1, fault).preempt_s(0) == 0.02
    assert Injector(1, fault).preempt_s(1) == 0.0
    assert Injector(0, fault).preempt_s(0) == 0.0
    Injector(1, fault).at(0)  # the point's start is left alone: only the probe is delayed


def test_a_preempted_probe_does_not_collapse_the_iteration_count(tmp_path):
    """Every probe iteration of the first point on rank 1 descheduled for 50 ms: the old probe
    sized that point to 0.2 s / 50 ms -> the 5-iteration floor, whatever the op cost. Now the
    timed iterations' own median decides: 5 only if the op itself took over 20 ms (a box so
    loaded that 5 fill the budget half), else more."""
    args = ("run", "pingpong", "--sizes", "64K,128K", "--budget", "0.2", "--results",
            str(tmp_path), "--run-id", "pre")  # fmt: skip
    out, _ = start(2, *args, fault="rank=1,point=0,kind=preempt,seconds=0.05").finish(120)
    assert out.returncode == 0, out.output
    lines = (tmp_path / "pre" / "records.jsonl").read_text().splitlines()
    preempted = json.loads(lines[0])  # point 0
    assert preempted["iters"] > 5 or preempted["time_us"] > 10_000, preempted


def test_a_clipped_count_is_said_with_the_fix():
    from commbench.commands.clipnote import clipped
    from commbench.measure.runner import TimingConfig

    cfg = TimingConfig(budget_s=0.2)
    assert clipped([40, 900], cfg) is None
    note = clipped([5, 40, 2000, 2000], cfg)
    assert note is not None and note.startswith("# iterations clipped: 1 point(s) at the floor")
    assert "an iteration took over 0.2 s / 5" in note and "2 at the cap of 2000" in note
    assert note.endswith("-n N -w W fixes the counts (OSU's -i/-x)")
    assert clipped([5], TimingConfig(iters=5, warmup=1)) is None  # asked for: not clipped


def test_run_says_when_the_budget_clipped_a_count(tmp_path):
    """A budget of 1 ms cannot hold 5 iterations of a 4 MiB all-reduce: the floor, said."""
    args = ("run", "allreduce", "--sizes", "4M", "--budget", "0.001", "--results",
            str(tmp_path), "--run-id", "clip")  # fmt: skip
    out, _ = start(2, *args).finish(120)
    assert out.returncode == 0, out.output
    assert "# iterations clipped: 1 point(s) at the floor of 5" in out.stdout, out.stdout
