"""Run a measuring command on emulated nodes: network namespaces with links of known rate.

    commbench emulate --nodes 2 --ranks-per-node 2 --link-rate 1gbit -- run allreduce -b 1M -e 16M
    commbench emulate --nodes 4 --ranks-per-node 2 --link-rate 500mbit --slow-node 3=250mbit \\
        -- suite collectives --quick
    commbench emulate --nodes 2 --ranks-per-node 2 --link-rate 400mbit --backend gloo -- run sendrecv

Each node is a network namespace with its own hostname; local rank r of every node has its own
NIC (rail r), shaped with tc's token bucket to the node's rate in both directions, so inter-node
time is set by a rate you chose while intra-node traffic stays in shared memory or loopback. The
command after `--` runs under mpirun (through a launch agent) or one torchrun per node, and its
meta.json records the emulated topology (`emulation`: nodes, NICs, rates, qdiscs, the expected
goodput) as ground truth. Everything is torn down on exit, on Ctrl-C and on failure. Needs root,
iproute2 and util-linux; choose rates well below what the CPUs can move (a few hundred Mbit/s on
a small box) so the link, not the scheduler, sets the time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from commbench.errors import UsageError

HELP = "run a measuring command across emulated nodes (namespaces, shaped links; root)"
MEASURING_COMMANDS = ("run", "suite", "check", "plan")  # plan measures with --verify only
BACKEND_LAUNCHERS = {"mpi": "mpirun", "gloo": "torchrun"}
# what each launcher can start: mpirun also runs torch backends (rank 0 picks the rendezvous)
LAUNCHABLE = {"mpi": ("auto", "mpi", "gloo"), "gloo": ("auto", "gloo")}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, required=True, help="emulated nodes (2-16)")
    p.add_argument(
        "--ranks-per-node", type=int, required=True, help="ranks (and NICs) per node (1-16)"
    )
    p.add_argument(
        "--link-rate",
        required=True,
        metavar="RATE",
        help="every NIC's rate, tc units: 1gbit, 500mbit, 125mbps (bytes/s)",
    )
    p.add_argument(
        "--slow-node",
        action="append",
        default=[],
        metavar="I=RATE",
        help="node I's NICs at RATE instead (a bad cable); repeatable",
    )
    p.add_argument(
        "--backend",
        choices=sorted(BACKEND_LAUNCHERS),
        default="mpi",
        help="mpi: mpirun with a launch agent; gloo: torchrun per node (default: %(default)s)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="print the topology and launch lines; build nothing"
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the commbench command to run on the nodes (run ..., suite ..., check ...)",
    )


def command_line(words: list[str], backend: str) -> list[str]:
    """The measuring command after `--`, checked: a measuring subcommand, no clashing backend."""
    words = words[1:] if words[:1] == ["--"] else words
    verifies = any(w == "--verify" or w.startswith("--verify=") for w in words)
    if not words or words[0] not in MEASURING_COMMANDS or (words[0] == "plan" and not verifies):
        got = f"'{' '.join(words[:1] + (['without --verify'] if words[:1] == ['plan'] else []))}'"
        raise UsageError(
            f"emulate runs a measuring command after '--' (run, suite, check, plan --verify), "
            f"got {got if words else 'nothing'}; fit, plan and report read the results as usual"
        )
    for i, w in enumerate(words):
        value = w.split("=", 1)[1] if w.startswith("--backend=") else None
        if w == "--backend" and i + 1 < len(words):
            value = words[i + 1]
        if value is not None and value not in LAUNCHABLE[backend]:
            raise UsageError(
                f"the command asks for --backend {value}, which "
                f"{BACKEND_LAUNCHERS[backend]} cannot run (emulate --backend {backend} launches "
                f"{', '.join(LAUNCHABLE[backend])}); choose the launcher with emulate --backend"
            )
        if w == "--ranks-per-node" or w.startswith("--ranks-per-node="):
            raise UsageError(
                "the command must not pass --ranks-per-node under emulate: the nodes are real "
                "hostnames, so link classes come from them"
            )
    return words


def main(args: argparse.Namespace) -> int:
    from commbench.emulate import jobs, netns
    from commbench.emulate.topology import EmulatedCluster, parse_rate, parse_slow_node

    command = command_line(args.cmd, args.backend)
    slow = dict(parse_slow_node(s) for s in args.slow_node)
    cluster = EmulatedCluster(
        nodes=args.nodes,
        ranks_per_node=args.ranks_per_node,
        link_rate_bps=parse_rate(args.link_rate),
        slow_nodes=slow,
    )
    if not args.dry_run:
        netns.check_privileges()
    with tempfile.TemporaryDirectory(prefix="commbench-emulate-") as tmp:
        build = jobs.mpi_job if args.backend == "mpi" else jobs.gloo_job
        job = build(cluster, command, Path(tmp))
        say = sys.stdout.write
        rates = ", ".join(
            f"{cluster.hostname(i)} {job.truth['node_rate_bps'][i] / 1e6:g} Mbit/s"
            for i in range(cluster.nodes)
        )
        say(
            f"# commbench emulate: {cluster.nodes} nodes x {cluster.ranks_per_node} ranks "
            f"(one NIC each), {BACKEND_LAUNCHERS[args.backend]}; NIC rates: {rates}\n"
        )
        if args.dry_run:
            say(jobs.describe(job) + "\n")
            return 0
        sys.stdout.flush()
        try:
            netns.create(cluster)
        except netns.EmulationError as e:
            print(f"commbench: error: emulate could not build the nodes: {e}", file=sys.stderr)
            return 1
        try:
            return jobs.run(job)
        finally:
            netns.destroy(cluster)
