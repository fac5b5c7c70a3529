"""Reliability findings of a newcomer's 171 cases (issue 33): wrong successes and unclear words.

One test per finding, each written before its fix and failing on the code it fixes. Wrong
success: an exit 0 that claims what is not so (the export's quoted error and gate on terms it
does not export; importers that drop rows, misread units or take impossible sizes and dtypes;
a fit that takes an impossible time or counts one measurement twice). Unclear: an answer that
is right but does not say what the user needs to read it (an in-sample validation, a run whose
every point was wrong, a slower timing loop taken silently, a timeout too small to be one, a
size rounded without a word, a key or flag given twice, minutes of silence).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from fit_samples import collective_records, imb_log, nccl_tests_new, osu_bw, write_run
from reliability import COUNTS, reliability_counts  # noqa: F401

from commbench import calibration, cli
from commbench.fit import calibrate
from commbench.fit.collect import collect, read_fit_runs
from commbench.fit.options import FitOptions

from conftest import run_mpi, run_single

WRONG = "wrong successes refused"
UNCLEAR = "unclear answers made clear"


def _cal(root: Path, recs: list[dict], name: str = "cal.json") -> Path:
    run = write_run(root, "r", recs)
    doc, _, _ = calibrate.build(collect(read_fit_runs([run])), FitOptions(bootstrap=0))
    return calibration.save(doc, root / name)


# ---- wrong success: the export -----------------------------------------------------------


@pytest.fixture(scope="module")
def two_ops_cal(tmp_path_factory) -> Path:
    """One link, two ops of very different cost: each op's terms fit it exactly, the shared
    line the export writes (one alpha, one beta for the link) misses both by far."""
    root = tmp_path_factory.mktemp("two-ops")
    recs = collective_records("pingpong", 2, 1e-6, 1 / 10e9)
    recs += collective_records("allreduce", 2, 50e-6, 1 / 0.5e9)
    return _cal(root, recs)


def test_export_gate_judges_the_exported_shared_line(two_ops_cal, tmp_path, capsys):
    """Claimed 0.0%, exported anyway: the gate read the per-op terms' error, while the export
    carries the shared line, which misses its points by a median of 185%."""
    doc = json.loads(two_ops_cal.read_text())
    m = doc["link_table"][0]["models"][doc["link_table"][0]["best_model"]]
    assert m["median_rel_err"] < 0.01 and m["shared_median_rel_err"] > 0.25  # the premise
    out = tmp_path / "n.yml"
    args = ["export", "astra-sim", str(two_ops_cal), "--npus", "intra=2", "-o", str(out)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert f"{m['shared_median_rel_err']:.1%}" in err and "--force" in err, err
    assert not out.exists()
    COUNTS[WRONG] += 1


def test_export_note_quotes_the_exported_lines_error(two_ops_cal, tmp_path, capsys):
    """With --force the note names the error of the line written, not the terms' 0.0%."""
    doc = json.loads(two_ops_cal.read_text())
    m = doc["link_table"][0]["models"][doc["link_table"][0]["best_model"]]
    out = tmp_path / "n.yml"
    args = ["export", "astra-sim", str(two_ops_cal), "--npus", "intra=2", "-o", str(out)]
    assert cli.main([*args, "--force"]) == 0
    printed = capsys.readouterr()
    text = printed.out + printed.err
    note = next(line for line in text.splitlines() if "explains the measured points" in line)
    assert f"{m['shared_median_rel_err']:.1%}" in note, note
    assert "0.0%" not in note, note
    COUNTS[WRONG] += 1


def test_export_gate_on_a_noisy_pingpong_calibration(tmp_path, capsys):
    """One op, noisy small sizes (a loaded box): the terms follow the noise through their
    knots (0.0% claimed), the exported line misses by 39%, and it was exported."""
    import numpy as np

    rng = np.random.default_rng(5)

    def noisy(s: int) -> float:
        base = 1e-6 + s / 5e9
        return base * (1 + 20 * rng.random()) if s < 1 << 16 else base

    cal = _cal(tmp_path, collective_records("pingpong", 2, 0, 0, time_of=noisy))
    e = json.loads(cal.read_text())["link_table"][0]
    m = e["models"][e["best_model"]]
    assert m["median_rel_err"] < 0.01 < 0.25 < m["shared_median_rel_err"]  # the premise
    out = tmp_path / "n.yml"
    assert cli.main(["export", "astra-sim", str(cal), "--npus", "intra=2", "-o", str(out)]) == 2
    assert f"{m['shared_median_rel_err']:.1%}" in capsys.readouterr().err
    assert not out.exists()
    COUNTS[WRONG] += 1


# ---- wrong success: importers ------------------------------------------------------------


def _import(tmp_path: Path, tool: str, text: str, *flags: str) -> tuple[int, str, Path]:
    log = tmp_path / f"{tool}.log"
    log.write_text(text)
    job = run_single(
        "import", tool, str(log), "--results", str(tmp_path), "--run-id", "imp", *flags
    )
    return job.returncode, job.output, tmp_path / "imp"


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]


def test_import_says_which_rows_it_dropped(tmp_path):
    """A table line that is not a row (its size cell is no byte count) was passed over
    without a word: the import must name the line and why."""
    lines = osu_bw().splitlines()
    lines.insert(5, "4.0e3     1234.56")  # a size printed as a float: not OSU's %-10d
    lines.insert(7, "-16       1234.56")
    code, out, run = _import(tmp_path, "osu", "\n".join(lines) + "\n", "--link-class", "intra")
    assert code == 0, out
    assert re.search(r"osu\.log:6: .*skipped", out), out
    assert re.search(r"osu\.log:8: .*skipped", out), out
    assert "'4.0e3'" in out and "'-16'" in out, out
    COUNTS[WRONG] += 1


def test_import_refuses_a_time_cell_that_is_no_number(tmp_path):
    """A time cell `1.2.3` (a damaged row) read as N/A: the placement was dropped, exit 0."""
    lines = nccl_tests_new(sizes=(8, 64, 512)).splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.strip().startswith("64 "))
    cells = lines[row].split()
    cells[5] = "1.2.3"  # out-of-place time
    lines[row] = "  ".join(cells)
    code, out, _ = _import(tmp_path, "nccl-tests", "\n".join(lines) + "\n")
    assert code == 2, out
    assert f"nccl-tests.log:{row + 1}" in out and "'1.2.3'" in out, out
    COUNTS[WRONG] += 1


def test_import_reads_the_bandwidth_unit_its_header_states(tmp_path):
    """`Bandwidth (GB/s)` was read as MB/s: times 1000 x too long, exit 0."""
    mb = osu_bw(GBps=10.0)
    gb_lines = ["# OSU MPI Bandwidth Test v7.4", f"{'# Size':<10s}{'Bandwidth (GB/s)':>18s}"]
    for line in mb.splitlines()[2:]:
        size, mbps = line.split()
        gb_lines.append(f"{int(size):<10d}{float(mbps) / 1e3:18.6f}")
    code, out, run = _import(tmp_path, "osu", "\n".join(gb_lines) + "\n", "--link-class", "intra")
    assert code == 0, out
    got = {r["bytes"]: r["time_us"] for r in _records(run)}
    (tmp_path / "mb").mkdir()
    code, out, ref = _import(tmp_path / "mb", "osu", mb, "--link-class", "intra")
    want = {r["bytes"]: r["time_us"] for r in _records(ref)}
    for size, t in want.items():
        assert got[size] == pytest.approx(t, rel=0.02), (size, got[size], t)
    COUNTS[WRONG] += 1


def test_import_refuses_an_unknown_dtype(tmp_path):
    """A `type` cell commbench has no element size for became a record's dtype (count,
    bytes per element unknown): one clear line naming it instead."""
    text = nccl_tests_new(sizes=(8, 64, 512)).replace("   float", "  quux16")
    code, out, _ = _import(tmp_path, "nccl-tests", text)
    assert code == 2, out
    assert "quux16" in out and "dtype" in out and "Traceback" not in out, out
    assert len([ln for ln in out.splitlines() if ln.startswith("commbench: error")]) == 1, out
    COUNTS[WRONG] += 1


def test_import_refuses_an_absurd_size(tmp_path):
    """A row of 1e23 bytes (a digit run no tool prints) was imported, exit 0."""
    huge = 10**23
    text = nccl_tests_new(sizes=(8, 64, 512, huge))
    code, out, _ = _import(tmp_path, "nccl-tests", text)
    assert code == 2, out
    assert str(huge) in out and "Traceback" not in out, out
    COUNTS[WRONG] += 1


@pytest.mark.parametrize(
    "tool, text, flags",
    [
        ("nccl-tests", nccl_tests_new(sizes=(8, 1024)), ()),
        ("osu", osu_bw(), ("--link-class", "intra")),
        ("imb", imb_log(), ("--link-class", "intra")),
    ],
)
def test_import_refuses_a_size_of_thousands_of_digits(tmp_path, tool, text, flags):
    """A size cell of 5000 digits reached int(), whose ValueError past 4300 digits was an
    internal error: one line naming the row instead, in every importer."""
    lines = text.splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["1024"])
    lines[row] = lines[row].replace("1024", "9" * 5000, 1)
    code, out, _ = _import(tmp_path, tool, "\n".join(lines) + "\n", *flags)
    assert code == 2, out
    assert f"{tool}.log:{row + 1}: size 999" in out and "over 1 PiB" in out, out
    assert "internal error" not in out and "Traceback" not in out, out
    COUNTS[UNCLEAR] += 1


# ---- wrong success: fit input --------------------------------------------------------------


def test_fit_refuses_a_time_no_op_takes(tmp_path, capsys):
    """A record with time_us 1e300 (a corrupt or hand-edited line) became a knot: the fit
    priced the size near it at 1e300 us. Refused, naming the line."""
    recs = collective_records("allreduce", 2, 1e-6, 1e-9)
    recs[5]["time_us"] = 1e300
    run = write_run(tmp_path, "r", recs)
    assert cli.main(["fit", str(run), "-q"]) == 2
    err = capsys.readouterr().err
    assert "records.jsonl:6" in err and "time_us" in err and "1e+300" in err, err
    COUNTS[WRONG] += 1


def test_fit_counts_a_duplicate_record_once(tmp_path, capsys):
    """The same record written twice (a log concatenated with itself) weighed twice."""
    recs = collective_records("allreduce", 2, 1e-6, 1e-9)
    run = write_run(tmp_path, "r", recs + recs[:7])
    assert cli.main(["fit", str(run), "-q"]) == 0
    out = capsys.readouterr().out
    assert "20 of 27 records used" in out, out
    assert re.search(r"ignored 7 record\(s\): .*twice", out), out
    COUNTS[WRONG] += 1


def test_fit_counts_a_run_given_twice_once(tmp_path, capsys):
    """`fit RUN RUN` (or a copy of RUN) counted every point twice."""
    import shutil

    run = write_run(tmp_path, "r", collective_records("allreduce", 2, 1e-6, 1e-9))
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    assert cli.main(["fit", str(run), str(run), str(copy), "-q"]) == 0
    out = capsys.readouterr().out
    assert "20 of 60 records used" in out, out
    assert out.count("counted once") == 2, out
    assert f"{run} given twice" in out and f"{copy} is a copy of {run}" in out, out
    COUNTS[WRONG] += 1


# ---- unclear: validate and report ----------------------------------------------------------


def test_validate_says_in_sample(tmp_path, capsys):
    """Validating a calibration on the run it was fitted from printed +0.0% errors as if
    they were a prediction's."""
    run = write_run(tmp_path, "r", collective_records("allreduce", 2, 1e-6, 1e-9))
    cal = tmp_path / "cal.json"
    assert cli.main(["fit", str(run), "-o", str(cal), "-q"]) == 0
    capsys.readouterr()
    assert cli.main(["validate", "--calibration", str(cal), str(run)]) == 0
    out = capsys.readouterr().out
    assert "in-sample" in out and "r" in out, out
    assert cli.main(["validate", "--calibration", str(cal), str(run), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["in_sample"] == ["r"], doc.get("in_sample")
    COUNTS[UNCLEAR] += 1


def test_report_says_in_sample_for_a_given_calibration(tmp_path, capsys):
    """`report RUN --calibration CAL` with CAL fitted from RUN showed its validation as
    out-of-sample (only the report's own fit was marked)."""
    from commbench.report.build import ReportOptions, _calibration
    from commbench.results.rundir import read_run

    run = write_run(tmp_path, "r", collective_records("allreduce", 2, 1e-6, 1e-9))
    other = write_run(tmp_path, "o", collective_records("allreduce", 2, 1e-6, 1e-9, seed=1))
    cal = tmp_path / "cal.json"
    assert cli.main(["fit", str(run), "-o", str(cal), "-q"]) == 0
    opts = ReportOptions(runs=[run], calibration=cal)
    assert _calibration(opts, [read_run(run)])[2] == ["r"]
    assert _calibration(opts, [read_run(other)])[2] == []
    COUNTS[UNCLEAR] += 1


def test_validate_says_all_points_had_wrong_data(tmp_path, capsys):
    """A run whose every op returned wrong data was 'no op records ... nothing to validate'."""
    good = write_run(tmp_path, "good", collective_records("allreduce", 2, 1e-6, 1e-9))
    recs = collective_records("allreduce", 2, 1e-6, 1e-9)
    for r in recs:
        r["wrong"] = 3
    bad = write_run(tmp_path, "bad", recs)
    cal = tmp_path / "cal.json"
    assert cli.main(["fit", str(good), "-o", str(cal), "-q"]) == 0
    capsys.readouterr()
    assert cli.main(["validate", "--calibration", str(cal), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "20" in err and "wrong data" in err and "no op records" not in err, err
    assert cli.main(["report", str(bad), "-o", str(tmp_path / "rep"), "--no-fit"]) == 0
    out = capsys.readouterr().out
    assert "wrong data" in out and "no measured primitive op" not in out, out
    COUNTS[UNCLEAR] += 1


# ---- unclear: options --------------------------------------------------------------------


def test_timeout_too_small_is_refused():
    """`--timeout 0.000001` ran and was reported as a hung peer."""
    job = run_single("run", "allreduce", "--sizes", "8", "--timeout", "0.000001")
    assert job.returncode == 2, job.output
    err = job.stderr
    assert "0.000001" in err and "at least" in err, err
    COUNTS[UNCLEAR] += 1


def test_check_says_the_rounded_size(capsys):
    """`check -b 1` printed S = 1 B and measured 4 B (a float32 element)."""
    assert cli.main(["check", "--dry-run", "--world", "4", "-b", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"-b 1 B -> 4 B", out), out
    COUNTS[UNCLEAR] += 1


def test_repeated_set_key_is_refused(capsys):
    """`--set a=1 --set a=2` kept the last silently."""
    argv = ["suite", "collectives", "--dry-run", "--world", "4", "--set", "factor=2"]
    job = run_single(*argv, "--set", "factor=4")
    assert job.returncode == 2, job.output
    err = job.stderr
    assert "factor" in err and "twice" in err, err
    assert cli.main(["plan", "--model", "llama-7b:layers=2,layers=4", "--gpus", "4"]) == 2
    err = capsys.readouterr().err
    assert "layers" in err and "twice" in err, err
    COUNTS[UNCLEAR] += 1


def test_duplicate_yaml_key_is_refused(tmp_path, capsys):
    """A suite or thresholds file with a key twice kept the last silently (PyYAML)."""
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "description: dup\nruns:\n  - pattern: collectives\n    options: {ops: [allreduce]}\n"
        "    options: {ops: [allgather]}\n"
    )
    job = run_single("suite", str(suite), "--dry-run", "--world", "2")
    assert job.returncode == 2, job.output
    err = job.stderr
    assert "options" in err and "twice" in err and "line 5" in err, err
    thresholds = tmp_path / "expect.yaml"
    thresholds.write_text("min_pct: 80\nmin_pct: 70\nexpect:\n  - {op: sendrecv, GBps: 10}\n")
    job = run_single("check", "--dry-run", "--world", "2", "--thresholds", str(thresholds))
    assert job.returncode == 2 and "'min_pct' given twice" in job.stderr, job.output
    thresholds = tmp_path / "expect.json"
    thresholds.write_text(
        '{"min_pct": 80, "min_pct": 70, "expect": [{"op": "sendrecv", "GBps": 1}]}'
    )
    job = run_single("check", "--dry-run", "--world", "2", "--thresholds", str(thresholds))
    assert job.returncode == 2 and "'min_pct' given twice" in job.stderr, job.output
    with pytest.raises(yaml.YAMLError):  # the loader every reader of a YAML file gets
        from commbench.textfile import yaml_loader

        yaml.load("a: {b: 1, b: 2}\n", Loader=yaml_loader())
    COUNTS[UNCLEAR] += 1


def test_repeated_flag_is_refused(tmp_path):
    """`run allreduce --sizes 8 --sizes 64` measured 64 only, without a word."""
    job = run_single(
        *("run", "allreduce", "--sizes", "8", "--sizes", "64", "--iters", "2"),
        *("--results", str(tmp_path)),
    )
    assert job.returncode == 2, job.output
    err = job.stderr
    assert "--sizes" in err and "twice" in err, err
    # the same value twice, or a flag that appends, is not a conflict
    parser, _ = cli.build_parser("run")
    args = parser.parse_args(["run", "allreduce", "--sizes", "8", "--sizes", "8"])
    assert args.sizes == "8" and not hasattr(args, "_flags_given")
    COUNTS[UNCLEAR] += 1


# ---- unclear: under mpirun -------------------------------------------------------------------


@pytest.mark.mpi
def test_unwritable_cache_says_the_python_loop_once(tmp_path):
    """A cache that cannot be written swapped the native timing loop for the Python one
    (0.64 -> 1.48 us a call) without a word: rank 0 says so, once."""
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache directory would be\n")
    job = run_mpi(
        2,
        *("run", "pingpong", "--sizes", "8", "--iters", "3", "--warmup", "1"),
        *("--results", str(tmp_path), "--run-id", "c"),
        env={"COMMBENCH_CACHE_DIR": str(blocker / "sub")},
    )
    assert job.returncode == 0, job.output
    lines = [ln for ln in job.stderr.splitlines() if "Python timing loop" in ln]
    assert len(lines) == 1, job.output
    assert "COMMBENCH_CACHE_DIR" in lines[0], lines
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    assert meta["timing_loop"]["loop"] == "python"
    COUNTS[UNCLEAR] += 1


@pytest.mark.mpi
def test_plan_verify_says_progress(tmp_path):
    """`plan --verify` printed nothing between its first line and its table (4+ minutes
    on the README's line): rank 0 now says each verified point as it is measured."""
    from conftest import REPO

    cal = REPO / "commbench" / "calibration" / "reference-h100-ib400.json"
    assert cal.exists()
    job = run_mpi(
        2,
        *("plan", "--model", "tiny:layers=2,hidden=64,ffn_hidden=128,heads=4,vocab=256"),
        *("--seq-len", "32", "--global-batch", "4", "--gpus", "2", "--gpus-per-node", "2"),
        *("--verify", "2", "--rounds", "2", "--budget", "0.005", "--calibration", str(cal)),
        *("--results", str(tmp_path), "--run-id", "v"),
        timeout=240,
    )
    assert job.returncode == 0, job.output
    lines = [ln for ln in job.stderr.splitlines() if re.match(r"# verify: measured \d+ of", ln)]
    assert len(lines) == 4, job.output  # 2 configs x 2 rounds, one line each
    assert "4 of 4" in lines[-1], lines
    COUNTS[UNCLEAR] += 1
