"""Importers: nccl-tests (current and older layout), OSU and IMB logs written by the tests in each
tool's own layout (fit_samples.py; numbers synthetic from stated alpha/beta), then fitted."""

from __future__ import annotations

import json

import pytest
from fit_samples import (
    imb_log,
    nccl_tests_new,
    nccl_tests_old,
    osu_bw,
    osu_collective,
    osu_latency,
)

from commbench import calibration, cli
from commbench.errors import UsageError
from commbench.fit import calibrate
from commbench.fit.collect import collect, read_fit_runs
from commbench.formats import imb, nccl_tests, osu
from commbench.formats.common import Hints
from commbench.results.records import MEASURED_FIELDS
from commbench.results.rundir import read_run


def log(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- nccl-tests ------------------------------------------------------------------------------


def test_nccl_tests_current_layout(tmp_path):
    imp = nccl_tests.parse(log(tmp_path, "out.txt", nccl_tests_new(wrong_at=3)), Hints())
    assert len(imp.records) == 50  # 25 rows x (out-of-place, in-place)
    r = imp.records[0]
    assert (r["op"], r["group_size"], r["link_class"], r["dtype"]) == (
        "allreduce",
        8,
        "intra",
        "float32",
    )
    assert (r["timing"], r["backend"], r["iters"], r["warmup"]) == ("pipelined", "nccl", 20, 5)
    assert {x["placement"] for x in imp.records} == {"out-of-place", "in-place"}
    for field in MEASURED_FIELDS:
        if field not in ("schema_version", "run_id"):
            assert field in r, field
    assert r["source"]["columns"]["root"] == "-1" and r["source"]["line"] == 20
    wrong = [x for x in imp.records if x["wrong"]]
    assert len(wrong) == 1 and wrong[0]["bytes"] == 64 and wrong[0]["placement"] == "out-of-place"
    assert imp.meta["nccl_version"] == "2.21.5+cuda12.4"
    assert imp.meta["env"] == {"NCCL_PROTO": "Simple"}
    assert imp.meta["hosts"] == ["dgx-a00"]
    last = imp.records[-2]  # out-of-place, 128 MiB: time = 20 us + S x 1.75 / 150 GB/s
    assert last["bytes"] == 128 << 20
    assert last["time_us"] == pytest.approx(20 + (128 << 20) * 1.75 / 150e3, abs=0.01)


def test_nccl_tests_older_layout(tmp_path):
    """No Group, no root, `error` holding the largest deviation: above 1e-5 (float) = wrong."""
    imp = nccl_tests.parse(log(tmp_path, "ar.log", nccl_tests_old(bad_error_at=5)), Hints())
    assert len(imp.records) == 46
    r = imp.records[0]
    assert (r["op"], r["group_size"], r["link_class"]) == ("allreduce", 4, "intra")
    assert "error" in r["source"]["columns"] and "root" not in r["source"]["columns"]
    assert [x["bytes"] for x in imp.records if x["wrong"]] == [256, 256]


def test_nccl_tests_op_from_file_name_and_from_ratio(tmp_path):
    """No command line in the log: the file name names the binary; without that either,
    busbw/algbw with redop/root singles out reduce_scatter, broadcast and allreduce."""
    text = nccl_tests_new(op="allgather", binary=None, redop="none")
    imp = nccl_tests.parse(log(tmp_path, "all_gather_perf.8.log", text), Hints())
    assert imp.records[0]["op"] == "allgather"
    for op, redop, root in (("reduce_scatter", "sum", -1), ("broadcast", "none", 0)):
        text = nccl_tests_new(op=op, binary=None, redop=redop, root=root)
        assert nccl_tests.parse(log(tmp_path, "x.log", text), Hints()).records[0]["op"] == op


def test_nccl_tests_ambiguous_op_needs_the_flag(tmp_path):
    """allgather and alltoall share the factor (p-1)/p and redop none: say so, take --op."""
    path = log(tmp_path, "run.log", nccl_tests_new(op="alltoall", binary=None, redop="none"))
    with pytest.raises(UsageError, match="does not single out one op: pass --op"):
        nccl_tests.parse(path, Hints())
    assert nccl_tests.parse(path, Hints(op="alltoall")).records[0]["op"] == "alltoall"


def test_nccl_tests_job_of_tests_back_to_back_names_each_binary(tmp_path):
    """nccl-tests >= 2.17 heads each test `# Collective test starting: X_perf`: in one job's
    log of all_gather then reduce_scatter (one bus factor, so the ratio cannot tell them
    apart) each section takes the op its own line names."""
    parts = [
        f"# Collective test starting: {binary}\n{nccl_tests_new(op=op, binary=None, redop=redop)}"
        f"# Collective test concluded: {binary}\n"
        for op, binary, redop in (
            ("allgather", "all_gather_perf", "none"),
            ("reduce_scatter", "reduce_scatter_perf", "sum"),
        )
    ]
    imp = nccl_tests.parse(log(tmp_path, "job.log", "".join(parts)), Hints())
    assert [r["op"] for r in imp.records[::50]] == ["allgather", "reduce_scatter"]
    assert len(imp.records) == 100


@pytest.mark.parametrize("prefix", ["0: ", "  3: ", "[1,0]<stdout>: ", "[1,0]<stdout>:"])
def test_nccl_tests_lines_tagged_by_the_launcher(tmp_path, prefix):
    """srun --label and mpirun --tag-output put the rank before every line: the same records,
    at the same line numbers, as the untagged log."""
    text = nccl_tests_new()
    plain = nccl_tests.parse(log(tmp_path, "plain.log", text), Hints())
    tagged_text = "".join(prefix + line for line in text.splitlines(keepends=True))
    tagged = nccl_tests.parse(log(tmp_path, "tagged.log", tagged_text), Hints())
    assert len(tagged.records) == len(plain.records) == 50
    for a, b in zip(tagged.records, plain.records, strict=True):
        assert (a["bytes"], a["time_us"], a["source"]["line"]) == (
            b["bytes"],
            b["time_us"],
            b["source"]["line"],
        )
    assert tagged.meta["nccl_version"] == plain.meta["nccl_version"]


def test_nccl_tests_multi_node_is_inter(tmp_path):
    imp = nccl_tests.parse(log(tmp_path, "x.log", nccl_tests_new(ranks=16, hosts=2)), Hints())
    assert imp.records[0]["link_class"] == "inter" and imp.records[0]["group_size"] == 16
    assert imp.records[0]["hosts_spanned"] == 2 and imp.meta["hosts"] == ["dgx-a00", "dgx-a01"]


def test_nccl_tests_flag_contradicting_the_log_is_an_error(tmp_path):
    path = log(tmp_path, "x.log", nccl_tests_new())
    with pytest.raises(UsageError, match="the log says op allreduce but --op is allgather"):
        nccl_tests.parse(path, Hints(op="allgather"))
    with pytest.raises(UsageError, match="group-size 8 but --group-size is 4"):
        nccl_tests.parse(path, Hints(group_size=4))


def test_nccl_tests_truncated_and_malformed_rows(tmp_path):
    text = nccl_tests_new().rstrip().splitlines()
    rows = [i for i, line in enumerate(text) if line[:12].strip().isdigit()]
    cut = text[: rows[-1]] + [text[rows[-1]][:40]]  # killed mid-row
    imp = nccl_tests.parse(log(tmp_path, "cut.log", "\n".join(cut)), Hints())
    assert len(imp.records) == 48 and "truncated last row" in imp.notes[0]
    bad = list(text)
    bad[rows[3]] = bad[rows[3]][:40]
    with pytest.raises(UsageError, match=r"bad.log:23: row has 3 columns but the header has 13"):
        nccl_tests.parse(log(tmp_path, "bad.log", "\n".join(bad)), Hints())


def test_unknown_layout(tmp_path):
    with pytest.raises(UsageError, match="not a nccl-tests log"):
        nccl_tests.parse(log(tmp_path, "x.log", "hello\nworld\n"), Hints())
    with pytest.raises(UsageError, match="not an OSU log"):
        osu.parse(log(tmp_path, "y.log", nccl_tests_new()), Hints())
    with pytest.raises(UsageError, match="not an IMB log"):
        imb.parse(log(tmp_path, "z.log", osu_latency()), Hints(link_class="intra"))


# ---- OSU ---------------------------------------------------------------------------------------


def test_osu_collective_full_columns(tmp_path):
    path = log(tmp_path, "osu_allreduce.txt", osu_collective("Allreduce"))
    with pytest.raises(UsageError, match="how many processes ran osu_allreduce: pass --group-size"):
        osu.parse(path, Hints(link_class="intra"))
    with pytest.raises(UsageError, match="which hosts ran the test: pass --link-class"):
        osu.parse(path, Hints(group_size=4))
    imp = osu.parse(path, Hints(group_size=4, link_class="inter"))
    r = imp.records[-1]
    assert (r["op"], r["group_size"], r["link_class"], r["timing"]) == (
        "allreduce",
        4,
        "inter",
        "per-iteration",
    )
    assert r["dtype"] == "int8"  # "# Datatype: MPI_CHAR."
    assert r["iters"] == 100 and set(r["source"]["columns"]) >= {
        "Avg Latency(us)",
        "Min Latency(us)",
        "Max Latency(us)",
        "Iterations",
    }
    assert r["time_us"] == pytest.approx(3.0 + (1 << 20) / 2e3, abs=0.01)


def test_osu_alltoall_size_is_per_peer(tmp_path):
    text = osu_collective("All-to-All Personalized Exchange", full=False, datatype=None)
    imp = osu.parse(log(tmp_path, "a2a.txt", text), Hints(group_size=8, link_class="intra"))
    assert imp.records[3]["op"] == "alltoall" and imp.records[3]["bytes"] == 8 * 8
    assert imp.records[3]["dtype"] == "int8"  # OMB before 7 moved MPI_CHAR


def test_osu_point_to_point(tmp_path):
    imp = osu.parse(log(tmp_path, "p2p.txt", osu_latency() + osu_bw()), Hints(link_class="intra"))
    lat = [r for r in imp.records if r["op"] == "pingpong"]
    bw = [r for r in imp.records if r["op"] == "bw"]
    assert len(lat) == 23 and len(bw) == 23 and lat[0]["bytes"] == 0
    assert {r["group_size"] for r in imp.records} == {2}
    assert bw[-1]["timing"] == "pipelined"  # osu_bw times all its windows under one timer
    # 4 MiB at 10 GB/s plus 0.5 us: the per-message time, back from MB/s (1e6)
    assert bw[-1]["time_us"] == pytest.approx(0.5 + (4 << 20) / 1e4, rel=1e-4)


# ---- IMB ---------------------------------------------------------------------------------------


def test_imb_blocks(tmp_path):
    path = log(tmp_path, "IMB.out", imb_log())
    with pytest.raises(UsageError, match="IMB logs do not say which hosts ran: pass --link-class"):
        imb.parse(path, Hints())
    imp = imb.parse(path, Hints(link_class="intra"))
    by = {}
    for r in imp.records:
        by.setdefault((r["op"], r["group_size"]), []).append(r)
    assert set(by) == {("pingpong", 2), ("allreduce", 2), ("allreduce", 4), ("alltoall", 4)}
    assert by[("allreduce", 2)][0]["world_size"] == 4  # 2 more waiting in MPI_Barrier
    assert by[("allreduce", 4)][0]["dtype"] == "float32"  # MPI_FLOAT for reductions
    a2a = by[("alltoall", 4)][-1]
    assert a2a["bytes"] == 4 * (4 << 20) and a2a["dtype"] == "int8"
    assert a2a["time_us"] == pytest.approx(float(a2a["source"]["columns"]["t_max[usec]"]))
    assert imp.meta["imb_version"] == "2021.7"


# ---- through the CLI, then fit ------------------------------------------------------------------


def test_import_then_fit_recovers_the_stated_link(tmp_path, capsys):
    """nccl-tests allreduce, 8 ranks, stated alpha 20 us and busbw 150 GB/s: import, fit,
    and the calibration predicts the stated line (2-decimal printing limits the precision)."""
    path = log(tmp_path, "all_reduce_perf.log", nccl_tests_new(alpha_us=20.0, busbw_GBps=150.0))
    rc = cli.main(["import", "nccl-tests", str(path), "--results", str(tmp_path), "--run-id", "n"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "imported 50 records" in out and "placements in-place, out-of-place" in out
    run = read_run(tmp_path / "n")
    assert run.status == "complete" and run.meta["source"]["tool"] == "nccl-tests"
    assert run.meta["libraries"] == {"nccl": "2.21.5+cuda12.4"}
    assert run.meta["env"] == {"NCCL_PROTO": "Simple"}
    cal_path = tmp_path / "cal.json"
    assert cli.main(["fit", str(tmp_path / "n"), "-o", str(cal_path)]) == 0
    cal = calibration.load(cal_path)
    for n in (8, 1 << 16, 100 << 20):
        want = (20 + n * 1.75 / 150e3) * 1e-6
        assert cal.predict("allreduce", n, 8, "intra", dtype="float32") == pytest.approx(
            want, rel=0.01
        )
    inplace = cal.explain("allreduce", 1 << 20, 8, "intra", placement="in-place")
    assert inplace.series.placement == "in-place"
    assert inplace.seconds == pytest.approx(1.05 * (20 + (1 << 20) * 1.75 / 150e3) * 1e-6, rel=0.01)


def test_import_osu_and_imb_then_fit(tmp_path, capsys):
    osu_path = log(tmp_path, "osu.txt", osu_collective("Allreduce", alpha_us=3.0, GBps=2.0))
    assert (
        cli.main(
            [
                "import",
                "osu",
                str(osu_path),
                "--group-size",
                "4",
                "--link-class",
                "intra",
                "--results",
                str(tmp_path),
                "--run-id",
                "o",
            ]
        )
        == 0
    )
    imb_path = log(tmp_path, "imb.txt", imb_log(alpha_us=2.0, GBps=3.0))
    assert (
        cli.main(
            [
                "import",
                "imb",
                str(imb_path),
                "--link-class",
                "intra",
                "--results",
                str(tmp_path),
                "--run-id",
                "i",
            ]
        )
        == 0
    )
    doc, _, _ = calibrate.build(collect(read_fit_runs([tmp_path / "o", tmp_path / "i"])))
    calibration.validate(doc)
    cal = calibration.Calibration(doc)
    assert cal.predict(
        "allreduce", 1 << 20, 4, "intra", dtype="int8", backend="mpi", timing="per-iteration"
    ) == pytest.approx((3.0 + (1 << 20) / 2e3) * 1e-6, rel=0.01)
    # IMB allreduce on 4: alpha 2 us x (p - 1) + S / 3 GB/s, t_max
    assert cal.predict("allreduce", 1 << 20, 4, "intra", dtype="float32") == pytest.approx(
        (6.0 + (1 << 20) / 3e3) * 1e-6, rel=0.01
    )
    capsys.readouterr()


def test_import_cli_errors(tmp_path, capsys):
    rc = cli.main(["import", "osu", str(tmp_path / "missing.txt")])
    assert rc == 2 and "no such log file" in capsys.readouterr().err
    path = log(tmp_path, "odd.log", "# nothing useful\n1 2 3\n")
    rc = cli.main(["import", "imb", str(path), "--link-class", "intra", "--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "not an IMB log" in err
    assert not any(p.is_dir() for p in tmp_path.iterdir())  # nothing written on error
    rc = cli.main(["import", "osu", str(path), "--link-class", "rack"])
    assert rc == 2 and "choose intra or inter" in capsys.readouterr().err


def test_imported_records_are_json_lines(tmp_path):
    path = log(tmp_path, "a.log", nccl_tests_new())
    assert (
        cli.main(["import", "nccl-tests", str(path), "--results", str(tmp_path), "--run-id", "j"])
        == 0
    )
    lines = (tmp_path / "j" / "records.jsonl").read_text().splitlines()
    assert len(lines) == 50 and json.loads(lines[0])["schema_version"] == 1


def test_ranks_per_node_gives_a_log_without_host_lines_its_nodes(tmp_path, capsys):
    """A 64-rank all-reduce log with its rank lines cut: --ranks-per-node 8 makes each record a
    group of 8 nodes x 8 (inter); the run says the shape; a log whose host lines disagree is
    refused."""
    text = "\n".join(
        line for line in nccl_tests_new(ranks=64, hosts=8).splitlines() if "Rank" not in line
    )
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(text)
    rc = cli.main(
        [
            "import",
            "nccl-tests",
            str(path),
            "--ranks-per-node",
            "8",
            "--group-size",
            "64",
            "--results",
            str(tmp_path),
            "--run-id",
            "big",
        ]  # fmt: skip
    )
    assert rc == 0
    recs = [json.loads(x) for x in (tmp_path / "big" / "records.jsonl").read_text().splitlines()]
    assert {(r["hosts_spanned"], r["link_class"], r["group_size"]) for r in recs} == {
        (8, "inter", 64)
    }
    assert json.loads((tmp_path / "big" / "meta.json").read_text())["ranks_per_node"] == 8
    with_hosts = tmp_path / "hosts.log"
    with_hosts.write_text(nccl_tests_new(ranks=16, hosts=2))  # 2 nodes x 8
    rc = cli.main(
        [
            "import",
            "nccl-tests",
            str(with_hosts),
            "--ranks-per-node",
            "4",
            "--results",
            str(tmp_path),
        ]  # fmt: skip
    )
    assert rc == 2 and "spans 2 host(s) but --ranks-per-node 4" in capsys.readouterr().err
