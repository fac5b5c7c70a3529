"""Read a training job's profiler traces: every collective and p2p op, the parallel axis it
belongs to, the step's communication and exposed shares, and what to change.

    commbench trace traces/                      # a folder of per-rank Kineto traces
    commbench trace rank0.json.gz rank1.json.gz --layout tp=2,dp=4
    commbench trace traces/ --calibration cal.json --ranks-per-node 8 --json
    commbench trace traces/ --emit-suite replay.yaml && commbench suite replay.yaml --dry-run

Traces are what torch.profiler's export_chrome_trace writes (JSON or .json.gz), with NCCL
(record_param_comms events and NCCL kernels) or gloo (c10d:: and gloo: events). Without
--layout the layout is inferred from the process groups seen, and said so. Reads files only:
no MPI, no torch. Details: docs/trace.md.
"""

from __future__ import annotations

import argparse
import json

HELP = "attribute a profiled job's communication to its parallel axes and say what to change"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="trace files or folders of them")
    p.add_argument("--layout", default=None, metavar="tp=N,pp=N,...",
                   help="parallel degrees (dp: the rest), Megatron's rank order")  # fmt: skip
    p.add_argument("--framework", choices=("megatron", "torchtitan"), default="megatron",
                   help="whose traffic --model prices (plan --framework); --layout's rank "
                   "order is the same for both on dense axes")  # fmt: skip
    p.add_argument("--step", type=int, default=None, metavar="N",
                   help="only ProfilerStep#N (default: every step traced)")  # fmt: skip
    p.add_argument("--calibration", default=None, metavar="FILE",
                   help="rate each op against this calibration's prediction")  # fmt: skip
    p.add_argument("--ranks-per-node", type=int, default=None, metavar="N",
                   help="ranks per node (default: the traces' host names)")  # fmt: skip
    p.add_argument("--model", default=None, metavar="MODEL",
                   help="also price the layout with `plan --explain` for this model (a preset, "
                   "preset:field=value or a config.json) and set the trace beside it")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--results", default=None, metavar="DIR",
                   help="also write a run directory (kind trace records) for report/validate")  # fmt: skip
    p.add_argument("--run-id", default=None, help="name the run directory")
    p.add_argument("--emit-suite", default=None, metavar="FILE",
                   help="write a suite replaying the traced ops (commbench suite FILE)")  # fmt: skip


def _nodes(traces, world: int, rpn: int | None) -> tuple[int, ...]:
    from commbench.traffic.layout import host_map

    if rpn:
        return host_map(world, ranks_per_node=rpn)
    hosts = {t.rank: t.host for t in traces if t.rank is not None and t.host}
    if len(hosts) == world and len(set(hosts.values())) > 1:
        return host_map(world, [hosts[r] for r in range(world)])
    return ()


def main(args: argparse.Namespace) -> int:
    from commbench.errors import UsageError
    from commbench.trace import findings as fnd
    from commbench.trace import output
    from commbench.trace.pipeline import analyse

    if args.ranks_per_node is not None and args.ranks_per_node < 1:
        raise UsageError("--ranks-per-node must be a positive integer")
    job = analyse(args.paths, args.layout, args.step)
    if not job.ops_flat:
        if args.json:
            empty = {**job.head, "ops": [], "axes": {}, "comm_share": 0.0, "exposed_share": 0.0}
            print(json.dumps({**empty, "notes": [*job.head["notes"], "no communication"]}))
            return 0
        print(f"# trace: {job.head['files']} file(s): no communication found (no collective "
              "or p2p op, no NCCL kernel)")  # fmt: skip
        return 0
    cal = None
    nodes = _nodes(job.traces, job.world, args.ranks_per_node)
    if args.calibration:
        from commbench.calibration import load

        cal = load(args.calibration)
        fnd.calibrate(job.ops_flat, cal, nodes)
    pp = job.attribution.layout.pp if job.attribution.layout else 1
    found = fnd.findings(fnd.Context(job.stats, job.ops_flat, pp, nodes, cal))
    if args.emit_suite:
        n, skipped = output.write_suite(args.emit_suite, job.ops_flat, job.world, args.paths[0])
        job.head["notes"].append(f"suite {args.emit_suite}: {n} runs"
                                 + (f", {len(skipped)} ops left out (size or group unknown)" if skipped else ""))  # fmt: skip
    cmp = None
    if args.model:
        from commbench.trace import plancompare

        if job.attribution.layout is None:
            raise UsageError("--model: the job's layout is unknown: give --layout")
        rpn = args.ranks_per_node or (job.world // (max(nodes) + 1) if nodes else job.world)
        cmp = plancompare.compare(args.model, job.world, rpn, args.calibration,
                                  job.attribution.layout.label(), job.stats,
                                  args.framework)  # fmt: skip
    if args.results:
        from commbench.trace.records import write_run

        path = write_run(args.results, args.run_id, job.ops_flat, job.stats, job.head, found,
                         nodes)  # fmt: skip
        job.head["notes"].append(f"records: {path}")
    if args.json:
        doc = output.as_json(job.ops_flat, job.stats, job.head, found)
        print(json.dumps({**doc, "plan": cmp}, indent=1))
    else:
        print(output.text(job.ops_flat, job.stats, job.head, found))
        if cmp is not None:
            print(plancompare.text(cmp))
    return 0
