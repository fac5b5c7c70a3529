"""Helpers of the reliability suite: jobs we can signal, rank pids, intact-run checks, counts.

Jobs are real `mpirun` (or torchrun) launches. Each carries a unique COMMBENCH_TEST_TAG in its
environment so its rank processes can be found in /proc (and nobody else's are touched).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from commbench.results.rundir import META, RECORDS, Run, read_run

from conftest import REPO, Job, commbench_cmd, job_env, mpirun_path

# Tallied by the tests, printed once at the end of the session (see `reliability_counts`).
COUNTS: Counter = Counter()

FAST_POINTS = ("--iters", "3", "--warmup", "1")


def sizes(n: int) -> tuple[str, ...]:
    """`--sizes 8,16,24,...` with n points (small: the point, not the size, is what matters)."""
    return ("--sizes", ",".join(str(8 * (i + 1)) for i in range(n)))


def run_args(tmp_path, run_id: str, points: int = 6, *extra: str) -> tuple[str, ...]:
    """`commbench run allreduce` over `points` tiny sizes, writing <tmp_path>/<run_id>."""
    return (
        "run",
        "allreduce",
        *sizes(points),
        *FAST_POINTS,
        "--results",
        str(tmp_path),
        "--run-id",
        run_id,
        *extra,
    )


def meta(tmp_path, run_id: str) -> dict:
    """The run's meta.json as written (status, error, stop_signal)."""
    return json.loads((tmp_path / run_id / "meta.json").read_text())


@dataclass
class Started:
    """A job running in the background: its process, tag, and where it writes."""

    proc: subprocess.Popen
    tag: str
    t0: float

    def rank_pids(self) -> dict[int, int]:
        """World rank -> pid of this job's rank processes (read from /proc/*/environ)."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                env = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"COMMBENCH_TEST_TAG={self.tag}".encode() not in env:
                continue
            for var in (b"OMPI_COMM_WORLD_RANK=", b"RANK="):
                hit = next((v for v in env if v.startswith(var)), None)
                if hit is not None and int(entry.name) != self.proc.pid:
                    found[int(hit[len(var) :])] = int(entry.name)
                    break
        return found

    def signal(self, sig: int) -> None:
        """Send `sig` to the launcher (mpirun / torchrun)."""
        self.proc.send_signal(sig)
        COUNTS["faults injected"] += 1

    def kill_rank(self, rank: int) -> None:
        """SIGKILL one rank process from outside, as an OOM killer or a dead node would."""
        pids = self.rank_pids()
        assert rank in pids, pids
        os.kill(pids[rank], signal.SIGKILL)
        COUNTS["faults injected"] += 1

    def finish(self, timeout: float) -> tuple[Job, float]:
        """Wait for the job (killing it if it overstays); the Job and seconds since start."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate()
            pytest.fail(f"job still running after {timeout} s:\n{out}\n{err}")
        return Job(self.proc.returncode, out, err), time.monotonic() - self.t0

    def down_after(self, run_dir: Path, points: int, timeout: float = 60) -> tuple[Job, float]:
        """Wait until `points` records are on disk (the fault's point is next), then for the
        job's end: the Job and the seconds between the two, i.e. how fast a fault takes the
        job down, whatever the start-up cost on a loaded machine."""
        wait_for_records(run_dir, points, self, timeout)
        t = time.monotonic()
        out, _ = self.finish(timeout)
        return out, time.monotonic() - t

    def kill(self) -> None:
        """Take the job down hard: the launcher and every rank it started."""
        for pid in self.rank_pids().values():
            _signal_pid(pid, signal.SIGKILL)
        _signal_pid(self.proc.pid, signal.SIGKILL)


def _signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def start(
    n: int, *args: str, env: dict | None = None, fault: str | None = None, launcher="mpirun"
) -> Started:
    """Start `commbench ARGS` on n ranks in the background (launcher: mpirun or torchrun)."""
    tag = uuid.uuid4().hex
    extra = {"COMMBENCH_TEST_TAG": tag, **(env or {})}
    if fault:
        extra["COMMBENCH_FAULT"] = fault
        if "kind=delay" not in fault:  # a delay only holds the job mid-run for the test
            COUNTS["faults injected"] += 1
    if launcher == "mpirun":
        mpirun = mpirun_path()
        if mpirun is None:
            pytest.skip("no mpirun")
        cmd = [mpirun, "-n", str(n), "--oversubscribe", *commbench_cmd(*args)]
    else:
        torchrun = Path(sys.executable).parent / "torchrun"
        if not torchrun.exists():
            pytest.skip("no torchrun")
        cmd = [str(torchrun), "--nproc-per-node", str(n), "-m", "commbench", *args]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=job_env(extra),
        cwd=REPO,
    )
    return Started(proc, tag, time.monotonic())


def wait_for_records(run_dir: Path, count: int, job: Started, timeout: float = 60) -> None:
    """Block until the run has written `count` records (fails if the job ends first)."""
    deadline = time.monotonic() + timeout
    path = run_dir / RECORDS
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        if job.proc.poll() is not None:
            out, err = job.proc.communicate()
            pytest.fail(f"job ended (rc {job.proc.returncode}) before {count} records:\n{out}{err}")
        time.sleep(0.05)
    job.kill()
    pytest.fail(f"no {count} records in {run_dir} after {timeout} s")


def check_intact(run_dir: Path, points: int | None = None, allow_torn: bool = False) -> Run:
    """The run reads back, every complete line is a JSON record, and it holds `points` of them
    (every point that finished). Counts one run checked intact."""
    raw = (run_dir / RECORDS).read_bytes()
    lines = raw.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    for line in complete:
        json.loads(line)  # every newline-terminated line is a whole record
    assert allow_torn or tail == b"", f"torn last line in {run_dir}: {tail[:80]!r}"
    run = read_run(run_dir)
    assert json.loads((run_dir / META).read_text())["status"] == run.status
    if points is not None:
        assert len(run.records) == points, (len(run.records), points)
        assert [r["bytes"] for r in run.records] == sorted(r["bytes"] for r in run.records)
    COUNTS["runs checked intact"] += 1
    return run


# The commands that read runs, as the reliability suite runs them on a partial run (the one
# place it calls them): `fit` and `report`.
READERS = {
    "fit": lambda run, scratch: ["fit", str(run), "--bootstrap", "0"],
    "report": lambda run, scratch: ["report", str(run), "-o", str(scratch / "report")],
}


def check_fit_accepts(run_dir: Path) -> None:
    """A partial run is input `fit` and `report` take, saying it is partial: read_run loads it
    and `partial_note()` says so; then each reader runs on the run directory as a plain process, must succeed, and must print that note (fit) or the word partial."""
    run = read_run(run_dir)
    note = run.partial_note()
    assert run.partial and note and "partial" in note
    for command, argv in READERS.items():
        scratch = run_dir.parent / f".{run_dir.name}-{command}"
        scratch.mkdir(exist_ok=True)
        p = subprocess.run(
            commbench_cmd(*argv(run_dir, scratch)),
            capture_output=True,
            text=True,
            timeout=120,
            env=job_env({"COMMBENCH_TEST_TAG": uuid.uuid4().hex}),
            cwd=scratch,
        )
        out = p.stdout + p.stderr
        assert p.returncode == 0, f"{command} refused a partial run:\n{out}"
        assert "partial" in out.lower(), f"{command} did not say partial:\n{out}"
        if command == "fit":
            assert note in out, f"fit did not print the run's partial note {note!r}:\n{out}"
        COUNTS[f"partial runs accepted by {command}"] += 1


class _CountsSummary:
    """A pytest plugin object: adds the counts to the terminal summary."""

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if COUNTS:
            line = ", ".join(f"{v} {k}" for k, v in sorted(COUNTS.items()))
            terminalreporter.write_line(f"reliability: {line}")


@pytest.fixture(scope="session", autouse=True)
def reliability_counts(request):
    """Print what the reliability suite tried (bad inputs, faults, intact runs) at the end."""
    manager = request.config.pluginmanager
    if not manager.has_plugin("commbench-reliability-counts"):
        manager.register(_CountsSummary(), "commbench-reliability-counts")
    return COUNTS
