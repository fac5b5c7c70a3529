"""Nothing lost, nothing misread: the run-directory reader and writer under crashes and junk.

- a table of corrupt run directories (the inputs fit/report/validate read): each a UsageError
  naming the file (and line);
- what a crash leaves (a torn last line, status running, no meta.json) loads as a partial run;
- a writer process killed with SIGKILL at random moments leaves every finished record readable;
- hypothesis fuzzing of records.jsonl and meta.json: a valid Run or a UsageError, nothing else.
  suite files, the nccl-tests / OSU / IMB log importers and calibration JSON get the same
  treatment (FUZZ_TARGETS; strategies and checked readers in reliability_fuzz.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import reliability_fuzz as rf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from reliability import COUNTS, reliability_counts  # noqa: F401

from commbench.errors import UsageError
from commbench.results.rundir import (
    META,
    RECORDS,
    REQUIRED_FIELDS,
    SCHEMA_VERSION,
    RunWriter,
    new_run_dir,
    read_run,
)

from conftest import REPO, run_single


def record(i: int = 0, **over) -> dict:
    """A record as the runner writes it (fields that matter to the reader)."""
    rec = {
        "schema_version": SCHEMA_VERSION,
        "run_id": "r",
        "kind": "collective",
        "op": "allreduce",
        "backend": "mpi",
        "dtype": "float32",
        "bytes": 8 << i,
        "group_size": 4,
        "time_us": 10.0 + i,
        "busbw_GBps": 0.1,
    }
    rec.update(over)
    return rec


def line(rec: dict) -> bytes:
    return (json.dumps(rec) + "\n").encode()


def make_run(path: Path, records: bytes | None, meta: bytes | dict | None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if records is not None:
        (path / RECORDS).write_bytes(records)
    if meta is not None:
        data = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
        (path / META).write_bytes(data)
    return path


GOOD = line(record(0)) + line(record(1))
META_OK = {"schema_version": 1, "run_id": "r", "status": "complete"}


@dataclass(frozen=True)
class BadRun:
    """A run directory fit/report must refuse with a clear message."""

    id: str
    records: bytes | None
    meta: bytes | dict | None
    match: str  # regex; {dir} is the run directory
    path: str = ""  # read this path (relative to the run directory's parent) instead


BAD_RUNS = [
    BadRun("missing", None, None, r"no such run directory", path="nope"),
    BadRun("empty-dir", None, None, r"not a run directory \(no records.jsonl or meta.json\)"),
    BadRun("file-not-dir", GOOD, None, r"not a directory", path="run/records.jsonl"),
    BadRun(
        "corrupt-middle-line",
        line(record(0)) + b'{"op": "allre\n' + line(record(1)),
        META_OK,
        r"records.jsonl:2: not a JSON record",
    ),
    BadRun("junk-first-line", b"hello\n" + GOOD, META_OK, r"records.jsonl:1: not a JSON record"),
    BadRun(
        "not-an-object",
        GOOD + b"[1, 2]\n",
        META_OK,
        r"records.jsonl:3: a record must be a JSON object",
    ),
    BadRun(
        "missing-fields",
        GOOD + b'{"op": "allreduce"}\n',
        META_OK,
        r"records.jsonl:3: record lacks schema_version, run_id",
    ),
    BadRun(
        "newer-schema",
        line(record(0, schema_version=2)),
        META_OK,
        r"records.jsonl:1: schema_version 2 is not 1",
    ),
    BadRun(
        "schema-true",
        line(record(0, schema_version=True)),
        META_OK,
        r"schema_version True is not 1",
    ),
    BadRun(
        "bytes-string",
        line(record(0, bytes="8")),
        META_OK,
        r"records.jsonl:1: bytes must be an integer >= 0",
    ),
    BadRun("bytes-negative", line(record(0, bytes=-8)), META_OK, r"bytes must be an integer >= 0"),
    BadRun(
        "group-float", line(record(0, group_size=2.0)), META_OK, r"group_size must be an integer"
    ),
    BadRun(
        "time-nan",
        GOOD + line(record(2, time_us=float("nan"))),
        META_OK,
        r"records.jsonl:3: time_us must be a finite number",
    ),
    BadRun("time-negative", line(record(0, time_us=-1)), META_OK, r"time_us must be a finite"),
    BadRun("op-number", line(record(0, op=7)), META_OK, r"op must be a string"),
    BadRun("not-utf8", GOOD + b"\xff\xfe\n" + GOOD, META_OK, r"records.jsonl:3: not UTF-8"),
    BadRun(
        "nested-too-deep",
        b"[" * 100_000 + b"]" * 100_000 + b"\n" + GOOD,
        META_OK,
        r"records.jsonl:1: not a JSON record \(nested too deeply\)",
    ),
    BadRun(
        "torn-then-more",
        line(record(0))[:20] + b"\n" + GOOD,
        META_OK,
        r"records.jsonl:1: not a JSON record",
    ),
    BadRun("meta-corrupt", GOOD, b'{"status": "comp', r"meta.json: unreadable meta"),
    BadRun("meta-not-object", GOOD, b"[]", r"meta.json: meta must be a JSON object"),
    BadRun("meta-binary", GOOD, b"\x00\xff\x00", r"meta.json: unreadable meta"),
    BadRun(
        "meta-key-twice",
        GOOD,
        b'{"status": "complete", "status": "failed"}',
        r"meta.json: unreadable meta \(key 'status' given twice",
    ),
    BadRun(
        "meta-5000-digits",
        GOOD,
        b'{"status": "complete", "world_size": ' + b"9" * 5000 + b"}",
        r"meta.json: unreadable meta \(a JSON integer: a number of 5000 digits",
    ),
    BadRun(
        "meta-bad-status",
        GOOD,
        {"status": "exploded"},
        r"meta.json: status 'exploded' is not one of running, complete",
    ),
    BadRun("records-is-dir", None, META_OK, r"cannot read .*records.jsonl"),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in BAD_RUNS])
def test_bad_run_is_a_clear_error(case: BadRun, tmp_path):
    run = tmp_path / "run"
    if case.id != "missing":
        make_run(run, case.records, case.meta)
    if case.id == "records-is-dir":
        (run / RECORDS).mkdir()
    target = tmp_path / case.path if case.path else run
    with pytest.raises(UsageError, match=case.match) as info:
        read_run(target)
    assert "\n" not in str(info.value)  # one line
    COUNTS["bad inputs tried (run directories)"] += 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a mode-000 directory anyway")
def test_unreadable_run_dir(tmp_path):
    run = make_run(tmp_path / "run", GOOD, META_OK)
    run.chmod(0)
    try:
        with pytest.raises(UsageError, match="not readable"):
            read_run(run)
    finally:
        run.chmod(0o755)


# ---- what a crash leaves: partial, readable ----


def test_torn_last_line_is_skipped_and_reported(tmp_path):
    full = line(record(2))
    for cut in range(1, len(full) - 1):  # every place a write can stop short of the newline
        run = make_run(tmp_path / f"cut{cut}", GOOD + full[:cut], {"status": "running"})
        got = read_run(run)
        assert [r["bytes"] for r in got.records] == [8, 16]
        assert got.torn_line == 3 and got.partial
        assert "torn last line 3" in got.partial_note()
    whole = read_run(make_run(tmp_path / "whole", GOOD + full[:-1], META_OK))  # only "\n" lost
    assert len(whole.records) == 3 and whole.torn_line is None and not whole.partial
    COUNTS["torn last lines read back"] += len(full) - 1


def test_partial_runs_say_why(tmp_path):
    cases = {
        "running": ({"status": "running"}, "killed before it could say"),
        "interrupted": ({"status": "interrupted", "stop_signal": "SIGINT"}, "stopped by SIGINT"),
        "failed": ({"status": "failed", "error": "rank 1: boom"}, "status failed: rank 1: boom"),
        "no-meta": (None, "no meta.json"),
    }
    for name, (meta, why) in cases.items():
        got = read_run(make_run(tmp_path / name, GOOD, meta))
        assert got.partial and len(got.records) == 2
        assert why in got.partial_note() and "2 finished point(s)" in got.partial_note()
    done = read_run(make_run(tmp_path / "done", GOOD, META_OK))
    assert not done.partial and done.partial_note() is None


@pytest.mark.parametrize(
    "shape,status,torn",
    [("flat", "interrupted", False), ("falling", "running", True), ("rising", "failed", False)],
)
def test_readers_accept_a_thin_partial_run(tmp_path, shape, status, torn):
    """What a run killed after its third point leaves, read by the real fit and report
    commands (reliability.check_fit_accepts): three points whose times are flat, falling (as
    noisy tiny points can be: a fit with no bandwidth term) or rising; a torn fourth line.
    Synthetic times, stated here: 50 us, 50 us minus 1 us per byte, 10 us plus 1 ns per byte."""
    from fit_samples import collective_records, write_run
    from reliability import check_fit_accepts

    time_of = {
        "flat": lambda s: 50e-6,
        "falling": lambda s: 50e-6 - s * 1e-6,
        "rising": lambda s: 10e-6 + s * 1e-9,
    }[shape]
    recs = collective_records("allreduce", 4, 0, 0, sizes=(8, 16, 24), time_of=time_of)
    run = write_run(tmp_path, shape, recs, status=status)
    if torn:
        with open(run / RECORDS, "ab") as f:
            f.write(line(record(3))[:30])
    check_fit_accepts(run)


def test_writer_statuses(tmp_path):
    """A late signal cannot undo `complete`; `failed` sticks and keeps the first error."""
    w = RunWriter.create(tmp_path, "run", {"command": "x"}, "a")
    w.write(record(0))
    w.finish("complete")
    w.mark("interrupted", stop_signal="SIGTERM")
    assert read_run(tmp_path / "a").status == "complete"
    w = RunWriter.create(tmp_path, "run", {"command": "x"}, "b")
    w.mark("failed", error="rank 3: first")
    w.finish("interrupted", error="later")
    meta = read_run(tmp_path / "b").meta
    assert meta["status"] == "failed" and meta["error"] == "rank 3: first"


# ---- SIGKILL a writer at random moments ----

WRITER = """
import sys, time
from pathlib import Path
from commbench.results.rundir import RunWriter
w = RunWriter.create(Path(sys.argv[1]), "run", {"command": "kill-test"}, sys.argv[2])
i = 0
while True:
    w.write({"kind": "collective", "op": "allreduce", "backend": "mpi", "dtype": "float32",
             "bytes": 8 + i, "group_size": 2, "time_us": 1.0, "pad": "x" * (i % 9000)})
    i += 1
"""


def test_sigkill_writer_keeps_every_record(tmp_path):
    """kill -9 a process appending (and fsyncing) records: what it wrote reads back."""
    kills = 12
    for k in range(kills):
        p = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), f"k{k}"],
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        run = tmp_path / f"k{k}"
        deadline = time.monotonic() + 30
        while not ((run / RECORDS).exists() and (run / RECORDS).stat().st_size > 100 * (k + 1)):
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.01)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        got = read_run(run)
        assert got.status == "running" and got.partial
        assert [r["bytes"] for r in got.records] == list(range(8, 8 + len(got.records)))
        COUNTS["faults injected"] += 1
        COUNTS["runs checked intact"] += 1


# ---- two runs at once never share a directory ----

CREATOR = """
import sys, time
from pathlib import Path
from commbench.errors import UsageError
from commbench.results.rundir import new_run_dir
root, run_id, start, many = Path(sys.argv[1]), sys.argv[2] or None, float(sys.argv[3]), int(sys.argv[4])
while time.time() < start:
    pass
for _ in range(many):
    try:
        print(new_run_dir(root, "run", run_id), flush=True)
    except UsageError as e:
        print("refused:", e, flush=True)
"""


def _race(root: Path, run_id: str, procs: int, many: int) -> list[str]:
    start = time.time() + 1.0
    ps = [
        subprocess.Popen(
            [sys.executable, "-c", CREATOR, str(root), run_id, str(start), str(many)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        for _ in range(procs)
    ]
    return [out for p in ps for out in p.communicate(timeout=60)[0].splitlines()]


def test_concurrent_runs_never_share_a_directory(tmp_path):
    named = _race(tmp_path / "named", "same", procs=6, many=1)
    assert len([o for o in named if not o.startswith("refused")]) == 1, named
    assert all(re.search("already exists", o) for o in named if o.startswith("refused"))
    fresh = _race(tmp_path / "fresh", "", procs=6, many=25)
    assert len(fresh) == 150 and len(set(fresh)) == 150
    assert len(list((tmp_path / "fresh").iterdir())) == 150


def test_new_run_dir_refuses_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="is a file, not a directory"):
        new_run_dir(tmp_path / "f", "run")


# ---- fuzzing: a Run or a UsageError, nothing else ----


def _check_read(path: Path) -> None:
    try:
        run = read_run(path)
    except UsageError as e:
        assert str(e) and "\n" not in str(e)
        return
    for rec in run.records:  # what a consumer may rely on once read_run returned
        assert all(k in rec for k in REQUIRED_FIELDS)
        assert type(rec["bytes"]) is int and rec["bytes"] >= 0
        assert isinstance(rec["time_us"], (int, float)) and rec["time_us"] >= 0
    assert isinstance(run.partial, bool)
    run.partial_note()


def _json_values():
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
        max_leaves=8,
    )


@st.composite
def records_files(draw) -> bytes:
    """Valid record lines, then mutations: cuts, byte flips, junk lines, field edits."""
    recs = [record(i) for i in range(draw(st.integers(0, 5)))]
    for rec in recs:
        if draw(st.booleans()):
            key = draw(st.sampled_from(REQUIRED_FIELDS))
            if draw(st.booleans()):
                del rec[key]
            else:
                rec[key] = draw(_json_values())
    data = b"".join(line(r) for r in recs)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["cut", "flip", "insert", "junk"]))
        pos = draw(st.integers(0, len(data)))
        if op == "cut":
            data = data[:pos]
        elif op == "flip" and data:
            i = min(pos, len(data) - 1)
            data = data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1 :]
        elif op == "insert":
            data = data[:pos] + draw(st.binary(max_size=12)) + data[pos:]
        else:
            data += json.dumps(draw(_json_values())).encode() + b"\n"
    return data


FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(
    data=records_files(),
    meta=st.none() | st.binary(max_size=40) | _json_values().map(lambda v: json.dumps(v).encode()),
)
def test_fuzz_records_and_meta(tmp_path_factory, data, meta):
    run = make_run(tmp_path_factory.mktemp("fuzz"), data, meta)
    _check_read(run)
    COUNTS["bad inputs tried (fuzzed run directories)"] += 1


# Readers of user files fuzzed the same way: (name, the file's name, a reader taking its path,
# a strategy producing its bytes). A reader returns (its result checked) or raises a one-line
# UsageError; strategies and readers of the files other commands read are in reliability_fuzz.
FUZZ_TARGETS: list[tuple[str, str, object, object]] = [
    ("records", RECORDS, lambda p: read_run(p.parent), records_files() | st.binary(max_size=300)),
    ("suite-file", "s.yaml", rf.read_suite, rf.suite_texts()),
    (
        "nccl-tests-log",
        "all_reduce_perf.log",
        rf.read_log("nccl-tests"),
        rf.log_texts("nccl-tests"),
    ),
    ("osu-log", "osu.log", rf.read_log("osu"), rf.log_texts("osu")),
    ("imb-log", "imb.log", rf.read_log("imb"), rf.log_texts("imb")),
    ("calibration", "cal.json", rf.read_calibration, rf.calibration_texts()),
    *(
        (f"{tool}-failed-log", f"{tool}.log", rf.read_failed_log(tool), rf.failed_log_texts(tool))
        for tool in ("nccl-tests", "osu", "imb")
    ),
]


# examples per target in `make test` (a suite file is expanded on three worlds, planned and
# dry-run: the slowest to check); the slow variant runs ten times FUZZ's 300 for each
FAST_EXAMPLES = {"suite-file": 150}


def _fuzz(tmp_path_factory, name, file_name, reader, strategy, examples: int) -> None:
    @settings(FUZZ, max_examples=examples)
    @given(data=strategy)
    def check(data):
        path = tmp_path_factory.mktemp(name) / file_name
        path.write_bytes(data)
        try:
            reader(path)
        except UsageError as e:
            assert str(e)
        COUNTS["bad inputs tried (fuzzed files)"] += 1

    check()


@pytest.mark.parametrize(
    "name,file_name,reader,strategy", FUZZ_TARGETS, ids=[t[0] for t in FUZZ_TARGETS]
)
def test_fuzz_user_files(tmp_path_factory, name, file_name, reader, strategy):
    _fuzz(tmp_path_factory, name, file_name, reader, strategy, FAST_EXAMPLES.get(name, 300))


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,file_name,reader,strategy", FUZZ_TARGETS, ids=[t[0] for t in FUZZ_TARGETS]
)
def test_fuzz_user_files_long(tmp_path_factory, name, file_name, reader, strategy):
    _fuzz(tmp_path_factory, name, file_name, reader, strategy, 10 * FUZZ.max_examples)


DRY_RUN_OK = b"runs: [{pattern: collectives, options: {ops: [allreduce], max_bytes: 4K}}]\n"


def _dry_run(tmp_path_factory, data: bytes) -> None:
    """`commbench suite FILE --dry-run --world 4` as a real process: exit 0 with the points
    listed, or exit 2 with one error line; never a traceback or an internal error."""
    path = tmp_path_factory.mktemp("dry-run") / "s.yaml"
    path.write_bytes(data)
    job = run_single("suite", str(path), "--dry-run", "--world", "4", timeout=60)
    assert job.returncode in (0, 2), job.output
    assert "Traceback" not in job.output and "internal error" not in job.output, job.output
    if job.returncode == 0:
        assert "## point 1:" in job.stdout, job.stdout
    else:
        lines = [x for x in job.stderr.splitlines() if x.startswith("commbench:")]
        assert len(lines) == 1 and lines[0].startswith("commbench: error: "), job.stderr
    COUNTS["fuzzed suite files run through commbench suite --dry-run"] += 1


@settings(FUZZ, max_examples=4)
@example(data=DRY_RUN_OK)
@example(data=DRY_RUN_OK.replace(b"4K", b"4Q"))
@given(data=rf.suite_texts())
def test_fuzz_suite_dry_run_command(tmp_path_factory, data):
    _dry_run(tmp_path_factory, data)


@pytest.mark.slow
@settings(FUZZ, max_examples=40)
@given(data=rf.suite_texts())
def test_fuzz_suite_dry_run_command_long(tmp_path_factory, data):
    _dry_run(tmp_path_factory, data)
