"""The key a calibration files each fitted series under: backend, op, link class, group size,
dtype, timing mode, buffer placement and buffers (pages, off-cache) (the fitter groups records
by it, predict looks it up)."""

from __future__ import annotations

from dataclasses import dataclass

KEY_FIELDS = (
    "backend",
    "op",
    "link_class",
    "group_size",
    "dtype",
    "timing",
    "placement",
    "buffers",
)
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

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in KEY_FIELDS}

    @classmethod
    def from_dict(cls, d: dict) -> SeriesKey:
        return cls(**{k: d[k] for k in KEY_FIELDS if k in d})

    def label(self) -> str:
        extra = "" if self.placement == DEFAULT_PLACEMENT else f" {self.placement}"
        extra += "" if self.buffers == DEFAULT_BUFFERS else f" {self.buffers}"
        return (
            f"{self.op} p={self.group_size} {self.link_class} {self.dtype} {self.backend} "
            f"{self.timing}{extra}"
        )
