"""The C heap's policy under a real mpirun: Open MPI's per-call scratch is carved from the heap
and kept when freed (heap.keep_scratch), so a call never pays page faults that depend on the
sizes the process ran before. Under glibc's default the 21.85 MB temporaries of one
reduce_scatter are mmapped and unmapped again, and the heap keeps almost nothing free."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO, job_env, mpirun_path


def test_reduce_scatter_scratch_stays_in_the_heap():
    cmd = [mpirun_path(), "-n", "2", "--oversubscribe", sys.executable,
           str(REPO / "tests/heap_job.py")]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=job_env(), cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["heap"]["policy"] == "kept", out
    assert out["hblkhd"] < out["bytes"], out  # nothing of S size left mmapped
    assert out["fordblks"] >= out["bytes"], out  # the freed scratch stays in the heap
