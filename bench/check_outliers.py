"""How far a slow node sits from equal links under `commbench check` (the outlier margin).

    sudo .venv/bin/python bench/check_outliers.py --nodes 4 --ranks-per-node 1 --runs 5

Runs `commbench check` under `commbench emulate` --runs times with every NIC at --rate, and
--runs times with node --slow-node's NICs at half of it, and prints per run the exit status,
who was named, and the lowest rank score's ratio to the median and its modified z (check.json's
`rank_scores_GBps`, inter class): how close equal links come to the 0.7 / -3.5 rule, and how
far a half-rate node clears it. Needs root. Exit 1 when an equal run names anyone or a slow
run names anything but the slow node.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from commbench.check.outliers import Rule, judge, robust  # noqa: E402


def check(a: argparse.Namespace, run_id: str, slow: bool) -> tuple[int, dict]:
    args = ["emulate", "--nodes", a.nodes, "--ranks-per-node", a.ranks_per_node]
    args += ["--link-rate", a.rate]
    if slow:
        rate = int(a.rate.removesuffix("mbit")) // 2
        args += ["--slow-node", f"{a.slow_node}={rate}mbit"]
    args += ["--", "check", "--no-collectives", "--results", str(a.results), "--run-id", run_id]
    subprocess.run(["rm", "-rf", str(a.results / run_id)], check=True)
    p = subprocess.run(
        [sys.executable, "-m", "commbench", *args], cwd=REPO, capture_output=True, text=True
    )
    return p.returncode, json.loads((a.results / run_id / "check.json").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="4")
    ap.add_argument("--ranks-per-node", default="1")
    ap.add_argument("--rate", default="400mbit", help="in mbit")
    ap.add_argument("--slow-node", default="2")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--results", type=Path, default=REPO / "results" / "bench-check")
    a = ap.parse_args()
    bad = 0
    print(f"{'links':<6} {'run':>3} {'exit':>4} {'lowest/median':>13} {'z':>7}  named")
    for slow in (False, True):
        for k in range(a.runs):
            rc, doc = check(a, f"{'slow' if slow else 'equal'}-{k}", slow)
            scores = list(doc["rank_scores_GBps"]["inter"].values())
            m, mad = robust(scores)
            ratio, z, _ = judge(min(scores), m, mad, Rule())
            named = [f"{o['level']} {o['where']}" for o in doc["outliers"]]
            want = [f"node emu-node{a.slow_node}"] if slow else []
            bad += named != want
            label = "slow" if slow else "equal"
            print(f"{label:<6} {k:>3} {rc:>4} {ratio:>13.3f} {z:>7.1f}  {', '.join(named) or '-'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
