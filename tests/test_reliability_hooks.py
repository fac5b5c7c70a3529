"""The pieces the reliability machinery is built from, in one process: fault plans, the
watchdog, the run-directory status rules and the usage-error exit of non-root ranks."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from reliability import COUNTS, reliability_counts  # noqa: F401

from commbench import cli
from commbench.errors import EXIT_USAGE, UsageError
from commbench.measure import faults
from commbench.measure.watchdog import Watchdog

GOOD_FAULTS = {
    "rank=1,point=3,kind=raise": faults.Fault(1, 3, "raise"),
    "rank=all,point=0,kind=usage": faults.Fault(faults.ALL, 0, "usage"),
    "rank=0,point=start,kind=hang": faults.Fault(0, faults.START, "hang"),
    " rank = 2 , point = 1 , kind = delay , seconds = 0.5 ": faults.Fault(2, 1, "delay", 0.5),
    "rank=3,point=9,kind=exit,code=7": faults.Fault(3, 9, "exit", code=7),
}
BAD_FAULTS = {
    "rank=1,point=3": r"needs kind",
    "rank=1,point=3,kind=melt": r"kind must be one of raise, usage",
    "rank=1,point=3,kind=raise,when=now": r"unknown key\(s\) when",
    "rank=one,point=3,kind=raise": r"are integers",
    "rank=1,point=-2,kind=raise": r"out of range",
    "rank=1,point=3,kind=delay,seconds=nan": r"out of range",
    "rank=1,point=3,kind=exit,code=0": r"out of range",
    "rank=1,,kind=raise": r"'' is not key=value",
    "rank=1,point=,kind=raise": r"'point=' is not key=value",
}


@pytest.mark.parametrize("text", GOOD_FAULTS)
def test_fault_specs_parse(text):
    assert faults.parse(text) == GOOD_FAULTS[text]


@pytest.mark.parametrize("text", BAD_FAULTS)
def test_bad_fault_specs_are_usage_errors(text):
    with pytest.raises(UsageError, match=BAD_FAULTS[text]):
        faults.parse(text)
    COUNTS["bad inputs tried (fault specs)"] += 1


def test_injector_fires_only_on_its_rank_and_point():
    plan = faults.Fault(1, 2, "raise")
    faults.Injector(0, plan).at(2)  # another rank: nothing
    quiet = faults.Injector(1, plan)
    for point in (faults.START, 0, 1, 3):
        quiet.at(point)
    with pytest.raises(faults.InjectedFault, match="on rank 1 at point 2"):
        quiet.at(2)
    with pytest.raises(UsageError, match="on every rank at point 0"):
        faults.Injector(5, faults.Fault(faults.ALL, 0, "usage")).at(0)
    t0 = time.monotonic()
    faults.Injector(0, faults.Fault(0, 4, "delay", 0.2)).at(4)
    assert time.monotonic() - t0 >= 0.2


def test_no_fault_planned_by_default(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    assert faults.from_env() is None
    faults.Injector.from_env(0).at(0)


def test_watchdog_fires_after_deadline_and_not_when_disarmed():
    fired: list[str] = []
    done = threading.Event()

    def on_timeout(label: str) -> None:
        fired.append(label)
        done.set()

    dog = Watchdog(0.4, on_timeout)
    with dog.guard("quick"):
        time.sleep(0.1)
    time.sleep(0.6)
    assert fired == []  # disarmed in time
    t0 = time.monotonic()
    with dog.guard("slow point"):
        assert done.wait(5)
    assert fired == ["slow point"] and 0.4 <= time.monotonic() - t0 < 2.0


def test_non_root_usage_error_waits_then_exits_quietly(monkeypatch, capsys):
    """A rank other than 0 lingers (so the launcher kills it after rank 0 has spoken), then
    exits 2 without a word; with --verbose it says what it saw."""
    monkeypatch.setattr(cli, "USAGE_LINGER_S", 0.3)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    t0 = time.monotonic()
    assert cli.main(["run", "allreduce", "-b", "12Q"]) == EXIT_USAGE
    assert time.monotonic() - t0 >= 0.3
    assert capsys.readouterr().err == ""
    monkeypatch.setattr("sys.argv", ["commbench", "--verbose"])
    assert cli.main(["run", "allreduce", "-b", "12Q", "--verbose"]) == EXIT_USAGE
    assert "commbench: rank 3: error: -b/--minbytes '12Q'" in capsys.readouterr().err


WAITER = """
import sys, threading, time
from commbench.measure.launch import detect
from commbench.measure.transport import open_world
w = open_world("mpi", detect(), 30)
ticks = []
def tick():
    while True:
        ticks.append(time.monotonic())
        time.sleep(0.01)
if w.rank == 0:
    threading.Thread(target=tick, daemon=True).start()
calls = {"max_int": lambda: w.max_int(1), "max_float": lambda: w.max_float(1.0),
         "allgather_obj": lambda: w.allgather_obj(1), "gather_obj": lambda: w.gather_obj(1),
         "barrier": w.barrier}
for name, call in calls.items():
    if w.rank == 0:
        n0 = len(ticks)
        call()
        print(name, len(ticks) - n0, flush=True)
    else:
        time.sleep(0.5)  # rank 0 waits half a second in each call
        call()
"""


@pytest.mark.mpi
def test_waiting_in_a_collective_leaves_other_threads_running():
    """While rank 0 waits in a control collective, its watchdog and signal threads must run:
    mpi4py's pickled allreduce(op=MAX) held the GIL, so a peer hung at a stop agreement hung
    everyone and a SIGTERM could not be recorded before mpirun's SIGKILL."""
    from conftest import REPO, job_env, mpirun_path

    if mpirun_path() is None:
        pytest.skip("no mpirun")
    p = subprocess.run(
        [mpirun_path(), "-n", "2", "--oversubscribe", sys.executable, "-c", WAITER],
        capture_output=True,
        text=True,
        timeout=120,
        env=job_env(),
        cwd=REPO,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    ticks = dict(line.split() for line in p.stdout.splitlines())
    assert set(ticks) == {"max_int", "max_float", "allgather_obj", "gather_obj", "barrier"}
    for name, count in ticks.items():
        assert int(count) >= 10, f"{name}: other threads ran {count} times in 0.5 s"
