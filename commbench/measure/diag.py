"""Opt-in self-diagnostics for commbench's own benchmarks and tests (bench/, tests/).

With COMMBENCH_DIAG_DIR=DIR every rank writes DIR/rank-<r>.json when the command ends: wall
clock stamps of start-up milestones (process start, main, MPI ready, first measured point,
end) with the CPU seconds the process had used by each (on an oversubscribed machine the
wall clock is everyone's load, the CPU time this rank's own work), the modules it imported
and its peak RSS. Off (a dict look-up) otherwise.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import time
from pathlib import Path

ENV = "COMMBENCH_DIAG_DIR"
_DIR = os.environ.get(ENV)
_marks: dict[str, float] = {}
_cpu: dict[str, float] = {}


def mark(event: str) -> None:
    """Remember when `event` first happened (time.time(), comparable across local ranks)."""
    if _DIR and event not in _marks:
        _marks[event] = time.time()
        _cpu[event] = time.process_time()


def process_start_time() -> float | None:
    """Wall-clock start of this process, from its /proc start tick (Linux; 10 ms resolution)."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time() - age


def dump(rank: int) -> None:
    """Write this rank's diagnostics file (when enabled)."""
    if not _DIR:
        return
    import json  # only when enabled: every rank imports this module

    mark("end")
    data = {
        "rank": rank,
        "pid": os.getpid(),
        "process_start": process_start_time(),
        "marks": _marks,
        "cpu": _cpu,
        "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "modules": sorted(sys.modules),
    }
    path = Path(_DIR)
    name = f"rank-{rank}.json"
    tmp = path / f".{name}.{os.getpid()}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path / name)
    except OSError as e:  # diagnostics are extra: the command's own outcome stands
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        print(
            f"commbench: warning: {ENV}={_DIR}: cannot write {name} ({e.strerror or e})",
            file=sys.stderr,
            flush=True,
        )
