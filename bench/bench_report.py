"""How long does `commbench report` take over a full set of runs?

    python bench/bench_report.py                  # measure runs once (cached), then time
    python bench/bench_report.py --repeat 5 --runs-dir results

The runs (made once under bench/_build/report-runs unless --runs-dir names existing ones):
`mpirun -n 4 commbench suite collectives` (every op, 8 B - 64 MiB x4, group sizes 2 and 4,
contiguous and strided) and `mpirun -n 4 commbench suite all --quick` (every strategy). Timed:
build_report in one process (median and min of --repeat), its stages from one profiled call
(reading runs, the in-memory fit, extracting series/points/timelines, drawing, PNG encoding,
HTML), the same with a saved calibration (no in-memory fit), and the whole CLI as a fresh
process (interpreter start and imports included).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _util import job_env, tool  # noqa: E402

from commbench.report import ReportOptions, build_report  # noqa: E402

# (label, module file suffix, function name) whose cumulative time makes a stage
STAGES = [
    ("read runs (results.read_run)", "commbench/results/rundir.py", "read_run"),
    ("in-memory fit (calibrate.build)", "commbench/fit/calibrate.py", "build"),
    ("series from records (reportdata.curves)", "commbench/report/inputs.py", "curves"),
    ("suite points (reportdata.points)", "commbench/report/inputs.py", "points"),
    ("PP replay (pptimeline.timeline)", "commbench/report/timeline.py", "timeline"),
    ("figures: bandwidth", "commbench/report/figures/collectives.py", "bandwidth"),
    ("figures: latency + residuals", "commbench/report/figures/collectives.py", "latency"),
    ("figures: strategy step time", "commbench/report/figures/strategies.py", "step_breakdown"),
    ("figures: EP load", "commbench/report/figures/strategies.py", "ep_load"),
    ("figures: PP timelines", "commbench/report/figures/strategies.py", "pp_timeline"),
    ("  of the figures: PNG encoding (render)", "commbench/report/figures/__init__.py", "render"),
    ("HTML page (reporthtml.page)", "commbench/report/html.py", "page"),
    ("write files (report.build._write)", "commbench/report/build.py", "_write"),
]


def make_runs(root: Path, n: int) -> list[Path]:
    """The collectives suite and every strategy suite (quick), once; cached in `root`."""
    runs = []
    for run_id, args in (
        ("collectives", ["suite", "collectives"]),
        ("all-quick", ["suite", "all", "--quick"]),
    ):
        path = root / run_id
        if not (path / "meta.json").is_file():
            t = time.perf_counter()
            cmd = [tool("mpirun"), "-n", str(n), "--oversubscribe", sys.executable, "-m", "commbench",
                   *args, "--backend", "mpi", "--results", str(root), "--run-id", run_id]  # fmt: skip
            subprocess.run(
                cmd, check=True, env=job_env(), cwd=ROOT, timeout=1800, capture_output=True
            )
            print(f"# measured {run_id} in {time.perf_counter() - t:.1f} s ({n} ranks)")
        runs.append(path)
    return runs


def stage_times(prof: cProfile.Profile) -> list[tuple[str, float, int]]:
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (cc, nc, tt, ct, callers)
    out = []
    for label, suffix, name in STAGES:
        ct = calls = 0
        for (file, _line, fn), (_cc, nc, _tt, cum, _callers) in stats.items():
            if fn == name and file.replace(os.sep, "/").endswith(suffix):
                ct += cum
                calls += nc
        out.append((label, ct, calls))
    return out


def time_build(opts: ReportOptions, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        build_report(opts)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-dir", type=Path, default=ROOT / "bench" / "_build" / "report-runs")
    ap.add_argument("--np", type=int, default=4, help="ranks for the measured runs")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    runs = make_runs(args.runs_dir, args.np)
    records = sum(sum(1 for _ in open(r / "records.jsonl")) for r in runs)
    out = Path(tempfile.mkdtemp(prefix="cb-bench-report-"))
    opts = ReportOptions(runs=runs, out=out / "fit")

    build_report(opts)  # warm: imports, font cache
    totals = time_build(opts, args.repeat)
    prof = cProfile.Profile()
    prof.enable()
    rep = build_report(opts)
    prof.disable()
    nfig = len(rep.figures)
    size = sum(p.stat().st_size for p in (out / "fit").rglob("*") if p.is_file())

    cal = out / "cal.json"
    subprocess.run(
        [sys.executable, "-m", "commbench", "fit", *map(str, runs), "-o", str(cal), "-q"],
        check=True, env=job_env(), cwd=ROOT, capture_output=True, timeout=600,
    )  # fmt: skip
    saved = time_build(ReportOptions(runs=runs, calibration=cal, out=out / "saved"), args.repeat)
    cli = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "commbench", "report", *map(str, runs), "-o", str(out / "cli")],
            check=True, env=job_env(), cwd=ROOT, capture_output=True, timeout=600,
        )  # fmt: skip
        cli.append(time.perf_counter() - t)

    print(
        f"# commbench report over {len(runs)} runs ({records} records): {nfig} figures, "
        f"{size / 2**20:.1f} MiB written (index.html + PNGs); {args.repeat} repeats"
    )
    print(f"{'what':<44} {'median s':>9} {'min s':>8}")
    for label, xs in (
        ("build_report, in-memory fit", totals),
        ("build_report, saved calibration", saved),
        ("commbench report CLI (fresh process)", cli),
    ):
        print(f"{label:<44} {statistics.median(xs):9.2f} {min(xs):8.2f}")
    print("# one profiled build_report (cProfile adds overhead), cumulative seconds per stage:")
    print(f"{'stage':<44} {'s':>9} {'calls':>8}")
    for label, ct, calls in stage_times(prof):
        print(f"{label:<44} {ct:9.3f} {calls:8d}")
    print(f"# output: {out}")


if __name__ == "__main__":
    main()
