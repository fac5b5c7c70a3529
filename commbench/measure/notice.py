"""Last words: a failing rank tells rank 0 why, before the job is torn down.

When a rank other than 0 fails, it aborts the job and the launcher sends every other rank
SIGTERM (Open MPI 5: SIGCONT, SIGTERM 0.25 s later, SIGKILL 0.25 s after that). Rank 0, which
writes meta.json, would take that for a user's Ctrl-C. So the failing rank first drops one
short file, `notice-rank<N>.txt`, into the run directory (atomic rename); rank 0 looks for it
when a signal or its own error arrives and records `failed` with the failing rank's message.
A file rather than an MPI message: MPI runs at MPI_THREAD_SERIALIZED for timing fidelity, so
rank 0's signal thread must not call MPI while its main thread waits in a collective. Needs
the run directory on storage all ranks see (one host, or a shared file system); elsewhere
meta.json says `interrupted` with the signal.

A rank the kernel's OOM killer takes leaves no word: rank 0 compares the host's OOM kill count
(/proc/vmstat `oom_kill`) with the one at the start of the run and records that instead.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

PREFIX = "notice-rank"
VMSTAT = Path("/proc/vmstat")


def oom_kills() -> int | None:
    """The kernel's count of OOM kills on this host since boot (Linux 4.13+), or None."""
    try:
        text = VMSTAT.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


class Notice:
    """A side channel from any rank to rank 0 through the run directory (None: no run dir)."""

    def __init__(self, run_dir: Path | None = None, rank: int = 0) -> None:
        self._dir = run_dir
        self._rank = rank
        self._oom_start = oom_kills() if run_dir is not None and rank == 0 else None

    def send(self, text: str) -> None:
        """From a failing rank other than 0: leave the message where rank 0 will look."""
        if self._dir is None or self._rank == 0:
            return
        path = self._dir / f"{PREFIX}{self._rank}.txt"
        tmp = path.with_name(f".{path.name}.tmp")
        with contextlib.suppress(OSError):  # best effort: the job is going down anyway
            tmp.write_text(text + "\n")
            os.replace(tmp, path)

    def oom_cause(self) -> str | None:
        """On rank 0: the OOM killer struck on this host during the run (a peer that vanished
        without a word was likely its victim), or None."""
        now = oom_kills() if self._oom_start is not None else None
        if now is None or self._oom_start is None or now <= self._oom_start:
            return None
        return (
            f"the kernel's OOM killer killed {now - self._oom_start} process(es) on "
            f"{os.uname().nodename} during the run: likely a rank out of memory "
            f"(/proc/vmstat oom_kill {self._oom_start} -> {now})"
        )

    def poll(self, wait_s: float = 0.0) -> str | None:
        """On rank 0: the earliest failure message left by a peer (waiting up to wait_s)."""
        if self._dir is None or self._rank != 0:
            return None
        deadline = time.monotonic() + wait_s
        while True:
            with contextlib.suppress(OSError):
                found = sorted(self._dir.glob(f"{PREFIX}*.txt"), key=lambda p: p.stat().st_mtime)
                if found:
                    return found[0].read_text().strip()
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.01)
