"""`mpirun -n N commbench plan ... --verify K`: measure the step Program of the top K planned
configs on this world (as `suite step` measures it: every op checked, all groups of an axis
at once), price the same Program with the plan's calibration and print predicted vs measured
step communication, top-1 agreement, Kendall tau and the axis the prediction missed most. The
records (suite `plan-verify`, pattern step) are what `validate` and `report` read."""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

from commbench.commands import nextstep
from commbench.commands.argtypes import DEFAULT_RESULTS, positive_float, positive_int

SUITE = "plan-verify"
VERIFY_JSON = "verify.json"  # rows and agreement, beside records.jsonl
VERIFY_BUDGET_S = 0.1  # timed seconds per measured op
VERIFY_ROUNDS = 3
MAX_BYTES = 64 << 20  # per-rank buffer budget; larger ops run a measured chunk, scaled
# without --calibration: a quick collectives sweep of every op the step uses, fitted first
QUICK_OPS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "sendrecv",
             "pingpong")  # fmt: skip
QUICK_MAX_BYTES = 32 << 20
QUICK_BUDGET_S = 0.05  # timed seconds per sweep point (as bench/verify_emulated.py sweeps)
QUICK_CALIBRATION = "calibration.json"
PROGRESS_S = 10.0  # rank 0's line on the ops measured inside a point, at most this often


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("verification (under a launcher)")
    g.add_argument(
        "--verify",
        type=positive_int,
        default=None,
        metavar="K",
        help="measure the top K planned configs that fit the launched world and compare "
        "with the prediction (needs --calibration measured on this world)",
    )
    g.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="where --verify writes")
    g.add_argument("--run-id", default=None, help="name --verify's run directory")
    g.add_argument(
        "--rounds",
        type=positive_int,
        default=VERIFY_ROUNDS,
        help="--verify: measure every config this many times, in turn, and take the median "
        f"(load that drifts then hits every config alike) (default: {VERIFY_ROUNDS})",
    )
    g.add_argument(
        "--budget",
        type=positive_float,
        default=VERIFY_BUDGET_S,
        help=f"--verify: timed seconds per op (default: {VERIFY_BUDGET_S})",
    )


def sweep_top(progs) -> int:
    """The quick sweep's largest size: 8 x 4^k reaching the largest op (one pipeline message
    for a schedule) of `progs`, at most QUICK_MAX_BYTES."""
    from commbench.calibration.pricing import busiest_bytes
    from commbench.ops import OPS

    need = max(
        (st.nbytes if OPS[st.op].scheduled else busiest_bytes(st))
        for prog in progs
        for st in prog.steps
    )
    top = 8
    while top < min(need, QUICK_MAX_BYTES):
        top *= 4
    return top


def quick_sweep(world: int, nodes: tuple[int, ...], top: int) -> tuple:
    """The quick calibration sweep on this world (its suite and points): every op the step
    Program uses, 8 B to `top` (x4), group sizes 2 .. world, contiguous and strided."""
    from commbench.traffic.layout import DEFAULT_ORDER
    from commbench.traffic.points import expand
    from commbench.traffic.suitefile import RunSpec, Suite

    options = {"ops": list(QUICK_OPS), "min_bytes": 8, "max_bytes": top, "factor": 4}
    run = RunSpec(
        where="plan --verify quick calibration", pattern="collectives", name="calibration",
        models=(), degrees={}, options=options, sweep={}, order=DEFAULT_ORDER, timing={},
        max_bytes=None,
    )  # fmt: skip
    suite = Suite(SUITE, Path(SUITE), "plan --verify: quick calibration", (run,))
    return suite, expand(suite, world, nodes)


def fit_here(s, path: Path) -> dict:
    """Rank 0 fits the quick sweep's records (written to `path`) and saves the calibration
    beside them; every rank gets the document (or the fitter's UsageError, raised on all)."""
    from commbench import calibration
    from commbench.errors import UsageError
    from commbench.fit import calibrate
    from commbench.fit.collect import collect, read_fit_runs

    outcome: tuple[str, dict | str] = ("ok", {})
    if s.is_root:
        try:
            doc, outcomes, _ = calibrate.build(collect(read_fit_runs([path])))
            if not outcomes:
                raise UsageError("the quick calibration sweep fitted no series")
            calibration.save(doc, path / QUICK_CALIBRATION)
            outcome = ("ok", doc)
        except UsageError as e:
            outcome = ("error", str(e))
    outcome = s.world.bcast_obj(outcome, root=0)
    if outcome[0] == "error":
        raise UsageError(f"--verify: {outcome[1]}")
    assert isinstance(outcome[1], dict)
    return outcome[1]


def check_nodes(planned: tuple[int, ...], launched: tuple[int, ...]) -> None:
    """The plan's nodes (--gpus-per-node) must be the launched world's hosts, or the configs
    verified are placed on links the plan did not price (identical on every rank)."""
    from collections import Counter

    from commbench.errors import UsageError

    want, have = Counter(planned or (0,) * len(launched)), Counter(launched)
    if sorted(want.values()) != sorted(have.values()):
        per = ", ".join(str(n) for n in sorted(set(have.values())))
        raise UsageError(
            f"--verify: --gpus-per-node {max(want.values())} plans {len(want)} node(s), but the "
            f"launched world has {len(launched)} rank(s) on {len(have)} host(s) ({per} per "
            f"host); give --gpus-per-node {max(have.values())}"
        )


def measure_points(
    s,
    suite,
    points,
    max_bytes: int,
    backend: str,
    on_point=None,
    whole: bool = False,
    what: str = "measured",
) -> None:
    """Measure `points` as suite does (measure/points.py: every op checked, rank 0 writing
    step and point records); with `whole`, each point's Program is then replayed as one timed
    Program (measure/replay.py); `on_point(point, plan, records, replayed)` on rank 0 after
    each. Rank 0 says on stderr each point as it is done, and the ops measured every
    PROGRESS_S inside a long one (`what` names them), so minutes of measuring are not silent."""
    import time

    from commbench.measure import points as measured
    from commbench.traffic.execution import plan as plan_steps

    plans = [
        plan_steps(pt.program, dataclasses.replace(pt.layout, nodes=s.nodes), backend, max_bytes)
        for pt in points
    ]
    start, ops = time.monotonic(), sum(len(pl) for pl in plans)
    state = {"ops": 0, "next": start + PROGRESS_S}

    def say(text: str) -> None:
        print(f"# verify: {text} ({time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)

    def on_step() -> None:
        state["ops"] += 1
        if time.monotonic() >= state["next"]:
            state["next"] = time.monotonic() + PROGRESS_S
            say(f"{what}: {state['ops']} of {ops} ops")

    done_points = measured.measure_points(
        s, suite, points, plans, backend, whole=whole, on_step=on_step
    )
    for k, done in enumerate(done_points, 1):
        say(f"{what} {k} of {len(points)}: {done.point.run.name}")
        if done.totals.wrong:
            s.say(
                f"commbench: {done.point.run.name}: {done.totals.wrong} op(s) returned wrong data"
            )
        if on_point is not None:
            on_point(done.point, done.plan, done.records, done.replayed)


def main(args: argparse.Namespace, req, cal, result) -> int:
    """Measure and compare; UsageErrors (K too large, world mismatch) come before any
    communication, identically on every rank. Without --calibration a quick sweep on this
    world is measured and fitted first, and the plan made again with it."""
    from commbench.calibration import Calibration
    from commbench.commands import common
    from commbench.commands.plan import request_from_args
    from commbench.errors import UsageError
    from commbench.measure.runner import TimingConfig
    from commbench.measure.session import Session
    from commbench.plan import plan, verify
    from commbench.plan.planner import Planner
    from commbench.results.rundir import write_json_atomic
    from commbench.sizes import format_size
    from commbench.traffic import patterns
    from commbench.traffic.layout import DEFAULT_ORDER
    from commbench.traffic.points import Point
    from commbench.traffic.suitefile import RunSpec, Suite

    launch = common.launch_info()
    configs = verify.select(result, launch.size, args.verify)  # memory decides here
    quick = args.calibration is None
    if quick and launch.size < 2:
        raise UsageError(
            "--verify without --calibration measures a quick sweep on the launched world "
            "first: launch 2 or more ranks (mpirun -n N), or give --calibration"
        )
    if quick:  # every config that fits in memory bounds the sweep (the ranking may change)
        fitting = [ev.config for ev in result.ranked if ev.fits]
        top = sweep_top([verify.step_program(req, c) for c in fitting])
    session_args = SimpleNamespace(
        backend=args.backend or "auto", results=args.results, timeout=300.0,
        ranks_per_node=None, verbose=False, run_id=args.run_id,
    )  # fmt: skip
    opts = common.session_options(session_args, "plan", launch)  # type: ignore[arg-type]
    timing = TimingConfig(budget_s=args.budget, min_iters=3, max_iters=200)
    with Session(launch, opts, timing) as s:
        assert s.runner is not None
        check_nodes(req.nodes, s.nodes)
        if quick:
            assert s.writer is not None or not s.is_root
            sweep_suite, sweep = quick_sweep(launch.size, s.nodes, top)
            s.say(
                f"# no --calibration: a quick sweep on this world first ({len(sweep)} points, "
                f"8 B - {format_size(top)}), fitted and saved as {QUICK_CALIBRATION} in the run"
            )
            s.runner.cfg = TimingConfig(budget_s=QUICK_BUDGET_S, min_iters=3, max_iters=50)
            measure_points(s, sweep_suite, sweep, MAX_BYTES, opts.backend, what="quick sweep")
            s.runner.cfg = timing
            path = s.world.bcast_obj(str(s.writer.path) if s.writer else "", root=0)
            cal = Calibration(fit_here(s, Path(path)), f"{path}/{QUICK_CALIBRATION}")
            req = request_from_args(args, cal)
            configs = verify.select(plan(req, cal), launch.size, args.verify)
        req = dataclasses.replace(req, extrapolate=True)  # tiny ops (loss, grad norm) included
        planner = Planner(req, cal)
        progs = [verify.step_program(req, c) for c in configs]
        preds = [verify.predicted(planner, c, p) for c, p in zip(configs, progs)]
        runs, points = [], []
        first = len(sweep) if quick else 0  # point numbers follow the sweep's: one run dir
        for i, (c, prog) in enumerate(zip(configs, progs)):
            run = RunSpec(
                where=f"plan --verify config {i + 1}", pattern=verify.STEP_PATTERN,
                name=c.full_label, models=(req.model,), degrees={}, options={}, sweep={},
                order=DEFAULT_ORDER, timing={}, max_bytes=None,
            )  # fmt: skip
            runs.append(run)
            layout = c.layout(req.gpus, ())
            opt = patterns.make_options(verify.STEP_PATTERN, verify.step_options(req, c))
            pred = preds[i]  # kept in the point record's meta: the report's ranking figure
            meta = {**prog.meta, "predicted_s": sum(pred.values()), "predicted_by_axis": pred}
            prog = dataclasses.replace(prog, meta=meta)
            for r in range(args.rounds):  # round r of every config, then round r + 1
                index = first + r * len(configs) + i + 1
                points.append(Point(index, run, req.model, layout, opt, {}, prog))
        points.sort(key=lambda pt: pt.index)
        suite = Suite(SUITE, Path(SUITE), "plan --verify", tuple(runs))
        measured: dict[int, list[dict[str, float]]] = {}  # config -> per round, by axis

        whole: dict[int, list[dict[str, float]]] = {}  # the same, replayed as one Program
        whole_steps: dict[int, list[float]] = {}  # its whole step time per round

        def keep(pt, pl, results, replayed) -> None:
            seconds = [0.0] * len(pt.program.steps)
            for m, rec in zip(pl, results):
                for idx in m.indices:
                    seconds[idx] = rec.time_us * 1e-6 * m.scale * pt.program.steps[idx].repeat
            k = (pt.index - first - 1) % len(configs)
            measured.setdefault(k, []).append(verify.by_axis(pt.program, seconds))
            whole.setdefault(k, []).append(verify.by_axis(pt.program, replayed.op_s))
            whole_steps.setdefault(k, []).append(replayed.step_s)

        measure_points(s, suite, points, MAX_BYTES, opts.backend, keep, whole=True)
        if s.is_root:
            rows = [
                verify.Row(
                    c,
                    preds[k],
                    verify.median_by_axis(measured[k]),
                    tuple(sum(r.values()) for r in measured[k]),
                    verify.median_by_axis(whole[k]),
                    statistics.median(whole_steps[k]),
                )
                for k, c in enumerate(configs)
            ]
            if args.rounds > 1:
                s.say(f"# measured: the median of {args.rounds} rounds over the configs in turn")
            ag = verify.agreement(rows)
            for line in verify.text(rows, ag, verify.agreement(rows, whole=True)):
                s.say(line)
            assert s.writer is not None
            doc = verify.summary(rows, ag, verify.agreement(rows, whole=True))
            write_json_atomic(s.writer.path / VERIFY_JSON, doc)
            s.say(f"results: {s.writer.path}")
            s.say(nextstep.line("plan", s.writer.path))
    return 0
