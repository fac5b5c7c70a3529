"""What an nccl-tests log says about the NCCL regime (algorithm, protocol) each size ran in.

Two sources. NCCL_ALGO / NCCL_PROTO, as NCCL_DEBUG=INFO's "set by environment" line or a job
script's comment states them, pin a regime where they leave one name for the op (nccl_names.
pinned). NCCL_DEBUG_SUBSYS=TUNING lines (src/enqueue.cc, printed by rank 0 of each communicator
as it enqueues a collective) name what ran at a size; their format changed twice:

- 2.20-2.22: `1048576 Bytes -> Algo 1 proto 1 time 25.100000` (NCCL_ALGO_* / NCCL_PROTO_*
  numbers, the bytes S: nRanks x count for all-gather and reduce-scatter);
- 2.23: the same with the collective first, `AllReduce: 1048576 Bytes -> ...`;
- 2.24+: `AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..15}` (names;
  the bytes are count x type size, one rank's share: S / p for all-gather, reduce-scatter and
  all-to-all).
"""

from __future__ import annotations

import re
from pathlib import Path

from commbench.nccl_names import NCCL_FUNCS, REGIME_SETTINGS, canonical, env_pins

# a tuning line in any of the three formats: (collective or None, bytes, algorithm, protocol)
TUNING = re.compile(r"(?:\b([A-Za-z]+): )?(\d+) Bytes -> Algo (\S+) proto (\S+)")
PER_RANK_COUNT = ("allgather", "reduce_scatter", "alltoall")


def regimes(
    path: Path,
    start: int,
    tuning: list[tuple[int, re.Match]],
    op: str,
    p: int,
    env: dict,
    env_lines: dict,
    notes: list[str],
) -> dict[int, tuple[str | None, str | None, list[str]]]:
    """Per size S of the section starting at line `start` (its `tuning` lines): (algorithm, protocol, forced) NCCL ran it in, from its tuning
    lines (what NCCL chose, or was made to run) and the log's NCCL_ALGO / NCCL_PROTO where one
    pins a single name for `op`; a size absent ran in what the settings pin (key -1)."""
    stated = {var: f"{path}:{env_lines.get(var, 1)}: {var}" for var in REGIME_SETTINGS.values()}
    pins = env_pins(op, env, stated)
    seen: dict[int, set[tuple[str, str]]] = {}
    for n, m in tuning:
        func, nbytes, algo, proto = m.groups()
        if func is not None and NCCL_FUNCS.get(func.lower()) != op:
            continue  # another collective's line (or a word before the bytes)
        numeric = algo.isdigit()
        where = f"{path}:{n}"
        ran = (
            canonical("algorithm", algo, where, numeric),
            canonical("protocol", proto, where, numeric),
        )
        size = int(nbytes) * (p if not numeric and op in PER_RANK_COUNT else 1)
        seen.setdefault(size, set()).add(ran)
    out: dict[int, tuple[str | None, str | None, list[str]]] = {}
    mixed = sorted(size for size, pairs in seen.items() if len(pairs) > 1)
    if mixed:
        notes.append(
            f"{path}:{start}: the tuning lines name more than one algorithm/protocol at "
            f"{len(mixed)} size(s) ({', '.join(map(str, mixed[:4]))} B...): left unstated there"
        )
    against: dict[str, list[int]] = {}
    for size in [-1, *seen]:
        one = next(iter(seen[size])) if size in seen and len(seen[size]) == 1 else None
        said: tuple[str | None, ...] = one or (None, None)
        pair: list[str | None] = []
        forced = []
        for i, kind in enumerate(("algorithm", "protocol")):
            pin = pins.get(kind)
            if pin is not None and said[i] not in (None, pin):
                against.setdefault(kind, []).append(size)
                pin = None
            pair.append(said[i] or pin)
            if pin is not None:
                forced.append(kind)
        out[size] = (pair[0], pair[1], forced)
    for kind, sizes in against.items():
        notes.append(
            f"{path}:{start}: the log's {kind} setting pins {pins[kind]} but its tuning "
            f"lines name another at {len(sizes)} size(s) ({sizes[0]} B...): there the tuning "
            "line's is kept, not filed as forced"
        )
    return out
