"""Who am I: rank, world size, local rank and host from the launcher's environment.

Reads Open MPI, MPICH / Intel MPI (PMI), Slurm `srun` and `torchrun` variables without
initialising anything, so flags can be validated against the world size before the first
collective. A plain `commbench ...` is a single process.
"""

from __future__ import annotations

import os
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
    host = os.uname().nodename  # gethostname(2); the socket module costs ~10 ms per rank
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


def usable_cores() -> tuple[int, ...]:
    """The CPU cores this process may run on (its affinity; the launcher may have bound it)."""
    return tuple(sorted(os.sched_getaffinity(0)))


def oversubscribed(hosts: list[str], cores: list[tuple[int, ...]]) -> list[dict]:
    """Hosts whose ranks outnumber the cores they may run on (the union of their affinities):
    there ranks take turns on a core, so times measure the scheduler, not the network."""
    per_host: dict[str, list[tuple[int, ...]]] = {}
    for host, mine in zip(hosts, cores):
        per_host.setdefault(host, []).append(mine)
    out = []
    for host, sets in per_host.items():
        union = set().union(*sets)
        if len(sets) > len(union):
            out.append({"host": host, "ranks": len(sets), "cores": len(union)})
    return out


def oversubscription_warning(found: list[dict]) -> str | None:
    """The one warning line for oversubscribed hosts, or None."""
    if not found:
        return None
    where = "; ".join(
        f"{o['ranks']} ranks on {o['cores']} CPU core{'s' if o['cores'] > 1 else ''} of {o['host']}"
        for o in found
    )
    return (
        f"commbench: warning: {where}: ranks share cores, so the times measure the OS scheduler, "
        "not the interconnect, and the numbers are not meaningful (use at most one rank per "
        "core; docs/running.md, 'On a small box', says how)"
    )


ENV_STATUS_DIR = "COMMBENCH_STATUS_DIR"  # set by `commbench emulate`: where ranks leave status


def exit_status_file(env: Mapping[str, str] | None = None) -> str | None:
    """Where this rank leaves its exit status (`<COMMBENCH_STATUS_DIR>/rank<r>.status`), if asked.

    A launcher can crash tearing down after its ranks exited (Open MPI 5.0's prterun aborts on a
    pthread mutex assertion now and then: status 134 instead of the ranks' own); the caller that
    set the directory then still knows what the ranks decided.
    """
    env = os.environ if env is None else env
    folder = env.get(ENV_STATUS_DIR)
    return os.path.join(folder, f"rank{detect(env).rank}.status") if folder else None
