"""Control-plane waits sleep (docs/design.md, "Control-plane waits sleep"): a rank waiting in
`settle()` for rank 0's serial work leaves the CPU to it, where Open MPI's blocking barrier
busy-polls. Measured as CPU time, which a loaded machine does not blur the way it does wall
time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO, job_env, mpirun_path


@pytest.mark.mpi
def test_a_rank_waiting_in_settle_burns_no_cpu_while_a_barrier_spins():
    mpirun = mpirun_path()
    assert mpirun is not None
    job = subprocess.run(
        [mpirun, "-n", "2", "--oversubscribe", sys.executable, str(REPO / "tests/settle_job.py")],
        capture_output=True, text=True, timeout=120, env=job_env(), cwd=REPO,
    )  # fmt: skip
    assert job.returncode == 0, job.stdout + job.stderr
    cpu = json.loads(job.stdout.strip().splitlines()[-1])
    # rank 0 sleeps 0.4 s: the sleeping wait costs milliseconds, the spinning one most of it
    assert cpu["settle"] < 0.05, cpu
    assert cpu["barrier"] > 4 * cpu["settle"], cpu
