"""`commbench trace` on issue 31's real-PyTorch jobs (tests/pytorch_jobs/run.py, torchtitan-
style TP, FSDP2, TP x FSDP2 and DDP on gloo, each writing its op log and a profiled trace):
every op of every rank lands on its logged group. Slow (torch in 4 ranks)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from commbench.trace.pipeline import analyse

from conftest import REPO, job_env

RUN = REPO / "tests" / "pytorch_jobs" / "run.py"
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("world, config", [(4, "tp-fsdp"), (2, "fsdp"), (2, "tp-sp")])
def test_framework_job_ops_land_on_their_logged_groups(tmp_path, world, config):
    pytest.importorskip("torch")
    logs, traces = tmp_path / "log", tmp_path / "traces"
    cmd = [sys.executable, str(RUN), "--world", str(world), "--out", str(logs),
           "--profile", str(traces), config]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=job_env(), cwd=REPO)
    assert p.returncode == 0, p.stderr[-2000:]
    job = analyse([str(traces / config)], None, None)
    for rank in range(world):
        logged = json.loads((logs / config / f"rank{rank}.json").read_text())["ops"]
        want = [(o["op"], sorted(o["ranks"])) for o in logged]
        got = [(o.op, sorted(o.group_ranks or ())) for o in job.ops[rank]]
        assert got == want, rank
