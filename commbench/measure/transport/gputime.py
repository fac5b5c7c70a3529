"""GPU timing arithmetic, kept free of torch so it is tested anywhere: how long a device
pre-roll must be to hide the host's enqueue, and seconds as torch.cuda._sleep cycles."""

from __future__ import annotations

PRE_ROLL_MIN_S = 100e-6  # well above the 20-30 us a c10d call takes to reach the GPU's queue
PRE_ROLL_MAX_S = 50e-3
PRE_ROLL_FACTOR = 3.0  # host jitter: a late iteration must still find the GPU asleep


def preroll_seconds(enqueue_s: float) -> float:
    """Device sleep before the start event for a host enqueue of `enqueue_s`: a few times the
    enqueue, at least PRE_ROLL_MIN_S, at most PRE_ROLL_MAX_S (a host slower than that is not
    hidden; the loop's record says which timer ran)."""
    return min(PRE_ROLL_MAX_S, max(PRE_ROLL_MIN_S, PRE_ROLL_FACTOR * enqueue_s))


def sleep_cycles(seconds: float, cycles_per_s: float) -> int:
    """torch.cuda._sleep's argument for `seconds` at the measured rate (at least 1)."""
    assert cycles_per_s > 0, cycles_per_s
    return max(1, round(seconds * cycles_per_s))
