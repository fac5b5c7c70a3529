"""Who am I: rank, world size, local rank and host from the launcher's environment.

Reads Open MPI, MPICH / Intel MPI (PMI), Slurm `srun` and `torchrun` variables without
initialising anything, so flags can be validated against the world size before the first
collective. A plain `commbench ...` is a single process.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

# (launcher, rank, size, local rank, local size) variable names, most specific first.
_SOURCES = (
    (
        "openmpi",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
    ),
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
)


@dataclass(frozen=True)
class LaunchInfo:
    """Where this process sits in the job, as the launcher told it."""

    launcher: str
    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str

    @property
    def is_mpi(self) -> bool:
        """True when an MPI launcher (mpirun, mpiexec, srun with PMI) started us."""
        return self.launcher in ("openmpi", "pmi", "slurm")


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name, "")
    head = value.split("(")[0].split(",")[0]  # SLURM_NTASKS_PER_NODE looks like "4(x2)"
    return int(head) if head.strip().isdigit() else default


def detect(env: Mapping[str, str] | None = None) -> LaunchInfo:
    """The launch environment of this process; a single process when none is found."""
    env = os.environ if env is None else env
    host = socket.gethostname()
    for launcher, rank_var, size_var, local_var, local_size_var in _SOURCES:
        if rank_var in env and size_var in env:
            rank = _int(env, rank_var, 0)
            size = _int(env, size_var, 1)
            if (
                launcher == "torchrun"
                and "TORCHELASTIC_RUN_ID" not in env
                and "MASTER_ADDR" not in env
            ):
                continue  # a stray RANK variable is not a torchrun launch
            return LaunchInfo(
                launcher=launcher,
                rank=rank,
                size=size,
                local_rank=_int(env, local_var, 0),
                local_size=_int(env, local_size_var, 1),
                host=host,
            )
    return LaunchInfo("single", 0, 1, 0, 1, host)
