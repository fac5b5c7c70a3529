"""ASTRA-sim analytical network backend input (network.yml) from a calibration.

Format (astra-network-analytical, NetworkParser): `topology` (Ring, FullyConnected or Switch per
dimension), `npus_count`, `bandwidth` in GB/s and `latency` in ns, one value per dimension. The
backend converts bandwidth with 1 GB = 2^30 B (bw_GBps_to_Bpns), so commbench writes GiB/s.
A Switch dimension counts two hops (NPU -> switch -> NPU) per message, so its per-hop latency
is half the fitted alpha. One dimension per link class: intra (inside a host), then inter.
"""

from __future__ import annotations

from commbench.calibration import Calibration
from commbench.formats.exportbase import Tier, not_expressed

TOPOLOGY_OF_MODEL = {
    "ring": "Ring",
    "pairwise": "FullyConnected",
    "tree": "Switch",
    "rabenseifner": "Switch",
}
TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
GIB = float(1 << 30)


def dimension(t: Tier, topology: str) -> dict:
    """One network dimension: per-link GiB/s and per-hop ns."""
    bw = t.busbw_Bps / GIB
    if topology == "FullyConnected":
        bw /= t.npus - 1  # the measured bus bandwidth is spread over p-1 direct links
    hops = 2 if topology == "Switch" else 1
    return {
        "topology": topology,
        "npus_count": t.npus,
        "bandwidth": bw,
        "latency": t.alpha_s * 1e9 / hops,
    }


def export(cal: Calibration, tiers: list[Tier], topologies: dict) -> tuple[str, list[str]]:
    """(network.yml text, notes on what could not be expressed)."""
    dims = [dimension(t, topologies.get(t.link_class) or TOPOLOGY_OF_MODEL[t.model]) for t in tiers]
    notes = not_expressed(cal, tiers)
    notes.append(
        "bandwidth is the fitted bus bandwidth in GiB/s (ASTRA-sim reads GB as 2^30 B); "
        "FullyConnected splits it over npus-1 links; Switch latency is half the fitted alpha "
        "(two hops per message)"
    )
    lines = [
        "# ASTRA-sim analytical network, written by commbench export astra-sim",
        f"# from {cal.source} ({cal.kind} calibration)",
        "# dimensions: " + ", ".join(f"{t.link_class} ({t.model} model)" for t in tiers),
    ]
    lines += [f"# not expressed: {n}" for n in notes]
    lines += [
        f"topology: [ {', '.join(d['topology'] for d in dims)} ]",
        f"npus_count: [ {', '.join(str(d['npus_count']) for d in dims)} ]",
        f"bandwidth: [ {', '.join(format(d['bandwidth'], '.6g') for d in dims)} ]"
        "  # GB/s (2^30 B/s)",
        f"latency: [ {', '.join(format(d['latency'], '.6g') for d in dims)} ]  # ns",
    ]
    return "\n".join(lines) + "\n", notes
