"""`make bench`: every benchmark of commbench itself, then one table of ratios and times.

Runs, each in its own process with a timeout: overhead.py (commbench vs C and mpi4py floors),
startup.py (16-rank start-up), memory.py (peak RSS), and the throughput scripts
bench_fit.py, bench_plan.py, bench_report.py when they exist ("not present" otherwise).
Every script's own output is shown as it runs. A script may add rows to the final table by
writing a JSON list of {bench, name, value, unit, goal, ok} to the file named by
$COMMBENCH_BENCH_JSON (bench/_util.py: Row, write_rows).

    python bench/run_all.py [--quick] [--only overhead,startup]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENV_JSON = "COMMBENCH_BENCH_JSON"

# name -> (script, full args, --quick args)
BENCHES = {
    "overhead": ("overhead.py", [], ["--blocks", "2", "--iters", "100"]),
    "startup": ("startup.py", [], ["--rounds", "1"]),
    "memory": ("memory.py", [], ["--size", "64M", "--ops", "allreduce,alltoall"]),
    "fit": ("bench_fit.py", [], []),
    "plan": ("bench_plan.py", [], []),
    "report": ("bench_report.py", [], []),
}


def run_one(name: str, script: Path, args: list[str], timeout: float) -> tuple[str, float, list]:
    """(status, seconds, rows) of one benchmark script; its output streams to ours."""
    if not script.exists():
        return "not present", 0.0, []
    print(f"\n=== {name}: {script.name} {' '.join(args)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="cb-bench-") as tmp:
        rows_file = Path(tmp) / "rows.json"
        env = {**os.environ, ENV_JSON: str(rows_file)}
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                [sys.executable, str(script), *args], env=env, timeout=timeout, cwd=HERE.parent
            )
            status = "ok" if p.returncode == 0 else f"failed (exit {p.returncode})"
        except subprocess.TimeoutExpired:
            status = f"timed out after {timeout:g} s"
        seconds = time.monotonic() - t0
        rows = json.loads(rows_file.read_text()) if rows_file.exists() else []
    return status, seconds, rows


def fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one round, smaller sizes")
    ap.add_argument("--only", default=None, help="comma-separated subset of: " + ", ".join(BENCHES))
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per script")
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(BENCHES)
    unknown = set(names) - set(BENCHES)
    if unknown:
        ap.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    results = {}
    for name in names:
        script, full, quick = BENCHES[name]
        results[name] = run_one(name, HERE / script, quick if args.quick else full, args.timeout)

    print("\n# commbench self-benchmarks" + (" (--quick)" if args.quick else ""))
    width = max([40] + [len(r["name"]) for _, _, rows in results.values() for r in rows])
    print(f"#{'bench':>9} {'measurement':<{width}} {'value':>10} {'unit':<4} {'goal':>9} ok")
    failed = False
    for name, (status, seconds, rows) in results.items():
        script = BENCHES[name][0]
        print(f"{name:>10} {script + ': ' + status:<{width}} {seconds:>10.1f} {'s':<4}")
        failed |= status not in ("ok", "not present")
        for r in rows:
            ok = {True: "ok", False: "MISS", None: ""}[r.get("ok")]
            print(
                f"{'':>10} {r['name']:<{width}} {fmt(r['value']):>10} {r['unit']:<4} "
                f"{r.get('goal', ''):>9} {ok}"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
