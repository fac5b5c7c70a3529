"""Off-cache (IMB's -off_cache in spirit): how much scratch a rank touches before each timed
iteration so the op's buffers are no longer in its caches, and what those touches cost.

Which cache matters: a rank's buffers sit in its core's private L2 and in the last-level cache
(L3), which the cores of a socket share. Every rank of a node runs the same loop, so the
node's ranks flush at once and together sweep the L3: each needs to evict its private L2 and
its share of the L3 (the L3's size over the CPUs that share it, sysfs shared_cpu_list), and
touches twice that, as the scratch used to be twice the largest cache, so a pseudo-LRU cache
keeps none of the op's lines. The share is capped at MAX_L3_SHARE: a virtual machine is shown
the host's whole L3 as shared by its few vCPUs (480 MiB over 2 on the VM this was written on;
260 MiB on another), and twice that, 960 MiB, took 174 ms a touch: the README's `run
allreduce --buffers plain --off-cache -n 1000 -w 200` ran 40 min to 2.6 h. 36 MiB takes 2.4 ms.
No shipping CPU gives a core more L3 than 12 MiB (AMD's 3D V-Cache: 96 MiB per 8-core CCD).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from commbench.measure.transport.base import touch_lines
from commbench.sizes import format_size, parse_size

if TYPE_CHECKING:
    from commbench.measure.runner import TimingConfig

SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
MAX_L3_SHARE = 16 << 20  # above any real core's L3 share (12 MiB), far below a VM's whole L3
DEFAULT_BYTES = 32 << 20  # no cache sizes in sysfs: what the scratch is twice of
ESTIMATE_FROM_S = 60.0  # say how long the flushes alone take when it is longer than this


@dataclass(frozen=True)
class Cache:
    """One cache of cpu0 as sysfs describes it."""

    level: int
    kind: str  # Data, Instruction, Unified
    nbytes: int
    sharers: int  # CPUs that share it


@dataclass(frozen=True)
class Scratch:
    """The scratch one rank touches before each timed iteration, and why that size."""

    nbytes: int
    why: str


def _cpus(text: str) -> int:
    """How many CPUs a sysfs cpu list names (`0-15,32-47` -> 32)."""
    n = 0
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return max(n, 1)


def caches(root: Path = SYSFS) -> list[Cache]:
    """cpu0's data and unified caches (sysfs cache/index*), unreadable ones left out."""
    out = []
    for d in sorted(root.glob("index*")):
        with contextlib.suppress(OSError, ValueError):
            kind = (d / "type").read_text().strip()
            if kind == "Instruction":
                continue
            shared = d / "shared_cpu_list"
            out.append(
                Cache(
                    level=int((d / "level").read_text()),
                    kind=kind,
                    nbytes=parse_size((d / "size").read_text().strip()),
                    sharers=_cpus(shared.read_text()) if shared.exists() else 1,
                )
            )
    return out


def scratch(root: Path = SYSFS) -> Scratch:
    """2 x (private L2 + this core's share of the L3, capped at MAX_L3_SHARE)."""
    found = caches(root)
    if not found:
        return Scratch(2 * DEFAULT_BYTES, f"2 x {format_size(DEFAULT_BYTES)} (no cache sizes)")
    private = max((c for c in found if c.level <= 2), key=lambda c: c.nbytes, default=None)
    llc = max((c for c in found if c.level >= 3), key=lambda c: c.level, default=None)
    parts, total = [], 0
    if private is not None:
        total += private.nbytes
        parts.append(f"L{private.level} {format_size(private.nbytes)}")
    if llc is not None:
        share = llc.nbytes // llc.sharers
        capped = share > MAX_L3_SHARE
        total += min(share, MAX_L3_SHARE)
        parts.append(
            f"L{llc.level} share {format_size(min(share, MAX_L3_SHARE))}: "
            f"{format_size(llc.nbytes)} over {llc.sharers} CPU(s)"
            + (f", capped at {format_size(MAX_L3_SHARE)}" if capped else "")
        )
    return Scratch(2 * total, f"2 x ({' + '.join(parts)})")


def flush_seconds(scratch_buf: np.ndarray, repeats: int = 3) -> float:
    """What one touch of the scratch takes here: the median of `repeats` after a first."""
    touch_lines(scratch_buf)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        touch_lines(scratch_buf)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def estimate(points: int, iterations: int, flush_s: float, scratch_bytes: int) -> str | None:
    """The line said before a run whose flushes alone take ESTIMATE_FROM_S or more, else
    None: `iterations` is the most a point runs (warm-up, probe and timed)."""
    total = points * iterations * flush_s
    if total < ESTIMATE_FROM_S:
        return None
    return (
        f"off-cache: each iteration first touches {format_size(scratch_bytes)} of scratch "
        f"({flush_s * 1e3:.1f} ms here); {points} point(s) x up to {iterations} iterations: "
        f"about {total / 60:.1f} min of flushing alone (fewer -n/-w or sizes to shorten it)"
    )


def notes(scratch_buf: np.ndarray, cfg: TimingConfig, points: int) -> list[str]:
    """What a run with --off-cache says first: the scratch and why its size, and how long
    its flushes will take when that is minutes (every rank times its own touch; rank 0 says).
    A point runs at most its warm-up, the probe and its timed iterations (the most the
    budget allows when they adapt)."""
    from commbench.measure.runner import PROBE_MAX

    size = scratch()
    lines = [f"off-cache: {format_size(scratch_buf.nbytes)} of scratch a rank, {size.why}"]
    warmup = cfg.warmup if cfg.warmup is not None else 20  # the adaptive warm-up's most
    iters = cfg.iters if cfg.iters is not None else cfg.max_iters + PROBE_MAX
    line = estimate(points, warmup + iters, flush_seconds(scratch_buf), scratch_buf.nbytes)
    return lines + ([line] if line else [])
