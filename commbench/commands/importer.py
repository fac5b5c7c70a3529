"""Turn existing nccl-tests, OSU or IMB logs into a commbench run, so `commbench fit` can use them.

    commbench import nccl-tests all_reduce_perf.log all_gather_perf.log --run-id dgx-nccl
    commbench import osu osu_allreduce.txt --group-size 16 --link-class inter
    commbench import imb IMB-MPI1.out --link-class intra

Records get the fields `commbench run` writes (kind "collective"), with S converted to the
nccl-tests convention, plus `source` (tool, file, line, the tool's own columns) and
`placement`. Op, group size, dtype and link class come from the log where it says them and
from the flags where it does not; a flag that contradicts the log is an error.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
import time
from pathlib import Path

from commbench.commands import nextstep
from commbench.commands.argtypes import DEFAULT_RESULTS, positive_int
from commbench.errors import EXIT_FAILURE
from commbench.formats import IMPORTERS
from commbench.nccl_names import label

HELP = "import nccl-tests / OSU / IMB logs as a commbench run"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("tool", choices=list(IMPORTERS), help="which tool wrote the logs")
    p.add_argument("logs", nargs="+", metavar="LOG", help="log files (the tool's stdout)")
    p.add_argument(
        "--results",
        type=Path,
        default=DEFAULT_RESULTS,
        help="directory that receives <run-id>/records.jsonl (default: %(default)s)",
    )
    p.add_argument("--run-id", default=None, help="name the run directory")
    g = p.add_argument_group("what the log does not say")
    g.add_argument("--op", default=None, help="the op (when the log does not name its binary)")
    g.add_argument("--group-size", type=positive_int, default=None, help="ranks per group")
    g.add_argument("--dtype", default=None, help="element type")
    g.add_argument(
        "--backend",
        default=None,
        help="backend label (default: nccl for nccl-tests, mpi for OSU and IMB)",
    )
    g.add_argument("--link-class", default=None, help="intra (one host) or inter (several)")
    g.add_argument(
        "--ranks-per-node",
        type=positive_int,
        default=None,
        metavar="N",
        help="ranks per node, for logs without host lines: a group of p ranks spans "
        "ceil(p / N) nodes (its link class follows)",
    )


def main(args: argparse.Namespace) -> int:
    import re

    from commbench import __version__
    from commbench.errors import UsageError
    from commbench.formats.common import Hints, read_lines, vet
    from commbench.results.rundir import RunWriter, cannot_create_run

    if args.run_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", args.run_id):
        raise UsageError(f"--run-id {args.run_id!r}: use letters, digits, '.', '_' and '-'")
    hints = Hints(
        args.op, args.group_size, args.dtype, args.backend, args.link_class, args.ranks_per_node
    )
    parser = importlib.import_module(IMPORTERS[args.tool])
    parsed = []
    for log in args.logs:
        path = Path(log)
        if not path.is_file():
            raise UsageError(f"{path}: no such log file")
        parsed.append((path, vet(path, parser.parse(path, hints), read_lines(path))))
    records = [r for _, imp in parsed for r in imp.records]
    failures = [imp.problems.failure for _, imp in parsed if imp.problems.failure]
    if not records:
        raise UsageError(
            f"{failures[0]} (the run failed before printing any row)"
            if failures
            else f"no rows found in {', '.join(args.logs)}"
        )
    warnings = [w for _, imp in parsed for w in imp.problems.warnings]
    warnings_total = sum(imp.problems.warnings_total for _, imp in parsed)
    hosts = list(dict.fromkeys(h for _, imp in parsed for h in imp.meta.get("hosts", [])))
    env: dict = {}
    for _, imp in parsed:
        env.update(imp.meta.get("env", {}))
    nccl = [imp.meta["nccl_version"] for _, imp in parsed if imp.meta.get("nccl_version")]
    libraries = {"nccl": nccl[0]} if nccl else {}
    meta = {
        "command": shlex.join(["commbench", *sys.argv[1:]]),
        "subcommand": "import",
        "start_time": time.time(),
        "start_time_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commbench_version": __version__,
        "backend": records[0]["backend"],
        "world_size": max((r["world_size"] or 0) for r in records) or None,
        "hosts": hosts,
        "num_hosts": len(hosts) or None,
        "ranks_per_node": args.ranks_per_node,
        "libraries": libraries,
        "env": env,
        "timing": records[0]["timing"],
        "source": {
            "tool": args.tool,
            "files": [str(p) for p, _ in parsed],
            "logs": [{"file": str(p), **imp.meta} for p, imp in parsed],
        },
        **({"warnings": warnings, "warnings_total": warnings_total} if warnings else {}),
    }
    try:
        writer = RunWriter.create(args.results, "import", meta, args.run_id)
    except OSError as e:
        raise UsageError(cannot_create_run(args.results, e)) from None
    try:
        for r in records:
            writer.write(r)
    except BaseException:
        writer.finish("failed", "import interrupted")
        raise
    status, error = _outcome(args.tool, failures, warnings, warnings_total)
    writer.finish(status, error)
    for _, imp in parsed:
        for note in imp.notes:
            print(f"# note: {note}")
    ops = sorted({r["op"] for r in records})
    groups = sorted({r["group_size"] for r in records})
    links = sorted({r["link_class"] for r in records})
    placements = sorted({r["placement"] for r in records})
    print(
        f"# imported {len(records)} records from {len(parsed)} {args.tool} log(s): "
        f"ops {', '.join(ops)}; group sizes {groups}; links {', '.join(links)}; "
        f"placements {', '.join(placements)}"
    )
    said = [r for r in records if r.get("algorithm") or r.get("protocol")]
    if said:  # the NCCL regime the log says the records ran in (nccl_tuning.py)
        pinned = sorted({k for r in said for k in r.get("forced") or ()})
        ran = sorted({label(r.get("algorithm") or "", r.get("protocol") or "") for r in said})
        print(
            f"# NCCL regime stated on {len(said)} of {len(records)} records: {', '.join(ran)}"
            + (f" ({' and '.join(pinned)} pinned by the log's settings)" if pinned else "")
        )
    print(f"results: {writer.path}")
    print(nextstep.line("import", writer.path))
    if status != "complete":
        print(f"commbench: warning: {error}: run marked {status}", file=sys.stderr)
    return EXIT_FAILURE if status == "failed" else 0


def _outcome(
    tool: str, failures: list[str], warnings: list[str], warnings_total: int
) -> tuple[str, str | None]:
    """The run's status and reason: `failed` at the tool's or launcher's failure line,
    `partial` when the tool warned, else `complete`."""
    if failures:
        return "failed", f"{failures[0]}: the {tool} run failed (rows before it are kept)"
    if warnings:
        more = f" and {warnings_total - 1} more" if warnings_total > 1 else ""
        return "partial", f"{warnings[0]}{more}: the {tool} run warned"
    return "complete", None
