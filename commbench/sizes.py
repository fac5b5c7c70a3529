"""Message sizes as nccl-tests and OSU take them: `8`, `64K`, `256M`, `1G` (powers of 1024)."""

from __future__ import annotations

import math
import re

from commbench.errors import UsageError
from commbench.limits import MAX_BYTES, MAX_DIGITS, digits_error, shown

# One sweep measures at most this many sizes: nccl-tests' -b 8 -e 16G -f 2 is 32; a factor of
# 1.0001 or a step of 8 B would be millions of points, hours before anything useful prints.
MAX_SWEEP_SIZES = 1000
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str | int, what: str = "size") -> int:
    """Parse a positive byte count; K/M/G/T are powers of 1024 (`-e 256M`)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        m = _SIZE_RE.match(str(text))
        if m and len(m.group(1)) > MAX_DIGITS:
            raise digits_error(m.group(1), f"{what} {shown(str(text))!r}")
        if not m:
            raise UsageError(
                f"{what} {text!r} does not parse: use a positive integer with an optional "
                "K/M/G suffix (powers of 1024), e.g. 8, 64K, 256M"
            )
        scaled = float(m.group(1)) * _UNITS[m.group(2).upper()]
        if scaled != int(scaled):
            raise UsageError(f"{what} {text!r} is not a whole number of bytes")
        value = int(scaled)
    if value <= 0:
        raise UsageError(f"{what} {text!r} must be positive")
    if value > MAX_BYTES:
        raise UsageError(
            f"{what} {text!r} is over the bound of {format_size(MAX_BYTES)} (one message or "
            "buffer of one rank)"
        )
    return value


def sweep(begin: int, end: int, factor: float = 2.0, step: int = 0) -> list[int]:
    """Sizes from begin to end inclusive, times `factor` each (or plus `step` when > 0)."""
    if begin > end:
        raise UsageError(
            f"min size {format_size(begin)} is larger than max size {format_size(end)}"
        )
    if step < 0:
        raise UsageError(f"size increment {step} must be positive")
    if step == 0 and not (factor > 1 and math.isfinite(factor)):
        raise UsageError(f"size factor {factor} must be a finite number greater than 1")
    sizes: list[int] = []
    size = begin
    while size <= end:
        if len(sizes) == MAX_SWEEP_SIZES:
            how = f"plus {format_size(step)}" if step else f"times {factor:g}"
            raise UsageError(
                f"{format_size(begin)} to {format_size(end)} {how} is over {MAX_SWEEP_SIZES} "
                "sizes (the bound of one sweep): use a larger factor or step, or list --sizes"
            )
        sizes.append(size)
        size = size + step if step else max(int(size * factor), size + 1)
    return sizes


def parse_sizes(text: str) -> list[int]:
    """A comma-separated list of sizes (`--sizes 8,1K,1M`)."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise UsageError("--sizes is empty: give a comma-separated list such as 8,1K,1M")
    if len(parts) > MAX_SWEEP_SIZES:
        raise UsageError(
            f"--sizes: {len(parts)} sizes, over {MAX_SWEEP_SIZES} (the bound of one sweep)"
        )
    return sorted({parse_size(p, "size") for p in parts})


def format_size(nbytes: float) -> str:
    """Binary units, as the tables and plots label them: 8 B, 64 KiB, 256 MiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            v = nbytes / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{int(nbytes)} B"


def parse_range(text: str) -> tuple[int, int]:
    """OSU's `-m [MIN:]MAX` message-size range (`-m 1:4M`, `-m 64K`; MIN defaults to 1)."""
    lo, sep, hi = str(text).rpartition(":")
    if sep and not lo:
        raise UsageError(f"-m/--message-size {text!r}: give MIN:MAX or MAX, e.g. 1:4M")
    return (parse_size(lo, "-m minimum") if sep else 1), parse_size(hi, "-m maximum")


def changed_sizes(points: dict[int, list[int]], unit: str) -> str:
    """One line naming every requested size that a point's S differs from (rounded, or merged
    with another size into one point), or "" when every point is exactly what was asked."""
    parts = []
    for nbytes, asked in points.items():
        other = [a for a in asked if a != nbytes]
        if other:
            parts.append(f"{', '.join(format_size(a) for a in other)} -> {format_size(nbytes)}")
    return f"sizes changed ({unit}): {'; '.join(parts)}" if parts else ""
