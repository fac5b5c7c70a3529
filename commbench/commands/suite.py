"""Run a suite of strategy traffic: each point builds one training step's Program (TP, DP,
ZeRO, PP, CP, EP or a primitive sweep) for a model and layout, and measures it on the groups
a framework would build, all groups of an axis at once.

    mpirun -n 16 commbench suite tp --quick
    commbench suite ep --dry-run --world 64 --ranks-per-node 8
    mpirun -n 8 commbench suite my-suite.yaml --set seq_len=8192 --model llama-70b

Per point it prints the configuration, the step's communication time (sum over its steps of
median time x repeat), bytes moved per rank, effective bus bandwidth and a per-op breakdown,
and writes one record per measured step (kind "step") and per point (kind "point").
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from commbench.commands import common, nextstep
from commbench.errors import UsageError
from commbench.measure.runner import DEFAULT_BUDGET_S
from commbench.traffic.patterns.base import options_label

if TYPE_CHECKING:
    from commbench.results.records import Measurement, PointTotals
    from commbench.traffic.execution import Measured
    from commbench.traffic.points import Point

HELP = "run strategy traffic suites (tp, dp, zero, pp, cp, ep, collectives, smoke, all)"
DEFAULT_MAX_BYTES = 128 << 20


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", help="a suite name (commbench list suites) or a YAML file")
    g = p.add_argument_group("what to run")
    g.add_argument("--quick", action="store_true", help="the suite's small sweep")
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="print each point's Program (steps, bytes, groups, link classes) and exit",
    )
    g.add_argument(
        "--world",
        type=common.world_size,
        default=None,
        help="world size for --dry-run without a launcher (default: the launched size)",
    )
    g.add_argument(
        "--max-bytes",
        default=None,
        help="per-rank buffer budget; larger steps run a measured chunk scaled by count "
        f"(marked scaled) (default: the suite's, else {DEFAULT_MAX_BYTES >> 20}M)",
    )
    g.add_argument(
        "--model",
        action="append",
        default=None,
        metavar="MODEL",
        help="replace the suite's models: a preset, PRESET:key=value,... or "
        "NAME:layers=..,hidden=..,ffn_hidden=..,heads=.. (repeatable)",
    )
    g.add_argument(
        "--set",
        action="append",
        default=None,
        metavar="OPTION=VALUE",
        help="set a pattern option in every run that has it, e.g. seq_len=8192 (repeatable)",
    )
    g.add_argument(
        "--degree",
        action="append",
        default=None,
        metavar="AXIS=VALUES",
        help="replace a degree sweep: tp=4, pp=2,4, cp=auto, ep=max (repeatable)",
    )
    g.add_argument("--order", default=None, help="rank order (default: tp-cp-ep-dp-pp)")
    common.add_timing_args(p)
    common.add_session_args(p)
    for action in p._actions:  # the suite file supplies timing defaults
        if action.dest == "budget":
            action.default = None
            action.help = (
                f"target timed seconds per step (default: the suite's, else {DEFAULT_BUDGET_S})"
            )


# ---- preparing (pure, identical on every rank) ----
def load(args: argparse.Namespace, world: int, nodes: tuple[int, ...] = ()):
    """The suite, its points on `world` ranks, and the per-rank byte budget."""
    from commbench.measure.launch import detect
    from commbench.traffic.bounds import parse_max_bytes
    from commbench.traffic.layout import parse_order
    from commbench.traffic.overrides import (
        Overrides,
        apply_overrides,
        parse_assignments,
        parse_degree_flags,
    )
    from commbench.traffic.points import dropped_runs, expand
    from commbench.traffic.presets import model_sets_seq_len, parse_model_arg
    from commbench.traffic.suitefile import load_suite

    suite = load_suite(args.suite, args.quick)
    order = parse_order(args.order, "--order") if args.order is not None else None
    ov = Overrides(
        models=tuple(parse_model_arg(m) for m in args.model or []),
        model_seq_len=any(model_sets_seq_len(m) for m in args.model or []),
        options=parse_assignments(args.set, "--set"),
        degrees=parse_degree_flags(args.degree),
        order=order,
    )
    suite = apply_overrides(suite, ov)
    points = expand(suite, world, nodes)
    if detect().rank == 0:
        for line in dropped_runs(suite, points):
            print(f"commbench: warning: suite {suite.name}: {line}", file=sys.stderr, flush=True)
    cli_max = parse_max_bytes(args.max_bytes, "--max-bytes") if args.max_bytes else None
    return suite, points, cli_max


def max_bytes_for(point, cli_max: int | None) -> int:
    return cli_max or point.run.max_bytes or DEFAULT_MAX_BYTES


def timing_for(args: argparse.Namespace, run):
    """Timing of a run: command-line flags over the suite file's defaults."""
    from commbench.measure.runner import TimingConfig
    from commbench.measure.transport.base import HUGEPAGE

    t = run.timing
    return TimingConfig(
        iters=args.iters if args.iters is not None else t.get("iters"),
        warmup=args.warmup if args.warmup is not None else t.get("warmup"),
        budget_s=args.budget if args.budget is not None else t.get("budget", DEFAULT_BUDGET_S),
        min_iters=min(t.get("min_iters", 5), args.iters or 10**9),
        max_iters=t.get("max_iters", 2000),
        timing=args.timing,
        check=args.check,
        isolated=args.isolated,
        buffers=args.buffers or HUGEPAGE,
        off_cache=args.off_cache,
    )


# ---- dry run ----
def dry_run(suite, points, cli_max: int | None, backend: str, out=sys.stdout) -> None:
    """Print every point's Program and what would be measured, without communicating."""
    from commbench.ops import record_bytes
    from commbench.sizes import format_size
    from commbench.traffic.execution import plan

    world = points[0].layout.world
    hosts = len(set(points[0].layout.nodes)) or 1
    out.write(
        f"# commbench suite {suite.name} --dry-run: world {world} ({hosts} host(s)), "
        f"{len(points)} point(s), backend {backend}\n"
    )
    for pt in points:
        prog = pt.program
        model = pt.model.name if pt.model else "-"
        mb = max_bytes_for(pt, cli_max)
        out.write(
            f"\n## point {pt.index}: {prog.pattern} {model} {pt.layout.label()} "
            f"[{options_label(pt.swept)}]  {len(prog.steps)} step(s), "
            f"{format_size(sum(record_bytes(s) * s.repeat for s in prog.steps))} per rank\n"
        )
        meta = {k: v for k, v in prog.meta.items() if not isinstance(v, list | dict)}
        if meta:
            out.write("#   " + ", ".join(f"{k}={_fmt(v)}" for k, v in meta.items()) + "\n")
        out.write(
            f"#   {'#':>3} {'phase':<16} {'op':<14} {'axis':<9} {'group':>5} {'groups':>6} "
            f"{'stride':>6} {'link':<5} {'bytes':>10} {'repeat':>8}  label / measured as\n"
        )
        measured = {i: m for m in plan(prog, pt.layout, backend, mb) for i in m.indices}
        for i, st in enumerate(prog.steps):
            m = measured[i]
            g = m.info
            note = m.note if i == m.indices[0] else f"same as step {m.indices[0]}"
            out.write(
                f"    {i:>3} {st.phase:<16} {st.op:<14} {st.axis:<9} {g.size:>5} "
                f"{len(g.groups):>6} {g.stride:>6} {g.link_class:<5} "
                f"{format_size(record_bytes(st)):>10} {_fmt(st.repeat):>8}  {st.label}"
                f"{'  [' + note + ']' if note else ''}\n"
            )
            if st.split is not None and i == m.indices[0]:
                out.write(f"          split (bytes src->dst): {list(map(list, st.split))}\n")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


# ---- measuring ----
def point_columns():
    from commbench.tables import Column

    return [
        Column("point", "", 6),
        Column("pattern", "", 11),
        Column("model", "", 14),
        Column("config", "", 22),
        Column("options", "", 22),
        Column("comm", "(ms)", 11, ".3f"),
        Column("bytes", "(/rank)", 10),
        Column("busbw", "(GB/s)", 8, ".3f"),
        Column("#wrong", "", 6),
        Column("scaled", "", 6),  # a step measured as a chunk, its time scaled by the count
    ]


STEP_HEADER = (
    f"#   {'op':<14} {'axis':<8} {'groups':<7} {'link':<5} {'bytes':>10} x {'repeat':<7} "
    f"{'phase':<17} {'per op':>16} {'total':>14} {'share':>6} busbw (GB/s)  [how measured]"
)


def breakdown_lines(
    point: Point, plan: list[Measured], results: list[Measurement], totals: PointTotals
) -> Iterable[str]:
    """One line per measured step: op, axis, placement, size x count, time per op, total."""
    from commbench.ops import record_bytes
    from commbench.sizes import format_size
    from commbench.traffic.execution import bus_bytes

    prog = point.program
    for m, rec in zip(plan, results):
        st = prog.steps[m.indices[0]]
        per_op = rec.time_us * m.scale
        total = per_op * m.repeat
        phases = "+".join(dict.fromkeys(prog.steps[i].phase for i in m.indices))
        busbw = bus_bytes(st, m.info.size) / (per_op * 1e-6) / 1e9
        share = 100 * total / totals.time_us if totals.time_us else 0.0
        yield (
            f"#   {st.op:<14} {st.axis:<8} {m.info.size:>3}x{len(m.info.groups):<3} "
            f"{m.info.link_class:<5} {format_size(record_bytes(st)):>10} x {_fmt(m.repeat):<7} "
            f"{phases:<17} {per_op / 1e3:>10.3f} ms/op {total / 1e3:>11.3f} ms {share:5.1f}% "
            f"busbw {busbw:7.3f}{'  [' + m.note + ']' if m.note else ''}"
        )


def split_lines(point: Point, plan: list[Measured], results: list[Measurement]) -> list[str]:
    """A whole step's raw communication time split by axis and by phase (each measured op's
    time per op x the repeat of every Program step it stands for)."""
    from commbench.traffic import patterns
    from commbench.traffic.patterns import Role

    if patterns.get(point.run.pattern).role is not Role.STEP:
        return []
    prog = point.program
    by: dict[str, dict[str, float]] = {"axis": {}, "phase": {}}
    for m, rec in zip(plan, results):
        for i in m.indices:
            st = prog.steps[i]
            ms = rec.time_us * m.scale * st.repeat / 1e3
            by["axis"][st.axis] = by["axis"].get(st.axis, 0.0) + ms
            by["phase"][st.phase] = by["phase"].get(st.phase, 0.0) + ms
    return [
        f"#   raw communication by {what}: "
        + ", ".join(f"{k} {v:.3f} ms" for k, v in sorted(d.items(), key=lambda kv: -kv[1]))
        for what, d in by.items()
    ]


def main(args: argparse.Namespace) -> int:
    launch = common.launch_info()
    if args.world and launch.size > 1 and args.world != launch.size:
        raise UsageError(f"--world {args.world} differs from the launched world {launch.size}")
    if args.world and not args.dry_run and args.world != launch.size:
        raise UsageError("--world sets the world size of --dry-run only; launch with mpirun -n N")
    world = args.world or launch.size
    if args.dry_run:
        from commbench.traffic.layout import host_map

        if args.ranks_per_node and world % args.ranks_per_node:
            raise UsageError(
                f"--ranks-per-node {args.ranks_per_node} does not divide the world size {world}"
            )
        nodes = host_map(world, ranks_per_node=args.ranks_per_node)
        try:
            suite, points, cli_max = load(args, world, nodes)
        except UsageError as e:
            if args.world or world > 1 or "no configuration" not in str(e):
                raise
            # one plain process and no --world: the world is 1, which is rarely what was meant
            raise UsageError(f"{e}; pass --world N for a dry run without a launcher") from None
        backend = "mpi" if args.backend == "auto" else args.backend
        if launch.rank == 0:
            dry_run(suite, points, cli_max, backend)
        return 0
    suite, points, cli_max = load(args, world)
    opts = common.session_options(args, "suite", launch)
    from commbench.traffic.execution import plan

    # each point's plan: its bounds (pieces per step) fail here, before any communication
    plans = [plan(pt.program, pt.layout, opts.backend, max_bytes_for(pt, cli_max)) for pt in points]
    common.check_buffer_flags(args, opts.backend)
    runs = list(dict.fromkeys(pt.run for pt in points))
    timings = {id(r): timing_for(args, r) for r in runs}
    return measure(args, suite, points, plans, cli_max, opts, launch, timings)


def measure(args, suite, points, plans, cli_max, opts, launch, timings) -> int:
    """Run every point under one Session; rank 0 prints and writes."""
    import dataclasses

    from commbench.measure.points import measure_points
    from commbench.measure.session import Session
    from commbench.sizes import format_size
    from commbench.traffic.execution import plan

    first_timing = timings[id(points[0].run)]
    with Session(launch, opts, first_timing) as s:
        assert s.world is not None and s.runner is not None  # opened by the session
        if s.is_root:  # the records (and their schema module) are rank 0's alone: ~20 ms a rank
            from commbench.measure.point_records import point_facts
            from commbench.tables import Table
        if len(set(s.nodes)) > 1:  # planned on one host: the groups' link classes change
            layouts = [dataclasses.replace(pt.layout, nodes=s.nodes) for pt in points]
            plans = [
                plan(pt.program, lay, opts.backend, max_bytes_for(pt, cli_max))
                for pt, lay in zip(points, layouts)
            ]
        hosts = len(set(s.nodes)) or 1
        budgets = sorted({max_bytes_for(pt, cli_max) for pt in points})
        s.say(
            f"# commbench suite {suite.name}{' (quick)' if args.quick else ''}: "
            f"{suite.description.strip().splitlines()[0] if suite.description else ''}"
        )
        s.say(
            f"# backend {opts.backend}, world {s.world.size} ({hosts} host(s)), "
            f"{len(points)} point(s), max-bytes {'/'.join(format_size(b) for b in budgets)} "
            f"per rank, timing {first_timing.timing}, "
            f"{'isolated' if first_timing.isolated else 'all groups at once'}"
        )
        s.say(
            "# comm = sum over steps of median(max over ranks) x repeat; bytes = sum of S x "
            "repeat per rank; busbw = bus bytes / comm"
        )
        table = Table(point_columns()) if s.is_root else None  # rank 0 prints it alone
        bad_points = 0
        point_timings = [timings[id(pt.run)] for pt in points]
        for done in measure_points(s, suite, points, plans, opts.backend, point_timings):
            pt, pl, results, totals = done.point, done.plan, done.records, done.totals
            assert table is not None  # a point is done on rank 0 only
            bad_points += totals.wrong > 0
            table.row(
                pt.index,
                pt.program.pattern,
                pt.model.name if pt.model else "-",
                pt.layout.label(),
                options_label(pt.swept),
                totals.time_us / 1e3,
                format_size(totals.bytes),
                totals.busbw_GBps,
                totals.wrong if first_timing.check else "N/A",
                "yes" if totals.extrapolated else "-",
            )
            if pt is points[0]:
                s.say(STEP_HEADER)  # the lines under each point: one per measured step
            for line in [*breakdown_lines(pt, pl, results, totals), *split_lines(pt, pl, results)]:
                s.say(line)
            facts = point_facts(pt, totals)
            if facts:
                s.say("#   " + ", ".join(f"{f.label} {_fmt(f.value)}" for f in facts))
        if s.is_root:
            assert s.writer is not None and table is not None
            checked = "checked" if first_timing.check else "not checked (--no-check)"
            table.note(f"Points with wrong data : {bad_points} of {len(points)} ({checked})")
            s.say(f"results: {s.writer.path}")
            from commbench.traffic import patterns
            from commbench.traffic.patterns import Role

            sweep = all(
                patterns.get(pt.program.pattern).role is Role.SWEEP for pt in points
            )  # fit's input
            s.say(nextstep.line("run" if sweep else "suite", s.writer.path))
    return 0
