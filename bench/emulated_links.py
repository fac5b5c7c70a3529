"""Ground truth on emulated nodes: does a fit recover the shaped rate, and does a sweep repeat?

    .venv/bin/python bench/emulated_links.py --nodes 2 --ranks-per-node 2 --rate 400mbit   # root

Runs the collectives sweep twice under `commbench emulate` (inter links shaped to --rate), fits
the first, and prints (1) each inter series' fitted large-message bus bandwidth next to the
goodput the shaping allows (meta.json's `emulation`), with the link table's inter bandwidth, (2)
intra vs inter bandwidth per op, and (3) how far the repeat's times are from the first run's at
sizes >= 1 MiB (median and max |t2/t1 - 1| per op; the inter points are the shaped ones).
Exit 1 when the p2p series miss the rate by more than 10% or the inter points' repeat median
differs by more than 5%. `--analyze-only` re-reads the two runs instead of measuring.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
P2P_OPS = ("sendrecv", "broadcast")  # one stream per NIC and direction at p=2: busbw = link rate


def commbench(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "commbench", *args], check=True, cwd=REPO)


def records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]


def big(r: dict, link: str) -> bool:
    """A primitive point of this link class at >= 1 MiB (suite step records included)."""
    return r["op"] != "program" and r.get("link_class") == link and r["bytes"] >= 1 << 20


def key(r: dict) -> tuple:
    return (r.get("label"), r["op"], r.get("group_size"), r.get("stride"), r["bytes"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="2")
    ap.add_argument("--ranks-per-node", default="2")
    ap.add_argument("--rate", default="400mbit")
    ap.add_argument("--max-bytes", default="8M")
    ap.add_argument("--results", type=Path, default=REPO / "results" / "bench-emulated")
    ap.add_argument("--analyze-only", action="store_true", help="read the runs, measure nothing")
    a = ap.parse_args()
    runs = []
    for k in (1, 2):
        run_id = f"emulated-{k}"
        runs.append(a.results / run_id)
        if a.analyze_only:
            continue
        subprocess.run(["rm", "-rf", str(a.results / run_id)], check=True)
        commbench(
            *("emulate", "--nodes", a.nodes, "--ranks-per-node", a.ranks_per_node),
            *("--link-rate", a.rate, "--", "suite", "collectives"),
            *("--set", f"max_bytes={a.max_bytes}", "--set", "factor=2"),
            *("--results", str(a.results), "--run-id", run_id),
        )
    cal_path = a.results / "emulated-calibration.json"
    commbench("fit", str(runs[0]), "-o", str(cal_path))
    cal = json.loads(cal_path.read_text())
    truth = json.loads((runs[0] / "meta.json").read_text())["emulation"]
    goodput = min(truth["expected_goodput_GBps"])
    print(f"\n# shaped {truth['link_rate']} per NIC: TCP goodput {goodput:.4f} GB/s each way")
    print(f"{'op':>15} {'p':>3} {'link':>6} {'busbw':>8} {'/truth':>7}")
    ok = True
    bw: dict[tuple[str, str], float] = {}
    for s in cal["series"]:
        top = s["segments"][-1]["busbw_GBps"]
        bw.setdefault((s["op"], s["link_class"]), top)
        if s["link_class"] == "inter":
            ratio = top / goodput
            p2p = s["op"] in P2P_OPS and s["group_size"] == 2
            ok &= not p2p or abs(ratio - 1) <= 0.10
            mark = " <- p2p: the link itself" if p2p else ""
            print(f"{s['op']:>15} {s['group_size']:>3} {'inter':>6} {top:8.4f} {ratio:7.2f}{mark}")
    for link in cal.get("link_table") or []:
        if link["link_class"] == "inter":
            model, lbw = link["best_model"], link["busbw_GBps"]
            print(f"# link table (inter, {model}): busbw {lbw:.4f} GB/s = {lbw / goodput:.2f}x")
    print("\n# intra above inter (largest segment busbw, GB/s)")
    for op in sorted({op for op, _ in bw}):
        intra, inter = bw.get((op, "intra")), bw.get((op, "inter"))
        if intra and inter:
            print(f"{op:>15} intra {intra:8.3f}  inter {inter:8.4f}  x{intra / inter:.0f}")
            ok &= intra > inter
    for link in ("inter", "intra"):
        first = {key(r): r["time_us"] for r in records(runs[0]) if big(r, link)}
        second = {key(r): r["time_us"] for r in records(runs[1]) if big(r, link)}
        diffs: dict[str, list[float]] = {}
        for k, t in first.items():
            if k in second:
                diffs.setdefault(k[1], []).append(abs(second[k] / t - 1))
        shaped = "shaped: the criterion" if link == "inter" else "not shaped: CPU-bound"
        print(f"\n# repeat vs first run, {link} points >= 1 MiB ({shaped}): |t2/t1 - 1|")
        for op, ds in sorted(diffs.items()):
            print(f"{op:>15} median {statistics.median(ds):6.1%}  max {max(ds):6.1%}  ({len(ds)})")
        med = statistics.median(d for ds in diffs.values() for d in ds)
        print(f"{'all':>15} median {med:6.1%}")
        ok &= link != "inter" or med <= 0.05
    print("\nPASS" if ok else "\nFAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
