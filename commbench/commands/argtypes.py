"""argparse value types shared by every command; light, so the analysis commands (fit, plan,
validate, report) can use them without importing the measuring machinery. Every integer flag
is parsed by one function with a bound it names (commbench.limits)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from commbench.errors import UsageError
from commbench.limits import MAX_COUNT, MAX_ITERS, MAX_WORLD, parse_int, shown

DEFAULT_RESULTS = Path("results")


def _int_in(text: str, least: int, says: str, most: int = MAX_COUNT, why: str = "") -> int:
    """limits.parse_int as an argparse type."""
    try:
        return parse_int(text, least, says, most, why)
    except UsageError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (and at most MAX_COUNT, MPI's int)."""
    return _int_in(text, 1, "at least 1", why="the largest count commbench takes: MPI's int")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_in(text, 0, "0 or more", why="the largest count commbench takes: MPI's int")


ITERS_WHY = "iterations of one point; OSU's largest default is 10000"


def iterations(text: str) -> int:
    """-n/--iters: timed iterations of one point, 1..MAX_ITERS."""
    return _int_in(text, 1, "at least 1", MAX_ITERS, ITERS_WHY)


def warmup_iterations(text: str) -> int:
    """-w/--warmup: 0..MAX_ITERS."""
    return _int_in(text, 0, "0 or more", MAX_ITERS, ITERS_WHY)


def world_size(text: str) -> int:
    """--world, --gpus: ranks of one job, 1..MAX_WORLD."""
    return _int_in(text, 1, "at least 1", MAX_WORLD, "ranks of one job")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive finite number")
    return value
