"""Shared test helpers: launch real `mpirun` jobs of commbench and read what they wrote."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def mpirun_path() -> str | None:
    """The mpirun beside this Python (Open MPI from PyPI), else the one on PATH."""
    local = Path(sys.executable).parent / "mpirun"
    return str(local) if local.exists() else shutil.which("mpirun")


def job_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe",
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        PYTHONUNBUFFERED="1",
    )
    env.pop("COMMBENCH_DEBUG", None)
    # Open MPI 5.0's libfabric BTL sleeps 1 s as it closes, in every MPI_Init here (no fabric):
    # a second per launched job; single-node and emulated jobs run over sm and tcp
    env.setdefault("OMPI_MCA_btl", "^ofi")
    env.update(extra or {})
    return env


@dataclass
class Job:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def commbench_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "commbench", *args]


def run_mpi(n: int, *args: str, timeout: float = 120, env: dict | None = None) -> Job:
    """`mpirun -n N --oversubscribe python -m commbench ARGS`, with a hard timeout."""
    mpirun = mpirun_path()
    if mpirun is None:
        pytest.skip("no mpirun")
    cmd = [mpirun, "-n", str(n), "--oversubscribe", *commbench_cmd(*args)]
    p = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=job_env(env), cwd=REPO
    )
    return Job(p.returncode, p.stdout, p.stderr)


TINY = {"name": "tiny", "layers": 2, "hidden": 128, "ffn_hidden": 256, "heads": 4,
        "kv_heads": 2, "vocab": 512, "seq_len": 64}  # fmt: skip


def run_checked_step(tmp_path: Path, ranks: int, degrees: dict, options: dict, **model) -> Path:
    """A one-run suite of pattern step on TINY (`model` overrides its fields) under `mpirun -n
    ranks`, asserted to exit 0 with every point's data checked; the suite file (the run is
    tmp_path/"s")."""
    suite = tmp_path / "step.yaml"
    run = {"pattern": "step", "name": "step", "models": [{**TINY, **model}],
           "degrees": degrees, "options": options}  # fmt: skip
    suite.write_text(  # JSON is YAML
        json.dumps(
            {
                "description": "a checked step",
                "max_bytes": "4M",
                "runs": [run],
                "timing": {"budget": 0.01, "min_iters": 2, "max_iters": 3},
            }
        )  # fmt: skip
    )
    job = run_mpi(ranks, "suite", str(suite), "--results", str(tmp_path), "--run-id", "s",
                  timeout=200)  # fmt: skip
    assert job.returncode == 0, job.output
    assert "Points with wrong data : 0 of 1 (checked)" in job.stdout, job.stdout
    return suite


def run_single(*args: str, timeout: float = 120, env: dict | None = None) -> Job:
    """`python -m commbench ARGS` as one plain process."""
    p = subprocess.run(
        commbench_cmd(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=job_env(env),
        cwd=REPO,
    )
    return Job(p.returncode, p.stdout, p.stderr)


def has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


needs_torch = pytest.mark.skipif(not has_torch(), reason="torch not installed")
