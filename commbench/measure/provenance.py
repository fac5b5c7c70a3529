"""Provenance for meta.json: the commit, the environment settings that change what is measured,
the emulated topology a job runs on (set by `commbench emulate`), and whether ranks outnumber
the cores they share."""

from __future__ import annotations

import os
from pathlib import Path

ENV_PREFIXES = (
    "NCCL_",
    "OMPI_MCA_",
    "UCX_",
    "FI_",
    "GLOO_",
    "TORCH_NCCL",
    "MPICH_",
    "I_MPI_",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "SLURM_JOB_ID",
    "COMMBENCH_",
)


def git_revision() -> str | None:
    """The commit commbench runs from, when it runs from a git checkout (rank 0's, at
    start-up: subprocess is imported here, not by every rank)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


ENV_EMULATION = "COMMBENCH_EMULATION"  # set by `commbench emulate`: the topology as JSON


def relevant_env() -> dict[str, str]:
    """NCCL/MPI/UCX settings and the like that change what is measured."""
    return {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith(ENV_PREFIXES) and k != ENV_EMULATION
    }


def emulation() -> dict | None:
    """The emulated topology this job runs on (ground truth for meta.json), if any."""
    text = os.environ.get(ENV_EMULATION)
    if not text:  # every rank asks before MPI starts: json only when there is a topology
        return None
    import json

    return json.loads(text)
