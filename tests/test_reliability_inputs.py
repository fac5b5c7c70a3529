"""Bad inputs end the job at once: status 2 and one clear line from rank 0, on every rank alike.

Two views of every row of reliability_cases.BAD_INPUTS:
- rank by rank, in-process: the launcher's environment is faked for each rank and the command
  must fail with the same message on every rank without opening a backend (agreement before
  communication, checked directly);
- under a real `mpirun` (a plain process for ranks=1): exit status 2 within 30 s, exactly one
  `commbench: error:` line, from rank 0, no traceback. The launches run a few at a time, once
  per module, and each row then asserts on its own result.
"""

from __future__ import annotations

import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from reliability import COUNTS, reliability_counts  # noqa: F401
from reliability_cases import BAD_INPUTS, BadInput

from commbench import cli
from commbench.errors import EXIT_USAGE

from conftest import REPO, Job, commbench_cmd, job_env, mpirun_path

LIMIT_S = 30.0
PARALLEL = 3  # launches at once: the machine has 2 cores shared with others


def _params(cases):
    out = []
    for c in cases:
        marks = []
        if c.skip:
            marks.append(pytest.mark.skip(reason=c.skip))
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


def _launch(case: BadInput, root: Path) -> tuple[Job, float]:
    tmp = root / case.id
    tmp.mkdir()
    if case.setup:
        case.setup(tmp)
    argv = case.resolve(tmp)
    if case.ranks == 1:
        cmd = commbench_cmd(*argv)
    else:
        cmd = [mpirun_path(), "-n", str(case.ranks), "--oversubscribe", *commbench_cmd(*argv)]
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=LIMIT_S + 30,
            env=job_env(case.env),
            cwd=REPO,
        )
    except subprocess.TimeoutExpired as e:
        return Job(-1, str(e.stdout), f"TIMEOUT {e}"), time.monotonic() - t0
    return Job(p.returncode, p.stdout, p.stderr), time.monotonic() - t0


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict[str, tuple[Job, float]]:
    """Every available row launched once, a few at a time."""
    if mpirun_path() is None:
        pytest.skip("no mpirun")
    root = tmp_path_factory.mktemp("bad-inputs")
    cases = [c for c in BAD_INPUTS if not c.skip]
    with ThreadPoolExecutor(PARALLEL) as pool:
        results = dict(zip((c.id for c in cases), pool.map(lambda c: _launch(c, root), cases)))
    COUNTS["bad inputs tried under mpirun"] += sum(c.ranks > 1 for c in cases)
    COUNTS["bad inputs tried as a plain process"] += sum(c.ranks == 1 for c in cases)
    return results


def _error_lines(text: str) -> list[str]:
    """commbench's lines but its warnings (more ranks than cores on a small box, say)."""
    return [
        line
        for line in text.splitlines()
        if line.startswith("commbench:") and not line.startswith("commbench: warning:")
    ]


@pytest.mark.mpi
@pytest.mark.parametrize("case", _params(BAD_INPUTS))
def test_launched(case: BadInput, launched):
    job, elapsed = launched[case.id]
    assert job.returncode == EXIT_USAGE, f"status {job.returncode}:\n{job.output}"
    assert elapsed < LIMIT_S, f"took {elapsed:.1f} s"
    assert "Traceback" not in job.output, job.output
    lines = _error_lines(job.stderr)
    assert len(lines) == 1, f"want one line from rank 0, got:\n{job.output}"
    assert lines[0].startswith("commbench: error: "), lines  # rank 0's form, no rank prefix
    assert re.search(case.match, lines[0]), f"{lines[0]!r} !~ {case.match!r}"


def _rank_env(rank: int, size: int) -> dict[str, str]:
    return {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(size),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(size),
    }


@pytest.mark.parametrize(
    "case", _params([c for c in BAD_INPUTS if c.before_communication and c.ranks > 1])
)
def test_every_rank_agrees(case: BadInput, monkeypatch, capsys, tmp_path):
    """Each rank, on its own, fails with the same message and never opens a backend."""
    if case.setup:
        case.setup(tmp_path)
    argv = case.resolve(tmp_path)
    for key, value in case.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(cli, "USAGE_LINGER_S", 0.0)
    monkeypatch.setattr(cli, "_is_root", lambda: True)  # let every rank print, to compare

    def no_session(self):
        raise AssertionError("validation passed: this rank would start communicating")

    monkeypatch.setattr("commbench.measure.session.Session.__enter__", no_session)
    messages = []
    for rank in range(case.ranks):
        for key, value in _rank_env(rank, case.ranks).items():
            monkeypatch.setenv(key, value)
        try:
            status = cli.main(argv)
        except SystemExit as e:
            status = e.code
        err = capsys.readouterr().err
        assert status == EXIT_USAGE, f"rank {rank}: status {status}\n{err}"
        lines = _error_lines(err)
        assert len(lines) == 1 and re.search(case.match, lines[0]), f"rank {rank}: {err}"
        messages.append(lines[0])
    assert len(set(messages)) == 1, messages
    COUNTS["bad inputs checked on every rank"] += 1


def test_table_is_big_enough():
    """The issue asks for at least 30 distinct bad inputs."""
    ids = [c.id for c in BAD_INPUTS]
    assert len(ids) == len(set(ids))
    assert len(ids) >= 30


@pytest.mark.mpi
def test_rank0_message_survives_a_late_rank0():
    """Rank 0 starts 2 s after the others (a slow node): its line still gets out, because the
    other ranks wait for the launcher rather than exit first and get rank 0 killed mid-print."""
    if mpirun_path() is None:
        pytest.skip("no mpirun")
    late = 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then sleep 2; fi; exec "$@"'
    cmd = [mpirun_path(), "-n", "4", "--oversubscribe", "sh", "-c", late, "sh"]
    p = subprocess.run(
        [*cmd, *commbench_cmd("run", "allreduce", "-b", "12Q")],
        capture_output=True,
        text=True,
        timeout=60,
        env=job_env(),
        cwd=REPO,
    )
    assert p.returncode == EXIT_USAGE
    assert _error_lines(p.stderr) == [
        "commbench: error: -b/--minbytes '12Q' does not parse: use a positive integer with an "
        "optional K/M/G suffix (powers of 1024), e.g. 8, 64K, 256M"
    ], p.stderr
    COUNTS["bad inputs tried under mpirun"] += 1
