"""Reliability findings of a new user's first runs (issue 19), one test per finding.

Each test was written before its fix and failed on the code it fixes: a rank stopped during
start-up, failure lines in imported logs, a diagnostics directory that cannot be written,
inputs that scale work without a bound, litter and wording, first use on a small box.
"""

from __future__ import annotations

import math
import os
import signal
import time

import pytest
from reliability import (
    COUNTS,
    reliability_counts,  # noqa: F401
    run_args,
    start,
)

pytestmark = pytest.mark.mpi


def test_rank_stopped_before_mpi_init_is_timed_out(tmp_path):
    """A rank stopped ~0.2 s after launch (a node stuck importing Python from a hung
    filesystem) never reaches MPI_Init: its peers block inside MPI's initialisation, where no
    Python thread runs, so the start-up watchdog must not be a Python thread."""
    timeout = 4
    job = start(2, *run_args(tmp_path, "stopped", 2, "--timeout", str(timeout)))
    deadline = time.monotonic() + 20
    pids: dict[int, int] = {}
    while time.monotonic() < deadline and 1 not in pids:
        pids = job.rank_pids()
        time.sleep(0.02)
    assert 1 in pids, "rank 1 never started"
    # at once: a scan of /proc under load can find the rank late, and a rank stopped after
    # its points (two rounds of this test's full runs) exercises the exit alarm, not start-up
    os.kill(pids[1], signal.SIGSTOP)
    COUNTS["faults injected"] += 1
    out, elapsed = job.finish(timeout=60)
    assert out.returncode != 0, out.output
    assert f"no progress for {timeout} s in start-up" in out.stderr, out.output
    assert "Traceback" not in out.output
    assert elapsed < timeout + 30  # start-up on 2 shared cores
    COUNTS["first-use findings held"] += 1


# ---- failure and warning lines in imported logs ----

NCCL_FAILURE = "dgx-a00: Test NCCL failure common.cu:1023 'unhandled system error / connect failed'"
MPI_ABORT = (
    "--------------------------------------------------------------------------\n"
    "prterun noticed that process rank 1 with PID 4242 on node cn01 exited on\n"
    "signal 9 (Killed).\n"
    "--------------------------------------------------------------------------"
)


def _cut_after_rows(text: str, rows: int, tail: str) -> str:
    """`text` with only its first `rows` table rows, then `tail` (how a failed run ends)."""
    lines, kept, seen = text.splitlines(), [], 0
    for line in lines:
        if line.strip()[:1].isdigit():
            seen += 1
            if seen > rows:
                break
        kept.append(line)
    return "\n".join([*kept, tail, ""])


def _import(tmp_path, tool: str, text: str, *flags: str):
    from conftest import run_single

    log = tmp_path / f"{tool}.log"
    log.write_text(text)
    job = run_single(
        "import", tool, str(log), "--results", str(tmp_path), "--run-id", "imp", *flags
    )
    COUNTS["imported logs' failure modes"] += 1
    return job, log


def _meta(tmp_path) -> dict:
    import json

    return json.loads((tmp_path / "imp" / "meta.json").read_text())


@pytest.mark.parametrize(
    "tool,sample,flags,tail",
    [
        ("nccl-tests", "nccl_tests_new", (), NCCL_FAILURE),
        ("nccl-tests", "nccl_tests_new", (), MPI_ABORT),
        ("osu", "osu_collective", ("--group-size", "4", "--link-class", "intra"), MPI_ABORT),
        ("imb", "imb_log", ("--link-class", "intra"), MPI_ABORT),
    ],
    ids=["nccl-failure", "nccl-mpirun-abort", "osu-mpirun-abort", "imb-mpirun-abort"],
)
def test_imported_log_that_failed_is_marked_failed(tmp_path, tool, sample, flags, tail):
    """A log that ends in its tool's failure line (or the launcher's abort) is a failed run:
    the rows before it are kept, meta says failed and why (file:line), the exit is not 0."""
    import fit_samples

    text = _cut_after_rows(getattr(fit_samples, sample)(), 6, tail)
    job, log = _import(tmp_path, tool, text, *flags)
    assert job.returncode == 3, job.output
    assert "Traceback" not in job.output
    m = _meta(tmp_path)
    assert m["status"] == "failed", m
    first = tail.splitlines()[0 if "failure" in tail else 1].strip()
    assert m["error"].startswith(f"{log}:") and first in m["error"], m["error"]
    assert "failed" in job.stderr and str(log) in job.stderr, job.output
    COUNTS["first-use findings held"] += 1


def test_nccl_warn_lines_inside_the_table_mark_the_run_partial(tmp_path):
    import fit_samples

    lines = fit_samples.nccl_tests_new().splitlines()
    at = next(i for i, x in enumerate(lines) if x.strip()[:1].isdigit()) + 3
    warn = "dgx-a03:41003:41090 [3] NCCL WARN NET/IB : Got completion with error 12, opcode 0"
    lines.insert(at, warn)
    job, log = _import(tmp_path, "nccl-tests", "\n".join(lines))
    assert job.returncode == 0, job.output
    m = _meta(tmp_path)
    assert m["status"] == "partial" and m["warnings"] == [f"{log}:{at + 1}: {warn}"], m
    assert "NCCL WARN" in job.stderr and "partial" in job.stderr, job.output
    COUNTS["first-use findings held"] += 1


def test_nccl_tests_log_with_timestamps_imports(tmp_path):
    """nccl-tests -S 1 adds a `timestamp` column (two tokens: date and time) to every row."""
    import fit_samples

    out = []
    for line in fit_samples.nccl_tests_new().splitlines():
        if line.startswith("#       size"):
            line += " timestamp"
        elif line.startswith("#        (B)"):
            line += " %Y-%m-%d %H:%M:%S"
        elif line.strip()[:1].isdigit():
            line += "  2026-12-01 10:33:25"
        out.append(line)
    job, _ = _import(tmp_path, "nccl-tests", "\n".join(out))
    assert job.returncode == 0, job.output
    assert "# imported 50 records" in job.stdout, job.output
    assert _meta(tmp_path)["status"] == "complete"
    COUNTS["first-use findings held"] += 1


# ---- a diagnostics directory that cannot be written ----

DIAG_UNWRITABLE = {"COMMBENCH_DIAG_DIR": "/proc/commbench-diag"}


@pytest.mark.parametrize(
    "argv,code", [(("list",), 0), (("run", "allreducee"), 2)], ids=["ok", "usage-error"]
)
def test_unwritable_diag_dir_keeps_the_exit_status(argv, code):
    """The dump runs as the command ends: it must neither traceback nor replace the status."""
    from conftest import run_single

    job = run_single(*argv, env=DIAG_UNWRITABLE)
    COUNTS["bad environments"] += 1
    assert job.returncode == code, job.output
    assert "Traceback" not in job.output
    notes = [x for x in job.stderr.splitlines() if "COMMBENCH_DIAG_DIR" in x]
    assert notes == [
        "commbench: warning: COMMBENCH_DIAG_DIR=/proc/commbench-diag: cannot write rank-0.json "
        "(No such file or directory)"
    ], job.stderr
    COUNTS["first-use findings held"] += 1


def test_unwritable_diag_dir_on_a_complete_run(tmp_path):
    job = start(2, *run_args(tmp_path, "diag", 2), env=DIAG_UNWRITABLE)
    out, _ = job.finish(timeout=90)
    assert out.returncode == 0 and "Traceback" not in out.output, out.output
    from reliability import meta

    assert meta(tmp_path, "diag")["status"] == "complete"
    COUNTS["first-use findings held"] += 1


# ---- wording: messages speak flags, not Python; numbers as users write them ----


def test_plan_on_a_narrow_calibration_names_the_flag(tmp_path):
    """A measured calibration that does not cover a step: the hint is --extrapolate (the
    flag), never `extrapolate=True`; `--explain` of an unpriceable config is an error, not a
    `step 0` with exit 0."""
    import reliability_cases

    from conftest import run_single

    reliability_cases._calibration(tmp_path)
    cal = str(tmp_path / "cal.json")
    base = ("plan", "--model", "llama-7b", "--gpus", "8", "--calibration", cal)
    for argv in (base, (*base, "--explain", "tp=2,dp=4")):
        job = run_single(*argv)
        COUNTS["wording checks"] += 1
        assert job.returncode == 2, job.output
        assert "extrapolate=True" not in job.output, job.output
        errors = [x for x in job.stderr.splitlines() if x.startswith("commbench: error:")]
        assert len(errors) == 1 and "--extrapolate" in errors[0], job.output
    assert "step 0\n" not in job.stdout and "step -" in job.stdout, job.stdout
    COUNTS["first-use findings held"] += 1


def test_set_takes_a_float_in_exponent_notation():
    """`--set compute_ms=2.5e3`: YAML 1.1 reads 2.5e3 as a string; a float option takes it (1e9
    is over compute_ms' bound now, issue 33)."""
    from conftest import run_single

    job = run_single("suite", "pp", "--dry-run", "--world", "4", "--set", "compute_ms=2.5e3")
    COUNTS["wording checks"] += 1
    assert job.returncode == 0, job.output
    assert "forward_s=2.5," in job.stdout, job.stdout  # 2.5e3 ms of forward per micro-batch
    COUNTS["first-use findings held"] += 1


# ---- litter: a write that fails leaves nothing behind and names its file ----


def _file_size_limit(limit: int):
    """preexec_fn: writes past `limit` bytes fail with EFBIG, as a full disk fails them."""
    import resource

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_failed_meta_write_leaves_no_litter_and_names_the_file(tmp_path):
    import subprocess

    import fit_samples

    from conftest import REPO, commbench_cmd, job_env

    log = tmp_path / "all_reduce_perf.log"
    log.write_text(fit_samples.nccl_tests_new())
    results = tmp_path / "results"
    argv = commbench_cmd("import", "nccl-tests", str(log), "--results", str(results))
    argv += ["--run-id", "imp"]
    p = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=job_env(),
        cwd=REPO,
        timeout=60,
        preexec_fn=_file_size_limit(256),
    )
    COUNTS["full filesystems"] += 1
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert p.stderr.strip() == (
        f"commbench: error: cannot write {results / 'imp' / 'meta.json'}: File too large"
    ), p.stderr
    assert not (results / "imp").exists(), list((results / "imp").iterdir())
    again = subprocess.run(argv, capture_output=True, text=True, env=job_env(), cwd=REPO)
    assert again.returncode == 0, again.stdout + again.stderr  # the --run-id is still free
    COUNTS["first-use findings held"] += 1


# ---- first use on a small box ----


def test_more_ranks_than_cores_warns_and_is_recorded(tmp_path):
    """2 ranks confined to 1 core: every measuring command says the numbers are not
    meaningful (once, from rank 0) and meta.json keeps it."""
    import json
    import subprocess

    from conftest import REPO, commbench_cmd, job_env, mpirun_path

    cmd = [
        mpirun_path(),
        "-n",
        "2",
        "--oversubscribe",
        *commbench_cmd(*run_args(tmp_path, "ov", 2)),
    ]
    p = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env=job_env(),
        cwd=REPO,
        timeout=90,
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    )
    COUNTS["small boxes"] += 1
    assert p.returncode == 0, p.stdout + p.stderr
    warnings = [x for x in p.stderr.splitlines() if x.startswith("commbench: warning:")]
    assert len(warnings) == 1 and "2 ranks on 1 CPU core" in warnings[0], p.stderr
    assert "not meaningful" in warnings[0]
    m = json.loads((tmp_path / "ov" / "meta.json").read_text())
    assert [o["ranks"] for o in m["oversubscribed"]] == [2] and m["oversubscribed"][0]["cores"] == 1
    COUNTS["first-use findings held"] += 1


def test_oversubscription_is_per_host_against_the_cores_its_ranks_may_use():
    from commbench.measure.launch import oversubscribed

    hosts = ["a", "a", "a", "b", "b"]
    bound = [(0,), (1,), (2,), (0,), (1,)]  # one core each: fine
    assert oversubscribed(hosts, bound) == []
    shared = [(0, 1), (0, 1), (0, 1), (0,), (1,)]  # three ranks on host a's two cores
    assert oversubscribed(hosts, shared) == [{"host": "a", "ranks": 3, "cores": 2}]
    COUNTS["first-use findings held"] += 1


# ---- straggler evidence ----


def test_records_and_table_keep_mean_max_and_the_slowest_rank(tmp_path):
    """A straggler is invisible in the median and p95: every measured record keeps the max
    iteration and which rank saw it, and the table shows mean and max beside the median."""
    from reliability import check_intact

    job = start(2, *run_args(tmp_path, "strag", 3))
    out, _ = job.finish(timeout=90)
    assert out.returncode == 0, out.output
    header = next(x for x in out.stdout.splitlines() if "busbw" in x)
    assert header.split()[7:12] == ["time", "p95", "mean", "max", "slowest"], header
    for r in check_intact(tmp_path / "strag", points=3).records:
        assert r["time_min_us"] <= r["time_us"] <= r["time_p95_us"] <= r["time_max_us"]
        assert r["time_mean_us"] <= r["time_max_us"] and r["slowest_rank"] in (0, 1), r
    COUNTS["first-use findings held"] += 1


def test_progress_names_the_rank_that_never_reached_the_point(tmp_path):
    from commbench.measure.progress import Progress, describe

    boards = [Progress(tmp_path, r, 3) for r in range(3)]
    for r, last in enumerate((3, 2, 3)):
        boards[r].reached(last)
    assert boards[0].behind(3) == [(1, 2)]
    assert describe(boards[0].behind(3), 3) == "rank 1 never reached point 3 (it is at point 2)"
    for b in boards:
        b.close()
    assert not list(tmp_path.iterdir())  # each rank removes its own file
    COUNTS["first-use findings held"] += 1


def test_an_oom_kill_during_the_run_is_the_recorded_cause(tmp_path, monkeypatch):
    """A rank the OOM killer takes leaves no notice: rank 0 reads the host's oom_kill count
    (/proc/vmstat) at the start and when the launcher's SIGTERM comes, and says so."""
    from commbench.measure import notice

    vmstat = tmp_path / "vmstat"
    vmstat.write_text("pgfault 10\noom_kill 4\n")
    monkeypatch.setattr(notice, "VMSTAT", vmstat)
    n = notice.Notice(tmp_path, 0)
    assert n.oom_cause() is None
    vmstat.write_text("pgfault 12\noom_kill 5\n")
    cause = n.oom_cause()
    assert cause and "OOM killer killed 1 process(es)" in cause and "4 -> 5" in cause
    assert notice.Notice(tmp_path, 1).oom_cause() is None  # only rank 0 records
    assert notice.oom_kills() == 5
    COUNTS["first-use findings held"] += 1


# ---- suites on odd world sizes ----


@pytest.mark.parametrize("world", [3, 5, 7, 13])
def test_suite_says_which_runs_an_odd_world_drops_and_why(world):
    """smoke on a prime world: tp/pp/cp/ep have no degree > 1 that divides it and the model,
    so they are dropped; each is named with the reason instead of vanishing."""
    from conftest import run_single

    job = run_single("suite", "smoke", "--dry-run", "--world", str(world))
    COUNTS["odd world sizes"] += 1
    assert job.returncode == 0, job.output
    notes = [x for x in job.stderr.splitlines() if x.startswith("commbench: warning:")]
    dropped = {p for p in ("tp", "pp", "cp", "ep") if any(f"run {p} " in x for x in notes)}
    assert dropped == {"tp", "pp", "cp", "ep"}, job.stderr
    assert all(f"world of {world}" in x and "divide" in x for x in notes), notes
    COUNTS["first-use findings held"] += 1


def test_no_point_on_an_odd_world_blames_divisibility_not_the_rank_count(tmp_path):
    from conftest import run_single

    suite = tmp_path / "s.yaml"
    suite.write_text(
        "runs:\n- pattern: tp\n  models: [{name: t, layers: 2, hidden: 256, ffn_hidden: 512, "
        "heads: 8}]\n  degrees: {tp: max}\n"
    )
    job = run_single("suite", str(suite), "--dry-run", "--world", "3")
    assert job.returncode == 2, job.output
    errors = [x for x in job.stderr.splitlines() if x.startswith("commbench: error:")]
    assert len(errors) == 1 and "at least 2" not in errors[0], job.stderr
    assert "world of 3" in errors[0] and "divide" in errors[0], errors
    COUNTS["first-use findings held"] += 1


def test_a_config_two_runs_share_is_measured_once():
    """`suite ep --set router=zipf`: ep-router's sweep collapses onto zipf, which ep-capacity's
    default capacity factor also measures; the same configuration must not run twice."""
    from commbench.traffic.overrides import Overrides, apply_overrides
    from commbench.traffic.points import expand
    from commbench.traffic.suitefile import load_suite

    suite = apply_overrides(load_suite("ep"), Overrides(options={"router": "zipf"}))
    points = expand(suite, 8)
    keys = [(p.run.pattern, p.model, p.layout, p.options) for p in points]
    assert len(keys) == len(set(keys)), "a configuration is measured twice"
    assert [p.index for p in points] == list(range(1, len(points) + 1))
    COUNTS["first-use findings held"] += 1


def test_suite_step_lines_have_a_header_and_scaled_is_not_extrapolated(tmp_path):
    """The per-step lines under each point get a header naming their columns; a step measured
    as a chunk and scaled up is `scaled`, leaving `extrapolated` to predictions beyond a
    calibration (plan, validate)."""
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "timing: {budget: 0.01, min_iters: 2, max_iters: 3}\nmax_bytes: 64K\nruns:\n"
        "- pattern: tp\n  models: [{name: t, layers: 2, hidden: 256, ffn_hidden: 512, heads: 8,"
        " seq_len: 256}]\n  degrees: {tp: 2}\n"
    )
    job = start(2, "suite", str(suite), "--results", str(tmp_path), "--run-id", "hdr")
    out, _ = job.finish(timeout=120)
    assert out.returncode == 0, out.output
    lines = out.stdout.splitlines()
    first_step = next(i for i, x in enumerate(lines) if x.startswith("#   allreduce"))
    header = lines[first_step - 1]
    assert header.startswith("#   op ") and "per op" in header and "share" in header, header
    table_head = next(x for x in lines if x.lstrip("# ").startswith("point"))
    assert "scaled" in table_head and "extrap" not in table_head, table_head
    assert "extrapolated" not in out.stdout, out.stdout
    COUNTS["first-use findings held"] += 1


# ---- report and console: what is shown as good must be good ----


def _link(err: float) -> dict:
    fit = {"alpha_s": 2e-6, "busbw_GBps": 5.0, "median_rel_err": err, "max_rel_err": 2 * err}
    return {
        "backend": "mpi",
        "link_class": "intra",
        "timing": "per-iteration",
        "group_sizes": [2, 4],
        "ops": ["allreduce"],
        "best_model": "ring",
        "ties": [],
        "models": {"ring": fit, "tree": {**fit, "median_rel_err": err * 1.5}},
    }


def test_a_link_model_no_better_than_a_guess_is_not_marked_best():
    from commbench.tables import link_notes, link_rows

    good, bad = _link(0.04), _link(0.94)
    assert [r[-1] for r in link_rows([good])] == ["*", ""]
    assert [r[-1] for r in link_rows([bad])] == ["?", ""]  # the least bad, not "best"
    note = link_notes([bad])[0]
    assert "no model fits" in note and "94%" in note, note
    assert "no model fits" not in link_notes([good])[0]
    COUNTS["first-use findings held"] += 1


def _loads(n: int):
    from commbench.report.inputs import EPLoad

    return [
        EPLoad(
            label=f"router{i}",
            experts=[10 + i, 10, 10, 10],
            per_rank=[20 + i, 20],
            imbalance=1.0 + i / 10,
            router_imbalance=None,
            dropped=None,
            capacity=None,
        )
        for i in range(n)
    ]


def test_ep_imbalance_figure_draws_a_readable_number_of_series():
    """21 routers' loads as 21 hair-thin bars per expert read as nothing: the figure keeps the
    few that tell (most imbalanced, and the most balanced as the baseline) and says so."""
    from commbench.report.figures.strategies import MAX_EP_SERIES, ep_load, ep_series

    shown = ep_series(_loads(21))
    assert len(shown) == MAX_EP_SERIES <= 6
    assert shown[0].label == "router20" and "router0" in [s.label for s in shown]
    fig = ep_load(_loads(21))
    assert f"{MAX_EP_SERIES} of 21" in fig.caption, fig.caption
    COUNTS["first-use findings held"] += 1


def test_strategy_bars_put_models_of_different_scale_in_their_own_panels():
    """A toy model's ms bars beside llama-70b's seconds on one axis are invisible slivers:
    each (strategy, model) gets its own panel and unit."""
    from commbench.report.figures.strategies import panels
    from commbench.report.inputs import PointRow

    rows = [
        PointRow(run_id="r", index=1, pattern="tp", model="tiny", config="tp2", options="-",
                 time_us=800.0, breakdown={"allreduce@tp": 800.0}),
        PointRow(run_id="r", index=2, pattern="tp", model="llama-70b", config="tp8",
                 options="-", time_us=4e6, breakdown={"allreduce@tp": 4e6}),
    ]  # fmt: skip
    assert [(p, [r.model for r in mine]) for p, mine in panels(rows)] == [
        ("tp, tiny", ["tiny"]),
        ("tp, llama-70b", ["llama-70b"]),
    ]
    COUNTS["first-use findings held"] += 1


def test_measured_line_does_not_join_points_of_different_runs(tmp_path):
    """Two runs of the same series at different sizes: each gets its own median line; one
    line through both would invent a curve nobody measured."""
    import fit_samples

    from commbench.report.inputs import curves
    from commbench.results.rundir import read_run

    a = fit_samples.collective_records("allreduce", 4, 5e-6, 1e-9, sizes=(8, 64, 512))
    b = fit_samples.collective_records("allreduce", 4, 5e-6, 1e-9, sizes=(1024, 8192))
    fit_samples.write_run(tmp_path, "a", a)
    fit_samples.write_run(tmp_path, "b", b)
    (curve,) = curves([read_run(tmp_path / "a"), read_run(tmp_path / "b")])[0]
    assert [(run, list(x)) for run, x, _ in curve.lines()] == [
        ("a", [8.0, 64.0, 512.0]),
        ("b", [1024.0, 8192.0]),
    ]
    COUNTS["first-use findings held"] += 1


def test_a_long_plan_says_how_far_it_is_on_stderr(monkeypatch, capsys):
    """Past a few seconds the planner's loops print progress, on stderr (stdout stays the
    table or JSON a pipeline reads)."""
    from commbench.plan import progress

    monkeypatch.setattr(progress, "QUIET_S", 0.0)
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    p = progress.Progress(3, "priced")
    for i in range(3):
        p.tick(i)
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[-1].startswith("# plan: priced 2 of 3 ("), err
    monkeypatch.setattr(progress, "QUIET_S", 60.0)
    progress.Progress(3, "priced").tick(1)
    assert capsys.readouterr().err == ""  # a quick plan says nothing
    COUNTS["first-use findings held"] += 1


def test_fuzz_sweep_bounds():
    """Any -b/-e/-f/-i: at most MAX_SWEEP_SIZES sizes, ascending within [b, e], or one-line
    usage error; never a runaway loop (each call well under a second)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from commbench.errors import UsageError
    from commbench.sizes import MAX_SWEEP_SIZES, sweep

    sizes = st.integers(1, 1 << 44)

    @settings(max_examples=300, deadline=1000)
    @given(
        b=sizes,
        e=sizes,
        f=st.floats(0.5, 64) | st.sampled_from([1.0, 1.0001, 1.001, math.inf, math.nan]),
        i=st.integers(0, 1 << 30) | st.sampled_from([0, 1, 8]),
    )
    def check(b, e, f, i):
        COUNTS["bounds fuzzed"] += 1
        try:
            out = sweep(b, e, f, i)
        except UsageError as err:
            assert str(err) and "\n" not in str(err)
            return
        assert 1 <= len(out) <= MAX_SWEEP_SIZES and out == sorted(out)
        assert out[0] == b and out[-1] <= e

    check()
    COUNTS["first-use findings held"] += 1


def test_a_step_split_into_too_many_pieces_is_refused():
    """`--max-bytes` at its floor on a suite of GiB-sized steps: a 9 GiB all-to-all timed as
    one 64 KiB chunk scaled 147456 times (or a pipeline message sent in as many pieces) is
    not a measurement; the bound on pieces names the --max-bytes that would do."""
    from conftest import run_single

    job = run_single("suite", "ep", "--dry-run", "--world", "8", "--max-bytes", "64K")
    assert job.returncode == 2, job.output
    errors = [x for x in job.stderr.splitlines() if x.startswith("commbench: error:")]
    assert len(errors) == 1 and "pieces" in errors[0] and "at most 4096" in errors[0], job.stderr
    assert "raise --max-bytes to at least" in errors[0], errors
    COUNTS["first-use findings held"] += 1
