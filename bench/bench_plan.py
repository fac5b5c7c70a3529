"""How fast is `commbench plan`? Plan llama-70b on 1024 GPUs (8 per node) against the shipped
reference calibration, over every config, and time it.

    python bench/bench_plan.py                  # the default search and the wide one
    python bench/bench_plan.py --gpus 4096 --repeat 3
    python bench/bench_plan.py --model deepseek-v3 --gpus 64 --search infer

Three searches: "default" = the CLI defaults (Megatron rank order, micro-batch 1, ZeRO 0-3);
"wide" = also micro-batch 1, 2, 4, sequence parallel on, every distinct rank order; "infer" =
--mode infer (prefill and decode; an MoE model's routing is sampled per config). Each is run
`--repeat` times, each time a fresh plan() (its own Planner: no caches survive between repeats);
the best and median wall times are printed with the number of candidates enumerated, valid,
fitting in memory and ranked (placements priced).
"""

from __future__ import annotations

import argparse
import statistics
import sys
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
    args = ap.parse_args()
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
