"""The failure and warning lines benchmark tools and their launchers print, found in a log.

A log that ends in `Test NCCL failure ...` or in mpirun's abort banner holds the rows of a run
that did not finish: the import keeps them but marks the run `failed` with the line that says
why. Warning lines (NCCL WARN amid the table) mark it `partial`: the numbers may be skewed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# What Open MPI, MPICH / Intel MPI and Slurm print when a rank aborts, dies or is killed, or
# when Slurm could not start the job at all.
LAUNCHER_FAILURES = (
    re.compile(r"MPI_ABORT was invoked on rank"),
    re.compile(r"\b(?:mpirun|prterun|mpiexec|orterun)\s+noticed that process rank"),
    re.compile(r"\b(?:mpirun|prterun|mpiexec)\s+has exited due to process rank"),
    re.compile(r"\*\*\* An error occurred in MPI_"),
    re.compile(r"\*\*\* Process received signal \*\*\*"),
    re.compile(r"BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"),
    re.compile(r"^Abort\(\d+\)"),
    re.compile(r"Fatal error in P?MPI_\w+"),
    re.compile(r"^srun: error: .*(?:Exited with exit code|task\(?s?\)? \d|Terminated|Killed)"),
    re.compile(r"^srun: error: Unable to (?:allocate resources|create step)"),
    # a job or step ended by its time limit, preemption or scancel; the OOM killer
    re.compile(r"slurmstepd: error: \*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT"),
    re.compile(r"slurmstepd: error: Detected \d+ oom[-_]kill event"),
)
# nccl-tests' own checks (common.h: CUDACHECK, NCCLCHECK, TESTCHECK; the result footer).
NCCL_TESTS_FAILURES = (
    re.compile(r"\bTest (?:NCCL |CUDA )?failure\b"),
    re.compile(r"^#\s*Out of bounds values\s*:\s*[1-9]\d*\s+FAILED"),
    re.compile(r"^#\s*error:\s*\S"),
)
NCCL_WARNINGS = (re.compile(r"\bNCCL WARN\b"),)
MAX_WARNINGS_KEPT = 20


@dataclass
class Problems:
    """What a log says went wrong: its first failure line, and its warning lines."""

    failure: str | None = None  # "FILE:LINE: text"
    warnings: list[str] = field(default_factory=list)  # "FILE:LINE: text", the first few
    warnings_total: int = 0


def scan(
    path: Path,
    lines: list[str],
    failures: tuple[re.Pattern, ...] = LAUNCHER_FAILURES,
    warnings: tuple[re.Pattern, ...] = NCCL_WARNINGS,
) -> Problems:
    """The failure and warning lines of `lines` (the log at `path`)."""
    found = Problems()
    for n, raw in enumerate(lines, 1):
        s = raw.strip()
        if found.failure is None and any(p.search(s) for p in failures):
            found.failure = f"{path}:{n}: {s}"
        elif any(p.search(s) for p in warnings):
            found.warnings_total += 1
            if len(found.warnings) < MAX_WARNINGS_KEPT:
                found.warnings.append(f"{path}:{n}: {s}")
    return found


def failed_before_rows(problems: Problems) -> str | None:
    """The error for a log without rows whose run says it failed first; None if it does not."""
    if problems.failure is None:
        return None
    return f"{problems.failure} (the run failed before printing any row)"


def cut_short(path: Path, line: int, end: str, problems: Problems) -> None:
    """The warning for a log whose last row (at `line`) comes without the `end` its tool
    prints after it: the run stopped early (killed, out of time; the reason went to stderr),
    so it is `partial`, not complete. It follows the log's own warnings, whose first (an NCCL
    WARN) is the likelier cause and heads the run's status; kept when they fill the list."""
    problems.warnings[MAX_WARNINGS_KEPT - 1 :] = [
        f"{path}:{line}: the table stops here without {end}: the run was cut short (or the "
        "log copied without its end)"
    ]
    problems.warnings_total += 1
