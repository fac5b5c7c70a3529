"""Accuracy of the fitter on real sweeps: leave-one-size-out error and the link table's per-op error.

    python bench/fit_accuracy.py --make            # collectives sweeps on 2 mpi ranks, then score
    python bench/fit_accuracy.py results/RUN ...   # score existing runs
    python bench/fit_accuracy.py RUN ... --against RUN ...  # and a second sweep
    python bench/fit_accuracy.py --make --penalty 1,2,3

For every series and every distinct message size: drop all points of that size, refit the
whole series (segmentation included), predict the dropped size as the calibration does (its
neighbours' measurements interpolated log-log, times the line's curvature there), and
take |pred - t| / t; the `line` column is the line alone.
Reported: per series and overall medians, over all sizes and over interior sizes only (the
smallest and largest size are extrapolations when left out), next to the in-sample error, the
calibration's own LOSO (segmentation held fixed), and log-log interpolation of the left-out
size's neighbours' median times (inside the measured range a fit should not lose to it:
PASS/FAIL on the interior medians). Then the link table's median error per op from 64 KiB up,
under the best fixed model and the library's own algorithm choice (the goal: below 10% per op),
PASS/FAIL, beside what bounds it: the series fit's in-sample error on the same points (the
model's form), and, with a second set of sweeps (`--make` makes one, `--against` names one),
the link table fitted on the first priced on the second's points and the two sets' spread
(max / min - 1 of their per-size medians: the noise). The goal is judged in-sample, on the
fitted sweeps; the second set says how much of that survives a rerun. A set is `--repeats`
sweeps made in turn and fitted together (the calibration states their spread as its noise
floor). 50 iterations per point, not 10, so that a 4 ms scheduler tick in a few of them does
not move a point's median (the sweep's own jitter from size to size fell: in-sample 2-7% per
op against 5-15%; the spread between two sweeps did not, it is the neighbours' load). The
measuring sweep is `commbench suite collectives --set factor=2 --iters 50` of
allreduce, allgather, reduce_scatter, alltoall, broadcast and sendrecv (8 B..64 MiB), under
the measuring lock when one is given (`flock /tmp/cb-measure.lock python
bench/fit_accuracy.py --make`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from commbench.calibration.accuracy import rerun_spread  # noqa: E402
from commbench.calibration.lines import link_model, predict_segments, predict_series  # noqa: E402
from commbench.fit.calibrate import build, fit_collected  # noqa: E402
from commbench.fit.collect import collect, read_fit_runs  # noqa: E402
from commbench.fit.options import FitOptions  # noqa: E402
from commbench.fit.series import fit_series  # noqa: E402

OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "sendrecv")
GOAL = 0.10  # the link table's median error per op from 64 KiB up
LARGE = 64 << 10


def make_runs(root: Path, ranks: int, iters: int, factor: float, name: str) -> Path:
    """Measure the collectives sweep on this machine (real mpirun, mpi backend)."""
    mpirun = Path(sys.executable).parent / "mpirun"
    env = dict(
        os.environ,
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        PYTHONPATH=str(REPO),
    )
    run_id = f"acc-collectives-{name}"
    cmd = [
        *(str(mpirun) if mpirun.exists() else "mpirun", "-n", str(ranks), "--oversubscribe"),
        *(sys.executable, "-m", "commbench", "suite", "collectives", "--backend", "mpi"),
        *("--iters", str(iters), "--set", f"factor={factor:g}"),
        *("--set", f"ops=[{','.join(OPS)}]", "--results", str(root), "--run-id", run_id),
    ]
    subprocess.run(cmd, check=True, timeout=900, env=env, stdout=subprocess.DEVNULL)
    return root / run_id


def loso(
    x: np.ndarray, t: np.ndarray, opts: FitOptions
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct size: median |pred - t| / t with that size left out of the whole fit, as
    the calibration predicts (the neighbours' knots with the line's curvature), the same for the line alone, and for log-log interpolation of its
    neighbours' median times (the baseline a fit must not lose to inside the measured range;
    NaN at the two ends)."""
    sizes = np.unique(x)
    errs = np.full(len(sizes), np.nan)
    line = np.full(len(sizes), np.nan)
    interp = np.full(len(sizes), np.nan)
    meds = np.array([np.median(t[x == s]) for s in sizes])
    for i, s in enumerate(sizes):
        keep = x != s
        if 0 < i < len(sizes) - 1 and sizes[0] > 0:
            lx = np.log(sizes[[i - 1, i + 1]])
            guess = np.exp(np.interp(np.log(s), lx, np.log(meds[[i - 1, i + 1]])))
            interp[i] = float(np.median(np.abs(guess - t[~keep]) / t[~keep]))
        if len(np.unique(x[keep])) < opts.min_sizes:
            continue
        res = fit_series(x[keep], t[keep], opts)
        bare = predict_segments(res.segments, float(s))
        pred = predict_series(res.segments, res.knots, float(s))
        errs[i] = float(np.median(np.abs(pred - t[~keep]) / t[~keep]))
        line[i] = float(np.median(np.abs(bare - t[~keep]) / t[~keep]))
    return sizes, errs, line, interp


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", help="run directories (default: make a sweep)")
    ap.add_argument("--make", action="store_true", help="measure two sets of sweeps first")
    ap.add_argument("--against", nargs="+", default=[], help="a second set of runs to price")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=50, help="timed iterations per point")
    ap.add_argument("--repeats", type=int, default=1, help="sweeps per set, made in turn")
    ap.add_argument("--factor", type=float, default=2.0, help="size step factor")
    ap.add_argument("--penalty", default="2", help="comma-separated BIC penalty multipliers")
    ap.add_argument("--bootstrap", type=int, default=0, help="bootstrap resamples (speed)")
    args = ap.parse_args()
    runs = [Path(r) for r in args.runs]
    against = [Path(r) for r in args.against]
    if args.make or not runs:
        root = Path(tempfile.mkdtemp(prefix="commbench-acc-"))
        t0 = time.perf_counter()
        made = [
            make_runs(root, args.ranks, args.iters, args.factor, f"{s}{k}")
            for k in range(args.repeats)
            for s in "ab"  # in turn: load that drifts hits both sets
        ]
        runs, against = made[0::2], made[1::2]
        print(f"# measured {len(made)} runs in {time.perf_counter() - t0:.0f} s under {root}")
    collected = collect(read_fit_runs(runs))
    print(f"# load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    interp_ok = True
    for pen in [float(p) for p in args.penalty.split(",")]:
        opts = FitOptions(penalty=pen, bootstrap=args.bootstrap)
        outcomes, skipped = fit_collected(collected, opts)
        print(f"\n# penalty {pen:g}: leave-one-size-out |pred - t| / t (whole fit redone per size)")
        print(
            f"# {'series':<44s} {'segs':>4s} {'in-sample':>9s} {'fixed-seg':>9s} "
            f"{'loso all':>9s} {'interior':>9s} {'line':>9s} {'interp':>9s}"
        )
        all_e, interior_e, line_e, interp_e = [], [], [], []
        for o in outcomes:
            x, t = o.data.arrays()
            sizes, errs, line, interp = loso(x, t, opts)
            inner, inner_line = errs[1:-1], line[1:-1]
            all_e += errs[np.isfinite(errs)].tolist()
            interior_e += inner[np.isfinite(inner)].tolist()
            line_e += inner_line[np.isfinite(inner_line)].tolist()
            interp_e += interp[np.isfinite(interp)].tolist()
            print(
                f"  {o.data.key.label():<44s} {len(o.fit.segments):4d} "
                f"{np.median(o.fit.rel_err):9.1%} {o.row['loso_median_rel_err'] or 0:9.1%} "
                f"{np.nanmedian(errs):9.1%} {np.nanmedian(inner):9.1%} "
                f"{np.nanmedian(inner_line):9.1%} {np.nanmedian(interp):9.1%}"
            )
        fit_i, interp_i = np.median(interior_e), np.median(interp_e)
        print(
            f"# overall median: loso all sizes {np.median(all_e):.1%} ({len(all_e)} sizes); "
            f"90th percentile {np.percentile(all_e, 90):.1%}"
        )
        ok = fit_i <= interp_i
        interp_ok &= ok
        print(
            f"# inside the measured range: the fit {fit_i:.1%} (its line alone "
            f"{np.median(line_e):.1%}), log-log interpolation of the "
            f"neighbours' medians {interp_i:.1%} (median over {len(interior_e)} interior sizes): "
            + ("PASS" if ok else "FAIL")
        )
        for s in skipped:
            print(f"# not fitted: {s['op']} p={s['group_size']}: {s['reason']}")
    table_ok = link_table_goal(collected, collect(read_fit_runs(against)) if against else None)
    return 0 if table_ok and interp_ok else 1


def large_err(pred: list[float], t: list[float]) -> float:
    return float(np.median(np.abs(np.asarray(pred) / np.asarray(t) - 1)))


def set_spread(a: dict, b: dict) -> float:
    """Median over sizes of the two sets' rerun spread (max / min - 1 of their per-size
    median times)."""
    out = [rerun_spread([float(np.median(a[x])), float(np.median(b[x]))]) for x in set(a) & set(b)]
    got = [s for s in out if s is not None]
    return float(np.median(got)) if got else float("nan")


def link_table_goal(collected, second=None) -> bool:
    """Print the link table's median error per op from 64 KiB up (best fixed model, and the
    library's own algorithm choice where it prices the op), in-sample beside the series fit's
    and, with a second set, on its points beside the two sets' spread; True when every op is
    within GOAL in-sample."""
    doc, outcomes, _ = build(collected, FitOptions(bootstrap=0))
    ok = True
    print(f"\n# link table: median |error| per op from 64 KiB up (goal {GOAL:.0%}, in-sample)")
    for e in doc["link_table"]:
        best = e["models"][e["best_model"]]["per_op_large_median_rel_err"]
        lib = {  # the ops it prices: those it fits as well as the best fixed model
            op: err
            for op, err in (e.get("library") or {}).get("per_op_large_median_rel_err", {}).items()
            if op in e["library"]["priced_ops"]
        }
        model = link_model(e)
        name = e["library"]["name"] if e.get("library") else "-"
        print(
            f"# {e['backend']}/{e['link_class']} p={e['group_sizes']}: {'op':>15} "
            f"{e['best_model']:>13} {name:>13} {'series fit':>10} {'2nd set':>8} {'spread':>7}"
        )
        for op, err in sorted(best.items()):
            use = lib.get(op, err)
            ok &= use <= GOAL
            mine = model.library if op in lib and model.library else model
            series = [  # the same points' series-fit error, and the second set's
                o
                for o in outcomes
                if o.data.key.op == op and e["link_class"] == o.data.key.link_class
            ]
            s_pred, s_t, o_pred, o_t, spread = [], [], [], [], []
            for o in series:
                x, t = o.data.arrays()
                big = x >= LARGE
                s_pred += [predict_segments(o.fit.segments, v) for v in x[big]]
                s_t += t[big].tolist()
                other = second.series.get(o.data.key) if second else None
                if other is not None:
                    ox, ot = other.arrays()
                    obig = ox >= LARGE
                    o_pred += [mine.time(op, o.data.key.group_size, v) for v in ox[obig]]
                    o_t += ot[obig].tolist()
                    by_a, by_b = {}, {}
                    for v, tt in zip(x[big], t[big]):
                        by_a.setdefault(v, []).append(tt)
                    for v, tt in zip(ox[obig], ot[obig]):
                        by_b.setdefault(v, []).append(tt)
                    spread.append(set_spread(by_a, by_b))
            print(
                f"  {'':>20} {op:>15} {err:13.1%} "
                + (f"{lib[op]:13.1%}" if op in lib else f"{'-':>13}")
                + (f" {large_err(s_pred, s_t):10.1%}" if s_t else f" {'-':>10}")
                + (f" {large_err(o_pred, o_t):8.1%} {np.median(spread):7.1%}" if o_t else "")
                + ("" if use <= GOAL else "  MISS")
            )
    print("PASS" if ok else "FAIL")
    return ok


if __name__ == "__main__":
    sys.exit(main())
