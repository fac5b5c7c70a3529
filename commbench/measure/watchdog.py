"""The watchdog of a measuring job: a guarded section that runs past its deadline (a dead or
hung peer) aborts the job instead of leaving every rank waiting (docs/design.md, "Failures")."""

from __future__ import annotations

import contextlib
import threading
import time
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
