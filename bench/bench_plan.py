"""How fast is `commbench plan`? Plan llama-70b on 1024 GPUs (8 per node) against the shipped
reference calibration, over every config, and time it.

    python bench/bench_plan.py                  # the default search and the wide one
    python bench/bench_plan.py --gpus 4096 --repeat 3
    python bench/bench_plan.py --model deepseek-v3 --gpus 64 --search infer
    python bench/bench_plan.py --scale                    # issue 30's targets, time + peak memory
    python bench/bench_plan.py --scale --old /tmp/cb-old  # and an older tree side by side

Three searches: "default" = the CLI defaults (Megatron rank order, micro-batch 1, ZeRO 0-3);
"wide" = also micro-batch 1, 2, 4, sequence parallel on, every distinct rank order; "infer" =
--mode infer (prefill and decode; an MoE model's routing is sampled per config). Each is run
`--repeat` times, each time a fresh plan() (its own Planner: no caches survive between repeats);
the best and median wall times are printed with the number of candidates enumerated, valid,
fitting in memory and ranked (placements priced).

`--scale` runs the planner at the scale users decide (SCALE: llama3.1-405b on 16,384 GPUs,
--explain of one config up to 65,536 GPUs, deepseek-v3 --mode infer with a cold route cache),
each `commbench plan` in a fresh process, and prints its wall time and peak memory (the child's
own maxrss, os.wait4) against its target; `--old DIR` runs the same command with PYTHONPATH=DIR
(e.g. `git archive b36bf9c | tar -x -C DIR`) beside it, `--timeout` bounding each run.
llama3.1-405b has 126 layers: the `405b-*` cases plan it as it is (depths that do not divide
126 get Megatron-Core's uneven split); the `405b128-*` cases force 128 (`:layers=128`) as issue
30 did, so that the code before uneven stages can run them too (`--old`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from commbench import calibration, plan  # noqa: E402
from commbench.calibration import reference
from commbench.traffic.presets import get_model  # noqa: E402

SEARCHES = {
    "default": {"zero_stages": (0, 1, 2, 3)},
    "wide": {
        "zero_stages": (0, 1, 2, 3),
        "micro_batch_sizes": (1, 2, 4),
        "sequence_parallel": True,
        "orders": "all",
    },
    "infer": {"mode": "infer"},  # prefill and decode Programs, ranked by time per output token
}


M405 = "llama3.1-405b"
M405_128 = "llama3.1-405b:layers=128"
TRAIN_405 = "--seq-len 8192 --global-batch 2048 --distributed-optimizer --sequence-parallel"
# name -> (plan arguments, target seconds, target peak GB or None)
SCALE = {
    "405b-16k": (f"--model {M405} --gpus 16384 {TRAIN_405}", 10.0, 1.5),
    "405b-8k": (f"--model {M405} --gpus 8192 {TRAIN_405}", 10.0, 1.5),
    "405b128-16k": (f"--model {M405_128} --gpus 16384 {TRAIN_405}", 10.0, 1.5),
    "405b128-8k-explain-partial": (
        f"--model {M405_128} --gpus 8192 {TRAIN_405} --explain tp8-pp16",
        2.0,
        None,
    ),
    "405b-8k-explain": (
        f"--model {M405} --gpus 8192 {TRAIN_405} --explain tp8-cp1-pp16",
        2.0,
        None,
    ),
    # as the issue ran it: the old code searched the unnamed cp (and explained tp8-cp8-dp8-pp16)
    "405b-8k-explain-partial": (
        f"--model {M405} --gpus 8192 {TRAIN_405} --explain tp8-pp16",
        2.0,
        None,
    ),
    "405b-65k-explain": (
        f"--model {M405} --gpus 65536 {TRAIN_405} --explain tp8-cp1-pp16",
        2.0,
        None,
    ),
    "405b128-65k-explain-pp128": (
        f"--model {M405_128} --gpus 65536 --seq-len 8192 --global-batch 16384 --explain tp8-cp1-pp128",
        2.0,
        None,
    ),
    "70b-2k-explain": ("--model llama-70b --gpus 2048 --explain tp8-cp1-pp4", 2.0, None),
    "dsv3-64-infer-cold": ("--model deepseek-v3 --gpus 64 --mode infer", 3.0, None),
    "70b-1k": ("--model llama-70b --gpus 1024", None, None),
}


def run_cli(args: str, code: str | None, timeout: float) -> tuple[float | None, float, str]:
    """(wall seconds or None on timeout, peak GB, first config line) of one `commbench plan`
    in a fresh process (PYTHONPATH=code when given) with a fresh, empty route cache."""
    env = dict(os.environ)
    env["PYTHONPATH"] = code or str(Path(__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory() as cache:
        env["COMMBENCH_CACHE_DIR"] = cache
        cmd = [sys.executable, "-m", "commbench", "plan", "--gpus-per-node", "8"]
        cmd += shlex.split(args)
        with tempfile.TemporaryFile() as out:
            t0 = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd="/")
            deadline = t0 + timeout
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.perf_counter() > deadline:
                    proc.kill()
                    os.wait4(proc.pid, 0)
                    return None, 0.0, "timeout"
                time.sleep(0.02)
            wall = time.perf_counter() - t0
            proc.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            lines = out.read().decode(errors="replace").splitlines()
    first = next(
        (ln.strip() for ln in lines if ln.startswith(("    1 ", "# commbench plan --explain"))),
        lines[-1] if lines else "",
    )
    if proc.returncode:
        first = f"exit {proc.returncode}: {first}"
    return wall, usage.ru_maxrss / 1e6, first  # ru_maxrss: KB on Linux


def scale(old: str | None, timeout: float, only: list[str] | None) -> int:
    """The SCALE cases, this tree (and `old`) side by side (printed as they finish)."""
    print(f"# bench_plan --scale: each case a fresh `commbench plan` process, cold route cache; "
          f"timeout {timeout:g} s{'; old = ' + old if old else ''}")  # fmt: skip
    for name in only or list(SCALE):
        args, secs, gbs = SCALE[name]
        wall, peak, first = run_cli(args, None, timeout)
        goal = []
        if secs is not None:
            goal.append(f"< {secs:g} s")
        if gbs is not None:
            goal.append(f"< {gbs:g} GB")
        met = wall is not None and (secs is None or wall < secs) and (gbs is None or peak < gbs)
        line = f"{name:>24}: new {_t(wall)}, {peak:.2f} GB"
        if old:
            owall, opeak, ofirst = run_cli(args, old, timeout)
            line += f" | old {_t(owall)}, {opeak:.2f} GB"
        verdict = ("met" if met else "NOT met") if goal else "no target"
        print(f"{line} | target {' and '.join(goal) or '-'}: {verdict}", flush=True)
        print(f"{'':>26}plan {args}")
        print(f"{'':>26}new: {first[:150]}")
        if old:
            print(f"{'':>26}old: {ofirst[:150]}", flush=True)
    return 0


def _t(wall: float | None) -> str:
    return "timeout" if wall is None else f"{wall:.2f} s"


def run_once(model: str, gpus: int, gpn: int, cal, opts: dict) -> tuple[float, plan.PlanResult]:
    req = plan.PlanRequest(
        model=get_model(model), gpus=gpus, gpus_per_node=gpn, peak_tflops=989.4, **opts
    )
    t0 = time.perf_counter()
    res = plan.plan(req, cal)
    return time.perf_counter() - t0, res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-70b")
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--search", choices=tuple(SEARCHES), action="append")
    ap.add_argument("--scale", action="store_true", help="issue 30's cases, time and memory")
    ap.add_argument("--case", choices=tuple(SCALE), action="append", help="with --scale")
    ap.add_argument("--old", default=None, help="with --scale: also run this source tree")
    ap.add_argument("--timeout", type=float, default=600.0, help="with --scale: per run (s)")
    args = ap.parse_args()
    if args.scale:
        return scale(args.old, args.timeout, args.case)
    cal = calibration.load(reference.shipped_path(), kind="reference")
    print(
        f"# bench_plan: {args.model} on {args.gpus} GPUs ({args.gpus_per_node}/node), reference "
        f"calibration, {args.repeat} repeat(s) per search"
    )
    for name in args.search or list(SEARCHES):
        times, res = [], None
        for _ in range(args.repeat):
            t, res = run_once(args.model, args.gpus, args.gpus_per_node, cal, SEARCHES[name])
            times.append(t)
        c = res.counts
        best = res.ranked[0]
        print(
            f"{name:>8}: best {min(times):.2f} s, median {statistics.median(times):.2f} s | "
            f"{c['candidates']} candidates, {c['valid']} valid, {c['fit_memory']} fit, "
            f"{c['ranked']} ranked (placements priced) | top: {best.config.full_label} "
            f"{'TPOT' if name == 'infer' else 'step'} {best.step_s:.3f} s, comm "
            f"{100 * best.comm_share:.0f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
