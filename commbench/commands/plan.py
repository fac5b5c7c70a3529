"""Rank parallel configs (TP, CP, EP, DP, PP, micro-batches, ZeRO) for a model on a cluster.

    commbench plan --model llama-70b --gpus 32 --gpus-per-node 8
    commbench plan --model llama-7b --gpus 8 --gpus-per-node 8 --calibration cal.json
    commbench plan --model mixtral-8x7b --gpus 64 --seq-len 65536 --zero-stage 1 --top 5
    commbench plan --model llama-70b --gpus 32 --explain tp8-pp4

Without --calibration the shipped reference calibration is used (H100 SXM on NVSwitch, one
400 Gb/s InfiniBand NIC per GPU, from published numbers: not a measurement; the output says
so). Every config is placed as the suites place it, checked for memory, and its traffic (the
Programs `commbench suite` runs) priced through the calibration; see commbench/plan/ for the
step-time model and its assumptions, which the output states.
"""

from __future__ import annotations

import argparse
import json
import sys

from commbench.commands.argtypes import positive_float, positive_int
from commbench.errors import UsageError

HELP = "rank TP/CP/EP/DP/PP configs for a model on a cluster from a calibration"


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and cluster")
    g.add_argument(
        "--model",
        required=True,
        help="a preset (commbench list models), PRESET:key=value,... or a new shape",
    )
    g.add_argument("--gpus", type=positive_int, required=True, help="GPUs in the job")
    g.add_argument(
        "--gpus-per-node",
        type=positive_int,
        default=None,
        help="GPUs per node: groups inside a node are intra, across nodes inter "
        "(default: the calibration's device, else 8)",
    )
    g.add_argument(
        "--gpu-memory",
        type=positive_float,
        default=None,
        metavar="GB",
        help="memory per GPU in GB (default: the calibration's device, else 80)",
    )
    g.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="calibration JSON (commbench fit); default: the shipped reference",
    )
    g.add_argument(
        "--backend", default=None, help="the calibration's backend to use (if it has several)"
    )
    w = p.add_argument_group("workload")
    w.add_argument("--mode", choices=("train", "infer"), default="train", help="(default: train)")
    w.add_argument("--seq-len", type=positive_int, default=None, help="(default: the model's)")
    w.add_argument(
        "--global-batch",
        type=positive_int,
        default=None,
        help="sequences per step (default: 4M tokens for train, 256K for infer)",
    )
    w.add_argument(
        "--micro-batch",
        default="1",
        help="micro-batch sizes to try: 1, 1,2,4 or auto (1,2,4,8) (default: 1)",
    )
    w.add_argument(
        "--zero-stage",
        default=None,
        help="ZeRO stages to try: 0, 1,2,3 or all (default: all for train, 0 for infer)",
    )
    w.add_argument(
        "--sequence-parallel", action="store_true", help="Megatron sequence parallel with TP"
    )
    w.add_argument(
        "--recompute",
        choices=("none", "selective", "full"),
        default="selective",
        help="activation recomputation (default: selective)",
    )
    w.add_argument("--grad-dtype", default="float32", help="gradient dtype (default: float32)")
    m = p.add_argument_group("time model")
    m.add_argument(
        "--peak-tflops",
        type=positive_float,
        default=None,
        help="dense peak per GPU for compute time (default: the calibration's device; a "
        "measured calibration has none: communication-only ranking)",
    )
    m.add_argument(
        "--mfu", type=positive_float, default=None, help="model FLOPs utilisation (default: 0.4)"
    )
    m.add_argument(
        "--overlap-dp",
        action="store_true",
        help="overlap gradient traffic with the backward compute (default: none)",
    )
    m.add_argument(
        "--orders",
        choices=("megatron", "all"),
        default="megatron",
        help="rank orders: Megatron's tp-cp-ep-dp-pp, or every distinct placement",
    )
    m.add_argument(
        "--extrapolate",
        action="store_true",
        help="let predictions extrapolate beyond what the calibration measured (marked)",
    )
    o = p.add_argument_group("output")
    o.add_argument("--top", type=positive_int, default=10, help="configs to show (default: 10)")
    o.add_argument(
        "--show-rejected", action="store_true", help="list the configs that cannot run and why"
    )
    o.add_argument("--json", action="store_true", help="print JSON instead of the table")
    o.add_argument("-o", "--output", default=None, help="also write the full plan as JSON here")
    o.add_argument(
        "--explain",
        default=None,
        metavar="CONFIG",
        help="list one config's Program steps with predicted times (tp8-pp4-dp1 or tp=8,pp=4)",
    )


def request_from_args(args: argparse.Namespace, cal):
    """A PlanRequest from the flags, the calibration's device filling the defaults."""
    from commbench.plan import request_from_flags

    return request_from_flags(
        cal,
        model=args.model,
        gpus=args.gpus,
        gpus_per_node=args.gpus_per_node,
        gpu_memory_gb=args.gpu_memory,
        seq_len=args.seq_len,
        global_batch=args.global_batch,
        micro_batch=args.micro_batch,
        zero_stage=args.zero_stage,
        sequence_parallel=args.sequence_parallel,
        mode=args.mode,
        peak_tflops=args.peak_tflops,
        mfu=args.mfu,
        recompute=args.recompute,
        grad_dtype=args.grad_dtype,
        overlap_dp=args.overlap_dp,
        orders=args.orders,
        extrapolate=args.extrapolate,
        backend=args.backend,
    )


# ---- text output ------------------------------------------------------------------------------
def _s(v) -> str:
    return "-" if v is None else f"{v:.4g}"


def placement_text(place: dict) -> str:
    """`tp8:i pp4:x`: group size and i(ntra)/x (inter) per axis."""
    return " ".join(
        f"{a}{d['size']}:{'i' if d['link_class'] == 'intra' else 'x'}"
        for a, d in place.items()
        if a in ("tp", "cp", "ep", "pp", "dp", "dp-cp", "edp") and d["size"] > 1
    )


def header(result, out) -> None:

    req, cal = result.request, result.calibration
    pc = req.model.param_counts()
    w = out.write
    w(
        f"# commbench plan: {req.model.name} ({pc.total / 1e9:.2f}B params, {pc.active / 1e9:.2f}B "
        f"active) on {req.gpus} GPUs ({req.num_nodes} node(s) x {min(req.gpus, req.gpus_per_node)}"
        f"), {req.mode}\n"
    )
    kind = (
        "REFERENCE (published H100 + 400 Gb/s IB numbers; not a measurement of your cluster)"
        if cal.kind == "reference"
        else "measured"
    )
    w(f"# calibration: {cal.source} [{kind}]\n")
    w(
        f"# workload: seq {req.seq}, global batch {req.batch} seqs ({req.batch * req.seq:,} "
        f"tokens), micro-batch {','.join(map(str, req.micro_batch_sizes))}, ZeRO "
        f"{','.join(map(str, req.zero_stages))}, SP {'on' if req.sequence_parallel else 'off'}, "
        f"recompute {req.recompute}, {req.gpu_memory_gb:g} GB per GPU\n"
    )
    for a in result.assumptions:
        w(f"# assumption: {a}\n")
    c = result.counts
    w(
        f"# {c['candidates']} candidate(s): {c['valid']} valid, {c['fit_memory']} fit in memory, "
        f"{c['ranked']} ranked, {c['rejected']} rejected"
        + ("" if c["rejected"] == 0 else " (--show-rejected says why)")
        + "\n"
    )


def table(result, top: int, out) -> None:
    from commbench.tables import Column, Table

    t = Table(
        [
            Column("rank", "", 5),
            Column("config", "", 22),
            Column("b", "", 2),
            Column("m", "", 5),
            Column("z", "", 1),
            Column("placement", "(i=intra x=inter)", 24),
            Column("mem", "(GB)", 6, ".1f"),
            Column("compute", "(s)", 8),
            Column("bubble", "(s)", 8),
            Column("tp", "(s)", 8),
            Column("cp", "(s)", 8),
            Column("ep", "(s)", 8),
            Column("pp", "(s)", 8),
            Column("dp", "(s)", 8),
            Column("step", "(s)", 8),
            Column("comm", "(%)", 5),
            Column("flag", "", 6),
        ],
        out,
    )
    for e in result.ranked[:top]:
        c, ti = e.config, e.times
        flags = ("COMM" if e.comm_bound else "") + ("*" if e.extrapolated else "")
        t.row(
            e.rank,
            c.label + ("" if c.order == result.ranked[0].config.order else "@"),
            c.micro_batch,
            c.micro_batches,
            c.zero_stage,
            placement_text(e.placement) or "-",
            e.memory["total"] / 1e9,
            _s(ti["compute"]),
            _s(ti["bubble"]),
            _s(ti["tp"]),
            _s(ti["cp"]),
            _s(ti["ep"]),
            _s(ti["pp"]),
            _s(ti["dp_exposed"]),
            _s(e.step_s),
            "-" if e.comm_share is None else f"{100 * e.comm_share:.0f}",
            flags,
        )
    out.write(
        "# times per step per GPU: tp/cp/ep/pp/dp = predicted communication (pp: messages on "
        "the 1F1B critical path; dp: exposed gradient traffic); bubble = idle pipeline time\n"
    )
    out.write(
        "# flag COMM: communication > 30% of the step; *: a prediction extrapolated beyond the "
        "calibration; @: not the Megatron rank order (see --json for the order)\n"
    )
    notes = sorted({n for e in result.ranked[:top] for n in e.notes})
    for n in notes:
        out.write(f"# note: {n}\n")


def rejected_lines(result, out) -> None:
    out.write(f"# rejected ({len(result.rejected)}):\n")
    for c in result.rejected:
        out.write(f"  {c.config.full_label:<36} {c.stage:<8} {'; '.join(c.reasons)}\n")


def explain_text(ev, req, cal, out) -> None:
    from commbench.sizes import format_size
    from commbench.traffic import patterns
    from commbench.traffic.patterns import Role

    w = out.write
    c = ev.config
    step_s = None if any(e.error for e in ev.estimates.values()) else ev.step_s
    w(
        f"# commbench plan --explain: {c.full_label} for {req.model.name} on {req.gpus} GPUs "
        f"({req.num_nodes} node(s)); calibration {cal.source} [{cal.kind}]\n"
    )
    if not ev.fits:
        w(
            f"# NOTE: does not fit in {req.gpu_memory_gb:g} GB per GPU "
            f"(needs {ev.memory['total'] / 1e9:.1f} GB)\n"
        )
    w(
        "# placement: "
        + ", ".join(
            f"{a} size {d['size']} {d['link_class']} ({d['hosts_spanned']} host(s), stride "
            f"{d['stride']})"
            for a, d in ev.placement.items()
        )
        + "\n"
    )
    w(
        "# memory per GPU (GB): "
        + ", ".join(f"{k} {v / 1e9:.2f}" for k, v in ev.memory.items())
        + "\n"
    )
    w(
        "# time per step (s): "
        + ", ".join(f"{k} {_s(v)}" for k, v in {**ev.times, "step": step_s}.items())
        + (
            ""
            if ev.comm_share is None
            else f"; communication {100 * ev.comm_share:.1f}% of the step"
            + (" (communication-bound)" if ev.comm_bound else "")
        )
        + "\n"
    )
    for name, est in ev.estimates.items():
        w(
            f"\n## {name}: {len(est.steps)} step(s), {_s(est.total_s)} s"
            + (
                f" (1F1B makespan with compute; messages on the critical path {_s(est.comm_s)} s)"
                if patterns.get(name).role is Role.PIPELINE
                else ""
            )
            + "\n"
        )
        w(
            f"#   {'#':>3} {'phase':<16} {'op':<14} {'axis':<6} {'group':>5} {'link':<5} "
            f"{'bytes':>10} {'repeat':>8} {'per op (us)':>12} {'total (s)':>10} "
            f"{'comm (s)':>10}  method\n"
        )
        for s in est.steps:
            per = "-" if s.per_op_s is None else f"{s.per_op_s * 1e6:.2f}"
            w(
                f"    {s.index:>3} {s.phase:<16} {s.op:<14} {s.axis:<6} {s.group_size:>5} "
                f"{s.link_class:<5} {format_size(s.nbytes):>10} {s.repeat:>8g} {per:>12} "
                f"{_s(s.total_s):>10} {_s(s.comm_s):>10}  {s.error or s.method}"
                + (" [extrapolated]" if s.extrapolated else "")
                + (f" ({'; '.join(s.notes)})" if s.notes else "")
                + "\n"
            )


def main(args: argparse.Namespace) -> int:
    from commbench import plan
    from commbench.results.rundir import write_json_output

    cal = plan.load_calibration(args.calibration)
    req = request_from_args(args, cal)
    out = sys.stdout
    if args.explain:
        ev = plan.explain(req, cal, args.explain)
        doc = plan.explain_file(req, cal, ev).to_json()
        if args.output:
            write_json_output(args.output, doc)
        if args.json:
            json.dump(doc, out, indent=2)
            out.write("\n")
        else:
            explain_text(ev, req, cal, out)
        unpriced = [f"cannot price {n}: {e.error}" for n, e in ev.estimates.items() if e.error]
        if unpriced:
            raise UsageError(f"--explain {args.explain}: {unpriced[0]}")
        return 0
    result = plan.plan(req, cal)
    if args.output:
        write_json_output(args.output, result.plan_file().to_json())
    if args.json:
        json.dump(result.plan_file(args.top).to_json(), out, indent=2)
        out.write("\n")
        return 0
    header(result, out)
    table(result, args.top, out)
    if args.show_rejected:
        rejected_lines(result, out)
    if args.output:
        out.write(f"plan: {args.output}\n")
    return 0
