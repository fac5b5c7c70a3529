"""llm-analysis GPU config with commbench's link numbers (cli99/llm-analysis
llm_analysis/config.py GPUConfig; its gpu_configs/*.json are the base).

llm-analysis prices a TP all-reduce as max(S x 2(p-1)/p / (intra_node_bandwidth x 1e9),
intra_node_min_message_latency) and a DP/ZeRO all-gather as S (p-1)/p over the intra or inter
bandwidth (analysis.py): the bandwidths are nccl-tests bus bandwidths in GB/s (1e9 B). commbench
writes the link table's fitted bus bandwidths there and, as the minimum message latency, the
link model's latency term of an all-reduce over one node. Memory, HBM bandwidth and peak
TFLOPS come from the base config (not measured by commbench).
"""

from __future__ import annotations

import json
from pathlib import Path

from commbench.calibration.costmodels import coefficients
from commbench.errors import UsageError
from commbench.formats.exportbase import Tier
from commbench.textfile import read_json

# the fields GPUConfig requires
FIELDS = ("name", "mem_per_GPU_in_GB", "hbm_bandwidth_in_GB_per_sec",
          "intra_node_bandwidth_in_GB_per_sec", "intra_node_min_message_latency",
          "peak_fp16_TFLOPS")  # fmt: skip


def read_base(base: Path) -> dict:
    doc = read_json(base, "--base")
    missing = [f for f in FIELDS if not isinstance(doc, dict) or f not in doc]
    if missing:
        raise UsageError(f"--base {base}: an llm-analysis GPU config needs {', '.join(missing)}")
    return doc


def export(tiers: list[Tier], base: dict, name: str) -> tuple[str, list[str]]:
    """(GPU config JSON, notes): intra/inter bandwidth and the intra latency replaced."""
    by = {t.link_class: t for t in tiers}
    if "intra" not in by:
        raise UsageError("llm-analysis needs an intra link in the link table")
    intra = by["intra"]
    doc = {**base, "name": name}
    doc["intra_node_bandwidth_in_GB_per_sec"] = intra.busbw_Bps / 1e9
    a, _ = coefficients(intra.model, "allreduce", intra.npus)
    doc["intra_node_min_message_latency"] = intra.alpha_s * a
    notes = [
        f"intra_node_min_message_latency: the {intra.model} model's all-reduce latency over "
        f"{intra.npus} NPUs ({a:g} x alpha); llm-analysis has no inter-node latency field",
        "mem_per_GPU_in_GB, hbm_bandwidth_in_GB_per_sec and peak TFLOPS come from the base",
    ]
    if "inter" in by:
        doc["inter_node_bandwidth_in_GB_per_sec"] = by["inter"].busbw_Bps / 1e9
    else:
        notes.append("no inter link measured: inter_node_bandwidth_in_GB_per_sec from the base")
    return json.dumps(doc, indent=4) + "\n", notes
