"""Reliability findings of a new user's first runs (issue 19), one test per finding.

Each test was written before its fix and failed on the code it fixes: a rank stopped during
start-up, failure lines in imported logs, a diagnostics directory that cannot be written,
inputs that scale work without a bound, litter and wording, first use on a small box.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from reliability import (
    COUNTS,
    reliability_counts,  # noqa: F401
    run_args,
    start,
)

pytestmark = pytest.mark.mpi


def test_rank_stopped_before_mpi_init_is_timed_out(tmp_path):
    """A rank stopped ~0.2 s after launch (a node stuck importing Python from a hung
    filesystem) never reaches MPI_Init: its peers block inside MPI's initialisation, where no
    Python thread runs, so the start-up watchdog must not be a Python thread."""
    timeout = 4
    job = start(2, *run_args(tmp_path, "stopped", 2, "--timeout", str(timeout)))
    deadline = time.monotonic() + 20
    pids: dict[int, int] = {}
    while time.monotonic() < deadline and 1 not in pids:
        pids = job.rank_pids()
        time.sleep(0.02)
    assert 1 in pids, "rank 1 never started"
    time.sleep(0.2)
    os.kill(pids[1], signal.SIGSTOP)
    COUNTS["faults injected"] += 1
    out, elapsed = job.finish(timeout=60)
    assert out.returncode != 0, out.output
    assert f"no progress for {timeout} s in start-up" in out.stderr, out.output
    assert "Traceback" not in out.output
    assert elapsed < timeout + 30  # start-up on 2 shared cores
