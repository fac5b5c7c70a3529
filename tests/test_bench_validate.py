"""bench/validate_accuracy.py's step table, pure: the sweep's time at a step's S (measured, or
log-log between the two measured sizes around it) and each step's per-op times, medians over
the rounds, beside it. Measuring is the benchmark's job, not a test's."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def val():
    sys.path.insert(0, str(REPO / "bench"))
    path = REPO / "bench" / "validate_accuracy.py"
    spec = importlib.util.spec_from_file_location("validate_accuracy", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sweep_time_is_measured_or_a_power_law_between_neighbours(val):
    series = {1 << 20: 1e-4, 4 << 20: 1.6e-3}  # t = c S^2 between them
    assert val.sweep_at(series, 1 << 20) == 1e-4
    assert val.sweep_at(series, 2 << 20) == pytest.approx(1e-4 * 2**2)
    assert val.sweep_at(series, 3 << 20) == pytest.approx(1e-4 * 3**2)
    assert val.sweep_at(series, 8 << 20) is None  # past the sweep: no value made up
    assert val.sweep_at(series, 1 << 10) is None
    assert val.sweep_at(None, 1 << 20) is None


def _row(point: int, measured_s: float, predicted_s: float, repeat: float) -> dict:
    step = {"index": 0, "op": "allgather", "label": "params", "group_size": 2,
            "link_class": "intra", "bytes": 2 << 20, "repeat": repeat,
            "measured_s": measured_s, "predicted_s": predicted_s}  # fmt: skip
    return {"pattern": "zero", "run": "zero", "point": point, "config": "tp1-cp1-dp2-pp1",
            "options": "", "steps": [step]}  # fmt: skip


def test_step_table_gives_per_op_medians_over_rounds_beside_the_sweep(val):
    rows = [_row(1, 0.3, 0.4, 100), _row(1, 0.1, 0.4, 100), _row(1, 0.2, 0.4, 100),
            _row(2, 0.5, 0.5, 10)]  # fmt: skip
    sweep = {("allgather", 2, "intra"): {1 << 20: 1e-3, 4 << 20: 4e-3}}  # t = c S
    first, second = val.step_table(rows, sweep)
    assert first["point"] == 1 and second["point"] == 2  # points stay apart
    assert first["measured_s"] == pytest.approx(2e-3)  # median of 3, 1, 2 ms per op
    assert first["predicted_s"] == pytest.approx(4e-3)
    assert first["sweep_s"] == pytest.approx(2e-3)
    assert first["spread"] == pytest.approx(1.0)  # median of 3/1, 3/2, 2/1, less 1
    assert second["measured_s"] == pytest.approx(0.05) and second["spread"] is None
