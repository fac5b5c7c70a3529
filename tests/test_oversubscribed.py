"""Ranks that outnumber the cores they share are said to, at run time and by the fitter: their
times measure the scheduler (a rank waiting for a core waits a 4 ms tick at a time)."""

from __future__ import annotations

import json
import os

import pytest

from commbench.measure.launch import oversubscribed

from conftest import run_mpi, run_single


def test_hosts_whose_ranks_outnumber_their_cores():
    hosts, cores = ["a"] * 3 + ["b"] * 4, [(0, 1)] * 3 + [(0, 1, 2, 3)] * 4
    assert oversubscribed(hosts, cores) == [{"host": "a", "ranks": 3, "cores": 2}]
    # emulated nodes are namespaces of one machine: the session counts them as one host
    assert oversubscribed(["emulated nodes"] * 7, cores) == [
        {"host": "emulated nodes", "ranks": 7, "cores": 4}
    ]
    assert oversubscribed(["a"] * 4, [(0, 1, 2, 3)] * 4) == []


@pytest.mark.mpi
def test_a_run_with_more_ranks_than_cores_says_so(tmp_path):
    """4 ranks on this machine: the run warns, meta.json records it, and fit notes it, exactly
    when the machine has fewer than 4 CPUs (none of it otherwise)."""
    job = run_mpi(
        4, "run", "allreduce", "-b", "8", "-e", "64", "--iters", "2",
        "--results", str(tmp_path), "--run-id", "o",
    )  # fmt: skip
    assert job.returncode == 0, job.output
    expected = (os.cpu_count() or 1) < 4
    assert ("ranks share cores" in job.stderr) == expected
    meta = json.loads((tmp_path / "o" / "meta.json").read_text())
    assert bool(meta["oversubscribed"]) == expected
    fit = run_single("fit", str(tmp_path / "o"), timeout=60)
    assert fit.returncode == 0, fit.output
    assert ("waited for a core" in fit.stdout) == expected
