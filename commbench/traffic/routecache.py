"""Routed token counts of the MoE patterns, cached per user, so that a rank routes without
importing numpy.random.

numpy.random's import (its bit generators and distributions are compiled modules) costs a rank
~15 ms of CPU before the Gumbel draws that route `ep`, `prefill` and the MoE `step`; on 16 ranks
over 2 cores that is ~0.12 s before the first collective. The counts are a pure function of the
router's options, the shape routed and numpy's version (a Generator's stream may change between
numpy releases, NEP 19), so an entry is keyed by all of them, kept beside its key text and used
only for exactly that key: it never goes stale. One entry (a few KB) per distinct routing,
written atomically (commbench.write_cache_entry, as the suite cache's); a cache that cannot
be read or written is passed by: it only ever saves time.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from commbench import user_cache, write_cache_entry

FORMAT = 2  # bump when an entry's layout or the draw changes (2: uniform_subsets)


def load(key: dict[str, Any], compute: Callable[[], np.ndarray]) -> np.ndarray:
    """compute(), the int64 counts [source rank, expert] routed under `key`, or their copy
    cached for exactly that key (and this numpy)."""
    import json

    text = json.dumps({"format": FORMAT, "numpy": np.__version__, **key}, sort_keys=True)
    where = user_cache("routes") / f"{zlib.crc32(text.encode()):08x}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # a miss, whatever way
        kept = json.loads(where.read_text())
        if kept["key"] == text:
            return np.array(kept["counts"], dtype=np.int64)
    counts = compute()
    assert counts.dtype == np.int64 and counts.ndim == 2, counts.dtype
    blob = json.dumps({"key": text, "counts": counts.tolist()})
    write_cache_entry(where, blob)
    return counts
