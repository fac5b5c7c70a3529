"""Shared helpers of commbench's self-benchmarks: paths, real mpirun jobs, result rows.

Every script here measures commbench itself on this machine (never a timed test) and can
write its headline numbers as JSON rows (`--json FILE`) for bench/run_all.py's table.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "bench" / "_build"


@dataclass
class Row:
    """One headline number: what, value, unit, and the goal it is held to (if any)."""

    bench: str
    name: str
    value: float | None
    unit: str
    goal: str = ""
    ok: bool | None = None


def write_rows(path: str | None, rows: list[Row]) -> None:
    """Write rows to `path`, else to $COMMBENCH_BENCH_JSON (set by run_all.py), if either."""
    path = path or os.environ.get("COMMBENCH_BENCH_JSON")
    if path:
        Path(path).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")


def tool(name: str) -> str:
    """An Open MPI tool (mpirun, mpicc) beside this Python, else from PATH."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        sys.exit(f"bench: no {name} found (install the openmpi package or put one on PATH)")
    return found


def job_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of a benchmark job: commbench importable from this checkout, root allowed."""
    env = dict(os.environ)
    env.update(
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")])),
        PYTHONUNBUFFERED="1",
    )
    for key in ("COMMBENCH_NATIVE", "COMMBENCH_DIAG_DIR", "MPI4PY_RC_THREAD_LEVEL"):
        env.pop(key, None)
    env.update(extra or {})
    return env


def mpirun(n: int, argv: list[str], timeout: float, env: dict | None = None) -> str:
    """Run `mpirun -n N --oversubscribe ARGV` and return its stdout; fail loudly."""
    cmd = [tool("mpirun"), "-n", str(n), "--oversubscribe", *argv]
    p = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=job_env(env), cwd=REPO
    )
    if p.returncode:
        sys.exit(f"bench: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout


def commbench(*args: str) -> list[str]:
    return [sys.executable, "-m", "commbench", *args]


def build_floor(library: bool = False) -> Path:
    """Compile bench/floor.c with the Open MPI mpicc, as a program or as the shared library
    overhead_job.py loads (again when the source changed)."""
    src = REPO / "bench" / "floor.c"
    out = BUILD / ("libfloor.so" if library else "floor")
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        BUILD.mkdir(parents=True, exist_ok=True)
        flags = ["-shared", "-fPIC", "-DFLOOR_LIBRARY"] if library else []
        cmd = [tool("mpicc"), "-O2", *flags, "-o", str(out), str(src)]
        subprocess.run(cmd, check=True, timeout=120)
    return out


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def median(values: list[float]) -> float:
    return statistics.median(values)


def now() -> float:
    return time.time()
