"""Exporters: ASTRA-sim network.yml and Calculon network tiers, parsed back and checked against
the calibration they came from (synthetic ring-model runs with stated alpha/beta). The
consumers' formats and the other exporters: test_exports.py."""

from __future__ import annotations

import json

import pytest
import yaml
from fit_samples import collective_records, write_run

from commbench import calibration, cli
from commbench.calibration.costmodels import model_time
from commbench.fit import calibrate
from commbench.fit.collect import collect, read_fit_runs
from commbench.fit.options import FitOptions

A_INTRA, BW_INTRA = 2e-6, 100e9  # per-step alpha, bus bandwidth (B/s)
A_INTER, BW_INTER = 8e-6, 25e9


@pytest.fixture(scope="module")
def cal_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("exp")
    recs = []
    for link, a, bw, sizes in (
        ("intra", A_INTRA, BW_INTRA, (2, 4, 8)),
        ("inter", A_INTER, BW_INTER, (16, 32)),
    ):
        for p in sizes:
            for op in ("allreduce", "allgather"):
                recs += collective_records(
                    op,
                    p,
                    0,
                    0,
                    link=link,
                    time_of=lambda s, op=op, p=p, a=a, bw=bw: model_time(
                        "ring", op, p, s, a, 1 / bw
                    ),
                )
    # a series with a protocol switch, so that there is something per-size to leave out
    recs += collective_records(
        "sendrecv", 2, 0, 0, time_of=lambda s: 1e-6 + s / 5e9 if s < 65536 else 9e-6 + s / 20e9
    )
    run = write_run(root, "r", recs, meta={"num_hosts": 4})
    doc, _, _ = calibrate.build(collect(read_fit_runs([run])), FitOptions(bootstrap=0))
    path = root / "cal.json"
    calibration.save(doc, path)
    return path


def test_astra_sim_yaml(cal_path, tmp_path, capsys):
    out = tmp_path / "network.yml"
    assert cli.main(["export", "astra-sim", str(cal_path), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    net = yaml.safe_load(out.read_text())
    assert net["topology"] == ["Ring", "Ring"]  # the ring model fits best on both links
    assert net["npus_count"] == [8, 4]  # largest intra group; 4 hosts in the run's meta
    gib = float(1 << 30)
    assert net["bandwidth"][0] == pytest.approx(BW_INTRA / gib, rel=1e-4)  # GB/s read as 2^30
    assert net["bandwidth"][1] == pytest.approx(BW_INTER / gib, rel=1e-4)
    assert net["latency"] == pytest.approx([A_INTRA * 1e9, A_INTER * 1e9], rel=1e-4)  # ns
    text = out.read_text()
    assert "# not expressed: per-size segments: 1 of" in text
    assert "per-group-size alpha: intra series at group sizes [2, 4, 8]" in text
    assert "per-size segments" in printed and f"wrote {out}" in printed


def test_astra_sim_switch_counts_two_hops(cal_path, capsys):
    assert (
        cli.main(
            [
                "export",
                "astra-sim",
                str(cal_path),
                "--topology",
                "intra=Switch",
                "--npus",
                "inter=2",
            ]
        )
        == 0
    )
    net = yaml.safe_load(capsys.readouterr().out)  # stdout holds only the YAML
    assert net["topology"] == ["Switch", "Ring"] and net["npus_count"] == [8, 2]
    assert net["latency"][0] == pytest.approx(A_INTRA * 1e9 / 2, rel=1e-4)


def test_calculon_tiers(cal_path, tmp_path, capsys):
    out = tmp_path / "net.json"
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"networks": []}))
    assert cli.main(["export", "calculon", str(cal_path), "--base", str(base), "-o", str(out)]) == 0
    nets = json.loads(out.read_text())["networks"]
    assert [n["size"] for n in nets] == [8, 32]  # tier 1 reaches all 8 x 4 NPUs
    for n, (a, bw) in zip(nets, ((A_INTRA, BW_INTRA), (A_INTER, BW_INTER))):
        assert set(n) == {
            "bandwidth",
            "efficiency",
            "size",
            "latency",
            "ops",
            "must_be_filled",
            "processor_usage",
        }
        assert n["bandwidth"] == pytest.approx(bw / 1e9, rel=1e-4)
        assert n["latency"] == pytest.approx(a, rel=1e-4)
        assert n["ops"] == {
            "p2p": [1.0, None],
            "reduce_scatter": [1.0, -1],
            "all_gather": [1.0, -1],
            "all_reduce": [2.0, -1],
        }
        # Calculon's own formula with these numbers is the ring bandwidth term (nccl busbw)
        p, S = 8, 1 << 24
        scalar, offset = n["ops"]["all_reduce"]
        size = S * scalar
        size += size / p * offset
        assert size / (n["bandwidth"] * 1e9 * n["efficiency"]) == pytest.approx(
            2 * (p - 1) / p * S / bw, rel=1e-4
        )
    assert "latency is the fitted per-step alpha" in capsys.readouterr().out
    assert cli.main(["export", "calculon", str(cal_path), "-o", str(out)]) == 2  # no base
    assert "calculon needs --base" in capsys.readouterr().err


def test_calculon_fills_a_base_system_file(cal_path, tmp_path, capsys):
    base = tmp_path / "a100.json"
    base.write_text(json.dumps({"matrix": {"float16": {"tflops": 312}}, "networks": []}))
    assert cli.main(["export", "calculon", str(cal_path), "--base", str(base)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["matrix"] == {"float16": {"tflops": 312}} and len(doc["networks"]) == 2


def test_export_errors(cal_path, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 1, "kind": "measured"}))
    assert cli.main(["export", "astra-sim", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "calibration fails its schema" in err and err.count("\n") == 1
    assert cli.main(["export", "astra-sim", str(cal_path), "--topology", "intra=Torus"]) == 2
    assert "choose from Ring, FullyConnected, Switch" in capsys.readouterr().err
    assert cli.main(["export", "astra-sim", str(cal_path), "--npus", "intra=1"]) == 2
    assert "--npus" in capsys.readouterr().err
