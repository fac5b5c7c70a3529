"""Other tools' formats: importers of nccl-tests, OSU and IMB logs; exports for ASTRA-sim,
Calculon, SimAI, Galvatron and llm-analysis.

Importers turn a log into records with the fields `commbench run` writes (kind "collective")
plus a `source` block (tool, file, line, the tool's own columns), so `commbench fit` can fit
what users already measured. Exporters turn a calibration (and, for SimAI, a config's step
Programs) into the inputs those simulators and planners read.
"""

from __future__ import annotations

IMPORTERS = {
    "nccl-tests": "commbench.formats.nccl_tests",
    "osu": "commbench.formats.osu",
    "imb": "commbench.formats.imb",
}
