"""The last line of every measuring command: what to run next on the run it just wrote.

A newcomer reads a table, then `results: DIR`, and should not need the README to know that a
sweep is fitted, a suite validated, a check drawn: `next: commbench fit DIR -o calibration.json`.
"""

from __future__ import annotations

from pathlib import Path

CALIBRATION = "calibration.json"

# what each command's run is for, by the command that wrote it
NEXT = {
    "run": "commbench fit {run} -o " + CALIBRATION + "   (then: commbench report {run})",
    "import": "commbench fit {run} -o " + CALIBRATION,
    "suite": "commbench validate --calibration "
    + CALIBRATION
    + " {run}   (or: commbench report {run})",
    "check": "commbench report {run}   (pair heatmap and outliers)",
    "plan": "commbench report {run}   (predicted vs measured ranking)",
}


def line(command: str, run: Path | str) -> str:
    """`next: ...` for a run written by `command` (run, import, suite, check, plan); a suite
    of collectives sweeps is fitted as a `run` is."""
    return "next: " + NEXT[command].format(run=run)
