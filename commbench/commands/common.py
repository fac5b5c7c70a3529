"""Flags shared by the measuring commands (run, suite) and their validation."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from commbench.commands.argtypes import (  # noqa: F401  (the measuring commands use them)
    DEFAULT_RESULTS,
    iterations,
    non_negative_int,
    positive_float,
    positive_int,
    warmup_iterations,
    world_size,
)
from commbench.errors import UsageError
from commbench.measure.launch import LaunchInfo, detect
from commbench.measure.runner import DEFAULT_BUDGET_S, TimingConfig
from commbench.measure.session import SessionOptions
from commbench.measure.transport import BACKENDS, resolve_backend
from commbench.measure.transport.base import GPU_TIMERS, HUGEPAGE, PLAIN, TIMING_MODES

MAX_TIMEOUT_S = 1e6
# the watchdog's timeout bounds start-up (launch, rendezvous, buffers) as well as each point:
# below a second it fires before the first point can start and reads as a hung peer
MIN_TIMEOUT_S = 1.0


def timeout_seconds(text: str) -> float:
    """--timeout: positive and finite (it becomes a datetime.timedelta for torch), between
    MIN_TIMEOUT_S and MAX_TIMEOUT_S."""
    value = positive_float(text)
    if value < MIN_TIMEOUT_S:
        raise argparse.ArgumentTypeError(
            f"{text!r} must be at least {MIN_TIMEOUT_S:g} s: the timeout bounds start-up "
            "(launch, rendezvous) as well as each point, and a smaller one is taken for a hang"
        )
    if value > MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"{text!r} must be at most {MAX_TIMEOUT_S:g} seconds")
    return value


def add_session_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("transport and output")
    g.add_argument(
        "--backend",
        default="auto",
        choices=BACKENDS,
        help="mpi (mpi4py), gloo (torch, CPU), nccl (torch, GPU); auto: nccl with a "
        "GPU, gloo under torchrun, else mpi (default: %(default)s)",
    )
    g.add_argument(
        "--results",
        type=Path,
        default=DEFAULT_RESULTS,
        help="directory that receives <run-id>/records.jsonl (default: %(default)s)",
    )
    g.add_argument(
        "--run-id",
        default=None,
        help="name the run directory (default: <timestamp>-<command>-<random>)",
    )
    g.add_argument(
        "--ranks-per-node",
        type=positive_int,
        default=None,
        help="pretend each N consecutive ranks share a node (link classes)",
    )
    g.add_argument(
        "--timeout",
        type=timeout_seconds,
        default=300.0,
        help="seconds a point may run before the job is aborted (default: %(default)s)",
    )
    g.add_argument("--verbose", action="store_true", help="let every rank print warnings")


def add_timing_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("timing")
    g.add_argument(
        "-n",
        "--iters",
        type=iterations,
        default=None,
        help="timed iterations per point (default: adapt to --budget)",
    )
    g.add_argument(
        "-w",
        "--warmup",
        type=warmup_iterations,
        default=None,
        help="warmup iterations per point (default: adapt)",
    )
    g.add_argument(
        "--budget",
        type=positive_float,
        default=DEFAULT_BUDGET_S,
        help="target timed seconds per point when iterations adapt (default: %(default)s)",
    )
    g.add_argument(
        "--timing",
        choices=TIMING_MODES,
        default=TIMING_MODES[0],
        help="per-iteration: barrier+op+sync each iteration; pipelined: n ops "
        "back to back, divided (default: %(default)s)",
    )
    g.add_argument(
        "--gpu-timer",
        choices=GPU_TIMERS,
        default=GPU_TIMERS[0],
        help="nccl: pre-roll queues a device sleep before the start event so the host's "
        "enqueue of the op is not timed; enqueue times from the host reaching the start event "
        "(includes 20-30 us of Python and c10d per call) (default: %(default)s)",
    )
    g.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip the exact correctness check of each point's first call",
    )
    g.add_argument(
        "--isolated",
        action="store_true",
        help="run one group at a time instead of all groups of an axis at once",
    )
    g.add_argument(
        "--buffers",
        choices=(HUGEPAGE, PLAIN),
        default=None,
        help="mpi host buffers: hugepage (2 MiB aligned, transparent huge pages advised) or "
        "plain (4 KiB pages, what OSU, IMB and most applications get) (default: hugepage; "
        "gloo/nccl use torch's allocator)",
    )
    g.add_argument(
        "--off-cache",
        action="store_true",
        help="flush the CPU caches before each timed iteration (IMB -off_cache): cold buffers",
    )


def check_buffer_flags(args: argparse.Namespace, backend: str) -> None:
    """--buffers picks mpi's host pages; --off-cache flushes host caches per iteration."""
    if args.buffers and backend != "mpi":
        raise UsageError(f"--buffers is for the mpi backend; {backend} uses torch's allocator")
    if args.off_cache and (backend == "nccl" or args.timing != "per-iteration"):
        raise UsageError(
            "--off-cache flushes host caches between iterations: it needs host buffers "
            "(mpi or gloo) and --timing per-iteration"
        )


def timing_config(args: argparse.Namespace) -> TimingConfig:
    return TimingConfig(
        buffers=args.buffers or HUGEPAGE,
        off_cache=args.off_cache,
        iters=args.iters,
        warmup=args.warmup,
        budget_s=args.budget,
        timing=args.timing,
        gpu_timer=args.gpu_timer,
        check=args.check,
        isolated=args.isolated,
    )


def session_options(args: argparse.Namespace, command: str, launch: LaunchInfo) -> SessionOptions:
    """Resolve the backend (raises UsageError identically on every rank) and bundle options."""
    backend = resolve_backend(args.backend, launch)
    if args.ranks_per_node and launch.size % args.ranks_per_node:
        raise UsageError(
            f"--ranks-per-node {args.ranks_per_node} does not divide the world size {launch.size}"
        )
    if args.run_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", args.run_id):
        raise UsageError(f"--run-id {args.run_id!r}: use letters, digits, '.', '_' and '-'")
    return SessionOptions(
        command=command,
        backend=backend,
        results=args.results,
        timeout_s=args.timeout,
        ranks_per_node=args.ranks_per_node,
        verbose=args.verbose,
        run_id=args.run_id,
    )


def launch_info() -> LaunchInfo:
    return detect()
