"""Provenance for meta.json: the commit, the environment settings that change what is measured,
the emulated topology a job runs on (set by `commbench emulate`), and whether ranks outnumber
the cores they share."""

from __future__ import annotations

import json
import os
import subprocess
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
    "SLURM_JOB_ID",
    "COMMBENCH_",
)


def git_revision() -> str | None:
    """The commit commbench runs from, when it runs from a git checkout."""
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
    return json.loads(text) if text else None


def oversubscribed(devices: list[dict], shared_machine: bool) -> list[dict]:
    """{host, ranks, cpus} of every host whose ranks outnumber its CPUs (each rank's `cpus`,
    os.cpu_count on its host); the nodes of an emulated cluster share one machine, counted as
    one. Such ranks wait for a core (a 4 ms scheduler tick at a time): their times measure the
    scheduler, so fits and validation of them are warned about."""
    by: dict[str, list[dict]] = {}
    for d in devices:
        by.setdefault("emulated nodes" if shared_machine else str(d.get("host")), []).append(d)
    out = []
    for host, ds in by.items():
        cores = max(int(d.get("cpus") or 0) for d in ds)
        if cores and len(ds) > cores:
            out.append({"host": host, "ranks": len(ds), "cpus": cores})
    return out
