"""bench/gpu_check.py (`make gpu-check`) off a GPU: its flags, its summary table, its exit
statuses (2 without a usable GPU, 1 when any check fails)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import REPO, job_env

spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
assert spec is not None and spec.loader is not None
gpu_check = importlib.util.module_from_spec(spec)
sys.modules["gpu_check"] = gpu_check  # dataclasses look their module up
spec.loader.exec_module(gpu_check)
Check = gpu_check.Check


def test_summary_table_has_one_row_per_check_and_a_count():
    table = gpu_check.summary(
        [Check("versions", True, "torch 2.5"), Check("2 ranks on 1 GPU refused", False, "rc=0")]
    )
    lines = table.splitlines()
    assert lines[0].split() == ["check", "result", "detail"]
    assert (
        lines[2].startswith("versions ") and " PASS " in lines[2] and lines[2].endswith("torch 2.5")
    )
    assert " FAIL " in lines[3] and lines[3].endswith("rc=0")
    assert lines[-1] == "1 of 2 checks passed"
    assert len({line.index("result") for line in lines[:1]} | {lines[2].index("PASS")}) == 1


def test_a_job_passes_only_clean_complete_and_exact():
    good = [{"wrong": 0}] * 3
    assert gpu_check.ran_clean("x", 0, "", good, 3).ok
    assert not gpu_check.ran_clean("x", 0, "", good[:2], 3).ok  # records missing
    assert not gpu_check.ran_clean("x", 0, "", [{"wrong": 2}], 1).ok
    failed = gpu_check.ran_clean("x", 2, "commbench: error: no GPU\n", good, 3)
    assert not failed.ok and failed.detail == "rc=2: commbench: error: no GPU"


def test_no_usable_gpu_exits_2_with_the_reason(capsys):
    assert gpu_check.main([], count=lambda: (0, "torch 2.13.0+cpu is a CPU build")) == 2
    assert "no usable GPU: torch 2.13.0+cpu is a CPU build" in capsys.readouterr().err


def test_bad_flags_are_usage_errors():
    with pytest.raises(SystemExit) as e:
        gpu_check.main(["--gpus", "0"], count=lambda: (1, ""))
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        gpu_check.main(["--frobnicate"])
    assert e.value.code == 2


def test_failing_checks_exit_1(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(
        gpu_check, "one_gpu_checks", lambda r: [Check("a", True, ""), Check("b", False, "")]
    )
    assert gpu_check.main(["--keep", str(tmp_path)], count=lambda: (1, "")) == 1
    assert "1 of 2 checks passed" in capsys.readouterr().out
    monkeypatch.setattr(gpu_check, "one_gpu_checks", lambda r: [Check("a", True, "")])
    assert gpu_check.main(["--keep", str(tmp_path)], count=lambda: (1, "")) == 0


def test_the_script_on_this_host():
    """Here (no GPU, or torch without CUDA) the real script says why and exits 2; on a GPU
    host it would run the checks (that is `make gpu-check`, not a test)."""
    n, why = gpu_check.gpu_count()
    if n:
        pytest.skip("a GPU is usable here: run `make gpu-check`")
    p = subprocess.run(
        [sys.executable, "bench/gpu_check.py"], capture_output=True, text=True, cwd=REPO,
        env=job_env(), timeout=120,
    )  # fmt: skip
    assert p.returncode == 2 and f"gpu-check: no usable GPU: {why}" in p.stderr
