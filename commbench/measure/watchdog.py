"""The watchdog of a measuring job: a guarded section that runs past its deadline (a dead or
hung peer) aborts the job instead of leaving every rank waiting (docs/design.md, "Failures")."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
import warnings
from collections.abc import Iterator


class Watchdog:
    """Aborts the job when a guarded section runs past its deadline (a dead or hung peer)."""

    def __init__(self, timeout_s: float, on_timeout) -> None:
        self.timeout_s = timeout_s
        self._on_timeout = on_timeout
        self._deadline: float | None = None
        self._label = ""
        threading.Thread(target=self._watch, name="commbench-watchdog", daemon=True).start()

    @contextlib.contextmanager
    def guard(self, label: str) -> Iterator[None]:
        self._label, self._deadline = label, time.monotonic() + self.timeout_s
        try:
            yield
        finally:
            self._deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout_s / 4))
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                self._on_timeout(self._label)
                return


@contextlib.contextmanager
def outside_guard(timeout_s: float, message: str) -> Iterator[None]:
    """Kill this process with `message` on stderr if the block runs past `timeout_s`.

    For start-up, where the Watchdog's thread cannot help: mpi4py's import runs MPI_Init while
    holding the interpreter lock, so while a stopped or hung peer keeps MPI_Init waiting no
    Python thread of this process runs. The sentinel is a forked child, which needs no lock of
    ours: it waits on a pipe this process closes when the block ends (or when it dies), and
    past the deadline prints the message and SIGKILLs us, so the launcher takes the job down.
    Forked before MPI exists, the child touches nothing but the pipe, stderr and kill(2).
    """
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    with warnings.catch_warnings():  # Python 3.12+ warns about fork() with threads running
        warnings.simplefilter("ignore", DeprecationWarning)
        child = os.fork()
    if child == 0:  # the sentinel
        try:
            if threading.current_thread() is threading.main_thread():
                signal.set_wakeup_fd(-1)  # the parent's signal pipe is not ours to write
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
                    signal.signal(sig, signal.SIG_DFL)
            os.close(write_fd)
            ready, _, _ = select.select([read_fd], [], [], timeout_s)
            if not ready:
                os.write(2, message.encode() + b"\n")
                os.kill(parent, signal.SIGKILL)
        finally:
            os._exit(0)
    os.close(read_fd)
    try:
        yield
    finally:
        os.close(write_fd)
        os.waitpid(child, 0)
