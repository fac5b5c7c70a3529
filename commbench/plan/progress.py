"""Progress of a long planning loop, on stderr so stdout stays a clean table or JSON.

Silent for the first few seconds (most plans finish first), then one line every few seconds:
`# plan: priced 1200 of 5400 configs (12 s)`.
"""

from __future__ import annotations

import sys
import time

QUIET_S = 3.0  # no word before this much time has passed
EVERY_S = 5.0  # then at most one line this often


class Progress:
    """Counts work done of `total` and says so now and then."""

    def __init__(self, total: int, what: str) -> None:
        self.total = total
        self.what = what
        self.start = time.monotonic()
        self._next = self.start + QUIET_S

    def tick(self, done: int) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + EVERY_S
            print(
                f"# plan: {self.what} {done} of {self.total} ({now - self.start:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
