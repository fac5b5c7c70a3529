"""How well does a calibration fitted on this machine predict the strategy suites measured here?

    python bench/validate_accuracy.py --np 2          # measure, fit, validate (2 MPI ranks)
    python bench/validate_accuracy.py --np 8 --out bench/_build/val8
    python bench/validate_accuracy.py --reuse bench/_build/val   # re-validate existing runs
    python bench/validate_accuracy.py --reuse bench/_build/val --steps   # and every step

Steps (all real: mpirun, mpi backend), `--repeats` rounds (5) made in turn: a `collectives` suite
run (the fitter's input; sizes 8 B..64 MiB, every `--factor`; the suite's ops plus alltoallv),
then the tp, dp, zero, cp, ep and pp suites with --quick. Then `commbench fit` of every round's
sweep together (the calibration states the sweeps' repeat spread, per size the median over
pairs of rounds of max / min - 1 of their medians, as its noise floor) and validate.compare
of every suite point against it, strictly and with extrapolation (steps larger than the fitted 64 MiB, e.g. ZeRO-3 layer
all-gathers, need it). A point's measured time is the median over the rounds, so a round a
neighbour's job slowed does not decide it; beside each strategy's median |error| stands its
own repeat spread (accuracy.rerun_spread over the rounds, median over its points: what a
rerun shows).
Every step times `--iters` iterations (the quick suites' own budgets give MiB-sized steps 2
iterations, and one 4 ms scheduler tick in 10 moved the median of a 0.5 ms step: the points
were bimodal, 0.5 or 8.5 ms), medians throughout. Per strategy: PASS when the median |error|
is within max(20%, the noise floor the calibration states), else FAIL; the exit status is 1
if any fails. Prints the load average before and after (the machine is shared).
`--steps` splits each error: every suite step's predicted and measured time per op beside what
the same rounds' sweep measured for that op at that S (log-log between its two sizes around S):
predicted / sweep is the fit at that size, measured / sweep the step against the sweep's op
(another variant, another state of the machine, or noise: the step's own spread beside it);
validation.json keeps the table (`extrapolate.steps`) either way.
"""

from __future__ import annotations

import argparse
import json
import math
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
    for k in range(args.repeats):  # in turn: load that drifts hits sweeps and suites alike
        run([*mp, "suite", "collectives", *common, *sweep, "--run-id", f"collectives-r{k}"],
            args.timeout)  # fmt: skip
        for s in SUITES:
            run([*mp, "suite", s, "--quick", *common, "--run-id", f"{s}-r{k}"], args.timeout)


def fit(out: Path, timeout: float) -> None:
    """One calibration of every round's sweep (again on --reuse: the fitter may have changed)."""
    sweeps = [str(p) for p in sorted(out.glob("collectives-r*"))]
    py = [sys.executable, "-m", "commbench"]
    run([*py, "fit", *sweeps, "-o", str(out / "calibration.json"), "-q"], timeout)


def per_point(rows: list[dict]) -> list[dict]:
    """compare's rows of every round merged per suite point: the median measured time over the
    rounds, the prediction (the same Program each round), and the rounds' spread."""
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["status"] == "ok":
            key = (r["suite"], r["run"], r["point"], r["pattern"], r["config"], r["options"])
            by.setdefault(key, []).append(r)
    out = []
    for (_, _, point, pattern, config, _), rs in by.items():
        meas = [r["measured_s"] for r in rs]
        pred = median([r["predicted_s"] for r in rs])
        m = median(meas)
        out.append(
            {
                "pattern": pattern,
                "point": point,
                "config": config,
                "rounds": len(rs),
                "measured_s": m,
                "predicted_s": pred,
                "rel_error": pred / m - 1,
                "spread": validate.rerun_spread(meas),
            }
        )
    return out


def sweep_times(out: Path) -> dict[tuple[str, int, str], dict[int, float]]:
    """The sweeps' own times: (op, group size, link class) -> S -> median over the rounds (s)."""
    from commbench.results.rundir import read_run

    got: dict[tuple[str, int, str], dict[int, list[float]]] = {}
    for path in sorted(out.glob("collectives-r*")):
        for r in read_run(path).records:
            if r.get("kind") == "step" and not r.get("wrong"):
                key = (r["op"], r["group_size"], r["link_class"])
                got.setdefault(key, {}).setdefault(r["bytes"], []).append(r["time_us"] * 1e-6)
    return {k: {n: median(ts) for n, ts in v.items()} for k, v in got.items()}


def sweep_at(series: dict[int, float] | None, nbytes: int) -> float | None:
    """The sweep's time at S: measured, or log-log between the two measured sizes around it;
    None outside the sweep (or without one)."""
    if not series:
        return None
    if nbytes in series:
        return series[nbytes]
    lo = max((n for n in series if n < nbytes), default=None)
    hi = min((n for n in series if n > nbytes), default=None)
    if lo is None or hi is None:
        return None
    f = math.log(nbytes / lo) / math.log(hi / lo)
    return series[lo] ** (1 - f) * series[hi] ** f


def step_table(rows: list[dict], sweep: dict) -> list[dict]:
    """Every suite step against the same sweep at its S: predicted, measured (medians over the
    rounds) and the sweep, per op. predicted / sweep off 1 is the fit mispredicting the op
    there; measured / sweep off 1 is the step running something the sweep's op does not (or
    noise: its rounds' spread stands beside it)."""
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        for st in r["steps"]:
            if st["measured_s"] and st["predicted_s"] is not None and st["repeat"]:
                key = (r["pattern"], r["run"], r["point"], r["config"], r["options"], st["index"])
                by.setdefault(key, []).append(st)
    out = []
    for (pattern, _, point, config, options, _), sts in by.items():
        st = sts[0]
        meas = [s["measured_s"] / s["repeat"] for s in sts]
        pred = median(s["predicted_s"] / s["repeat"] for s in sts)
        sw = sweep_at(sweep.get((st["op"], st["group_size"], st["link_class"])), st["bytes"])
        out.append(
            {
                "pattern": pattern,
                "point": point,
                "config": config,
                "options": options,
                "label": st["label"],
                "op": st["op"],
                "bytes": st["bytes"],
                "repeat": st["repeat"],
                "measured_s": median(meas),
                "predicted_s": pred,
                "sweep_s": sw,
                "spread": validate.rerun_spread(meas),
            }
        )
    return out


def print_steps(steps: list[dict]) -> None:
    """One line per suite step (per op: predicted, measured, the sweep at its S)."""
    print("\n# per step, per op (medians over the rounds): pred/sweep = the fit at that S, ")
    print("# meas/sweep = the step against the sweep's own op at that S (-: outside the sweep)")
    print(
        f"# {'strategy':<8} {'pt':>2} {'label':<26} {'op':<14} {'S':>10} {'repeat':>7} "
        f"{'pred us':>9} {'meas us':>9} {'sweep us':>9} {'pred/sw':>7} {'meas/sw':>7} "
        f"{'spread':>7}"
    )
    us = lambda v: f"{'-':>9}" if v is None else f"{1e6 * v:9.1f}"  # noqa: E731
    ratio = lambda a, b: f"{'-':>7}" if not (a and b) else f"{a / b:7.2f}"  # noqa: E731
    for s in steps:
        spread = "-" if s["spread"] is None else f"{100 * s['spread']:.0f}%"
        print(
            f"  {s['pattern']:<8} {s['point']:>2} {s['label'][:26]:<26} {s['op']:<14} "
            f"{s['bytes']:>10} {s['repeat']:>7.0f} {us(s['predicted_s'])} {us(s['measured_s'])} "
            f"{us(s['sweep_s'])} {ratio(s['predicted_s'], s['sweep_s'])} "
            f"{ratio(s['measured_s'], s['sweep_s'])} {spread:>7}"
        )


def report(out: Path, show_steps: bool = False) -> tuple[dict, bool]:
    runs = sorted(p for s in SUITES for p in out.glob(f"{s}-r*"))
    cal = calibration.load(out / "calibration.json")
    floor = (cal.doc.get("noise_floor") or {}).get("median_rel", 0.0)
    band = max(validate.ACCURACY_BAND, floor)
    result: dict = {"noise_floor": cal.doc.get("noise_floor"), "band": band}
    passed = True
    for mode, extrapolate in (("strict", False), ("extrapolate", True)):
        rows = validate.compare(runs, cal, extrapolate)
        points = per_point(rows)
        result[mode] = {"points": points, "rows": rows}
        print(f"\n# {mode}: per strategy |error| = |predicted / median measured - 1|")
        print(
            f"# band {band:.0%} = max(20%, the noise floor the calibration states: {floor:.0%}"
            f" over {(cal.doc.get('noise_floor') or {}).get('runs', 1)} sweeps)"
        )
        print(
            f"# {'strategy':<8} {'points':>6} {'skipped':>7} {'median':>8} {'max':>8} "
            f"{'signed':>8} {'spread':>8}"
        )
        f = lambda v: "-" if v is None else f"{100 * v:7.1f}%"  # noqa: E731
        for pattern in SUITES:
            mine = [p for p in points if p["pattern"] == pattern]
            skipped = sum(1 for r in rows if r["pattern"] == pattern and r["status"] != "ok")
            errs = [abs(p["rel_error"]) for p in mine]
            spreads = [p["spread"] for p in mine if p["spread"] is not None]
            med = median(errs) if errs else None
            ok = med is not None and med <= band
            if extrapolate:  # the verdict: ZeRO-3's layer gathers are larger than the sweep
                passed &= ok
            print(
                f"  {pattern:<8} {len(mine):>6} {skipped:>7} {f(med):>8} "
                f"{f(max(errs) if errs else None):>8} "
                f"{f(median([p['rel_error'] for p in mine]) if mine else None):>8} "
                f"{f(median(spreads) if spreads else None):>8}  {'PASS' if ok else 'FAIL'}"
            )
        skipped_why = {r["why"] for r in rows if r["status"] != "ok"}
        for why in sorted(skipped_why)[:5]:
            print(f"#   not predicted: {why[:160]}")
        steps: dict[str, list[float]] = {}
        for r in rows:
            for st in r["steps"]:
                if st["rel_error"] is not None:
                    steps.setdefault(f"{r['pattern']}:{st['op']}", []).append(st["rel_error"])
        print("# per strategy:op, signed step errors over every round: median (n)")
        print(
            "  "
            + ", ".join(f"{k} {100 * median(v):+.0f}% ({len(v)})" for k, v in sorted(steps.items()))
        )
        if extrapolate:
            result[mode]["steps"] = table = step_table(rows, sweep_times(out))
            if show_steps:
                print_steps(table)
    print("\n" + ("PASS" if passed else "FAIL") + " (with extrapolation, every strategy)")
    return result, passed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=4, help="MPI ranks (default 4)")
    ap.add_argument("--repeats", type=int, default=5, help="rounds of sweep + suites (default 5)")
    ap.add_argument("--out", type=Path, default=None, help="results directory")
    ap.add_argument("--reuse", type=Path, default=None, help="validate runs already made here")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--iters", type=int, default=40, help="timed iterations per step (0: budget)")
    ap.add_argument("--factor", type=float, default=2.0, help="size factor of the sweep")
    ap.add_argument(
        "--steps", action="store_true", help="print every step against the sweep at its size"
    )
    args = ap.parse_args()
    out = args.reuse or args.out or REPO / "bench" / "_build" / time.strftime("val-%Y%m%d-%H%M%S")
    print(
        f"# validate_accuracy: {out} (np {args.np}, iters {args.iters}, sweep factor "
        f"{args.factor}, {args.repeats} rounds); load average before: {load()}"
    )
    if not args.reuse:
        out.mkdir(parents=True, exist_ok=True)
        measure(out, args)
    fit(out, args.timeout)
    result, passed = report(out, args.steps)
    print(f"\n# load average after: {load()}")
    (out / "validation.json").write_text(json.dumps(result, indent=1, default=str))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
