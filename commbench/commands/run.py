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

from commbench.commands import common
from commbench.dtypes import canonical_dtype
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


def columns():
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
        Column("algbw", "(GB/s)", 8, ".3f"),
        Column("busbw", "(GB/s)", 8, ".3f"),
        Column("#wrong", "", 6),
        Column("iters", "", 6),
    ]


def main(args: argparse.Namespace) -> int:
    from commbench.measure.session import Session
    from commbench.ops import supports
    from commbench.results.records import SweepRecord, fields_of
    from commbench.tables import Table

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
        table = Table(columns())
        busbw, bad = [], 0
        redop = "sum" if op_spec(steps[0].op).reduces else "-"
        for st in steps:
            m = s.runner.measure(st, info)
            if m is None:
                continue
            assert s.writer is not None  # records come back on rank 0, which writes them
            asked = plan.asked[st.nbytes]
            rec = SweepRecord(
                **fields_of(m),
                backend=opts.backend,
                label=st.label,
                requested_bytes=None if asked == [st.nbytes] else asked,
            )
            s.writer.write(rec.to_json())
            busbw.append(rec.busbw_GBps)
            bad += rec.wrong > 0
            table.row(
                rec.bytes,
                rec.count,
                st.dtype,
                redop,
                p,
                info.link_class,
                rec.time_us,
                rec.time_p95_us,
                rec.algbw_GBps,
                rec.busbw_GBps,
                rec.wrong if timing.check else "N/A",
                rec.iters,
            )
        if s.is_root:
            assert s.writer is not None
            checked = "checked" if timing.check else "not checked (--no-check)"
            table.note(f"Points with wrong data : {bad} of {len(busbw)} ({checked})")
            table.note(f"Avg bus bandwidth      : {sum(busbw) / max(len(busbw), 1):.4f} GB/s")
            s.say(f"results: {s.writer.path}")
    return 0
