"""Bounds on every input that scales work or memory, each with its one-line error.

A typo in a suite file or a flag (a 1000 x 1000 sweep, a factor of 1.0001, `--max-bytes 1`, a
billion layers) must fail at once, before any communication, rather than expand for an hour
or time a 4-byte chunk scaled four million times. The bounds sit a few times above the largest
real use (nccl-tests' default sweep has 32 sizes; the largest published models and jobs).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.errors import UsageError
from commbench.limits import MAX_COUNT
from commbench.sizes import format_size, parse_size

if TYPE_CHECKING:
    from commbench.traffic.program import Step

MAX_SUITE_FILE_BYTES = 1 << 20
MAX_INCLUDE_DEPTH = 8
MAX_SWEEP_COMBINATIONS = 1000  # one run's sweep: the product of its value lists
MAX_SUITE_POINTS = 5000  # one suite on one world, after degrees and models multiply
MIN_MAX_BYTES = 64 << 10  # a smaller chunk times latency, not the step it stands for
MAX_PIECES = 4096  # a step measured as 1/N and scaled, or a message sent in N pieces
# ModelShape fields that drive loops (layers, experts) or the memory arithmetic.
SHAPE_BOUNDS = {
    "layers": 4096,
    "hidden": 1 << 20,
    "ffn_hidden": 1 << 22,
    "heads": 1 << 14,
    "kv_heads": 1 << 14,
    "head_dim": 1 << 14,
    "vocab": 1 << 24,
    "seq_len": 1 << 24,
    "experts": 1 << 14,
    "moe_ffn_hidden": 1 << 22,
    "moe_every": 4096,
}
# Pattern options of suite files and --set that drive loops or memory (a suite builds each
# micro-batch's pipeline slots), and why each bound is where it is; any other integer option
# is bounded by limits.MAX_COUNT. The planner prices micro-batches without building them.
OPTION_BOUNDS: dict[str, tuple[float, str]] = {
    "micro_batches": (4096, "micro-batches of one step: each is a pipeline slot built in turn"),
    "micro_batch": (1 << 16, "sequences of one micro-batch"),
    "seq_len": (SHAPE_BOUNDS["seq_len"], "tokens of one sequence"),
    "compute_ms": (60_000.0, "synthetic compute of one micro-batch, spun for real"),
}
MAX_OPTION_LIST = 64  # entries of a list option (ops, group_sizes, placements)
MAX_ROUTED_KEYS = 1 << 25  # tokens x experts one rank's router draws (8 bytes each: 256 MiB)


def check_option(key: str, value: object, where: str) -> None:
    """A pattern option's value within OPTION_BOUNDS (or MAX_COUNT), a list option within
    MAX_OPTION_LIST entries."""
    if isinstance(value, tuple | list):
        if len(value) > MAX_OPTION_LIST:
            raise UsageError(
                f"{where}: {len(value)} entries, over the bound of {MAX_OPTION_LIST} a list "
                "option may have"
            )
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    bound, why = OPTION_BOUNDS.get(key, (MAX_COUNT, "the largest count commbench takes"))
    if value > bound:
        shown = value if isinstance(value, int) else f"{value:g}"
        raise UsageError(f"{where}: {shown} is over the bound of {bound:g} ({why})")


def check_options(options: object, where: str) -> None:
    """Every field of a pattern's Options from a suite file or --set (not the planner's, which
    prices micro-batches without building them) within check_option's bounds."""
    import dataclasses

    assert dataclasses.is_dataclass(options), options
    for f in dataclasses.fields(options):
        check_option(f.name, getattr(options, f.name), f"{where}.{f.name}")


def check_routing(tokens: int, experts: int, where: str) -> None:
    """The router draws a score per token and expert: at most MAX_ROUTED_KEYS of them."""
    if tokens * experts > MAX_ROUTED_KEYS:
        raise UsageError(
            f"{where}: routing {tokens} tokens over {experts} experts draws {tokens * experts} "
            f"scores, over the bound of {MAX_ROUTED_KEYS} (what one rank's router simulates): "
            "lower micro_batch or seq_len"
        )


def check_suite_file(path: Path, shown: str, depth: int, top: str | None) -> None:
    """A suite file to read: not over MAX_SUITE_FILE_BYTES, included at most
    MAX_INCLUDE_DEPTH levels below the suite named (`top`)."""
    if depth > MAX_INCLUDE_DEPTH:
        raise UsageError(
            f"{shown}: includes nested deeper than {MAX_INCLUDE_DEPTH} levels (from {top})"
        )
    try:
        size = path.stat().st_size
    except OSError:
        return  # the read that follows says why
    if size > MAX_SUITE_FILE_BYTES:
        raise UsageError(
            f"{shown}: {format_size(size)}, over the {format_size(MAX_SUITE_FILE_BYTES)} a "
            "suite file may have"
        )


def check_sweep(sweep: dict[str, tuple], where: str) -> None:
    """A run's sweep has at most MAX_SWEEP_COMBINATIONS combinations."""
    combinations = math.prod(len(v) for v in sweep.values())
    if combinations > MAX_SWEEP_COMBINATIONS:
        sizes = " x ".join(str(len(v)) for v in sweep.values())
        raise UsageError(
            f"{where}.sweep: {sizes} = {combinations} combinations, over "
            f"{MAX_SWEEP_COMBINATIONS} (the bound of one run's sweep)"
        )


def check_points(count: int, suite: str, world: int) -> None:
    """Called as points are made: stop as soon as a suite passes MAX_SUITE_POINTS."""
    if count > MAX_SUITE_POINTS:
        raise UsageError(
            f"suite {suite}: over {MAX_SUITE_POINTS} points on a world of {world} (the bound "
            "of one suite run): narrow its sweeps, models or degrees"
        )


def check_shape(name: str, values: dict[str, object]) -> None:
    """A model shape's fields within SHAPE_BOUNDS."""
    for f, bound in SHAPE_BOUNDS.items():
        value = values.get(f)
        if isinstance(value, int) and value > bound:
            raise UsageError(
                f"model {name}: {f} {value} is over the bound of {bound} (the largest shape "
                "commbench builds traffic and memory for)"
            )


def check_pieces(pieces: int, step: Step, max_bytes: int | None) -> None:
    """A step fits --max-bytes in at most MAX_PIECES pieces (or chunks scaled up)."""
    if pieces > MAX_PIECES:
        need = math.ceil(pieces / MAX_PIECES) * (max_bytes or 0)
        raise UsageError(
            f"{step.op} {step.label or ''} on {step.axis}: {format_size(step.nbytes)} per rank "
            f"is {pieces} pieces of --max-bytes {format_size(max_bytes or 0)}, at most "
            f"{MAX_PIECES} (a step timed as a tiny chunk, or sent in as many pieces, is not "
            f"the step): raise --max-bytes to at least {format_size(need)}"
        )


def parse_max_bytes(text: str | int, what: str) -> int:
    """A per-rank buffer budget (suite `max_bytes`, `--max-bytes`) of at least MIN_MAX_BYTES,
    so a step measured as a chunk and scaled up stays a bandwidth measurement."""
    value = parse_size(text, what)
    if value < MIN_MAX_BYTES:
        raise UsageError(
            f"{what} {text}: at least {format_size(MIN_MAX_BYTES)} (a smaller chunk, scaled up "
            "to the step it stands for, would time latency, not bandwidth)"
        )
    return value
