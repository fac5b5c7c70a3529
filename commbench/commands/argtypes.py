"""argparse value types shared by every command; light, so the analysis commands (fit, plan,
validate, report) can use them without importing the measuring machinery."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

DEFAULT_RESULTS = Path("results")


def _int_at_least(text: str, least: int, says: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r} must be {says}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _int_at_least(text, 1, "at least 1")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0, "0 or more")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive finite number")
    return value
