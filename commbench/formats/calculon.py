"""Calculon system file with commbench's network tiers, from a calibration and a base system.

Calculon (calculon/network.py) prices an op as latency + S * scalar * (1 + offset / p) /
(bandwidth * 1e9 * efficiency), ops given as [scalar, offset]: the ring byte factors are
all_reduce [2, -1] = 2(p-1)/p, reduce_scatter and all_gather [1, -1] = (p-1)/p, p2p [1, null].
With bandwidth = the fitted bus bandwidth (GB/s, 1e9) and efficiency 1.0 this is exactly the
nccl-tests busbw convention. Each op's [scalar, offset] comes from the link's best model
(`commbench.ops` cost B(p)); a model whose B(p) is not of that form (tree: ceil(log2 p)) is
written exact at the tier's size. Each tier needs bandwidth, efficiency, size, latency
(seconds), ops, must_be_filled and processor_usage. A system file also needs the processor,
memory and compute that commbench does not measure, so the tiers fill in a base system file
(Calculon's systems/*.json); the base's tiers beyond the exported ones are kept.
"""

from __future__ import annotations

import json
from pathlib import Path

from commbench.calibration import Calibration
from commbench.calibration.costmodels import coefficients
from commbench.errors import UsageError
from commbench.formats.exportbase import Tier, not_expressed
from commbench.textfile import read_json

# Calculon's op names -> commbench's
OPS = {
    "p2p": "sendrecv",
    "reduce_scatter": "reduce_scatter",
    "all_gather": "allgather",
    "all_reduce": "allreduce",
}
NETWORK_KEYS = ("bandwidth", "efficiency", "size", "latency", "ops", "must_be_filled",
                "processor_usage")  # fmt: skip


def op_factors(model: str, size: int) -> tuple[dict[str, list], list[str]]:
    """[scalar, offset] per Calculon op so that scalar * (1 + offset/p) = B(p) of `model`,
    and the ops where that holds only at p = size (a B(p) Calculon's form cannot follow)."""
    ops: dict[str, list] = {}
    approx = []
    for name, op in OPS.items():
        if name == "p2p":
            ops[name] = [coefficients(model, op, 2)[1], None]
            continue
        b1, b2 = (coefficients(model, op, p)[1] for p in (size, 2 * size))
        scalar = 2 * b2 - b1  # b(p) = s + s o / p: s = 2 b(2n) - b(n)
        if scalar > 0:
            offset = (b1 - scalar) * size / scalar
            probe = [coefficients(model, op, p)[1] for p in (2, 3, 5, 8)]
            if all(abs(scalar * (1 + offset / p) - b) < 1e-9 for p, b in zip((2, 3, 5, 8), probe)):
                ops[name] = [scalar, round(offset, 12)]
                continue
        ops[name] = [b1, 0]
        approx.append(name)
    return ops, approx


def network(t: Tier, size: int) -> tuple[dict, list[str]]:
    ops, approx = op_factors(t.model, t.npus)
    return {
        "bandwidth": t.busbw_Bps / 1e9,
        "efficiency": 1.0,
        "size": size,
        "latency": t.alpha_s,
        "ops": ops,
        "must_be_filled": False,
        "processor_usage": 0.0,
    }, approx


def read_base(base: Path) -> dict:
    """A Calculon system file: a JSON object with a 'networks' list."""
    doc = read_json(base, "--base")
    if not isinstance(doc, dict) or not isinstance(doc.get("networks"), list):
        raise UsageError(f"--base {base}: a Calculon system file is a JSON object with 'networks'")
    return doc


def export(cal: Calibration, tiers: list[Tier], base: dict) -> tuple[str, list[str]]:
    """(JSON text, notes). Tier sizes: intra = its NPUs; inter = all NPUs (intra x inter); the
    base's networks after the exported ones stay (Calculon's pipeline/data-parallel tiers
    index into them), each widened to at least the exported system."""
    nets, total, notes = [], 1, not_expressed(cal, tiers)
    for i, t in enumerate(tiers):
        total *= t.npus
        net, approx = network(t, t.npus if i == 0 else total)
        nets.append(net)
        a = [round(coefficients(t.model, OPS[o], t.npus)[0]) for o in ("all_reduce", "all_gather")]
        notes.append(
            f"{t.link_class}: latency is the fitted per-step alpha; Calculon charges it once "
            f"per op, the {t.model} model {a[0]} times for an all-reduce and {a[1]} for an "
            f"all-gather of {t.npus}"
        )
        if approx:
            notes.append(
                f"{t.link_class}: the {t.model} model's byte factor of {', '.join(approx)} is "
                f"not scalar x (1 + offset/p): written exact at p = {t.npus} only"
            )
    kept = base["networks"][len(nets) :]
    for net in kept:
        if isinstance(net, dict) and isinstance(net.get("size"), int) and net["size"] < total:
            net["size"] = total
    if kept:
        notes.append(
            f"kept the base's {len(kept)} network tier(s) after the exported {len(nets)} "
            "(not measured by commbench)"
        )
    doc = {**base, "networks": nets + kept}
    notes.append("processor_usage 0.0 and must_be_filled false are not measured by commbench")
    return json.dumps(doc, indent=2) + "\n", notes
