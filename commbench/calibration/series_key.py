"""The key a calibration files each fitted series under: backend, op, link class, group size,
dtype, timing mode, buffer placement, buffers (pages, off-cache) and the NCCL regime the run
pinned (algorithm, protocol: "" where NCCL chose, or nothing says) (the fitter groups records
by it, predict looks it up)."""

from __future__ import annotations

from dataclasses import dataclass

from commbench.errors import UsageError
from commbench.nccl_names import label as regime_label

KEY_FIELDS = (
    "backend",
    "op",
    "link_class",
    "group_size",
    "dtype",
    "timing",
    "placement",
    "buffers",
    "algorithm",
    "protocol",
)
# written only when set, so a calibration without a pinned regime reads as it always did
REGIME_FIELDS = ("algorithm", "protocol")
DEFAULT_TIMING = "per-iteration"
DEFAULT_PLACEMENT = "out-of-place"
DEFAULT_BUFFERS = "hugepage"  # records and calibrations from before `buffers` was recorded


@dataclass(frozen=True, order=True)
class SeriesKey:
    """What one fitted line-set describes."""

    backend: str
    op: str
    link_class: str
    group_size: int
    dtype: str
    timing: str = DEFAULT_TIMING
    placement: str = DEFAULT_PLACEMENT
    buffers: str = DEFAULT_BUFFERS
    # NCCL's algorithm / protocol the run pinned (NCCL_ALGO=Ring: RING); "": NCCL's own choice
    algorithm: str = ""
    protocol: str = ""

    def as_dict(self) -> dict:
        return {
            k: getattr(self, k) for k in KEY_FIELDS if k not in REGIME_FIELDS or getattr(self, k)
        }

    @classmethod
    def from_dict(cls, d: dict) -> SeriesKey:
        return cls(**{k: d[k] for k in KEY_FIELDS if k in d})

    @property
    def regime(self) -> str:
        """`RING/SIMPLE`, `RING/*` (protocol NCCL's choice); "" for NCCL's own choice."""
        return regime_label(self.algorithm, self.protocol)

    def label(self) -> str:
        extra = "" if self.placement == DEFAULT_PLACEMENT else f" {self.placement}"
        extra += "" if self.buffers == DEFAULT_BUFFERS else f" {self.buffers}"
        extra += f" {self.regime}" if self.regime else ""
        return (
            f"{self.op} p={self.group_size} {self.link_class} {self.dtype} {self.backend} "
            f"{self.timing}{extra}"
        )


def regime_of(rec: dict, where: str) -> tuple[str, str]:
    """The (algorithm, protocol) a record's series is keyed by: those its run pinned (`forced`,
    an import's NCCL_ALGO / NCCL_PROTO), "" for what NCCL chose, however well the log says
    what that was: NCCL's choice is one curve, cut into regimes by size, not several."""
    forced = rec.get("forced") or ()
    if not isinstance(forced, (list, tuple)) or not all(f in REGIME_FIELDS for f in forced):
        raise UsageError(f"{where}: field forced must list algorithm/protocol, got {forced!r}")
    out = []
    for name in REGIME_FIELDS:
        value = rec.get(name) if name in forced else ""
        if not isinstance(value, str) or (name in forced and not value):
            raise UsageError(f"{where}: field {name} is forced but {value!r}")
        out.append(value)
    return out[0], out[1]
