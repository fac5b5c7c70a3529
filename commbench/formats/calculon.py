"""Calculon system-file network tiers from a calibration.

Calculon (calculon/network.py) prices an op as latency + S * scalar * (1 + offset / p) /
(bandwidth * 1e9 * efficiency), ops given as [scalar, offset]: the ring byte factors are
all_reduce [2, -1] = 2(p-1)/p, reduce_scatter and all_gather [1, -1] = (p-1)/p, p2p [1, null].
With bandwidth = the fitted bus bandwidth (GB/s, 1e9) and efficiency 1.0 this is exactly the
nccl-tests busbw convention. Each tier needs bandwidth, efficiency, size, latency (seconds),
ops, must_be_filled and processor_usage.
"""

from __future__ import annotations

import json
from pathlib import Path

from commbench.calibration import Calibration
from commbench.errors import UsageError
from commbench.formats.exportbase import Tier, not_expressed

RING_OPS = {
    "p2p": [1.0, None],
    "reduce_scatter": [1.0, -1],
    "all_gather": [1.0, -1],
    "all_reduce": [2.0, -1],
}


def network(t: Tier, size: int) -> dict:
    return {
        "bandwidth": t.busbw_Bps / 1e9,
        "efficiency": 1.0,
        "size": size,
        "latency": t.alpha_s,
        "ops": RING_OPS,
        "must_be_filled": False,
        "processor_usage": 0.0,
    }


def export(cal: Calibration, tiers: list[Tier], base: Path | None = None) -> tuple[str, list[str]]:
    """(JSON text, notes). Tier sizes: intra = its NPUs; inter = all NPUs (intra x inter)."""
    nets, total = [], 1
    for t in tiers:
        total *= t.npus
        nets.append(network(t, t.npus if t is tiers[0] else total))
    doc: dict = {"networks": nets}
    if base is not None:
        try:
            doc = json.loads(Path(base).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise UsageError(f"--base {base}: not a readable Calculon system JSON ({e})") from None
        if not isinstance(doc, dict):
            raise UsageError(f"--base {base}: a Calculon system file is a JSON object")
        doc["networks"] = nets
    notes = not_expressed(cal, tiers)
    notes.append(
        "latency is the fitted per-step alpha; Calculon charges it once per op, while the "
        "ring model pays it (p-1) times (2(p-1) for all-reduce)"
    )
    notes.append("processor_usage 0.0 and must_be_filled false are not measured by commbench")
    if base is None:
        notes.append(
            "wrote only the 'networks' list: merge it into a Calculon system file (or pass "
            "--base SYSTEM.json to fill one in)"
        )
    return json.dumps(doc, indent=2) + "\n", notes
