"""Calibration JSON: the versioned alpha-beta model planners call, validated on load.

    cal = commbench.calibration.load("calibration.json")
    seconds = cal.predict("allreduce", 32 << 20, 8, "intra", dtype="bfloat16")

document.py reads, validates and writes the file (its schema ships in commbench/schemas);
predict.py answers predict()/explain() from it.
"""

from commbench.calibration.document import KINDS, SCHEMA_VERSION, load, save, schema, validate
from commbench.calibration.predict import (
    PLACEMENT_PREFERENCE,
    TIMING_PREFERENCE,
    Calibration,
    Line,
    LinkModel,
    Prediction,
    SeriesModel,
)

__all__ = [
    "KINDS",
    "PLACEMENT_PREFERENCE",
    "SCHEMA_VERSION",
    "TIMING_PREFERENCE",
    "Calibration",
    "Line",
    "LinkModel",
    "Prediction",
    "SeriesModel",
    "load",
    "save",
    "schema",
    "validate",
]
