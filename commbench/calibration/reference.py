"""The shipped reference calibration: an H100 SXM cluster (NVSwitch inside a node, one 400 Gb/s
InfiniBand NDR NIC per GPU between nodes) stated from published anchor numbers, for planning
before anything has been measured. It is NOT a measurement (kind "reference").

    python -m commbench.calibration.reference -o commbench/calibration/reference-h100-ib400.json   # regenerate
    python -m commbench.calibration.reference --check                                       # shipped == built

Every number below is an anchor with its source; the file is derived from them here, not typed.
The calibration has no per-size series: its link table *is* the statement, one (alpha, beta) per
link class under the ring model (Thakur, Rabenseifner & Gropp 2005; NCCL's default algorithm),
which Calibration.predict uses for every op and group size without `extrapolate` (see
calibration.py). beta = 1 / busbw, so an all-reduce of S bytes on p GPUs costs
2(p-1) alpha + 2(p-1)/p S / busbw, exactly the nccl-tests bus-bandwidth convention.

Known simplifications (said in the file's notes): NVLink SHARP all-reduce (~480 GB/s busbw on 8
GPUs) is faster than the ring line used here; an inter-node group is priced at one NIC per GPU
(a group with several GPUs per node can use several NICs and do better); latency is one alpha
per message round, fitted to NCCL's own tuning model at 8 GPUs.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from commbench.calibration import SCHEMA_VERSION, validate

FILENAME = "reference-h100-ib400.json"
CREATED = "2026-11-29"  # when these anchors were collected; fixed so the file is reproducible


@dataclass(frozen=True)
class Anchor:
    """A published number and where it comes from."""

    value: float
    unit: str
    what: str
    source: int  # index into SOURCES


SOURCES = [
    {
        "title": "NVIDIA DGX BasePOD reference architecture: core components (DGX H100: eight "
        "H100 GPUs, four NVSwitch chips, eight single-port ConnectX-7 VPI up to 400 Gb/s "
        "InfiniBand for the compute fabric)",
        "url": "https://docs.nvidia.com/dgx-basepod/reference-architecture-infrastructure-"
        "foundation-enterprise-ai/latest/core-components.html",
    },
    {
        "title": "NVIDIA/nccl-tests issue #212, 'H100 all reduce performance is poor': NVLink 4 "
        "line rate 450 GB/s per direction; with ~20% protocol overhead NCCL reaches ~370 GB/s "
        "bus bandwidth (ring, and every non-all-reduce op); NVLink SHARP all-reduce peaks at "
        "~480 GB/s busbw on 8 GPUs (S. Jeaugey, NVIDIA, 2024)",
        "url": "https://github.com/NVIDIA/nccl-tests/issues/212",
    },
    {
        "title": "NVIDIA/nccl-tests issue #119, 'Evaluation of NCCL test result': 24 GB/s is the "
        "peak NCCL bus bandwidth per 200 Gb/s NIC, 12 GB/s per 100 Gb/s NIC (96% of line "
        "rate); scaled to a 400 Gb/s NDR NIC: 48 GB/s (S. Jeaugey, NVIDIA, 2022)",
        "url": "https://github.com/NVIDIA/nccl-tests/issues/119",
    },
    {
        "title": "NVIDIA NCCL src/graph/tuning.cc: NCCL's own latency model, baseLat Ring/LL "
        "6.6 us per collective, hwLat NVLink Ring/LL 0.6 us per step, hwLat NET Tree/LL 5.0 us "
        "per step (used for inter-node latency when one GPU per node is in the ring)",
        "url": "https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc",
    },
    {
        "title": "NVIDIA H100 Tensor Core GPU datasheet: H100 SXM 80 GB HBM3, BF16 Tensor Core "
        "1,979 TFLOPS with sparsity (989.4 dense), NVLink 900 GB/s (bidirectional)",
        "url": "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
    },
    {
        "title": "NVIDIA/nccl-tests issue #309, 'Acceptable performance of nccl-test on 2 HGX "
        "hosts?': 8 GPU-NIC pairs in one node 480 GB/s all-reduce busbw, 2 nodes 470 GB/s, 4 "
        "nodes 366 GB/s (a check: whole-node groups across nodes do better than one NIC per "
        "GPU, which this reference does not model)",
        "url": "https://github.com/NVIDIA/nccl-tests/issues/309",
    },
    {
        "title": "NVIDIA/nccl issue #1487: nccl-tests send/recv latency between two H100 over "
        "NVLink ~3 us (a check on the intra-node alpha)",
        "url": "https://github.com/NVIDIA/nccl/issues/1487",
    },
]

ANCHORS = {
    "nvlink_busbw": Anchor(370.0, "GB/s", "NCCL ring bus bandwidth over NVLink 4 / NVSwitch", 1),
    "nic_busbw_200g": Anchor(24.0, "GB/s", "NCCL peak bus bandwidth per 200 Gb/s NIC", 2),
    "nic_gbps": Anchor(400.0, "Gb/s", "InfiniBand NDR per GPU (ConnectX-7)", 0),
    "nccl_base_lat_us": Anchor(6.6, "us", "NCCL baseLat Ring/LL per collective", 3),
    "nvlink_hop_lat_us": Anchor(0.6, "us", "NCCL hwLat NVLink Ring/LL per step", 3),
    "net_hop_lat_us": Anchor(5.0, "us", "NCCL hwLat NET Tree/LL per step (1 GPU/node)", 3),
    "gpus_per_node": Anchor(8, "GPUs", "H100 SXM per DGX H100 node", 0),
    "gpu_memory_gb": Anchor(80.0, "GB", "HBM3 per H100 SXM", 4),
    "peak_bf16_tflops": Anchor(989.4, "TFLOP/s", "dense BF16 Tensor Core peak, H100 SXM", 4),
}


def derived() -> dict[str, float]:
    """The link parameters, each a stated formula of the anchors."""
    a = {k: v.value for k, v in ANCHORS.items()}
    ring_steps = 2 * (a["gpus_per_node"] - 1)  # all-reduce rounds of an 8-GPU ring
    # the collective's base latency spread over the rounds of the 8-GPU all-reduce it was tuned on
    base_per_step = a["nccl_base_lat_us"] / ring_steps
    inter_busbw = a["nic_busbw_200g"] * a["nic_gbps"] / 200.0
    return {
        "intra_alpha_s": (a["nvlink_hop_lat_us"] + base_per_step) * 1e-6,
        "intra_busbw_GBps": a["nvlink_busbw"],
        "inter_alpha_s": (a["net_hop_lat_us"] + base_per_step) * 1e-6,
        "inter_busbw_GBps": inter_busbw,
    }


FORMULAS = {
    "intra_alpha_s": "(hwLat NVLink Ring/LL + baseLat Ring/LL / (2 x (8-1))) x 1e-6",
    "intra_busbw_GBps": "NCCL ring busbw over NVLink 4 (370 GB/s)",
    "inter_alpha_s": "(hwLat NET Tree/LL + baseLat Ring/LL / (2 x (8-1))) x 1e-6",
    "inter_busbw_GBps": "24 GB/s per 200 Gb/s NIC x 400/200 = 48 GB/s per GPU",
}


def _link(link_class: str, alpha: float, busbw: float) -> dict:
    beta = 1.0 / (busbw * 1e9)
    return {
        "backend": "nccl",
        "link_class": link_class,
        "timing": "per-iteration",
        "best_model": "ring",
        "ties": [],
        "ops": [],
        "alpha_s": alpha,
        "busbw_GBps": busbw,
        "models": {"ring": {"alpha_s": alpha, "beta_s_per_byte": beta, "busbw_GBps": busbw}},
    }


def build() -> dict:
    """The reference calibration document (validated against the shipped schema)."""
    d = derived()
    a = {k: v.value for k, v in ANCHORS.items()}
    doc = {
        "schema_version": SCHEMA_VERSION,
        "kind": "reference",
        "created": CREATED,
        "generator": "commbench.calibration.reference",
        "provenance": {
            "statement": "Reference values for an H100 SXM cluster (8 GPUs per node on NVSwitch, "
            "one 400 Gb/s InfiniBand NDR NIC per GPU), stated from published anchor numbers. "
            "This is NOT a measurement: measure your cluster (commbench suite collectives, "
            "commbench fit) and plan with that calibration.",
            "sources": SOURCES,
            "anchors": {
                k: {"value": v.value, "unit": v.unit, "what": v.what, "source": v.source}
                for k, v in ANCHORS.items()
            },
            "derived": {k: {"value": d[k], "formula": FORMULAS[k]} for k in d},
        },
        "device": {
            "name": "NVIDIA H100 SXM 80GB",
            "gpus_per_node": int(a["gpus_per_node"]),
            "memory_gb": a["gpu_memory_gb"],
            "peak_bf16_tflops": a["peak_bf16_tflops"],
        },
        "series": [],
        "skipped": [],
        "ignored": {},
        "link_table": [
            _link("intra", d["intra_alpha_s"], d["intra_busbw_GBps"]),
            _link("inter", d["inter_alpha_s"], d["inter_busbw_GBps"]),
        ],
        "link_skipped": [],
        "notes": [
            "kind reference: predictions come from the ring model of each link class for every "
            "op and group size; they are a starting point, not a measurement",
            "NVLink SHARP all-reduce (~480 GB/s busbw on 8 GPUs, source 1) is faster than the "
            "370 GB/s ring line used for every op",
            "an inter-node group is priced at one 400 Gb/s NIC per GPU; groups holding several "
            "GPUs of each node can use several NICs (source 5: 470 GB/s on 2 full nodes)",
            "intra-node send/recv latency is ~3 us in nccl-tests (source 6); the single ring "
            "alpha (~1.1 us per round) understates tiny point-to-point messages",
        ],
    }
    validate(doc, FILENAME)
    return doc


def shipped_path():
    """The reference calibration inside the installed package."""
    return resources.files("commbench.calibration").joinpath(FILENAME)


def render(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m commbench.calibration.reference", description=__doc__
    )
    p.add_argument("-o", "--output", type=Path, help="write the reference calibration here")
    p.add_argument("--check", action="store_true", help="exit 1 if the shipped file is stale")
    args = p.parse_args(argv)
    text = render(build())
    if args.check:
        same = shipped_path().read_text() == text
        print(f"{FILENAME}: {'up to date' if same else 'STALE (regenerate with -o)'}")
        return 0 if same else 1
    if args.output:
        args.output.write_text(text)
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
