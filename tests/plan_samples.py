"""A small measured-kind calibration for planner tests, fitted by the real fitter from SYNTHETIC
points: every time is a stated ring-model line (alpha, bus bandwidth) times 1 + 1% Gaussian
noise (seeded). Nothing here was measured; the numbers only exercise the pricing rules.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from commbench.calibration import Calibration
from commbench.calibration.series_key import SeriesKey
from commbench.fit import calibrate
from commbench.fit.collect import Collected, SeriesData
from commbench.ops import bus_factor
from commbench.plan import Config, PlanRequest
from commbench.traffic import presets as models

ALPHA_S = 20e-6  # stated latency per op (synthetic)
BUSBW = 2e9  # stated bus bandwidth, B/s (synthetic)
SIZES = [1 << k for k in range(10, 23, 2)]  # 1 KiB .. 4 MiB


def stated_time(op: str, nbytes: float, p: int) -> float:
    """The stated line the synthetic points are drawn around."""
    return ALPHA_S + nbytes * bus_factor(op, p) / BUSBW


def synthetic_calibration(
    ops=("allreduce", "allgather", "reduce_scatter", "alltoall", "sendrecv"),
    groups=(2, 4),
    link_class="intra",
    dtype="float32",
) -> Calibration:
    """Fit series of `ops` x `groups` on one link class from stated lines plus 1% noise."""
    rng = np.random.default_rng(7)
    series = {}
    for op in ops:
        for p in groups:
            key = SeriesKey("mpi", op, link_class, p, dtype)
            data = SeriesData(key)
            for s in SIZES:
                for _ in range(3):
                    data.x.append(float(s))
                    data.t.append(stated_time(op, s, p) * (1 + 0.01 * rng.standard_normal()))
            data.runs.add("synthetic")
            series[key] = data
    runs = [
        {
            "run_id": "synthetic",
            "path": "synthetic",
            "status": "complete",
            "partial": False,
            "records": sum(len(d.x) for d in series.values()),
            "records_used": sum(len(d.x) for d in series.values()),
        }
    ]
    doc, _, _ = calibrate.build(Collected(series, Counter(), runs))
    return Calibration(doc, "synthetic-calibration")


def config(tp=1, cp=1, ep=1, dp=1, pp=1, b=1, m=1, z=0) -> Config:
    """A planner Config by its degrees, micro-batch size b, micro-batches m and ZeRO stage z."""
    return Config(tp=tp, cp=cp, ep=ep, dp=dp, pp=pp, micro_batch=b, micro_batches=m, zero_stage=z)


def req(model="llama-7b", gpus=8, **kw) -> PlanRequest:
    """A PlanRequest for a preset, 8 GPUs a node and H100's dense bf16 peak by default."""
    kw.setdefault("gpus_per_node", 8)
    kw.setdefault("peak_tflops", 989.4)
    return PlanRequest(model=models.get_model(model), gpus=gpus, **kw)
