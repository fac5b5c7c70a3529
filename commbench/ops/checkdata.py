"""Check data: exact small-integer patterns per rank, in each dtype's host storage.

Values lie in [-2, 2], so sums over up to 128 ranks are exact in bfloat16 and over 1024 in
float16, whatever the reduction order: a correct op reproduces the expected buffer bit for
bit and `wrong` counts differing elements. bfloat16 is held as its raw uint16 bits on host.
Buffers are filled and verified through `Fill`s, generated a chunk at a time, so checking a
256 MiB point costs a few MB of host memory, not several copies of the buffer. It lives with
the ops because each op states its inputs and exact outputs in these terms (nccl-tests keeps
InitData/expected with each collective), and a pipeline schedule checks every message as it
arrives, inside the timed closure; Communicator is a type-only import.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from commbench.measure.transport.base import Communicator

_PERIOD = 61  # prime, so patterns of different seeds do not line up by chance
# Largest group whose sums of [-2, 2] values stay exact, whatever the order: partial sums reach
# 2p, and bfloat16 (8-bit significand) holds integers exactly up to 256, float16 up to 2048.
EXACT_SUM_RANKS = {"bfloat16": 128, "float16": 1024}


def exact_sum(dtype: str, p: int) -> bool:
    """Whether a sum over p ranks of check data is exact in `dtype` (so `wrong` is meaningful)."""
    return p <= EXACT_SUM_RANKS.get(dtype, p)


def storage_dtype(dtype: str) -> np.dtype:
    """numpy dtype holding `dtype` on the host (bfloat16 -> uint16 bits)."""
    return np.dtype(
        {
            "float32": np.float32,
            "float16": np.float16,
            "bfloat16": np.uint16,
            "int32": np.int32,
            "float64": np.float64,
            "int8": np.int8,
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


CHUNK = 1 << 20  # elements generated at a time


@dataclass(frozen=True)
class Piece:
    """Elements [start, start+n) of the sum of the patterns of `seeds` (none: zeros)."""

    seeds: tuple[int, ...]
    n: int
    start: int = 0


@dataclass(frozen=True)
class Fill:
    """Check data described, not stored: pieces laid end to end, produced in chunks.

    Every pattern repeats with period 61, so one encoded template of a chunk plus a period
    serves every chunk of a piece as a slice (no per-chunk arithmetic, no full-size copy).
    """

    dtype: str
    pieces: tuple[Piece, ...]

    @property
    def n(self) -> int:
        return sum(p.n for p in self.pieces)

    def chunks(self, size: int = CHUNK) -> Iterator[tuple[int, np.ndarray]]:
        """(offset, values) covering elements [0, n) in order, each at most `size` long."""
        offset = 0
        for piece in self.pieces:
            if piece.n:
                total = sum((_period(s) for s in piece.seeds), np.zeros(_PERIOD, dtype=np.int64))
                template = encode(_tile(total, 0, min(piece.n, size) + _PERIOD), self.dtype)
                for a in range(0, piece.n, size):
                    k = (piece.start + a) % _PERIOD
                    yield offset + a, template[k : k + min(size, piece.n - a)]
            offset += piece.n

    def array(self) -> np.ndarray:
        """All values at once (small buffers and tests)."""
        parts = [v for _, v in self.chunks()]
        return np.concatenate(parts) if parts else encode(np.zeros(0), self.dtype)


def fill(seed: int, n: int, dtype: str, start: int = 0) -> Fill:
    """Lazy `pattern(seed, n, dtype, start)`."""
    return Fill(dtype, (Piece((seed,), n, start),))


def fill_sum(seeds: Iterable[int], n: int, dtype: str, start: int = 0) -> Fill:
    """Lazy `pattern_sum(seeds, n, dtype, start)`."""
    return Fill(dtype, (Piece(tuple(seeds), n, start),))


def fill_zeros(n: int, dtype: str) -> Fill:
    """Lazy zeros (buffers an in-place reduction keeps growing are reset to these)."""
    return Fill(dtype, (Piece((), n),))


def concat(fills: Iterable[Fill]) -> Fill:
    """Fills laid end to end (all of one dtype)."""
    fills = list(fills)
    assert len({f.dtype for f in fills}) == 1, [f.dtype for f in fills]
    return Fill(fills[0].dtype, tuple(p for f in fills for p in f.pieces))


def write_fill(comm: Communicator, view: Any, values: Fill) -> None:
    """Write `values` into `view` a chunk at a time."""
    for a, chunk in values.chunks():
        comm.write(view[a : a + len(chunk)], chunk)


def count_wrong_fill(comm: Communicator, view: Any, expected: Fill) -> int:
    """Elements of `view` that differ from `expected`, read back a chunk at a time."""
    assert len(view) == expected.n, (len(view), expected.n)
    return sum(
        count_wrong(comm.read(view[a : a + len(chunk)]), chunk) for a, chunk in expected.chunks()
    )
