"""Transfer on emulated nodes: fit a calibration on 2 nodes, predict 3 and 4 nodes nobody fitted.

    sudo .venv/bin/python bench/transfer_emulated.py                  # 2 -> 3, 4 nodes, 400mbit
    sudo .venv/bin/python bench/transfer_emulated.py --repeats 5 --rate 200mbit
    sudo .venv/bin/python bench/transfer_emulated.py --reuse          # score the sweeps again

For each repeat and node count, in turn (2, 3, 4, 2, 3, 4, ...: load that drifts hits every
node count alike), a `collectives` sweep (factor 2, one group of the whole world, ranks per
node --ranks-per-node, inter links shaped to --rate, --iters timed iterations per point) runs
under `commbench emulate`. The 2-node
sweeps are fitted together (the calibration states their repeat spread as its noise floor);
then `commbench validate --ops --extrapolate` predicts every record of every sweep from it.
Scored per op, node count and size >= 64 KiB: |predicted / median measured over the repeats
- 1|; printed per op is the median over sizes (the goal: 10% at 3 and 4 nodes for allreduce,
allgather, reduce_scatter and alltoall), the repeat spread of the same points (max / min - 1
over repeats: no prediction can be trusted closer), how each prediction was made, and the
load average (the box is shared). Needs root. Exit 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from commbench.calibration.accuracy import rerun_spread  # noqa: E402

OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "sendrecv")
GOAL_OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall")
GOAL = 0.10
LARGE = 64 << 10


def commbench(*args: str, out: Path | None = None) -> None:
    cmd = [sys.executable, "-m", "commbench", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if out is None:
        subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL, env=env)
    else:
        with open(out, "w") as f:
            subprocess.run(cmd, check=True, cwd=REPO, stdout=f, env=env)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def sweep(a: argparse.Namespace, n: int, run: Path) -> None:
    rpn = int(a.ranks_per_node)
    ops = [op for op in OPS if op != "sendrecv" or n * rpn == 2]
    subprocess.run(["rm", "-rf", str(run)], check=True)
    commbench(
        *("emulate", "--nodes", str(n), "--ranks-per-node", str(rpn), "--link-rate", a.rate),
        *("--", "suite", "collectives", "--set", f"max_bytes={a.max_bytes}"),
        *("--set", "factor=2", "--set", f"group_sizes=[{n * rpn}]"),
        *("--set", f"ops=[{','.join(ops)}]", "--set", "placements=[contiguous]"),
        *("--iters", str(a.iters), "--results", str(run.parent), "--run-id", run.name),
    )


def score(rows: list[dict]) -> dict[str, dict]:
    """Per op: the median over sizes >= LARGE of |predicted / median measured - 1|, the max,
    the median repeat spread of those sizes, and the prediction methods used."""
    by: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        if r["status"] == "ok" and r["bytes"] >= LARGE:
            by.setdefault((r["op"], r["bytes"]), []).append(r)
    out: dict[str, dict] = {}
    for (op, _), rs in sorted(by.items()):
        measured = [r["measured_s"] for r in rs]
        err = abs(rs[0]["predicted_s"] / median(measured) - 1)
        o = out.setdefault(op, {"errors": [], "spreads": [], "methods": set()})
        o["errors"].append(err)
        o["spreads"].append(rerun_spread(measured) or 0.0)
        o["methods"].add(rs[0]["method"].split(" (")[0])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="2,3,4", help="node counts; the first is fitted")
    ap.add_argument("--ranks-per-node", default="1")
    ap.add_argument("--rate", default="400mbit")
    ap.add_argument("--max-bytes", default="4M")
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="sweeps per node count, in turn (3: the median over them drops one disturbed repeat)",
    )
    ap.add_argument(
        "--iters",
        type=int,
        default=10,
        help="timed iterations per point (the suite's 0.05 s budget gives MiB sizes 3: one "
        "preempted iteration moves their median)",
    )
    ap.add_argument("--results", type=Path, default=REPO / "results" / "bench-transfer")
    ap.add_argument("--reuse", action="store_true", help="reuse sweeps already made")
    a = ap.parse_args()
    counts = [int(n) for n in a.nodes.split(",")]
    print(f"# transfer_emulated: {a.results}; load average before: {load()}")
    runs = {n: [a.results / f"nodes-{n}-r{k}" for k in range(a.repeats)] for n in counts}
    for k in range(a.repeats):
        for n in counts:
            if not (a.reuse and (runs[n][k] / "records.jsonl").exists()):
                sweep(a, n, runs[n][k])
    cal = a.results / f"calibration-{counts[0]}-nodes.json"
    commbench("fit", *map(str, runs[counts[0]]), "-o", str(cal), out=a.results / "fit.txt")
    doc = json.loads(cal.read_text())
    floor = (doc.get("noise_floor") or {}).get("median_rel")
    lib = next((e["library"]["name"] for e in doc["link_table"] if "library" in e), None)
    print(
        f"# fitted {len(runs[counts[0]])} sweeps of {counts[0]} nodes x {a.ranks_per_node} "
        f"({a.rate} per NIC); library model: {lib or 'none'}; stated noise floor "
        + (f"{floor:.1%}" if floor is not None else "-")
    )
    print(
        f"# per op: median |predicted / median measured - 1| over sizes >= 64 KiB (goal {GOAL:.0%})"
    )
    print(f"# {'nodes':>5} {'op':>15} {'sizes':>5} {'median':>7} {'max':>7} {'spread':>7}  method")
    ok = True
    for n in counts:
        out = a.results / f"validate-{n}-nodes.json"
        commbench(
            *("validate", "--calibration", str(cal), *map(str, runs[n]), "--ops"),
            *("--extrapolate", "--min-bytes", "64K", "--json"),
            out=out,
        )
        for op, s in score(json.loads(out.read_text())["rows"]).items():
            med = median(s["errors"])
            miss = n != counts[0] and op in GOAL_OPS and med > GOAL
            ok &= not miss
            print(
                f"  {n:>5} {op:>15} {len(s['errors']):>5} {med:7.1%} {max(s['errors']):7.1%} "
                f"{median(s['spreads']):7.1%}  {'; '.join(sorted(s['methods']))}"
                + ("  MISS" if miss else "")
            )
    print(f"# load average after: {load()}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
