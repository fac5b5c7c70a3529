"""The OSU/IMB-style ops under real mpirun: pingpong's two buffers, each new op checked exactly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, job_env, mpirun_path


@pytest.mark.mpi
@pytest.mark.parametrize("native", ["1", "0"])
def test_pingpong_sends_and_receives_through_two_buffers(native):
    """Fails on the one-buffer form: rank 0 would find its own pattern echoed back."""
    cmd = [mpirun_path(), "-n", "2", "--oversubscribe", sys.executable, "tests/pingpong_job.py"]
    p = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=120,
        env=job_env({"COMMBENCH_NATIVE": native}),
        cwd=REPO,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    loop = "native" if native == "1" else "python"
    assert p.stdout.count(f"pingpong two buffers ok, loop {loop}") == 2, p.stdout
