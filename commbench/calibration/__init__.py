"""Calibration JSON: the versioned alpha-beta model planners call, validated on load.

    cal = commbench.calibration.load("calibration.json")
    seconds = cal.predict("allreduce", 32 << 20, 8, "intra", dtype="bfloat16")

document.py reads, validates and writes the file (its schema ships in commbench/schemas);
series_key.py is the key each series is filed under; lines.py evaluates a series' segments
and a link's model; choice.py picks the series (preferences, NCCL regime); predict.py answers
predict()/explain() from them.
"""

from commbench.calibration.choice import PLACEMENT_PREFERENCE, TIMING_PREFERENCE
from commbench.calibration.document import KINDS, SCHEMA_VERSION, load, save, schema, validate
from commbench.calibration.lines import Line, LinkModel, SeriesModel
from commbench.calibration.predict import Calibration, Prediction

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
