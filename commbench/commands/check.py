"""Cluster acceptance: find the slow link, GPU or node, and say whether each number is good.

    mpirun -n 16 commbench check                                # all pairs, 15 rounds
    mpirun -n 512 commbench check --schedule sampled --peers 8  # 8 rounds: 8 peers per rank
    mpirun -n 512 commbench check --schedule nodes              # node pairs, one rail each
    mpirun -n 16 commbench check --thresholds expect.yaml --json > check.json; echo $?
    commbench emulate --nodes 4 --ranks-per-node 1 --link-rate 400mbit --slow-node 2=200mbit \\
        -- check --thresholds expect.yaml

Every pair of ranks exchanges S both ways at once, in rounds of disjoint pairs (a round-robin
tournament: n-1 rounds for n ranks, every pair once); then all-reduce and all-gather within
each node and across nodes (local rank r of every node). Each pair's bandwidth is judged
against the median of its peers of the same link class: slow nodes, ranks (with host, local
rank and device) and links are named. Each result is also compared with what it should reach
(a thresholds file, or a calibration's prediction) as % of expected. Exit status: 0 pass,
4 a result below its threshold, 5 an outlier (else all met), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.commands import common, nextstep
from commbench.errors import UsageError

if TYPE_CHECKING:
    from commbench.calibration import Calibration
    from commbench.check.expect import Threshold
    from commbench.check.outliers import Rule
    from commbench.measure.launch import LaunchInfo
    from commbench.measure.runner import TimingConfig
    from commbench.measure.session import SessionOptions

HELP = "cluster acceptance: all-pairs links, per-node groups, outliers, pass/fail vs expected"
DEFAULT_BYTES = "4M"
DEFAULT_ITERS = 5
DEFAULT_WARMUP = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-b", "--bytes", default=DEFAULT_BYTES,
                   help="S per pair and per group; large, so the link sets the time "
                   "(default: %(default)s)")  # fmt: skip
    p.add_argument("-d", "--dtype", default="float32", help="(default: %(default)s)")
    p.add_argument("--schedule", choices=("all", "sampled", "nodes"), default="all",
                   help="all pairs (n-1 rounds), `--peers K` rounds of them, or node pairs "
                   "(one rail each) (default: %(default)s)")  # fmt: skip
    p.add_argument("--peers", type=common.positive_int, default=None,
                   help="sampled: rounds to run = distinct peers per rank")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="sampled: which rounds (default: 0)")
    p.add_argument("--no-collectives", dest="collectives", action="store_false",
                   help="pairs only: skip the node and rail all-reduce / all-gather")  # fmt: skip
    g = p.add_argument_group("expectations and verdict")
    g.add_argument("--thresholds", type=Path, default=None,
                   help="YAML/JSON of expected GB/s per op, link class, size "
                        "(docs/check.md; examples/expect.yaml)")  # fmt: skip
    g.add_argument("--calibration", default=None,
                   help="price what no threshold covers: a calibration JSON, or `reference`")  # fmt: skip
    g.add_argument("--min-pct", type=common.positive_float, default=None,
                   help="fail below this %% of expected (over the file's top-level min_pct; default 80)")  # fmt: skip
    g.add_argument("--outlier-ratio", type=common.positive_float, default=0.7,
                   help="an outlier is below this fraction of its peers' median "
                   "(default: %(default)s)")  # fmt: skip
    g.add_argument("--outlier-z", type=common.positive_float, default=3.5,
                   help="... and its modified z-score below minus this (default: %(default)s)")  # fmt: skip
    g.add_argument("--json", action="store_true", help="print the verdict as JSON on stdout")
    g.add_argument("--dry-run", action="store_true",
                   help="print the schedule and its cost for --world ranks; run nothing")  # fmt: skip
    g.add_argument("--world", type=common.world_size, default=None, help="--dry-run: ranks")
    t = p.add_argument_group("timing")
    t.add_argument("-n", "--iters", type=common.iterations, default=DEFAULT_ITERS,
                   help="timed exchanges per round and group (default: %(default)s)")  # fmt: skip
    t.add_argument("-w", "--warmup", type=common.warmup_iterations, default=DEFAULT_WARMUP,
                   help="(default: %(default)s)")  # fmt: skip
    common.add_session_args(p)


def calls_per_unit(args: argparse.Namespace) -> int:
    """Exchanges each round costs: the exact check, the runner's 2-call probe, warm-up, timed."""
    return 1 + 2 + args.warmup + args.iters


def expectations(args: argparse.Namespace) -> tuple[list[Threshold], Calibration | None]:
    """(thresholds, calibration): loaded and checked before any communication, on every rank."""
    from commbench.check.expect import load_thresholds

    thresholds = load_thresholds(args.thresholds, args.min_pct) if args.thresholds else []
    cal = None
    if args.calibration is not None:
        from commbench.plan.request import load_calibration

        cal = load_calibration(None if args.calibration == "reference" else args.calibration)
    return thresholds, cal


def rounded(nbytes: int, dtype: str) -> tuple[int, str]:
    """S as the pairs measure it (whole elements of dtype, as `run` rounds) and the line that
    says so when it differs from -b (`check -b 1` said 1 B and measured 4 B); "" when not."""
    from commbench.check.schedule import PAIR_OP
    from commbench.ops import round_bytes
    from commbench.sizes import format_size

    pair = round_bytes(PAIR_OP, nbytes, 2, dtype)
    if pair == nbytes:
        return pair, ""
    return pair, (
        f"# size changed: -b {format_size(nbytes)} -> {format_size(pair)} (whole {dtype} "
        "elements; the groups' ops round to whole elements per rank likewise)"
    )


def main(args: argparse.Namespace) -> int:
    from commbench.check.expect import DEFAULT_MIN_PCT
    from commbench.check.outliers import Rule
    from commbench.check.schedule import build
    from commbench.dtypes import canonical_dtype
    from commbench.sizes import parse_size

    dtype = canonical_dtype(args.dtype)
    nbytes, changed = rounded(parse_size(args.bytes, "-b/--bytes"), dtype)
    rule = Rule(ratio=args.outlier_ratio, z=args.outlier_z)
    if rule.ratio >= 1:
        raise UsageError(f"--outlier-ratio {rule.ratio:g} must be below 1")
    thresholds, cal = expectations(args)
    min_pct = args.min_pct or DEFAULT_MIN_PCT
    if args.dry_run:
        if args.world is None:
            raise UsageError("--dry-run needs --world N (and --ranks-per-node for nodes)")
        rpn = args.ranks_per_node or args.world
        nodes = tuple(r // rpn for r in range(args.world))
        sched = build(args.schedule, nodes, args.peers, args.seed)
        print(f"# commbench check (dry run): {sched.cost(calls_per_unit(args), nbytes)}")
        if changed:
            print(changed)
        for i, rnd in enumerate(sched.rounds):
            print(f"round {i + 1}: " + " ".join(f"{a}-{b}" for a, b in rnd))
        return 0
    launch = common.launch_info()
    if args.schedule != "nodes":  # nodes needs the hosts: checked once they are known
        build(args.schedule, (0,) * launch.size, args.peers, args.seed)
    opts = common.session_options(args, "check", launch)
    from commbench.measure.runner import TimingConfig

    timing = TimingConfig(iters=args.iters, warmup=args.warmup, budget_s=common.DEFAULT_BUDGET_S)
    return _measure(
        args, launch, opts, timing, nbytes, dtype, rule, thresholds, cal, min_pct, changed
    )


def _measure(
    args: argparse.Namespace,
    launch: LaunchInfo,
    opts: SessionOptions,
    timing: TimingConfig,
    nbytes: int,
    dtype: str,
    rule: Rule,
    thresholds: list[Threshold],
    cal: Calibration | None,
    min_pct: float,
    changed: str = "",
) -> int:
    """Measure on every rank; rank 0 judges, prints and writes check.json; all return its
    exit status (broadcast, so no rank exits before rank 0 has printed)."""
    from commbench.check.schedule import build
    from commbench.check.summary import summarize
    from commbench.measure import linkcheck
    from commbench.measure.session import Session
    from commbench.results.rundir import write_json_atomic

    out = sys.stderr if args.json else sys.stdout
    with Session(launch, opts, timing) as s:

        def say(text: str) -> None:
            if s.is_root:
                print(text, file=out, flush=True)

        sched = build(args.schedule, s.nodes, args.peers, args.seed)
        hosts = len(set(s.hosts))
        say(f"# commbench check: backend {opts.backend}, world {s.world.size} on {hosts} "
            f"host(s), S = {nbytes} B {dtype}")  # fmt: skip
        if changed:
            say(changed)
        say(f"# cost: {sched.cost(calls_per_unit(args), nbytes)}")
        records = linkcheck.measure(s, sched, nbytes, dtype, say, rule, args.collectives)
        code = 0
        if s.is_root:
            assert s.writer is not None
            places = linkcheck.rank_places(s)
            summary = summarize(records, places, rule, thresholds, cal, min_pct)
            doc = summary.to_json()
            write_json_atomic(s.writer.path / "check.json", doc)
            if args.json:
                print(json.dumps(doc, indent=1), flush=True)
            else:
                from commbench.check.text import print_summary

                print_summary(summary)
            say(f"results: {s.writer.path}")
            say(nextstep.line("check", s.writer.path))
            code = summary.exit_code
        code = s.world.bcast_obj(code, root=0)  # everyone waits for rank 0's output
    return code
