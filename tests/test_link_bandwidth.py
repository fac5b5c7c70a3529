"""A link whose points lie past their latency regime always gets a bandwidth term; where no
series has one, `fit` says why (issue 29, item 5: `export astra-sim` refused a link fitted
with beta = 0 from noisy points on a loaded 2-core box). Synthetic points, stated here."""

from __future__ import annotations

import numpy as np

from commbench.calibration.costmodels import coefficients
from commbench.calibration.lines import Line
from commbench.calibration.series_key import SeriesKey
from commbench.fit.links import fit_link_table

KEY = SeriesKey("mpi", "allreduce", "intra", 4, "float32", "pipelined")
X = np.array([float(8 << k) for k in range(0, 18, 2)])  # 8 B .. 512 KiB


def falling_times() -> np.ndarray:
    """50 us falling 1% a size: what noise on a loaded box can print; a log fit of
    alpha A + beta B S through them puts beta at its bound, 0."""
    return 50e-6 * 0.99 ** np.arange(len(X))


def link(segs: list[Line]):
    entries, skipped = fit_link_table([(KEY, X, falling_times(), np.ones(len(X)), segs)])
    assert not skipped
    return entries[0]


def test_points_past_the_latency_regime_get_the_series_bandwidth():
    """The series' own fit found a bandwidth regime above 64 KiB (10 GB/s): the shared line
    takes it (beta / B of the model), never 0."""
    segs = [Line(8, 32768, 50e-6, 0.0), Line(131072, 524288, 40e-6, 1e-10)]
    entry = link(segs)
    for model, fit in entry.models.items():
        b = coefficients(model, "allreduce", 4, 524288)[1]
        assert fit.beta_s_per_byte > 0, model
        assert abs(fit.beta_s_per_byte - 1e-10 / b) < 1e-3 * 1e-10 / b, model
    assert "no bandwidth term" not in (entry.note or "")


def test_no_bandwidth_regime_anywhere_is_said_with_its_reason():
    entry = link([Line(8, 524288, 50e-6, 0.0)])
    assert entry.models[entry.best_model].beta_s_per_byte == 0
    assert "no bandwidth term (beta = 0)" in entry.note
    assert "measure larger sizes" in entry.note
