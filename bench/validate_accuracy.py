"""How well does a calibration fitted on this machine predict the strategy suites measured here?

    python bench/validate_accuracy.py                 # measure, fit, validate (4 MPI ranks)
    python bench/validate_accuracy.py --np 8 --out bench/_build/val8
    python bench/validate_accuracy.py --reuse bench/_build/val   # re-validate existing runs

Steps (all real: mpirun, mpi backend): a `collectives` suite run (the fitter's input; sizes
8 B..64 MiB, every `--factor`; the suite's ops plus alltoallv), then the tp, dp, zero, cp, ep and pp suites with --quick, then
`commbench fit` of the collectives run only, then validate.compare of every suite point against
that calibration, strictly and with extrapolation (steps larger than the fitted 64 MiB, e.g.
ZeRO-3 layer all-gathers, need it). Every run times `--iters` iterations per step (the quick
suites' own budgets give MiB-sized steps 2 iterations: a median of 2 is mostly noise), and the
sweep is denser than the suite's default x4 so the fitter has sizes to place segments on.
A second `collectives` run after the suites measures the noise floor: the same op, size and
group timed twice minutes apart (median |t2/t1 - 1|); no prediction can be more accurate than
the measurements repeat. Prints the load average before and after (the machine is shared) and
per pattern the median and max |error| (goal: median within 20% or the noise floor the
calibration states, whichever is larger), plus per-op step errors, for the calibration fitted
before the suites, the one fitted after, and one fitted on both sweeps (which states their
repeat spread as its noise floor).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _util import job_env, tool  # noqa: E402

from commbench import calibration  # noqa: E402
from commbench.calibration import accuracy as validate  # noqa: E402

SUITES = ("tp", "dp", "zero", "cp", "ep", "pp")
SWEEP_OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "alltoallv", "broadcast",
             "sendrecv")  # fmt: skip


def run(cmd: list[str], timeout: float) -> None:
    t0 = time.time()
    p = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=job_env(), cwd=REPO
    )
    if p.returncode:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}")
    print(
        f"#   {time.time() - t0:7.1f} s  {' '.join(cmd[3:] if cmd[0] == tool('mpirun') else cmd)}"
    )


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def measure(out: Path, args: argparse.Namespace) -> None:
    py = [sys.executable, "-m", "commbench"]
    mp = [tool("mpirun"), "-n", str(args.np), "--oversubscribe", *py]
    common = ["--backend", "mpi", "--results", str(out)]
    if args.iters:
        common += ["--iters", str(args.iters)]
    # the sweep also times alltoallv (equal split): MPI_Alltoallv is not MPI_Alltoall, and the
    # EP suite runs the former
    sweep = ["--set", f"factor={args.factor}", "--set", f"ops=[{','.join(SWEEP_OPS)}]"]
    run([*mp, "suite", "collectives", *common, *sweep, "--run-id", "collectives"], args.timeout)
    for s in SUITES:
        run([*mp, "suite", s, "--quick", *common, "--run-id", s], args.timeout)
    run(
        [*mp, "suite", "collectives", *common, *sweep, "--run-id", "collectives-after"],
        args.timeout,
    )
    for name, cal in (("collectives", "calibration"), ("collectives-after", "calibration-after")):
        run([*py, "fit", str(out / name), "-o", str(out / f"{cal}.json"), "-q"], args.timeout)
    fit_both(out, args.timeout)


def fit_both(out: Path, timeout: float) -> None:
    """Both sweeps in one calibration: it states their repeat spread as its noise floor."""
    py = [sys.executable, "-m", "commbench"]
    both = [str(out / "collectives"), str(out / "collectives-after")]
    run([*py, "fit", *both, "-o", str(out / "calibration-both.json"), "-q"], timeout)


def repeatability(out: Path) -> None:
    """Median |t_after / t_before - 1| of the two sweeps, below and above 1 MiB."""

    def times(name: str) -> dict:
        recs = (json.loads(x) for x in (out / name / "records.jsonl").read_text().splitlines())
        return {(r["op"], r["axis"], r["bytes"]): r["time_us"] for r in recs if r["kind"] == "step"}

    a, b = times("collectives"), times("collectives-after")
    both = [k for k in a if k in b]
    for label, keep in (("< 1 MiB", lambda n: n < 1 << 20), (">= 1 MiB", lambda n: n >= 1 << 20)):
        d = [abs(b[k] / a[k] - 1) for k in both if keep(k[2])]
        if d:
            print(
                f"# noise floor {label}: the same op/size/group timed before and after the suites "
                f"differs by median {100 * median(d):.0f}%, max {100 * max(d):.0f}% ({len(d)} points)"
            )


def report(out: Path) -> dict:
    runs = [out / s for s in SUITES]
    result = {}
    modes = [("strict", "calibration", False), ("extrapolate", "calibration", True)]
    if (out / "calibration-after.json").exists():
        modes.append(("after, extrapolate", "calibration-after", True))
    if (out / "collectives-after").exists():
        if not (out / "calibration-both.json").exists():
            fit_both(out, 600)
        modes.append(("both sweeps, extrapolate", "calibration-both", True))
    for mode, name, extrapolate in modes:
        cal = calibration.load(out / f"{name}.json")
        floor = (cal.doc.get("noise_floor") or {}).get("median_rel", 0.0)
        band = max(validate.ACCURACY_BAND, floor)
        rows = validate.compare(runs, cal, extrapolate)
        summary = validate.summarize(rows)
        result[mode] = {"summary": summary, "rows": rows}
        print(f"\n# {mode}: per pattern |error| = |predicted - measured| / measured")
        print(
            f"# band {band:.0%} = max(20%, the noise floor the calibration states: "
            f"{floor:.0%}); ok = median |error| within it"
        )
        print(
            f"# {'pattern':<8} {'points':>6} {'skipped':>7} {'median':>8} {'max':>8} {'signed':>8}"
        )
        for s in summary:
            f = lambda v: "-" if v is None else f"{100 * v:7.1f}%"  # noqa: E731
            med = s["median_abs_error"]
            print(
                f"  {s['pattern']:<8} {s['points']:>6} {s['not_predicted']:>7} "
                f"{f(med):>8} {f(s['max_abs_error']):>8} "
                f"{f(s['median_rel_error']):>8}  {'ok' if med is not None and med <= band else 'MISS'}"
            )
        skipped = {r["why"] for r in rows if r["status"] != "ok"}
        for why in sorted(skipped)[:5]:
            print(f"#   not predicted: {why[:160]}")
        steps: dict[str, list[float]] = {}
        for r in rows:
            for st in r["steps"]:
                if st["rel_error"] is not None:
                    key = f"{r['pattern']}:{st['op']}"
                    steps.setdefault(key, []).append(st["rel_error"])
        print("# per pattern:op, signed step errors: median (n)")
        print(
            "  "
            + ", ".join(f"{k} {100 * median(v):+.0f}% ({len(v)})" for k, v in sorted(steps.items()))
        )
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=4, help="MPI ranks (default 4)")
    ap.add_argument("--out", type=Path, default=None, help="results directory")
    ap.add_argument("--reuse", type=Path, default=None, help="validate runs already made here")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--iters", type=int, default=10, help="timed iterations per step (0: budget)")
    ap.add_argument("--factor", type=float, default=2.0, help="size factor of the sweep")
    args = ap.parse_args()
    out = args.reuse or args.out or REPO / "bench" / "_build" / time.strftime("val-%Y%m%d-%H%M%S")
    print(
        f"# validate_accuracy: {out} (np {args.np}, iters {args.iters}, sweep factor "
        f"{args.factor}); load average before: {load()}"
    )
    if not args.reuse:
        out.mkdir(parents=True, exist_ok=True)
        measure(out, args)
    result = report(out)
    if (out / "collectives-after").exists():
        print()
        repeatability(out)
    print(f"\n# load average after: {load()}")
    (out / "validation.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
