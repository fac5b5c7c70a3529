"""The NCCL regime (algorithm, protocol) an nccl-tests log says it ran in: kept on each record
(NCCL_ALGO / NCCL_PROTO that pin one name, NCCL_DEBUG_SUBSYS=TUNING lines per size), runs that
pinned different regimes fitted as series of their own, predict asked for each, validate
pricing a record under its own regime; calibrations without regimes read as before. The logs
are written here, in nccl-tests' and NCCL's own line formats, with times from a stated
alpha and bus bandwidth."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from fit_samples import nccl_tests_new

from commbench import calibration, cli
from commbench.calibration import op_accuracy
from commbench.calibration.choice import asked_regime, regimes_of
from commbench.calibration.series_key import SeriesKey
from commbench.errors import UsageError
from commbench.fit import calibrate
from commbench.fit.collect import collect, read_fit_runs
from commbench.formats import nccl_tests
from commbench.formats.common import Hints
from commbench.results.rundir import read_run

SIZES = tuple(1024 << k for k in range(0, 12))  # 1 KiB .. 2 MiB
HOST = "gpu-a:4100:4100 [0] NCCL INFO"


def perf_log(
    *,
    binary: str = "all_reduce_perf",
    ranks: int = 4,
    alpha_us: float = 10.0,
    busbw_GBps: float = 100.0,
    info: tuple[str, ...] = (),
    tuning: dict[int, str] | None = None,
    curve: Callable[[int], float] | None = None,
) -> str:
    """An nccl-tests log of one node: `info` NCCL INFO lines after the rank lines (settings),
    `tuning` the NCCL INFO text printed before each size's row (what NCCL's enqueue says);
    `curve` the time in us of S (default alpha + S x bus factor / busbw)."""
    factor = 2 * (ranks - 1) / ranks if binary == "all_reduce_perf" else (ranks - 1) / ranks
    lines = [
        f"+ mpirun -np {ranks} ./build/{binary} -b 1K -e 2M -f 2 -g 1",
        "# nThread 1 nGpus 1 minBytes 1024 maxBytes 2097152 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        *(
            f"#  Rank {r:2d} Group  0 Pid {4100 + r:6d} on      gpu-a device {r:2d} "
            f"[0x{r + 7:02x}] NVIDIA A100-SXM4-80GB"
            for r in range(ranks)
        ),
        f"{HOST} NCCL version 2.24.3+cuda12.4",
        *(f"{HOST} {text}" for text in info),
        "#",
        "#                                                              out-of-place       "
        "                in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
        "     (us)  (GB/s)  (GB/s)       ",
    ]
    for s in SIZES:
        if tuning and s in tuning:
            lines.append(f"{HOST} {tuning[s]}")
        t = curve(s) if curve else alpha_us + s * factor / (busbw_GBps * 1e3)
        algbw = s / t / 1e3
        cell = f"  {t:8.2f}  {algbw:6.2f}  {algbw * factor:6.2f}      0"
        lines.append(f"{s:12d}  {s // 4:12d}     float     sum      -1{cell}{cell}")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 12.3 ", "#", ""]
    return "\n".join(lines)


def parse(tmp_path, text: str, name: str = "log.txt"):
    path = tmp_path / name
    path.write_text(text)
    return nccl_tests.parse(path, Hints())


def regime(rec: dict) -> tuple:
    return rec.get("algorithm"), rec.get("protocol"), rec.get("forced")


def imported(tmp_path, name: str, text: str):
    path = tmp_path / f"{name}.txt"
    path.write_text(text)
    args = ["import", "nccl-tests", str(path), "--results", str(tmp_path), "--run-id", name]
    assert cli.main(args) == 0
    return tmp_path / name


# ---- the records keep the regime ------------------------------------------------------------


def test_settings_that_pin_one_name_are_on_every_record(tmp_path):
    info = ("NCCL_ALGO set by environment to Ring", "NCCL_PROTO set by environment to Simple")
    imp = parse(tmp_path, perf_log(info=info))
    assert len(imp.records) == 2 * len(SIZES)
    assert {regime(r)[:2] for r in imp.records} == {("RING", "SIMPLE")}
    assert all(r["forced"] == ["algorithm", "protocol"] for r in imp.records)
    assert imp.meta["algorithm"] == "Ring" and imp.meta["protocol"] == "Simple"  # as before


def test_tuning_lines_name_each_size_nccl_chose(tmp_path):
    """NCCL 2.24+ `AllReduce: N Bytes -> Algo RING proto LL channel{Lo..Hi}=...`: what NCCL
    chose at that size; a size without a line says nothing."""
    tuning = {
        1024: "AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}",
        1 << 20: "AllReduce: 1048576 Bytes -> Algo TREE proto LL128 channel{Lo..Hi}={0..7}",
        2 << 20: "AllReduce: 2097152 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..7}",
    }
    imp = parse(tmp_path, perf_log(tuning=tuning))
    by = {(r["bytes"], r["placement"]): regime(r) for r in imp.records}
    assert by[1024, "out-of-place"] == by[1024, "in-place"] == ("RING", "LL", None)
    assert by[1 << 20, "in-place"] == ("TREE", "LL128", None)
    assert by[2 << 20, "out-of-place"] == ("RING", "SIMPLE", None)
    assert by[4096, "out-of-place"] == (None, None, None)
    quiet = next(r for r in imp.records if r["bytes"] == 4096)
    assert "algorithm" not in quiet and "forced" not in quiet  # not written when unsaid


def test_old_numeric_tuning_lines(tmp_path):
    """NCCL 2.20-2.23: `N Bytes -> Algo 1 proto 0 time 6.2` (NCCL_ALGO_RING = 1, LL = 0;
    2.23 prefixes the collective), the bytes S even for all-gather."""
    tuning = {
        2048: "2048 Bytes -> Algo 1 proto 0 time 6.200000",
        8192: "AllReduce: 8192 Bytes -> Algo 0 proto 2 time 9.100000",
    }
    imp = parse(tmp_path, perf_log(tuning=tuning))
    by = {r["bytes"]: regime(r) for r in imp.records}
    assert by[2048] == ("RING", "LL", None) and by[8192] == ("TREE", "SIMPLE", None)
    ag = {8192: "8192 Bytes -> Algo 1 proto 2 time 9.1"}
    imp = parse(tmp_path, perf_log(binary="all_gather_perf", tuning=ag))
    assert {r["bytes"]: regime(r) for r in imp.records}[8192] == ("RING", "SIMPLE", None)


def test_named_tuning_lines_give_one_rank_s_bytes_for_all_gather(tmp_path):
    """2.24+ prints count x type size: one rank's share, S / p for all-gather."""
    tuning = {8192: "AllGather: 2048 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..3}"}
    imp = parse(tmp_path, perf_log(binary="all_gather_perf", tuning=tuning))
    by = {r["bytes"]: regime(r) for r in imp.records}
    assert by[8192] == ("RING", "LL128", None) and by[2048] == (None, None, None)


def test_a_pinned_algorithm_with_tuning_lines_naming_the_protocol(tmp_path):
    tuning = {
        1024: "AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}",
        2 << 20: "AllReduce: 2097152 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..7}",
        # another collective's line (a barrier, a second communicator) is not this op's
        4096: "AllGather: 4096 Bytes -> Algo PAT proto SIMPLE channel{Lo..Hi}={0..1}",
    }
    imp = parse(tmp_path, perf_log(info=("NCCL_ALGO set by environment to ring",), tuning=tuning))
    by = {r["bytes"]: regime(r) for r in imp.records}
    assert by[1024] == ("RING", "LL", ["algorithm"])
    assert by[2 << 20] == ("RING", "SIMPLE", ["algorithm"])
    assert by[4096] == ("RING", None, ["algorithm"])


@pytest.mark.parametrize(
    "setting,algorithm",
    [
        ("Ring,Tree", None),  # NCCL chooses between them
        ("^Tree", None),
        ("allreduce:ring;allgather:tree", "RING"),  # per collective (NCCL 2.24+)
        ("allgather:tree", None),
        ("NVLSTree", "NVLS_TREE"),
        ("CollNetDirect", "COLLNET_DIRECT"),
        ("CollNet", "COLLNET"),  # NCCL <= 2.13's one CollNet
    ],
)
def test_only_a_setting_leaving_one_name_pins(tmp_path, setting, algorithm):
    imp = parse(tmp_path, perf_log(info=(f"NCCL_ALGO set by environment to {setting}",)))
    assert {r.get("algorithm") for r in imp.records} == {algorithm}
    assert {bool(r.get("forced")) for r in imp.records} == {algorithm is not None}


def test_a_job_script_setting_in_a_comment_pins_too(tmp_path):
    text = "# job: export NCCL_PROTO=LL128\n" + perf_log()
    imp = parse(tmp_path, text)
    assert all(regime(r) == (None, "LL128", ["protocol"]) for r in imp.records)


def test_import_says_what_regime_its_records_ran_in(tmp_path, capsys):
    tuning = {1024: "AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}"}
    imported(tmp_path, "r", perf_log(info=("NCCL_ALGO set by environment to Ring",), tuning=tuning))
    out = capsys.readouterr().out
    assert (
        f"# NCCL regime stated on {2 * len(SIZES)} of {2 * len(SIZES)} records: RING/*, RING/LL "
        "(algorithm pinned by the log's settings)"
    ) in out
    imported(tmp_path, "bare", perf_log())
    assert "NCCL regime" not in capsys.readouterr().out


# ---- what a log says that cannot be filed -----------------------------------------------------


@pytest.mark.parametrize(
    "info,tuning,message",
    [
        (
            ("NCCL_ALGO set by environment to Rign",),
            None,
            "log.txt:10: NCCL_ALGO: unknown NCCL algorithm 'Rign' (known: TREE, RING,",
        ),
        (
            ("NCCL_PROTO set by environment to LL256",),
            None,
            "unknown NCCL protocol 'LL256' (known: LL, LL128, SIMPLE)",
        ),
        (
            ("NCCL_ALGO set by environment to allreduse:ring",),
            None,
            "unknown collective 'allreduse'",
        ),
        (
            (),
            {2048: "AllReduce: 2048 Bytes -> Algo HYPERCUBE proto LL channel{Lo..Hi}={0..1}"},
            "log.txt:15: unknown NCCL algorithm 'HYPERCUBE'",
        ),
        ((), {2048: "2048 Bytes -> Algo 9 proto 0 time 1.0"}, "unknown NCCL algorithm '9'"),
        ((), {2048: "2048 Bytes -> Algo 1 proto 5 time 1.0"}, "unknown NCCL protocol '5'"),
    ],
)
def test_an_unknown_name_is_one_clear_line(tmp_path, info, tuning, message):
    with pytest.raises(UsageError) as e:
        parse(tmp_path, perf_log(info=info, tuning=tuning))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_an_unknown_name_is_one_line_from_the_cli(tmp_path, capsys):
    path = tmp_path / "log.txt"
    path.write_text(perf_log(info=("NCCL_ALGO set by environment to Rign",)))
    rc = cli.main(["import", "nccl-tests", str(path), "--results", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "unknown NCCL algorithm 'Rign'" in err[0]


def test_tuning_lines_that_disagree_at_a_size_leave_it_unstated(tmp_path):
    tuning = {
        4096: "AllReduce: 4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}\n"
        f"{HOST} AllReduce: 4096 Bytes -> Algo TREE proto LL channel{{Lo..Hi}}={{0..1}}",
        8192: "AllReduce: 8192 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}",
    }
    imp = parse(tmp_path, perf_log(tuning=tuning))
    by = {r["bytes"]: regime(r) for r in imp.records}
    assert by[4096] == (None, None, None) and by[8192] == ("RING", "LL", None)
    assert any("more than one algorithm/protocol at 1 size(s) (4096 B" in n for n in imp.notes)


def test_a_tuning_line_against_the_pin_is_kept_not_forced(tmp_path):
    tuning = {4096: "AllReduce: 4096 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..1}"}
    imp = parse(tmp_path, perf_log(info=("NCCL_ALGO set by environment to Ring",), tuning=tuning))
    by = {r["bytes"]: regime(r) for r in imp.records}
    assert by[4096] == ("TREE", "LL", None) and by[8192] == ("RING", None, ["algorithm"])
    assert any("pins RING but its tuning lines name another" in n for n in imp.notes)


# ---- fitted per regime -------------------------------------------------------------------------


def fitted(tmp_path, runs: dict[str, str]) -> tuple[dict, calibration.Calibration]:
    dirs = [imported(tmp_path, name, text) for name, text in runs.items()]
    doc, _, _ = calibrate.build(collect(read_fit_runs(dirs)))
    path = calibration.save(doc, tmp_path / "cal.json")
    return doc, calibration.load(path)


RING = ("NCCL_ALGO set by environment to Ring", "NCCL_PROTO set by environment to Simple")
TREE = ("NCCL_ALGO set by environment to Tree", "NCCL_PROTO set by environment to LL")


def test_two_pinned_regimes_fit_as_two_series_and_predict_picks_each(tmp_path):
    doc, cal = fitted(
        tmp_path,
        {
            "ring": perf_log(info=RING, alpha_us=10.0, busbw_GBps=100.0),
            "tree": perf_log(info=TREE, alpha_us=6.0, busbw_GBps=20.0),
        },
    )
    keys = [SeriesKey.from_dict(s) for s in doc["series"]]
    out = sorted(k.regime for k in keys if k.placement == "out-of-place")
    assert out == ["RING/SIMPLE", "TREE/LL"]  # two series, not one blended
    assert {(s.get("algorithm"), s.get("protocol")) for s in doc["series"]} == {
        ("RING", "SIMPLE"),
        ("TREE", "LL"),
    }
    s = 1 << 20
    ring = cal.explain("allreduce", s, 4, "intra", algorithm="ring")
    tree = cal.explain("allreduce", s, 4, "intra", algorithm="TREE", protocol="ll")
    assert ring.seconds * 1e6 == pytest.approx(10 + s * 1.5 / 100e3, rel=0.01)
    assert tree.seconds * 1e6 == pytest.approx(6 + s * 1.5 / 20e3, rel=0.01)
    assert ring.series is not None and ring.series.regime == "RING/SIMPLE"
    assert "RING/SIMPLE" in ring.series.label()
    # NCCL's own choice was never measured: its tuner takes the fastest, so the faster of the
    # two pinned regimes at each size (the ring's bandwidth at 1 MiB, the tree's latency at 1 KiB)
    chose = cal.explain("allreduce", s, 4, "intra")
    assert chose.seconds == ring.seconds and chose.series == ring.series
    small = cal.explain("allreduce", 1024, 4, "intra")
    assert small.seconds == cal.predict("allreduce", 1024, 4, "intra", algorithm="tree")
    assert small.seconds < cal.predict("allreduce", 1024, 4, "intra", algorithm="ring")
    assert small.notes == [
        "NCCL's own choice was not measured, only runs that pinned RING/SIMPLE, TREE/LL: "
        "priced as TREE/LL, the fastest of RING/SIMPLE, TREE/LL (NCCL's tuner takes the fastest)"
    ]
    with pytest.raises(UsageError, match="outside the measured sizes"):
        cal.predict("allreduce", 1 << 30, 4, "intra")  # each regime refuses: the first says why
    with pytest.raises(UsageError, match="not measured under RING/LL .*ran: RING/SIMPLE, TREE/LL"):
        cal.predict("allreduce", s, 4, "intra", algorithm="RING", protocol="LL")
    with pytest.raises(UsageError, match="algorithm=: unknown NCCL algorithm 'Rign'"):
        cal.predict("allreduce", s, 4, "intra", algorithm="Rign")
    # validate prices each run's records under its own regime
    rows = op_accuracy.compare([tmp_path / "ring", tmp_path / "tree"], cal)
    assert {r["status"] for r in rows} == {"ok"}
    assert {(r["run_id"], r["regime"]) for r in rows} == {
        ("ring", "RING/SIMPLE"),
        ("tree", "TREE/LL"),
    }
    assert max(r["abs_error"] for r in rows) < 0.02
    summary = op_accuracy.summarize(rows, 0.2)
    assert sorted(x["regime"] for x in summary) == ["RING/SIMPLE", "TREE/LL"]


def test_nccl_s_own_choice_is_preferred_and_kept_out_of_reach_of_pinned_runs(tmp_path, capsys):
    tuning = {1024: "AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}"}
    doc, cal = fitted(
        tmp_path,
        {
            "chose": perf_log(alpha_us=8.0, busbw_GBps=80.0, tuning=tuning),
            "tree": perf_log(info=TREE, alpha_us=6.0, busbw_GBps=20.0),
        },
    )
    regimes = sorted(SeriesKey.from_dict(s).regime for s in doc["series"])
    assert regimes == ["", "", "TREE/LL", "TREE/LL"]  # a tuning line alone pins nothing
    s = 1 << 20
    got = cal.explain("allreduce", s, 4, "intra")
    assert got.seconds * 1e6 == pytest.approx(8 + s * 1.5 / 80e3, rel=0.01)
    assert got.series is not None and got.series.regime == "" and not got.notes
    assert cal.predict("allreduce", s, 4, "intra", algorithm="tree") * 1e6 == pytest.approx(
        6 + s * 1.5 / 20e3, rel=0.01
    )
    # the link table is NCCL's choice: the pinned TREE/LL run is not blended into it
    (link,) = doc["link_table"]
    assert link["models"][link["best_model"]]["points"] == 2 * len(SIZES)
    # the chose run's 1 KiB record ran RING/LL: no series pinned that, so NCCL's choice
    rows = op_accuracy.compare([tmp_path / "chose", tmp_path / "tree"], cal)
    assert {(r["run_id"], r["regime"]) for r in rows} == {("chose", ""), ("tree", "TREE/LL")}
    # the settings differ only in what the fitter keeps apart: no warning of a blend
    assert not [n for n in doc["notes"] if "different settings" in n]


# NCCL's own choice at 4 ranks as its tuning lines say it: LL up to 16 KiB, LL128 to 256 KiB,
# Simple above, each with its own latency and bandwidth (us, bus GB/s); LL and LL128 close
# enough that the BIC alone takes them for one line (7% off at its worst)
CHOICE = {"LL": (5.0, 10.0), "LL128": (6.0, 11.0), "SIMPLE": (30.0, 120.0)}


def chose(s: int) -> str:
    return "LL" if s <= 16 << 10 else "LL128" if s <= 256 << 10 else "SIMPLE"


def choice_us(s: int) -> float:
    alpha, busbw = CHOICE[chose(s)]
    return alpha + s * 1.5 / (busbw * 1e3)


def test_segments_follow_the_regimes_the_tuning_lines_name(tmp_path):
    """Fit per observed regime: NCCL's choice stays one series (a tuning line pins nothing),
    its segments cut where the log says the protocol switched, each labelled with it."""
    tuning = {
        s: f"AllReduce: {s} Bytes -> Algo RING proto {chose(s)} channel{{Lo..Hi}}={{0..1}}"
        for s in SIZES
    }
    doc, cal = fitted(tmp_path, {"chose": perf_log(tuning=tuning, curve=choice_us)})
    (series,) = [s for s in doc["series"] if s["placement"] == "out-of-place"]
    assert "algorithm" not in series and "protocol" not in series
    segs = [(g["bytes_min"], g["bytes_max"], g.get("regime")) for g in series["segments"]]
    assert segs == [
        (1024, 16 << 10, "RING/LL"),
        (32 << 10, 256 << 10, "RING/LL128"),
        (512 << 10, 2 << 20, "RING/SIMPLE"),
    ]
    for s in (4096, 128 << 10, 1 << 20):
        assert cal.predict("allreduce", s, 4, "intra") * 1e6 == pytest.approx(choice_us(s), 0.01)
    assert max(g["max_rel_err"] for g in series["segments"]) < 0.005
    # the same curve without its tuning lines: the segments the BIC finds fit it worse
    (tmp_path / "bare").mkdir()
    bare, _ = fitted(tmp_path / "bare", {"bare": perf_log(curve=choice_us)})
    (plain,) = [s for s in bare["series"] if s["placement"] == "out-of-place"]
    assert not any("regime" in g for g in plain["segments"])
    assert max(g["max_rel_err"] for g in plain["segments"]) > 0.02


def test_a_regime_too_short_for_a_segment_cuts_nothing(tmp_path):
    """Two sizes of LL128 between LL and Simple: no segment of their own (min_sizes 3), so no
    cut either side; the BIC places the segments as without tuning lines."""
    mid = {64 << 10, 128 << 10}
    tuning = {
        s: f"AllReduce: {s} Bytes -> Algo RING proto "
        + ("LL128" if s in mid else "LL" if s < 64 << 10 else "SIMPLE")
        + " channel{Lo..Hi}={0..1}"
        for s in SIZES
    }
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with_lines, _ = fitted(tmp_path / "a", {"a": perf_log(tuning=tuning, curve=choice_us)})
    without, _ = fitted(tmp_path / "b", {"b": perf_log(curve=choice_us)})
    cut = [[(g["bytes_min"], g["bytes_max"]) for g in s["segments"]] for s in with_lines["series"]]
    free = [[(g["bytes_min"], g["bytes_max"]) for g in s["segments"]] for s in without["series"]]
    assert cut == free


def test_one_pinned_regime_alone_is_used_with_a_note(tmp_path):
    _, cal = fitted(tmp_path, {"ring": perf_log(info=RING)})
    got = cal.explain("allreduce", 4096, 4, "intra")
    assert got.series is not None and got.series.regime == "RING/SIMPLE"
    assert any("pinned to RING" in n for n in got.notes)
    assert any("pinned to SIMPLE" in n for n in got.notes)


def test_a_trace_op_is_priced_under_the_series_of_its_kernel_s_regime(tmp_path):
    _, cal = fitted(
        tmp_path,
        {
            "ring": perf_log(info=RING, alpha_us=10.0, busbw_GBps=100.0),
            "tree": perf_log(info=TREE, alpha_us=6.0, busbw_GBps=20.0),
        },
    )
    have = regimes_of(cal.series, "allreduce", "intra")
    assert have == {("RING", "SIMPLE"), ("TREE", "LL")}
    kernel = {"kind": "trace", "algorithm": "TREE", "protocol": "LL"}
    assert asked_regime(kernel, have, "t") == ("TREE", "LL")
    other = {"kind": "trace", "algorithm": "RING", "protocol": "LL128"}
    assert asked_regime(other, have, "t") == (None, None)


def test_report_labels_name_the_regime_where_curves_differ_in_it():
    import numpy as np

    from commbench.report.figures.collectives import curve_labels
    from commbench.report.inputs import Curve

    def curve(algorithm: str, protocol: str) -> Curve:
        key = SeriesKey("nccl", "allreduce", "intra", 8, "float32", algorithm=algorithm,
                        protocol=protocol)  # fmt: skip
        return Curve(key, np.ones(3), np.ones(3))

    labels = curve_labels([curve("RING", "SIMPLE"), curve("TREE", "LL"), curve("", "")])
    assert labels == ["p=8 intra RING/SIMPLE", "p=8 intra TREE/LL", "p=8 intra NCCL's choice"]
    assert curve_labels([curve("", ""), curve("", "")]) == ["p=8 intra", "p=8 intra"]


# ---- calibrations and records from before ---------------------------------------------------


def old_calibration() -> dict:
    """A calibration as commbench wrote it before regimes were kept: no algorithm/protocol."""
    fit = {"points": 18, "sizes": 18, "outliers": 0, "median_rel_err": 0.0}
    seg = {
        "bytes_min": 8, "bytes_max": 1 << 20, "alpha_s": 10e-6, "beta_s_per_byte": 1e-9, **fit,
        "r2_log": 1.0, "max_rel_err": 0.0, "loso_median_rel_err": 0.0, "loso_max_rel_err": 0.0,
        "alpha_ci95": None, "beta_ci95": None,
    }  # fmt: skip
    series = {
        "backend": "nccl", "op": "allreduce", "link_class": "intra", "group_size": 4,
        "dtype": "float32", "timing": "pipelined", "placement": "out-of-place",
        "buffers": "tool", "bytes_min": 8, "bytes_max": 1 << 20, "segments": [seg], **fit,
        "excluded_wrong": 0, "excluded_time": 0, "loso_median_rel_err": 0.0, "runs": ["r"],
    }  # fmt: skip
    run = {"run_id": "r", "path": "results/r", "status": "complete", "partial": False,
           "records": 36, "records_used": 36}  # fmt: skip
    return {
        "schema_version": 1,
        "kind": "measured",
        "created": "2026-01-01T00:00:00+0000",
        "provenance": {"runs": [run]},
        "series": [series],
        "link_table": [],
    }


def test_a_calibration_from_before_loads_and_predicts_the_same(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old_calibration()))
    cal = calibration.load(path)
    (s,) = cal.series
    assert (s.key.algorithm, s.key.protocol, s.key.regime) == ("", "", "")
    assert s.key.label() == "allreduce p=4 intra float32 nccl pipelined tool"
    assert s.key.as_dict() == {k: old_calibration()["series"][0][k] for k in s.key.as_dict()}
    assert "algorithm" not in s.key.as_dict()
    got = cal.explain("allreduce", 4096, 4, "intra")
    assert got.seconds == pytest.approx(10e-6 + 4096e-9) and not got.notes
    assert cal.predict("allreduce", 4096, 4, "intra", algorithm="") == got.seconds
    with pytest.raises(UsageError, match="not measured under RING/\\* .*ran: NCCL's choice"):
        cal.predict("allreduce", 4096, 4, "intra", algorithm="Ring")
    again = calibration.save(json.loads(path.read_text()), tmp_path / "again.json")
    assert json.loads(again.read_text()) == old_calibration()


def test_records_from_before_fit_as_nccl_s_choice(tmp_path):
    """Records imported before the regime was kept (no algorithm/protocol/forced fields)."""
    run = imported(tmp_path, "old", perf_log())
    recs = read_run(run).records
    assert not any({"algorithm", "protocol", "forced"} & set(r) for r in recs)
    doc, _, _ = calibrate.build(collect(read_fit_runs([run])))
    assert all("algorithm" not in s and "protocol" not in s for s in doc["series"])


@pytest.mark.parametrize(
    "forced,message",
    [
        ("algorithm", "field forced must list algorithm/protocol"),
        (["algo"], "field forced must list algorithm/protocol"),
        (["protocol"], "field protocol is forced but None"),
    ],
)
def test_a_hand_edited_forced_field_is_named(tmp_path, forced, message):
    run = imported(tmp_path, "r", perf_log(info=RING[:1]))
    path = run / "records.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    recs[3]["forced"] = forced
    recs[3].pop("protocol", None)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(UsageError, match=message):
        collect(read_fit_runs([run]))


def test_commbench_s_own_nccl_runs_stamp_what_their_environment_pins(monkeypatch):
    """`commbench run` on nccl keys its records by NCCL_ALGO / NCCL_PROTO as an import does:
    per op, only a setting that leaves one name pins; other backends ignore both."""
    from commbench.measure.runner import nccl_regimes

    monkeypatch.setenv("NCCL_ALGO", "allreduce:Tree;allgather:Ring,PAT")
    monkeypatch.setenv("NCCL_PROTO", "Simple")
    pins = nccl_regimes("nccl")
    assert pins["allreduce"] == {"algorithm": "TREE", "protocol": "SIMPLE"}
    assert pins["allgather"] == {"protocol": "SIMPLE"}  # Ring,PAT lets NCCL choose
    assert nccl_regimes("gloo") == {} and nccl_regimes("mpi") == {}
    monkeypatch.setenv("NCCL_ALGO", "Rnig")
    with pytest.raises(UsageError, match="environment variable NCCL_ALGO.*Rnig"):
        nccl_regimes("nccl")


def test_a_run_s_pinned_records_fit_apart_from_nccl_s_choice(tmp_path):
    """Sweep records of `commbench run` on nccl under NCCL_ALGO=Ring and under NCCL's choice
    (the fields as the runner writes them, read back as SweepRecords): two series, not one
    blend."""
    from commbench.results.records import SweepRecord, fields_of

    def run(name: str, pins: dict, us_per_byte: float) -> None:
        d = tmp_path / name
        d.mkdir()
        (d / "meta.json").write_text(json.dumps({"run_id": name, "backend": "nccl"}))
        rows = []
        for k in range(10, 24):
            t = 10.0 + (1 << k) * us_per_byte
            rec = SweepRecord(
                kind="collective", backend="nccl",
                label="allreduce", op="allreduce", dtype="float32", bytes=1 << k,
                count=(1 << k) // 4, axis="world", group_size=8, groups=1, stride=1,
                hosts_spanned=2, link_class="inter", world_size=8, iters=20, warmup=5,
                time_us=t, time_mean_us=t, time_min_us=t, time_p95_us=t, algbw_GBps=1.0,
                busbw_GBps=1.0, wrong=0, checked=True, timing="per-iteration", loop="host",
                isolated=False, per_group_us=[t], algorithm=pins.get("algorithm"),
                protocol=pins.get("protocol"), forced=sorted(pins) or None,
            )  # fmt: skip
            row = fields_of(rec)
            assert fields_of(SweepRecord.from_json(row)) == row
            rows.append(json.dumps({"schema_version": 1, "run_id": name, **row}))
        (d / "records.jsonl").write_text("\n".join(rows) + "\n")

    run("ring", {"algorithm": "RING"}, 1e-4)
    run("chosen", {}, 2e-4)
    got = collect(read_fit_runs([tmp_path / "ring", tmp_path / "chosen"]))
    assert sorted(k.regime for k in got.series) == ["", "RING/*"]


# ---- a pinned algorithm scales as that algorithm across node counts -------------------------


def two_nodes(algo: str | None, alpha_us: float = 30.0, busbw_GBps: float = 20.0) -> str:
    """nccl-tests all_reduce on 2 nodes x 4 (one inter-node link), NCCL_ALGO pinned or not."""
    text = nccl_tests_new(ranks=8, hosts=2, alpha_us=alpha_us, busbw_GBps=busbw_GBps)
    if algo is None:
        return text
    pin = "dgx-a00:41000:41000 [0] NCCL INFO NCCL_PROTO set by environment to Simple"
    return text.replace(
        pin, f"{pin}\ndgx-a00:41000:41000 [0] NCCL INFO NCCL_ALGO set by environment to {algo}"
    )


@pytest.mark.parametrize("nbytes", [256 << 10, 1 << 20])
def test_a_pinned_ring_is_scaled_as_the_ring_where_nccl_would_choose_the_tree(tmp_path, nbytes):
    """On 16 nodes NCCL's model picks the tree at 256 KiB-1 MiB (log2 inter steps, not 2 (N - 1)):
    runs that let NCCL choose are scaled by it; runs that pinned NCCL_ALGO=Ring stay the ring
    at the target (its 2 (p - 1) steps at the same per-peer chunk, slower), Tree the tree; an
    algorithm the model does not price (NVLS) is scaled as NCCL's choice, and says so."""
    got = {}
    for algo in (None, "Ring", "Tree", "NVLS"):
        where = tmp_path / (algo or "chose")
        where.mkdir()
        _, cal = fitted(where, {"r": two_nodes(algo)})
        got[algo] = cal.explain("allreduce", nbytes, 64, "inter", extrapolate=True, nodes=16)
    assert "(ring) to 64 on 16 (tree) by NCCL's ring/tree model" in got[None].method
    assert "same per-peer chunk" in got["Ring"].method
    assert "NCCL_ALGO pinned the ring" in got["Ring"].method
    assert got["Ring"].seconds > 1.1 * got[None].seconds  # 1.19x at 1 MiB with 2.21.5
    assert "(tree) to 64 on 16 (tree) by NCCL's model of the pinned algorithm" in got["Tree"].method
    assert got["Ring"].band is not None and got["Tree"].band is not None
    assert got["NVLS"].method == got[None].method
    assert any(
        "pinned NCCL_ALGO NVLS, which commbench's NCCL model" in n for n in got["NVLS"].notes
    )


def test_pinned_ring_and_tree_runs_give_nccl_s_choice_at_another_node_count(tmp_path):
    """Ring and Tree pinned on 2 nodes, none letting NCCL choose: at 16 nodes each is scaled
    as its own algorithm and NCCL's choice is the faster of the two at each size (the tree's
    log2 steps at 64 KiB, the ring's bandwidth at 64 MiB, where the tree was measured at half)."""
    _, cal = fitted(
        tmp_path,
        {"ring": two_nodes("Ring"), "tree": two_nodes("Tree", alpha_us=40.0, busbw_GBps=10.0)},
    )
    taken = {}
    for nbytes in (64 << 10, 64 << 20):
        each = {
            alg: cal.explain(
                "allreduce", nbytes, 64, "inter", extrapolate=True, nodes=16, algorithm=alg
            )  # fmt: skip
            for alg in ("ring", "tree")
        }
        chose = cal.explain("allreduce", nbytes, 64, "inter", extrapolate=True, nodes=16)
        fastest = min(each, key=lambda a: each[a].seconds)
        assert chose.seconds == each[fastest].seconds and chose.band == each[fastest].band
        said = f"priced as {fastest.upper()}/SIMPLE, the fastest of RING/SIMPLE, TREE/SIMPLE"
        assert any(said in n for n in chose.notes)
        taken[nbytes] = fastest
    assert taken == {64 << 10: "tree", 64 << 20: "ring"}
