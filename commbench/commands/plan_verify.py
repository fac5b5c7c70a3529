"""`mpirun -n N commbench plan ... --verify K`: measure the step Program of the top K planned
configs on this world (as `suite step` measures it: every op checked, all groups of an axis
at once), price the same Program with the plan's calibration and print predicted vs measured
step communication, top-1 agreement, Kendall tau and the axis the prediction missed most. The
records (suite `plan-verify`, pattern step) are what `validate` and `report` read."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from types import SimpleNamespace

from commbench.commands.argtypes import DEFAULT_RESULTS, positive_float, positive_int

SUITE = "plan-verify"
VERIFY_JSON = "verify.json"  # rows and agreement, beside records.jsonl
VERIFY_BUDGET_S = 0.1  # timed seconds per measured op
VERIFY_ROUNDS = 3
MAX_BYTES = 64 << 20  # per-rank buffer budget; larger ops run a measured chunk, scaled


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


def main(args: argparse.Namespace, req, cal, result) -> int:
    """Measure and compare; UsageErrors (K too large, world mismatch) come before any
    communication, identically on every rank."""
    from commbench.commands import common
    from commbench.errors import UsageError
    from commbench.measure.point_records import point_record, point_totals, step_record
    from commbench.measure.runner import TimingConfig
    from commbench.measure.session import Session
    from commbench.plan import verify
    from commbench.plan.planner import Planner
    from commbench.results.rundir import write_json_atomic
    from commbench.traffic import patterns
    from commbench.traffic.execution import plan as plan_steps
    from commbench.traffic.layout import DEFAULT_ORDER
    from commbench.traffic.points import Point
    from commbench.traffic.suitefile import RunSpec, Suite

    if args.calibration is None:
        raise UsageError(
            "--verify needs --calibration: one measured on this world (commbench fit); the "
            "shipped reference describes H100s, not this machine"
        )
    launch = common.launch_info()
    configs = verify.select(result, launch.size, args.verify)
    req = dataclasses.replace(req, extrapolate=True)  # tiny ops (loss, grad norm) included
    planner = Planner(req, cal)
    progs = [verify.step_program(req, c) for c in configs]
    preds = [verify.predicted(planner, c, p) for c, p in zip(configs, progs)]
    session_args = SimpleNamespace(
        backend=args.backend or "auto", results=args.results, timeout=300.0,
        ranks_per_node=None, verbose=False, run_id=args.run_id,
    )  # fmt: skip
    opts = common.session_options(session_args, "plan", launch)  # type: ignore[arg-type]
    timing = TimingConfig(budget_s=args.budget, min_iters=3, max_iters=200)
    runs, points = [], []
    for i, (c, prog) in enumerate(zip(configs, progs)):
        run = RunSpec(
            where=f"plan --verify config {i + 1}", pattern=verify.STEP_PATTERN,
            name=c.full_label, models=(req.model,), degrees={}, options={}, sweep={},
            order=DEFAULT_ORDER, timing={}, max_bytes=None,
        )  # fmt: skip
        runs.append(run)
        options = verify.step_options(req, c)
        layout = c.layout(req.gpus, ())
        opt = patterns.make_options(verify.STEP_PATTERN, options)
        pred = preds[i]  # kept in the point record's meta: the report's ranking figure
        meta = {**prog.meta, "predicted_s": sum(pred.values()), "predicted_by_axis": pred}
        prog = dataclasses.replace(prog, meta=meta)
        for r in range(args.rounds):  # round r of every config, then round r + 1
            points.append(Point(r * len(configs) + i + 1, run, req.model, layout, opt, {}, prog))
    points.sort(key=lambda pt: pt.index)
    suite = Suite(SUITE, Path(SUITE), "plan --verify", tuple(runs))
    measured: dict[int, list[dict[str, float]]] = {}  # config -> per round, seconds by axis
    with Session(launch, opts, timing) as s:
        assert s.runner is not None
        plans = [
            plan_steps(pt.program, dataclasses.replace(pt.layout, nodes=s.nodes), opts.backend,
                       MAX_BYTES)
            for pt in points
        ]  # fmt: skip
        s.runner.reserve([(m.step, m.info) for pl in plans for m in pl])
        for pt, pl in zip(points, plans):
            c = configs[(pt.index - 1) % len(configs)]
            results = []
            for m in pl:
                rec = s.runner.measure(m.step, m.info)
                if rec is not None:
                    assert s.writer is not None
                    results.append(rec)
                    s.writer.write(step_record(suite, pt, m, rec, opts.backend).to_json())
            if not s.is_root:
                continue
            totals = point_totals(pt, pl, results)
            assert s.writer is not None
            s.writer.write(point_record(suite, pt, totals, opts.backend, pl).to_json())
            seconds = [0.0] * len(pt.program.steps)
            for m, rec in zip(pl, results):
                for idx in m.indices:
                    seconds[idx] = rec.time_us * 1e-6 * m.scale * pt.program.steps[idx].repeat
            measured.setdefault(configs.index(c), []).append(verify.by_axis(pt.program, seconds))
            if totals.wrong:
                s.say(f"commbench: {c.full_label}: {totals.wrong} op(s) returned wrong data")
        if s.is_root:
            rows = [
                verify.Row(
                    c,
                    preds[k],
                    verify.median_by_axis(measured[k]),
                    tuple(sum(r.values()) for r in measured[k]),
                )
                for k, c in enumerate(configs)
            ]
            if args.rounds > 1:
                s.say(f"# measured: the median of {args.rounds} rounds over the configs in turn")
            ag = verify.agreement(rows)
            for line in verify.text(rows, ag):
                s.say(line)
            assert s.writer is not None
            write_json_atomic(s.writer.path / VERIFY_JSON, verify.summary(rows, ag))
            s.say(f"results: {s.writer.path}")
    return 0
