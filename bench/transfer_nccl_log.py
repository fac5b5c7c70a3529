"""Transfer on a real cluster's nccl-tests logs: fit one node count, predict another.

    python bench/transfer_nccl_log.py                  # every stored pair, smaller -> larger
    python bench/transfer_nccl_log.py --pair 4x8:8x8   # one pair
    python bench/transfer_nccl_log.py --pair 2x8+4x8:8x8   # fit two node counts together

The logs (bench/data/nccl-tests/, source in their first line and the README there) are
all_reduce_perf runs of one cluster of 8 nodes x 8 H100 with 400 Gb/s IB at 2, 4 and 8 nodes,
default settings, 1 MiB..8 GiB. For each pair: `commbench import nccl-tests` both logs
(`--ranks-per-node` 8: the node shape), `commbench fit` the smaller one (or several together:
predict scales the nearest group size, with that node count's own bandwidth), `commbench validate
--extrapolate --json` the larger one from it; then the same with the calibration's library
model removed (the link's fixed ring model alone). Scored per op over sizes >= 64 KiB (both
placements): the median and max |predicted / measured - 1|, the method and reach of each
prediction, PASS at 10% median with the library model. Exit 1 when a pair fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "bench" / "data" / "nccl-tests"
PAIRS = ("4x8:8x8", "2x8:4x8", "2x8:8x8", "2x8+4x8:8x8")
GOAL = 0.10
LARGE = 64 << 10


def commbench(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "commbench", *args]
    return subprocess.run(cmd, check=True, cwd=REPO, capture_output=True, text=True, env=env).stdout


def import_log(shape: str, results: Path) -> Path:
    """One stored log as a run directory; its shape (NxG) gives --ranks-per-node."""
    log = DATA / f"all_reduce_perf.{shape}.log"
    ppn = shape.split("x")[1]
    commbench("import", "nccl-tests", str(log), "--ranks-per-node", ppn, "--results",
              str(results), "--run-id", shape)  # fmt: skip
    return results / shape


def without_library(calibration: Path) -> Path:
    """The calibration with every link's library model dropped (its fixed model prices)."""
    doc = json.loads(calibration.read_text())
    for entry in doc["link_table"]:
        entry.pop("library", None)
    out = calibration.with_name(calibration.stem + "-fixed.json")
    out.write_text(json.dumps(doc))
    return out


def validate(calibration: Path, run: Path) -> list[dict]:
    out = commbench("validate", "--calibration", str(calibration), str(run), "--extrapolate",
                    "--min-bytes", str(LARGE), "--json")  # fmt: skip
    return [r for r in json.loads(out)["rows"] if r["status"] == "ok"]


def score(rows: list[dict]) -> dict[str, dict]:
    """Per op: median and max |error| over the rows of >= 64 KiB, and the methods used."""
    out: dict[str, dict] = {}
    for op in sorted({r["op"] for r in rows}):
        mine = [r for r in rows if r["op"] == op and r["bytes"] >= LARGE]
        errs = [r["abs_error"] for r in mine]
        out[op] = {
            "points": len(mine),
            "median": median(errs),
            "max": max(errs),
            "methods": sorted({r["method"] for r in mine}),
            "reach": sorted({r["reach"]["text"] for r in mine}),
        }
    return out


def transfer(pair: str, work: Path) -> tuple[dict, dict]:
    """(score with the library model, score without it) for `small:large`."""
    small, large = pair.split(":")
    fit_runs, target = [import_log(x, work) for x in small.split("+")], import_log(large, work)
    calibration = work / f"calibration-{small}.json"
    commbench("fit", *map(str, fit_runs), "-o", str(calibration))
    return score(validate(calibration, target)), score(
        validate(without_library(calibration), target)
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", action="append", help=f"small:large shapes (default {PAIRS})")
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="cb-nccl-log-") as tmp:
        for pair in args.pair or PAIRS:
            work = Path(tmp) / pair.replace(":", "-")
            lib, fixed = transfer(pair, work)
            print(f"# fit {pair.split(':')[0]} (nodes x GPUs), predict {pair.split(':')[1]}")
            for op, s in lib.items():
                ok = s["median"] <= GOAL
                failed += not ok
                print(
                    f"{op:>12} {s['points']:3d} points >= 64 KiB: median {100 * s['median']:5.1f}%"
                    f"  max {100 * s['max']:6.1f}%  (ring model alone: median "
                    f"{100 * fixed[op]['median']:5.1f}%, max {100 * fixed[op]['max']:6.1f}%)"
                    f"  {'PASS' if ok else 'FAIL'} at {GOAL:.0%}"
                )
                for m in s["methods"]:
                    print(f"{'':>14}method: {m}")
                print(f"{'':>14}reach: {', '.join(s['reach'])}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
