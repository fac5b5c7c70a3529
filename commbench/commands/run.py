"""Sweep one op over message sizes, nccl-tests style.

    mpirun -n 4 commbench run allreduce -b 8 -e 16M -f 2
    mpirun -n 8 commbench run alltoall --backend gloo --group-size 4 --placement strided

Sizes are S in the nccl-tests convention (allgather: the gathered output; reduce_scatter:
the input). Each point is checked exactly once, warmed up, timed per iteration (max over
the group's ranks) and written to results/<run-id>/records.jsonl by rank 0.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from commbench.commands import clipnote, common, nextstep
from commbench.dtypes import canonical_dtype, dtype_size
from commbench.errors import UsageError
from commbench.ops import SWEEP_OPS, op_spec
from commbench.sizes import changed_sizes, parse_range, parse_size, parse_sizes, sweep
from commbench.traffic.program import Step

HELP = "sweep one collective over message sizes (nccl-tests / OSU style)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("op", help=f"one of: {', '.join(SWEEP_OPS)}")
    g = p.add_argument_group("sizes (K/M/G are powers of 1024)")
    g.add_argument("-b", "--minbytes", default="8", help="smallest S (default: %(default)s)")
    g.add_argument("-e", "--maxbytes", default="16M", help="largest S (default: %(default)s)")
    g.add_argument(
        "-f",
        "--stepfactor",
        type=float,
        default=2.0,
        help="multiply the size by this each step (default: %(default)s)",
    )
    g.add_argument("-i", "--stepbytes", default=None, help="add this many bytes each step instead")
    g.add_argument("--sizes", default=None, help="explicit comma-separated sizes (overrides -b/-e)")
    g.add_argument(
        "-m",
        "--message-size",
        default=None,
        metavar="[MIN:]MAX",
        help="OSU's size range, powers of 2 from MIN (default 1) to MAX (overrides -b/-e/-f)",
    )
    g.add_argument(
        "--per-rank-size",
        action="store_true",
        help="sizes are what one rank sends, as OSU and IMB print them: S = p x size for "
        "allgather, alltoall, gather, scatter and allgatherv (other ops: S = size)",
    )
    p.add_argument(
        "-d",
        "--dtype",
        default="float32",
        help="float32, float16, bfloat16, int32, float64, int8 (default: %(default)s)",
    )
    p.add_argument(
        "-g",
        "--group-size",
        type=common.positive_int,
        default=None,
        help="run on groups of N ranks, all groups at once (default: the world; pingpong: 2)",
    )
    p.add_argument(
        "--placement",
        choices=("contiguous", "strided"),
        default="contiguous",
        help="groups of consecutive ranks, or ranks world/N apart (default: %(default)s)",
    )
    p.add_argument(
        "--peer",
        type=int,
        default=1,
        help="sendrecv: send to position+peer, receive from position-peer",
    )
    p.add_argument(
        "--columns",
        choices=("nccl-tests", "osu"),
        default="nccl-tests",
        help="console table: nccl-tests' columns, or OSU's with -f (size, avg/min/max over "
        "ranks of each rank's mean, iterations, MB/s) (default: %(default)s)",
    )
    common.add_timing_args(p)
    common.add_session_args(p)


@dataclass(frozen=True)
class Sweep:
    """The Steps to run on groups of p, the sizes asked for that each S stands for, and the
    line saying which sizes had to change (rounded to whole elements and p chunks, or merged
    with another size), said once per run and recorded per point."""

    steps: list[Step]
    p: int
    asked: dict[int, list[int]]
    changed: str


def requested_sizes(args: argparse.Namespace) -> list[int]:
    """The sizes on the command line: --sizes, else -m (OSU), else -b/-e with -f or -i."""
    if args.sizes:
        return parse_sizes(args.sizes)
    if args.message_size:
        return sweep(*parse_range(args.message_size), 2.0)
    step = parse_size(args.stepbytes, "-i/--stepbytes") if args.stepbytes else 0
    return sweep(
        parse_size(args.minbytes, "-b/--minbytes"),
        parse_size(args.maxbytes, "-e/--maxbytes"),
        args.stepfactor,
        step,
    )


def build_steps(args: argparse.Namespace, world: int) -> Sweep:
    """Validate the sweep against the world size: the Steps, the group size, changed sizes."""
    spec = op_spec(args.op)
    if spec.built_by:
        raise UsageError(
            f"{spec.name} is built by the {spec.built_by} pattern: "
            f"use `commbench suite {spec.built_by}`"
        )
    dtype = canonical_dtype(args.dtype)
    sizes = requested_sizes(args)
    p = args.group_size or (spec.max_group or world)
    if world % p:
        raise UsageError(f"group size {p} does not divide the world size {world}")
    if p < spec.min_group or (spec.max_group and p > spec.max_group):
        need = spec.min_group if spec.min_group == spec.max_group else f">= {spec.min_group}"
        raise UsageError(
            f"{spec.name} needs a group of {need} ranks; this one has {p} "
            f"(world {world}, --group-size {args.group_size})"
        )
    if not spec.sized:  # barrier: one point whatever the sizes
        one = Step(
            op=spec.name, nbytes=dtype_size(dtype), axis="group", dtype=dtype, label=spec.name
        )
        return Sweep([one], p, {one.nbytes: [one.nbytes]}, f"{spec.name} moves no data: one point")
    steps: dict[int, Step] = {}
    asked: dict[int, list[int]] = {}
    scale = p if args.per_rank_size and spec.per_rank else 1
    for size in sizes:
        nbytes = spec.round_bytes(size * scale, p, dtype)
        asked.setdefault(nbytes, []).append(size * scale)
        fields = spec.sweep_fields(nbytes, p, args.peer)  # op-specific: a split, a --peer check
        steps.setdefault(
            nbytes,
            Step(
                op=spec.name,
                nbytes=nbytes,
                axis="group",
                dtype=dtype,
                label=spec.name,
                peer=args.peer,
                **fields,
            ),
        )
    unit = f"S = {p} x the per-rank size" if scale > 1 else "S"
    why = f"{spec.name} moves whole {dtype} elements"
    if spec.chunks:
        why += f" in {p} equal chunks"
    changed = changed_sizes(asked, f"{unit}; {why}")
    return Sweep(list(steps.values()), p, asked, changed)


def columns(style: str, overlap: bool) -> list:
    """nccl-tests' columns, or OSU's with -f (Avg/Min/Max over ranks of each rank's mean);
    a non-blocking op adds osu_iallreduce's overall, compute and overlap."""
    from commbench.tables import Column

    cols = [
        Column("Size", "(B)", 10),
        Column("Avg Latency", "(us)", 12, ".2f"),
        Column("Min Latency", "(us)", 12, ".2f"),
        Column("Max Latency", "(us)", 12, ".2f"),
        Column("Iterations", "", 10),
        Column("Bandwidth", "(MB/s)", 12, ".2f"),
        Column("#wrong", "", 6),
    ]
    if style == "nccl-tests":
        cols = nccl_tests_columns()
    if overlap:
        cols += [
            Column("Overall", "(us)", 10, ".2f"),
            Column("Compute", "(us)", 10, ".2f"),
            Column("Overlap", "(%)", 8, ".1f"),
        ]
    return cols


def cells(style: str, rec, redop: str, link: str, check: bool) -> list:
    """One table row of a record, in the columns of `columns(style, ...)`."""
    wrong = rec.wrong if check else "N/A"
    if style == "osu":
        row = [rec.bytes, rec.rank_avg_us, rec.rank_min_us, rec.rank_max_us, rec.iters]
        row += [rec.algbw_GBps * 1e3, wrong]
    else:
        row = [rec.bytes, rec.count, rec.dtype, redop, rec.group_size, link, rec.time_us]
        row += [rec.time_p95_us, rec.time_mean_us, rec.time_max_us, rec.slowest_rank]
        row += [rec.algbw_GBps, rec.busbw_GBps, wrong, rec.iters]
    if rec.overlap_pct is not None:
        row += [rec.overall_us, rec.compute_us, rec.overlap_pct]
    return row


def nccl_tests_columns() -> list:
    from commbench.tables import Column

    return [
        Column("size", "(B)", 12),
        Column("count", "(elements)", 12),
        Column("type", "", 8),
        Column("redop", "", 5),
        Column("group", "", 5),
        Column("link", "", 5),
        Column("time", "med(us)", 10, ".2f"),
        Column("p95", "(us)", 10, ".2f"),
        Column("mean", "(us)", 10, ".2f"),  # a straggler moves the mean and max, not the median
        Column("max", "(us)", 10, ".2f"),
        Column("slowest", "rank", 7),
        Column("algbw", "(GB/s)", 8, ".3f"),
        Column("busbw", "(GB/s)", 8, ".3f"),
        Column("#wrong", "", 6),
        Column("iters", "", 6),
    ]


def main(args: argparse.Namespace) -> int:
    from commbench.measure.session import Session
    from commbench.ops import supports

    launch = common.launch_info()
    plan = build_steps(args, launch.size)
    steps, p = plan.steps, plan.p
    opts = common.session_options(args, "run", launch)
    why = supports(opts.backend, steps[0].op, steps[0].dtype)
    if why:
        raise UsageError(why)
    common.check_buffer_flags(args, opts.backend)
    timing = common.timing_config(args)
    from commbench.traffic.layout import sweep_mesh

    with Session(launch, opts, timing) as s:
        assert s.world is not None and s.runner is not None  # opened by Session.__enter__
        info = sweep_mesh(s.world.size, p, args.placement, s.nodes).info("group")
        s.runner.reserve([(st, info) for st in steps])
        s.say(
            f"# commbench {steps[0].op}: backend {opts.backend}, world {s.world.size}, "
            f"{len(info.groups)} group(s) of {p} ({args.placement}, {info.link_class}, "
            f"{'isolated' if timing.isolated else 'concurrent'}), timing {timing.timing}, "
            f"buffers {s.runner.buffers}, time = median over iterations of the max over ranks"
        )
        if plan.changed:
            s.say(f"# {plan.changed}")
        if s.runner.scratch is not None:  # --off-cache: the scratch, and minutes said ahead
            from commbench.measure import offcache

            for line in offcache.notes(s.runner.scratch, timing, len(steps)):
                s.say(f"# {line}")
        if not s.is_root:  # the others take part in each measurement; rank 0 keeps the records
            for st in steps:
                s.runner.measure(st, info)
            return 0
        from commbench.results.records import SweepRecord, fields_of
        from commbench.tables import Table

        table = Table(columns(args.columns, op_spec(steps[0].op).overlaps))
        busbw, bad, iters = [], 0, []
        redop = "sum" if op_spec(steps[0].op).reduces else "-"
        for st in steps:
            m = s.runner.measure(st, info)
            assert m is not None and s.writer is not None  # rank 0 gets and writes records
            asked = plan.asked[st.nbytes]
            rec = SweepRecord(
                **fields_of(m),
                backend=opts.backend,
                label=st.label,
                requested_bytes=None if asked == [st.nbytes] else asked,
            )
            s.writer.write(rec.to_json())
            busbw.append(rec.busbw_GBps)
            iters.append(rec.iters)
            bad += rec.wrong > 0
            table.row(*cells(args.columns, rec, redop, info.link_class, timing.check))
        assert s.writer is not None
        checked = "checked" if timing.check else "not checked (--no-check)"
        table.note(f"Points with wrong data : {bad} of {len(busbw)} ({checked})")
        table.note(f"Avg bus bandwidth      : {sum(busbw) / max(len(busbw), 1):.4f} GB/s")
        note = clipnote.clipped(iters, timing)
        if note:
            s.say(note)
        s.say(f"results: {s.writer.path}")
        s.say(nextstep.line("run", s.writer.path))
    return 0
