"""plan --verify: the pure parts against their formulas (Kendall tau, agreement, the configs
chosen and the bad-input errors) and, under mpirun, a whole verification of the top planned
configs with a calibration measured on the same world."""

from __future__ import annotations

import json
import statistics

import pytest
from plan_samples import synthetic_calibration

from commbench import calibration
from commbench.commands.emulate import command_line
from commbench.errors import UsageError
from commbench.plan import PlanRequest, plan, verify
from commbench.plan.search import Config
from commbench.report.figures.models import verify_ranking
from commbench.report.step_timeline import verifications
from commbench.results.rundir import read_run
from commbench.traffic.presets import parse_model_arg

from conftest import run_mpi, run_single

TINY = "tiny:layers=4,hidden=256,ffn_hidden=512,heads=8,kv_heads=4,vocab=1024,seq_len=256"


def cfg(tp=1, dp=1, pp=1) -> Config:
    return Config(tp=tp, cp=1, ep=1, dp=dp, pp=pp, micro_batch=1, micro_batches=4, zero_stage=0)


def test_kendall_tau_counts_concordant_minus_discordant_pairs():
    assert verify.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert verify.kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    # one adjacent swap among 4: 5 concordant, 1 discordant of 6 pairs
    assert verify.kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)


def test_agreement_top1_error_and_the_axis_missed_most():
    rows = [
        verify.Row(cfg(tp=2, dp=4), {"tp": 1.0, "dp": 1.0}, {"tp": 1.5, "dp": 1.0}),
        verify.Row(cfg(dp=8), {"dp": 3.0}, {"dp": 3.0}),
        verify.Row(cfg(pp=2, dp=4), {"pp": 4.0}, {"pp": 2.8}),
    ]
    ag = verify.agreement(rows)
    assert ag.top1_same  # 2.0 predicted and 2.5 measured are both the smallest
    assert ag.kendall_tau == pytest.approx(1 / 3)  # the last two swap
    assert ag.median_abs_error == pytest.approx(0.2)  # |2/2.5 - 1|, 0, |4/2.8 - 1|
    assert ag.missed_most == "pp"
    assert rows[0].missed_most() == ("tp", -0.5)


def test_pairs_measured_within_their_repeat_spread_count_as_ties():
    """Two configs 2% apart with 5% repeat spreads swap places: plain tau counts the swap as
    discordant, (2 - 1) / 3; tau-b drops the tied pair, 2 / sqrt(3 x 2). A third config well
    apart is never tied."""
    rows = [
        verify.Row(cfg(dp=4), {"dp": 1.0}, {"dp": 1.02}, (1.0, 1.05)),
        verify.Row(cfg(tp=2, dp=2), {"dp": 2.0}, {"dp": 1.0}, (0.98, 1.03)),
        verify.Row(cfg(pp=4), {"pp": 3.0}, {"pp": 2.0}, (2.0, 2.02)),
    ]
    assert rows[0].spread == pytest.approx(0.05)
    assert verify.within_noise(rows) == {(0, 1)}
    ag = verify.agreement(rows)
    assert ag.kendall_tau == pytest.approx(1 / 3)
    assert ag.kendall_tau_noise == pytest.approx(2 / 6**0.5) and ag.ties == 1
    assert not ag.top1_same and ag.top1_within_noise
    doc = verify.summary(rows, ag)
    assert [c["config"] for c in doc["configs"]] == [r.config.full_label for r in rows]
    assert doc["agreement"]["ties"] == 1 and doc["configs"][2]["spread"] == pytest.approx(0.01)
    assert verify.kendall_tau_b([1, 2], [5, 5], set()) == 0.0  # every pair tied


def test_select_takes_distinct_fitting_configs_and_refuses_too_many():
    req = PlanRequest(
        model=parse_model_arg(TINY), gpus=4, gpus_per_node=4, global_batch=8, zero_stages=(0,)
    )
    result = plan(req, synthetic_calibration())
    chosen = verify.select(result, 4, 3)
    assert len(chosen) == 3 and len({c.full_label for c in chosen}) == 3
    assert chosen[0] == result.ranked[0].config
    with pytest.raises(UsageError, match=r"--verify 999: only \d+ planned config"):
        verify.select(result, 4, 999)
    with pytest.raises(UsageError, match="--gpus 4 but 8 rank"):
        verify.select(result, 8, 1)


def test_the_planner_prices_the_step_program_it_measures():
    req = PlanRequest(model=parse_model_arg(TINY), gpus=4, gpus_per_node=4, global_batch=8)
    prog = verify.step_program(req, cfg(tp=2, dp=2))
    assert prog.pattern == "step"
    labels = {s.label for s in prog.steps}
    assert {"embedding output", "cross entropy", "grad norm", "LM head input grad"} <= labels


def test_emulate_accepts_plan_only_with_verify():
    assert command_line(["--", "plan", "--verify", "4"], "mpi")[:3] == ["plan", "--verify", "4"]
    with pytest.raises(UsageError, match="without --verify"):
        command_line(["--", "plan", "--model", "x"], "mpi")


def test_verify_without_calibration_needs_a_world_to_sweep():
    job = run_single("plan", "--model", TINY, "--gpus", "1", "--verify", "1")
    assert job.returncode == 2 and "launch 2 or more ranks" in job.stderr, job.output


MICRO = "tiny:layers=2,hidden=64,ffn_hidden=128,heads=4,kv_heads=2,vocab=256,seq_len=64"


@pytest.mark.mpi
def test_verify_without_calibration_sweeps_and_fits_first(tmp_path):
    """No --calibration: a quick sweep of the step's ops on the 4 ranks, fitted (saved in
    the run), the plan made with it, then the top 2 configs verified."""
    job = run_mpi(
        4, "plan", "--model", MICRO, "--gpus", "4", "--gpus-per-node", "4", "--global-batch",
        "4", "--zero-stage", "0", "--backend", "mpi", "--verify", "2", "--rounds", "1",
        "--budget", "0.01", "--results", str(tmp_path), "--run-id", "q", timeout=300,
    )  # fmt: skip
    assert job.returncode == 0, job.output
    assert "a quick sweep on this world first" in job.stdout
    cal = calibration.load(tmp_path / "q" / "calibration.json")
    assert {"broadcast", "sendrecv", "allreduce"} <= {s.key.op for s in cal.series}
    doc = json.loads((tmp_path / "q" / "verify.json").read_text())
    assert len(doc["configs"]) == 2 and all(c["measured_s"] > 0 for c in doc["configs"])
    kinds = {r.get("pattern") for r in read_run(tmp_path / "q").records}
    assert {"collectives", "step"} <= kinds


SWEEP = """\
description: calibration for plan --verify
timing: {budget: 0.01, min_iters: 3, max_iters: 10}
max_bytes: 16M
runs:
  - pattern: collectives
    options:
      ops: [allreduce, allgather, reduce_scatter, alltoall, sendrecv, broadcast]
      min_bytes: 8
      max_bytes: 4M
      factor: 4
"""


@pytest.mark.mpi
def test_verify_on_4_ranks(tmp_path):
    """Calibrate 4 ranks, then verify the top 3 planned configs on them; K too large is exit
    2 on every rank with nothing run."""
    (tmp_path / "sweep.yaml").write_text(SWEEP)
    job = run_mpi(
        4, "suite", str(tmp_path / "sweep.yaml"), "--backend", "mpi", "--results",
        str(tmp_path), "--run-id", "sweep", timeout=300,
    )  # fmt: skip
    assert job.returncode == 0, job.output
    cal = tmp_path / "cal.json"
    job = run_single("fit", str(tmp_path / "sweep"), "-o", str(cal), "-q", timeout=120)
    assert job.returncode == 0, job.output
    common = ["plan", "--model", TINY, "--gpus", "4", "--gpus-per-node", "4",
              "--global-batch", "8", "--calibration", str(cal), "--backend", "mpi",
              "--results", str(tmp_path)]  # fmt: skip
    job = run_mpi(4, *common, "--verify", "999", "--run-id", "bad", timeout=120)
    assert job.returncode == 2 and "--verify 999: only" in job.stderr, job.output
    assert not (tmp_path / "bad").exists()
    job = run_mpi(
        4, *common, "--verify", "3", "--rounds", "2", "--budget", "0.02", "--run-id", "v",
        timeout=300,
    )  # fmt: skip
    assert job.returncode == 0, job.output
    assert "Kendall tau" in job.stdout and "top-1 same:" in job.stdout
    doc = json.loads((tmp_path / "v" / "verify.json").read_text())
    assert len(doc["configs"]) == 3 and all(len(c["rounds_s"]) == 2 for c in doc["configs"])
    # the step replayed as one timed Program: every axis the ops measured alone have, and a
    # whole step no shorter than its longest op
    for c in doc["configs"]:
        assert set(c["whole_by_axis"]) == set(c["measured_by_axis"])
        assert c["whole_s"] >= 0.9 * max(c["whole_by_axis"].values()) > 0
    assert "whole step replayed: top-1 same:" in job.stdout and doc["agreement_whole"]
    assert "wrong data" not in job.stdout
    records = (tmp_path / "v" / "records.jsonl").read_text()
    assert records.count('"kind": "point"') == 6 and '"pattern": "step"' in records  # 2 rounds
    # the report's ranking figure reads the prediction kept in each point's meta
    (check,) = verifications([read_run(tmp_path / "v")])
    assert len(check.configs) == 3 and all(p > 0 and m > 0 for _, p, m in check.configs)
    fig = verify_ranking(check)
    assert fig.png.startswith(b"\x89PNG") and fig.name == "verify-v"


def test_the_replayed_step_is_compared_as_a_whole():
    """Replayed, a config's measurement is its whole step time split by the replayed ops'
    shares: here dp4's replay is 3.3 s (skew between ops), so it ranks last, as predicted."""
    rows = [
        verify.Row(cfg(dp=4), {"dp": 3.0}, {"dp": 2.0}, (), {"dp": 3.0}, 3.3),
        verify.Row(cfg(pp=4), {"pp": 2.0}, {"pp": 2.5}, (), {"pp": 2.0, "tp-pp": 1.0}, 2.4),
    ]
    assert rows[1].as_whole().measured == pytest.approx({"pp": 1.6, "tp-pp": 0.8})
    assert not verify.agreement(rows).top1_same  # op by op: dp4 2.0 < pp4 2.5
    whole = verify.agreement(rows, whole=True)
    assert whole.top1_same and whole.kendall_tau == 1.0
    assert whole.median_abs_error == pytest.approx(statistics.median([1 - 3 / 3.3, 1 - 2 / 2.4]))


def test_the_plans_nodes_must_be_the_launched_hosts():
    """--gpus-per-node 2 on a world of 4 ranks on one host would verify configs on links the
    plan did not price: refused naming the flag to give; 2 hosts of 2 ranks agree."""
    from commbench.commands.plan_verify import check_nodes

    with pytest.raises(UsageError, match=r"4 rank\(s\) on 1 host\(s\).*--gpus-per-node 4"):
        check_nodes((0, 0, 1, 1), (0, 0, 0, 0))
    check_nodes((0, 0, 1, 1), (0, 0, 1, 1))
    check_nodes((0, 0, 0, 0), (0, 0, 0, 0))
