"""Which rank is behind: every rank's last point reached, so the watchdog can name it.

Each rank keeps one small file, `.progress-rank<N>`, in the run directory and rewrites it in
place (pwrite, no fsync) when it reaches the timed part of a point. When the watchdog fires,
rank 0 reads them all: a rank whose count is below the point it waits in never got there (it
hangs, or is stopped). Like the notice files, this needs the run directory on storage every
rank sees; elsewhere the message names no rank. Each rank removes its file when it closes.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PREFIX = ".progress-rank"


class Progress:
    """One rank's progress file, and (rank 0) the reading of everyone's."""

    def __init__(self, run_dir: Path | None = None, rank: int = 0, size: int = 1) -> None:
        self._dir = run_dir
        self._rank = rank
        self._size = size
        self._fd: int | None = None
        if run_dir is not None:
            with contextlib.suppress(OSError):
                self._fd = os.open(self._path(rank), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def _path(self, rank: int) -> Path:
        assert self._dir is not None
        return self._dir / f"{PREFIX}{rank}"

    def reached(self, point: int) -> None:
        """This rank got to the timed part of `point` (1-based, as tables number points)."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.pwrite(self._fd, b"%12d" % point, 0)

    def behind(self, point: int) -> list[tuple[int, int]]:
        """(rank, last point it reached) of every rank whose file says it never got to
        `point`; 0 for a rank that reached none. Empty without a shared run directory."""
        if self._dir is None:
            return []
        out = []
        for rank in range(self._size):
            try:
                text = self._path(rank).read_bytes().strip()
            except OSError:
                continue  # not on storage we see: no word either way
            last = int(text) if text.isdigit() else 0
            if last < point:
                out.append((rank, last))
        return out

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
                self._path(self._rank).unlink()
            self._fd = None


def describe(behind: list[tuple[int, int]], point: int) -> str:
    """`rank 1 never reached point 3 (it is at point 2)` for the watchdog's message."""
    if not behind:
        return ""
    parts = [
        f"rank {r} never reached point {point} "
        + (f"(it is at point {last})" if last else "(it reached no point)")
        for r, last in behind[:4]
    ]
    more = f" and {len(behind) - 4} more" if len(behind) > 4 else ""
    return "; ".join(parts) + more
