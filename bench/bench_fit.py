"""How fast is `commbench fit`? Fit 100k synthetic records and time each stage.

    python bench/bench_fit.py                 # both shapes, 100k records each
    python bench/bench_fit.py --records 20000 --shape many

Synthetic data, stated here: every series is two alpha-beta segments (alpha 5 us then 30 us,
beta 1/(2 GB/s) then 1/(10 GB/s), break at 64 KiB) times (1 + 5% Gaussian noise), 1% of the
points x3 (outliers). Shapes: "repeats" = 400 series of 250 points (25 sizes 8 B..128 MiB x
10 repeats), like a cluster calibration merged from many runs; "many" = 4000 series of 25
points each, the worst case for per-series overhead (series = backend x op x group size x link
x dtype x timing). Stages: read records.jsonl, group into series, fit series,
link table, build + validate the calibration.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from commbench import calibration  # noqa: E402
from commbench.fit.calibrate import fit_collected, link_points  # noqa: E402
from commbench.fit.collect import collect, read_fit_runs  # noqa: E402
from commbench.fit.links import fit_link_table  # noqa: E402
from commbench.fit.options import FitOptions  # noqa: E402
from commbench.results.rundir import RunWriter  # noqa: E402

OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv")
SIZES = [8 << k for k in range(25)]


def synth_time(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    t = np.where(x < 65536, 5e-6 + x / 2e9, 30e-6 + x / 10e9)
    t = t * (1 + 0.05 * rng.standard_normal(len(x)))
    out = rng.random(len(x)) < 0.01
    t[out] *= 3
    return np.abs(t)


def write_run(root: Path, n_records: int, shape: str) -> Path:
    """One run directory of n_records synthetic collective records."""
    rng = np.random.default_rng(0)
    w = RunWriter.create(root, "bench", {"backend": "mpi", "hosts": ["synthetic"]}, shape)
    repeats = 10 if shape == "repeats" else 1
    per_series = len(SIZES) * repeats
    keys = [
        (op, p, link, dtype, timing, backend)
        for backend in ("mpi", "gloo", "nccl")
        for p in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
        for op in OPS
        for link in ("intra", "inter")
        for dtype in ("float32", "bfloat16", "float16", "int32", "float64")
        for timing in ("per-iteration", "pipelined")
    ][: max(1, n_records // per_series)]
    lines = []
    for op, p, link, dtype, timing, backend in keys:
        x = np.repeat(np.array(SIZES, dtype=float), repeats)
        t = synth_time(x, rng)
        for xi, ti in zip(x, t):
            lines.append(
                json.dumps(
                    {
                        "schema_version": 1,
                        "run_id": shape,
                        "kind": "collective",
                        "op": op,
                        "backend": backend,
                        "dtype": dtype,
                        "bytes": int(xi),
                        "group_size": p,
                        "link_class": link,
                        "time_us": float(ti * 1e6),
                        "wrong": 0,
                        "timing": timing,
                    }
                )
            )
    w._f.write("\n".join(lines) + "\n")  # one write: the bench times the fitter, not fsync
    w.count = len(lines)
    w.finish("complete")
    return w.path


def to_doc(collected, outcomes, links) -> dict:
    """The calibration document from fits already made (as calibrate.build), validated."""
    from commbench.fit.calibrate import build_doc

    doc = build_doc(collected, outcomes, [], links, [], FitOptions())
    calibration.validate(doc)
    return doc


def bench_shape(path: Path, shape: str, opts: FitOptions) -> None:
    """Time each stage of fitting one run directory, wall and CPU."""
    stages = []

    def stage(name, fn):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        stages.append((name, time.perf_counter() - w0, time.process_time() - c0))
        return out

    runs = stage("read records.jsonl", lambda: read_fit_runs([path]))
    collected = stage("group into series", lambda: collect(runs))
    outcomes, _ = stage("fit series", lambda: fit_collected(collected, opts))
    links, _ = stage("link table", lambda: fit_link_table(link_points(outcomes), opts))
    doc = {}
    stage("build doc + schema check", lambda: doc.update(to_doc(collected, outcomes, links)))
    n = sum(len(r.records) for r, _ in runs)
    wall = sum(s[1] for s in stages)
    cpu = sum(s[2] for s in stages)
    print(
        f"# shape {shape}: {n} records, {len(collected.series)} series, "
        f"{sum(len(o.fit.segments) for o in outcomes)} segments, {len(links)} links"
    )
    print(f"  {'stage':<28s} {'wall':>8s} {'cpu':>8s}")
    for name, w, c in stages:
        print(f"  {name:<28s} {w:7.3f}s {c:7.3f}s")
    print(f"  {'total':<28s} {wall:7.3f}s {cpu:7.3f}s  ({n / cpu:,.0f} records per cpu-s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--shape", choices=("repeats", "many", "both"), default="both")
    ap.add_argument("--bootstrap", type=int, default=200)
    args = ap.parse_args()
    shapes = ("repeats", "many") if args.shape == "both" else (args.shape,)
    root = Path(tempfile.mkdtemp(prefix="commbench-benchfit-"))
    opts = FitOptions(bootstrap=args.bootstrap)
    for shape in shapes:
        bench_shape(write_run(root, args.records, shape), shape, opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
