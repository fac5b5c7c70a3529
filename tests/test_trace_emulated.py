"""`commbench trace` on a job across emulated nodes (network namespaces, each its own host
name): tests/trace_job.py on 4 nodes x 1 rank, so the tp2 groups span two nodes, and the
traces' host names alone (no --ranks-per-node) trip the "TP groups span nodes" finding.
Root only; slow (four torchruns, each importing torch)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys

import pytest

from commbench.emulate import jobs, netns
from commbench.emulate.topology import EmulatedCluster

from conftest import REPO, run_single

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or any(shutil.which(t) is None for t in netns.TOOLS),
        reason="emulated nodes need root and iproute2/tc/unshare",
    ),
]
TAG = f"cbtr{os.getpid() % 10}"


def test_tp_across_emulated_nodes_is_found_from_host_names(tmp_path):
    pytest.importorskip("torch")
    c = EmulatedCluster(nodes=4, ranks_per_node=1, link_rate_bps=1e9, tag=TAG)
    out = tmp_path / "traces"
    job = jobs.gloo_job(c, ["run", "pingpong"], tmp_path)  # the launch; the command replaced
    cut = len(jobs.commbench_argv(["run", "pingpong"]))
    script = [sys.executable, str(REPO / "tests" / "trace_job.py"), str(out)]
    job = dataclasses.replace(job, argvs=[argv[:-cut] + script for argv in job.argvs])
    netns.create(c)
    try:
        rc = jobs.run(job)
    finally:
        netns.destroy(c)
    assert rc == 0
    got = run_single("trace", str(out / "tpdp"))
    assert got.returncode == 0, got.output
    assert "# finding: TP groups span nodes: group [0, 1] sits on nodes [0, 1]" in got.stdout
    assert run_single("trace", str(out / "pp")).stdout.count("TP groups span") == 0
