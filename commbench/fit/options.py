"""The knobs of the series fit (segments, robust weights, bootstrap), shared by every stage
of it: the weighted least squares, the segment search and the diagnostics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class FitOptions:
    """Knobs of the series fit; the defaults are what `commbench fit` uses."""

    min_sizes: int = 3  # distinct message sizes a segment (and a series) needs
    max_segments: int = 5
    # segments above the first may be secants (negative intercept) of a cache transition, where
    # the cost per byte rises with S (fit/segments.py); the link table's regimes only
    secants: bool = False
    penalty: float = 2.0  # multiplies the BIC parameter term
    noise_floor: float = 1e-3  # relative error below which extra segments buy nothing
    robust: bool = True
    huber_k: float = 1.345
    tukey_c: float = 4.685
    min_scale: float = 0.005  # floor of the robust residual scale (relative)
    bootstrap: int = 200
    seed: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)
