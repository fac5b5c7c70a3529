"""A newcomer's bad inputs (issue 33), one test per finding: nothing lost, nothing unbounded,
no internal errors.

Each test was written before its fix and failed on the code it fixes: an output path that
overwrote the command's own input or a run's records (exit 0), a text file with one Latin-1
byte, integers of thousands of digits, option values large enough for a MemoryError or an
hour of expansion, a check schedule of five billion pairs, a 100 KB value echoed in full, and
an off-cache scratch sized by a VM's whole-socket L3. Each command runs as a plain process
under a memory limit and a timeout, so the old behaviour fails the test rather than the box.
"""

from __future__ import annotations

import json
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from reliability import COUNTS, reliability_counts  # noqa: F401

from commbench.errors import EXIT_USAGE

from conftest import REPO, Job, commbench_cmd, job_env

LIMIT_S = 30.0
MEMORY_LIMIT = 4 << 30  # an unbounded expansion dies here instead of taking the machine
HUGE = "9" * 5000  # over Python's 4300-digit int() limit
KEY = "issue-33 newcomer findings held"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def cb(*args: str, cwd: Path = REPO, timeout: float = LIMIT_S) -> tuple[Job, float]:
    """`python -m commbench ARGS` as a plain process, memory-limited; (Job, seconds)."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            commbench_cmd(*args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=job_env(),
            cwd=cwd,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout} s: commbench {' '.join(args)[:200]}")
    return Job(p.returncode, p.stdout, p.stderr), time.monotonic() - t0


def refused(job: Job, match: str) -> str:
    """Exit 2 with one `commbench: error:` line matching `match`, no traceback or internal
    error; counts one finding held."""
    assert "Traceback" not in job.output and "internal error" not in job.output, job.output
    assert job.returncode == EXIT_USAGE, f"status {job.returncode}:\n{job.output[-2000:]}"
    lines = [ln for ln in job.stderr.splitlines() if ln.startswith("commbench: error:")]
    assert len(lines) == 1, job.output[-2000:]
    assert re.search(match, lines[0]), f"{lines[0][:500]!r} !~ {match!r}"
    assert len(lines[0]) < 600, f"{len(lines[0])} characters: {lines[0][:300]}..."
    COUNTS[KEY] += 1
    return lines[0]


# ---- data loss: an output path is never an input, never a run's own files ----


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run imported from a synthetic nccl-tests log: something `fit` can fit."""
    from fit_samples import nccl_tests_new

    root = tmp_path_factory.mktemp("runs")
    log = root / "nccl.log"
    log.write_text(nccl_tests_new())
    job, _ = cb("import", "nccl-tests", str(log), "--results", str(root), "--run-id", "r")
    assert job.returncode == 0, job.output
    return root / "r"


@pytest.mark.parametrize("name", ["records.jsonl", "meta.json"])
def test_fit_output_onto_its_run_is_refused(run_dir, name):
    target = run_dir / name
    before = target.read_bytes()
    job, _ = cb("fit", str(run_dir), "--bootstrap", "0", "-o", str(target))
    refused(job, rf"-o {re.escape(str(target))}: .*{name}.* of run {run_dir.name}")
    assert target.read_bytes() == before


def test_plan_output_onto_a_run_is_refused(run_dir):
    target = run_dir / "records.jsonl"
    before = target.read_bytes()
    job, _ = cb("plan", "--model", "llama-7b", "--gpus", "8", "-o", str(target))
    refused(job, r"records.jsonl.* of run r")
    assert target.read_bytes() == before


def test_export_output_onto_its_input_is_refused(tmp_path):
    from commbench.calibration import reference

    cal = tmp_path / "cal.json"
    shutil.copyfile(reference.shipped_path(), cal)
    before = cal.read_bytes()
    job, _ = cb("export", "astra-sim", str(cal), "-o", str(cal))
    refused(job, r"-o .*cal.json: is also an input of this command \(CAL\)")
    assert cal.read_bytes() == before


def test_report_output_into_a_run_is_refused(run_dir, tmp_path):
    job, _ = cb("report", str(run_dir), "-o", str(run_dir))
    refused(job, r"-o .*: is run directory r")


# ---- internal errors: every text file read alike, every number parsed alike ----

THRESHOLDS = "min_pct: 80   # caf\xe9 (Latin-1)\nexpect:\n  - {op: sendrecv, GBps: 1.0}\n"


def test_latin1_byte_in_a_thresholds_comment_is_tolerated(tmp_path):
    path = tmp_path / "expect.yaml"
    path.write_bytes(THRESHOLDS.encode("latin-1"))
    job, _ = cb("check", "--thresholds", str(path), "--dry-run", "--world", "4")
    assert job.returncode == 0, job.output
    assert "round 3:" in job.stdout
    COUNTS[KEY] += 1


def test_latin1_byte_in_thresholds_data_names_file_and_byte(tmp_path):
    path = tmp_path / "expect.yaml"
    path.write_bytes("expect:\n  - {op: sendrecv, GBps: 1.0, caf\xe9: 1}\n".encode("latin-1"))
    job, _ = cb("check", "--thresholds", str(path), "--dry-run", "--world", "4")
    refused(job, r"--thresholds .*expect.yaml: byte 41 \(line 2, 0xe9\) is not UTF-8")


def test_latin1_byte_in_report_plan_names_file_and_byte(tmp_path):
    path = tmp_path / "plan.json"
    path.write_bytes(b'{"x": "caf\xe9"}')
    job, _ = cb("report", "--plan", str(path), "-o", str(tmp_path / "rep"))
    refused(job, r"plan .*plan.json: byte 10 \(line 1, 0xe9\) is not UTF-8")


def test_latin1_byte_in_export_base_names_file_and_byte(tmp_path):
    path = tmp_path / "base.json"
    path.write_bytes(b'{"networks": [], "n": "caf\xe9"}')
    job, _ = cb("export", "calculon", "reference", "--base", str(path))
    refused(job, r"--base .*base.json: byte 26 \(line 1, 0xe9\) is not UTF-8")


def test_thousands_of_digits_in_model_layers():
    job, _ = cb("plan", "--model", f"llama-7b:layers={HUGE}", "--gpus", "8")
    refused(job, r"layers: .*5000 digits.*bound")


def test_thousands_of_digits_in_a_size():
    job, _ = cb("run", "allreduce", "-b", HUGE)
    refused(job, r"-b/--minbytes .*5000 digits, over the bound of")


def test_thousands_of_digits_in_set():
    job, _ = cb("suite", "pp", "--dry-run", "--world", "8", "--set", f"micro_batches={HUGE}")
    refused(job, r"--set micro_batches: .*5000 digits.*bound")


@pytest.mark.parametrize(("suite", "key"), [("ep", "micro_batch"), ("step", "seq_len")])
def test_set_large_enough_for_a_memory_error(suite, key):
    job, _ = cb("suite", suite, "--dry-run", "--world", "8", "--set", f"{key}=100000000")
    refused(job, rf"{key}.* over the bound of \d+")


def test_check_dry_run_on_a_huge_world():
    job, elapsed = cb("check", "--dry-run", "--world", "100000")
    refused(job, r"--world: .100000. is over the bound of 65536")
    assert elapsed < 10


def test_check_all_pairs_schedule_is_bounded():
    job, elapsed = cb("check", "--dry-run", "--world", "60000")
    refused(job, r"--schedule all on 60000 ranks: \d+ pairs in 59999 rounds, over the bound of")
    assert elapsed < 10


def test_check_sampled_on_a_large_world_is_quick():
    """Sampled rounds are built one by one, not from the whole tournament (O(world^2))."""
    job, elapsed = cb(
        "check", "--dry-run", "--world", "32768", "--schedule", "sampled", "--peers", "2"
    )
    assert job.returncode == 0, job.output[-2000:]
    assert sum(line.startswith("round ") for line in job.stdout.splitlines()) == 2
    assert elapsed < 15
    COUNTS[KEY] += 1


# ---- unbounded: every number that scales work has a bound the message names ----


@pytest.mark.parametrize("value", ["1000000000", "1000000"])
def test_set_micro_batches_is_bounded(value):
    job, elapsed = cb("suite", "pp", "--dry-run", "--world", "8", "--set", f"micro_batches={value}")
    refused(job, r"micro_batches.*over the bound of 4096")
    assert elapsed < 10


def test_the_planner_still_prices_many_micro_batches():
    """The option bounds hold where a suite builds micro-batches (suite files, --set), not
    where the planner prices them: --global-batch 100000 on 512 GPUs has configs of 6250."""
    from commbench.traffic import patterns

    assert patterns.make_options("pp", {"micro_batches": 6250}, "options.pp").micro_batches == 6250


def test_set_ops_with_ten_thousand_entries_is_bounded():
    ops = "[" + ",".join(["allreduce"] * 10000) + "]"
    job, elapsed = cb("suite", "collectives", "--dry-run", "--world", "4", "--set", f"ops={ops}")
    refused(job, r"ops: 10000 entries, over the bound of \d+")
    assert len(job.output) < 2000 and elapsed < 10


def test_iterations_are_bounded():
    job, elapsed = cb("run", "allreduce", "-n", "1000000000")
    refused(job, r"-n/--iters: '1000000000' is over the bound of 100000")
    assert elapsed < 10


def test_a_long_set_value_is_not_echoed_in_full():
    job, _ = cb("suite", "ep", "--dry-run", "--world", "8", "--set", "router=" + "x" * 100_000)
    line = refused(job, r"router")
    assert "characters" in line and len(job.output) < 2000


def test_echo_cut_keeps_paths_whole():
    """The cut is for echoed values, not for the deep paths messages name."""
    from commbench.limits import shorten_message

    path = "/tmp/" + "d" * 200 + "/cal.json:3: not valid JSON"
    assert shorten_message(path) == path
    cut = shorten_message("router " + "x" * 100_000 + ": choose from uniform")
    assert len(cut) < 300 and cut.endswith(": choose from uniform") and "characters" in cut


# ---- off-cache: the scratch a rank touches is sized by the cache that matters ----


def _sysfs(tmp_path: Path, caches: list[tuple[int, str, str, str]]) -> Path:
    """A fake /sys/devices/system/cpu/cpu0/cache: (level, type, size, shared_cpu_list)."""
    root = tmp_path / "cache"
    for i, (level, kind, size, shared) in enumerate(caches):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
        (d / "shared_cpu_list").write_text(f"{shared}\n")
    return root


# This VM: a 2-vCPU guest shown the host's whole 480 MiB L3 as shared by its 2 vCPUs.
VM = [(1, "Data", "48K", "0"), (1, "Instruction", "64K", "0"), (2, "Unified", "2048K", "0"),
      (3, "Unified", "491520K", "0-1")]  # fmt: skip


def test_off_cache_scratch_is_the_cache_a_rank_can_hold(tmp_path):
    from commbench.measure import offcache

    size = offcache.scratch(_sysfs(tmp_path, VM))
    # twice (the private L2 + a per-core L3 share capped at MAX_L3_SHARE): tens of MiB, where
    # twice the whole L3 (960 MiB) made the README's off-cache line run for hours
    assert size.nbytes == 2 * ((2 << 20) + offcache.MAX_L3_SHARE)
    assert "L2 2 MiB" in size.why and "capped" in size.why
    # a real socket: 32 MiB of L3 over 16 cores -> 2 MiB a core, not capped
    real = [(2, "Unified", "1024K", "0"), (3, "Unified", "32768K", "0-15")]
    size = offcache.scratch(_sysfs(tmp_path / "real", real))
    assert size.nbytes == 2 * ((1 << 20) + (2 << 20))
    COUNTS[KEY] += 1


def test_off_cache_estimate_is_printed_before_a_long_run():
    from commbench.measure import offcache

    line = offcache.estimate(points=26, iterations=1200, flush_s=0.004, scratch_bytes=36 << 20)
    assert line is not None and "2.1 min" in line and "36 MiB" in line
    assert offcache.estimate(points=3, iterations=20, flush_s=0.004, scratch_bytes=1 << 20) is None
    COUNTS[KEY] += 1


def test_json_numbers_of_thousands_of_digits(tmp_path):
    """A calibration with a 5000-digit integer: one line, not int()'s ValueError."""
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"schema_version": 1}).replace("1}", HUGE + "}"))
    job, _ = cb("export", "astra-sim", str(path))
    refused(job, r"cal.json: .*5000 digits")


def test_every_output_flag_goes_through_the_one_rule():
    """Every command's -o is dest `output`, the one the front door checks (check_output)."""
    from commbench import cli
    from commbench.results.outputs import OUTPUT_DEST

    parser, _ = cli.build_parser()
    sub = cli._subparser(parser, "fit")
    assert sub is not None
    commands = next(a for a in parser._actions if a.dest == "command").choices
    seen = 0
    for name, p in commands.items():
        for action in p._actions:
            if "-o" in action.option_strings:
                assert action.dest == OUTPUT_DEST, (name, action.dest)
                seen += 1
    assert seen >= 5  # fit, plan, validate, report, export
