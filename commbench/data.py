"""Check data: exact small-integer patterns per rank, in each dtype's host storage.

Values lie in [-2, 2], so sums over up to 128 ranks are exact in bfloat16 and over 1024 in
float16, whatever the reduction order: a correct op reproduces the expected buffer bit for
bit and `wrong` counts differing elements. bfloat16 is held as its raw uint16 bits on host.
"""

from __future__ import annotations

import numpy as np

_PERIOD = 61  # prime, so patterns of different seeds do not line up by chance


def storage_dtype(dtype: str) -> np.dtype:
    """numpy dtype holding `dtype` on the host (bfloat16 -> uint16 bits)."""
    return np.dtype(
        {
            "float32": np.float32,
            "float16": np.float16,
            "bfloat16": np.uint16,
            "int32": np.int32,
            "float64": np.float64,
        }[dtype]
    )


def _period(seed: int) -> np.ndarray:
    i = np.arange(_PERIOD, dtype=np.int64)
    return (i * i * 3 + i * 7 + seed * 13 + seed * seed) % _PERIOD % 5 - 2


def _tile(period: np.ndarray, start: int, n: int) -> np.ndarray:
    """Elements [start, start+n) of the infinite repetition of `period`."""
    k = len(period)
    first = start % k
    reps = -(-(first + n) // k)
    return np.tile(period, reps)[first : first + n]


def _ints(seed: int, n: int, start: int = 0) -> np.ndarray:
    """Small integers in [-2, 2], periodic in the index, different per seed."""
    return _tile(_period(seed), start, n)


def encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """Exact small integers (int64/float64 array) -> host storage of `dtype`."""
    if dtype == "bfloat16":
        bits = np.asarray(values, dtype=np.float32).view(np.uint32)
        return (bits >> 16).astype(np.uint16)  # exact: small integers have no low mantissa bits
    return np.asarray(values).astype(storage_dtype(dtype))


def pattern(seed: int, n: int, dtype: str, start: int = 0) -> np.ndarray:
    """Elements [start, start+n) of the input a rank with this seed sends, in `dtype` storage."""
    return encode(_ints(seed, n, start), dtype)


def pattern_sum(seeds: range | list[int], n: int, dtype: str, start: int = 0) -> np.ndarray:
    """Elementwise sum of the patterns of `seeds`: the expected result of a sum reduction."""
    total = sum((_period(s) for s in seeds), np.zeros(_PERIOD, dtype=np.int64))
    return encode(_tile(total, start, n), dtype)


def count_wrong(got: np.ndarray, expected: np.ndarray) -> int:
    """Elements that differ (bitwise for bfloat16 storage)."""
    assert got.shape == expected.shape, (got.shape, expected.shape)
    return int(np.count_nonzero(got != expected))
