"""Transfer on emulated nodes: fit a calibration on 2 nodes, predict 3 and 4 nodes nobody fitted.

    sudo .venv/bin/python bench/transfer_emulated.py                  # 2 -> 3, 4 nodes, 400mbit
    sudo .venv/bin/python bench/transfer_emulated.py --ranks-per-node 1 --rate 200mbit --reuse

For each node count a `collectives` sweep (factor 2, one group of the whole world, ranks per
node --ranks-per-node, inter links shaped to --rate) runs under `commbench emulate`; the 2-node
sweep is fitted; then `commbench validate --ops --extrapolate --min-bytes 64K` predicts every
record of the 3- and 4-node sweeps from it (each row says how far it reached: group size
scaled from, nodes measured) and of the 2-node sweep itself (inside). Prints per op and node
count the median |error| at >= 64 KiB; the goal is 10%. Needs root. Exit 1 when an op misses.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "sendrecv")
GOAL = 0.10


def commbench(*args: str, out: Path | None = None) -> None:
    cmd = [sys.executable, "-m", "commbench", *args]
    if out is None:
        subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    else:
        with open(out, "w") as f:
            subprocess.run(cmd, check=True, cwd=REPO, stdout=f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="2,3,4", help="node counts; the first is fitted")
    ap.add_argument("--ranks-per-node", default="1")
    ap.add_argument("--rate", default="400mbit")
    ap.add_argument("--max-bytes", default="4M")
    ap.add_argument("--results", type=Path, default=REPO / "results" / "bench-transfer")
    ap.add_argument("--reuse", action="store_true", help="reuse sweeps already made")
    a = ap.parse_args()
    counts = [int(n) for n in a.nodes.split(",")]
    rpn = int(a.ranks_per_node)
    runs = {}
    for n in counts:
        run_id = f"nodes-{n}"
        runs[n] = a.results / run_id
        if a.reuse and (runs[n] / "records.jsonl").exists():
            continue
        subprocess.run(["rm", "-rf", str(runs[n])], check=True)
        ops = [op for op in OPS if op != "sendrecv" or n * rpn == 2]
        commbench(
            *("emulate", "--nodes", str(n), "--ranks-per-node", str(rpn), "--link-rate", a.rate),
            *("--", "suite", "collectives", "--set", f"max_bytes={a.max_bytes}"),
            *("--set", "factor=2", "--set", f"group_sizes=[{n * rpn}]"),
            *("--set", f"ops=[{','.join(ops)}]", "--set", "placements=[contiguous]"),
            *("--results", str(a.results), "--run-id", run_id),
        )
    cal = a.results / f"calibration-{counts[0]}-nodes.json"
    commbench("fit", str(runs[counts[0]]), "-o", str(cal), out=a.results / "fit.txt")
    print(f"# fitted {runs[counts[0]].name} -> {cal.name}; shaped {a.rate} per NIC")
    print(f"# median |error| at >= 64 KiB per op (goal {GOAL:.0%}); reach of the predictions")
    ok = True
    for n in counts:
        out = a.results / f"validate-{n}-nodes.json"
        commbench(
            *("validate", "--calibration", str(cal), str(runs[n]), "--ops", "--extrapolate"),
            *("--min-bytes", "64K", "--json"),
            out=out,
        )
        doc = json.loads(out.read_text())
        reach = sorted({r["reach"]["text"] for r in doc["rows"] if r["status"] == "ok"})
        for s in doc["summary"]:
            err = s["median_abs_error"]
            miss = err is None or err > GOAL
            ok &= not (miss and n != counts[0])
            print(
                f"  nodes {n} p={s['group_size']:<3} {s['op']:>15} points {s['points']:>3} "
                f"median {100 * err:6.1f}%  max {100 * s['max_abs_error']:6.1f}%"
                + ("  MISS" if miss else "")
            )
        print(f"    reach: {'; '.join(reach)}")
    print("\nPASS" if ok else "\nFAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
