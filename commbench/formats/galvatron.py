"""Galvatron hardware profiles from a calibration: the all-reduce and p2p bandwidth files its
search engine reads (PKU-DAIR/Hetu-Galvatron galvatron/utils/config_utils.py
read_allreduce_bandwidth_config / read_p2p_bandwidth_config; written by
galvatron/profile_hardware/profile_allreduce.py and profile_p2p.py).

- `allreduce_bandwidth_{N}nodes_{G}gpus_per_node.json`: `allreduce_size_{p}_consec_{c}` for p =
  W, W/2, ..., 2 (W = N x G), consec 1 = contiguous ranks, 0 = stride W/p (only consec 1 at
  p = W). The value is Galvatron's message size 2(p-1)/p x S in MB (2^20 B) over the time in ms:
  the nccl-tests *bus* bandwidth in MB/ms.
- `p2p_bandwidth_{N}nodes_{G}gpus_per_node.json`: `pp_size_{p}` for p = 2, 4, ... W: S in MB over
  the time of a send/recv between stages W/p ranks apart, all stages at once, so the slowest hop
  (inter once the pipeline spans nodes) sets it (algorithm = bus bandwidth for p2p).

Times are the calibration's prediction for an S-byte message (`--message-size`), as `plan`
prices them: the per-op series where measured, else the link model.
"""

from __future__ import annotations

import json
from collections.abc import Callable

MB = float(1 << 20)  # Galvatron's MB_TO_BYTES

Price = Callable[[str, int, int, str], float]  # (op, S, p, link class) -> seconds


def link_of(ranks: list[int], per_node: int) -> str:
    return "intra" if len({r // per_node for r in ranks}) == 1 else "inter"


def powers(world: int) -> list[int]:
    out, p = [], 2
    while p <= world:
        if world % p == 0:
            out.append(p)
        p *= 2
    return out


def allreduce_profile(nodes: int, per_node: int, nbytes: int, price: Price) -> dict[str, float]:
    """allreduce_size_{p}_consec_{c}: bus bandwidth in MB/ms for each group Galvatron profiles."""
    world = nodes * per_node
    out: dict[str, float] = {}
    for p in sorted(powers(world), reverse=True):
        for consec in (1, 0) if p < world else (1,):
            ranks = list(range(p)) if consec else list(range(0, world, world // p))
            seconds = price("allreduce", nbytes, p, link_of(ranks, per_node))
            out[f"allreduce_size_{p}_consec_{consec}"] = (
                2 * (p - 1) / p * nbytes / MB / (seconds * 1e3)
            )
    return out


def p2p_profile(nodes: int, per_node: int, nbytes: int, price: Price) -> dict[str, float]:
    """pp_size_{p}: MB/ms of one stage-to-stage message on the pipeline's slowest hop."""
    world = nodes * per_node
    out = {}
    for p in powers(world):
        link = link_of(list(range(0, world, world // p)), per_node)  # its slowest hop
        out[f"pp_size_{p}"] = nbytes / MB / (price("sendrecv", nbytes, 2, link) * 1e3)
    return out


def export(nodes: int, per_node: int, nbytes: int, price: Price) -> dict[str, str]:
    """{file name: JSON text} for the two profiles."""
    tail = f"{nodes}nodes_{per_node}gpus_per_node.json"
    return {
        f"allreduce_bandwidth_{tail}": json.dumps(
            allreduce_profile(nodes, per_node, nbytes, price), indent=4
        )
        + "\n",
        f"p2p_bandwidth_{tail}": json.dumps(p2p_profile(nodes, per_node, nbytes, price), indent=4)
        + "\n",
    }
