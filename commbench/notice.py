"""Last words: a failing rank tells rank 0 why, before the job is torn down.

When a rank other than 0 fails, it aborts the job and the launcher sends every other rank
SIGTERM (Open MPI 5: SIGCONT, SIGTERM 0.25 s later, SIGKILL 0.25 s after that). Rank 0, which
writes meta.json, would take that for a user's Ctrl-C. So the failing rank first sends one
short message on a private MPI communicator; rank 0 looks for it when a signal or its own
error arrives and records `failed` with the failing rank's message. Needs MPI with
MPI_THREAD_MULTIPLE (rank 0 probes from its signal thread); elsewhere it does nothing and
meta.json says `interrupted` with the signal.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any

TAG = 7007


class Notice:
    """A side channel from any rank to rank 0 (None = unavailable: not MPI, or one rank)."""

    def __init__(self, comm: Any = None) -> None:
        self._comm = comm

    @classmethod
    def open(cls, is_mpi: bool, size: int) -> Notice:
        """Collective on MPI_COMM_WORLD when MPI is up and has several ranks."""
        if not is_mpi or size < 2:
            return cls()
        if "mpi4py.MPI" not in sys.modules:  # a backend that did not start MPI
            return cls()
        from mpi4py import MPI

        if not MPI.Is_initialized() or MPI.Query_thread() != MPI.THREAD_MULTIPLE:
            return cls()
        return cls(MPI.COMM_WORLD.Dup())

    def send(self, text: str, wait_s: float = 1.0) -> None:
        """From a failing rank other than 0: hand the message over (bounded wait)."""
        if self._comm is None or self._comm.Get_rank() == 0:
            return
        with contextlib.suppress(Exception):  # MPI may be what failed: best effort only
            req = self._comm.isend(text, dest=0, tag=TAG)
            deadline = time.monotonic() + wait_s
            while not req.Test() and time.monotonic() < deadline:
                time.sleep(0.005)

    def poll(self, wait_s: float = 0.0) -> str | None:
        """On rank 0: the first failure message that has arrived (waiting up to wait_s)."""
        if self._comm is None or self._comm.Get_rank() != 0:
            return None
        from mpi4py import MPI

        deadline = time.monotonic() + wait_s
        with contextlib.suppress(Exception):
            while True:
                status = MPI.Status()
                if self._comm.Iprobe(source=MPI.ANY_SOURCE, tag=TAG, status=status):
                    return str(self._comm.recv(source=status.Get_source(), tag=TAG))
                if time.monotonic() >= deadline:
                    return None
                time.sleep(0.005)
        return None

    def close(self) -> None:
        if self._comm is not None:
            with contextlib.suppress(Exception):
                self._comm.Free()
            self._comm = None
