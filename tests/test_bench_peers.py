"""bench/peers.py's table logic, pure: the OSU and IMB tables it reads and the ratio it prints
(median over rounds of the ratio within each round). Building and running the C tools needs
their sources and is the benchmark's job, not a test's."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import REPO

OSU_LOG = """\
# OSU MPI-CUDA Latency Test v7.4
# Datatype: MPI_CHAR.
# Size       Avg Latency(us)
8                       0.42
16                      0.48
4194304               612.30
"""
IMB_LOG = """\
#----------------------------------------------------------------
# Benchmarking PingPong
# #processes = 2
#----------------------------------------------------------------
       #bytes #repetitions      t[usec]   Mbytes/sec
            0         1000         0.21         0.00
            8         1000         0.40        20.12
#----------------------------------------------------------------
# Benchmarking Allreduce
# #processes = 2
#----------------------------------------------------------------
       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]
            0         1000         0.09         0.09         0.09
            8         1000         0.65         0.69         0.67
"""


@pytest.fixture(scope="module")
def peers():
    sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location("peers", REPO / "bench" / "peers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_reads_osu_tables(peers):
    assert peers.parse_osu(OSU_LOG) == {8: 0.42, 16: 0.48, 4194304: 612.30}


def test_reads_imb_pingpong_time_and_collective_average_without_zero_bytes(peers):
    got = peers.parse_imb(IMB_LOG)
    assert got == {"PingPong": {8: 0.40}, "Allreduce": {8: 0.67}}


def test_ratio_is_the_median_over_rounds_of_ratios_within_a_round(peers):
    # the load drifts: round 2 is slow for both tools; the ratio of medians would say 2x
    rounds = [
        {("commbench", "allreduce", 2, 8): 2.0, ("osu", "allreduce", 2, 8): 1.0},
        {("commbench", "allreduce", 2, 8): 3.0, ("osu", "allreduce", 2, 8): 3.0},
        {("commbench", "allreduce", 2, 8): 1.0, ("osu", "allreduce", 2, 8): 1.0},
        {("osu", "allreduce", 2, 16): 1.0},  # no commbench time this round: no ratio
    ]
    assert peers.ratio_table(rounds, "osu") == {("allreduce", 2, 8): 1.0}
    assert peers.ratio_table(rounds, "imb") == {}


def test_table_counts_cells_outside_the_band(peers, capsys):
    tables = {"osu": {("pingpong", 2, 8): 0.95, ("pingpong", 2, 16): 1.3}, "imb": {}}
    assert peers.print_table(tables, 0.9, 1.1) == 1
    out = capsys.readouterr().out
    assert "1.30" in out and "0.95" in out


def test_medians_compare_each_tools_typical_job(peers):
    # a bimodal machine draws each job's state; the pairing of draws within a round decides a
    # median of ratios, not the tools: the ratio of medians compares their typical jobs
    times = {"commbench": [1.0, 2.0, 3.0], "osu": [3.0, 1.0, 2.0]}
    rounds = [{(who, "pingpong", 2, 8): ts[i] for who, ts in times.items()} for i in range(3)]
    assert peers.ratio_table(rounds, "osu") == {("pingpong", 2, 8): 1.5}
    assert peers.medians_table(rounds, "osu") == {("pingpong", 2, 8): 1.0}
    assert peers.medians_table(rounds, "imb") == {}


def test_control_compares_osus_second_job_with_its_first(peers):
    # the A/A control: the same statistic between two jobs of one tool, whatever commbench did
    rounds = [
        {("osu", "alltoall", 2, 8): 1.0, ("osu-again", "alltoall", 2, 8): 1.2,
         ("commbench", "alltoall", 2, 8): 5.0},
        {("osu", "alltoall", 2, 8): 2.0, ("osu-again", "alltoall", 2, 8): 2.0,
         ("commbench", "alltoall", 2, 8): 5.0},
    ]  # fmt: skip
    assert peers.ratio_table(rounds, "osu", tool="osu-again") == {("alltoall", 2, 8): 1.1}
    assert peers.medians_table(rounds, "osu", tool="osu-again") == {
        ("alltoall", 2, 8): pytest.approx(1.6 / 1.5)
    }


def test_control_keeps_both_pairs_neighbours_in_every_round(peers):
    jobs = ["commbench", "osu", "osu-again"]
    for turn in range(6):
        order = peers.job_order(jobs, turn, control=True)
        at = {who: i for i, who in enumerate(order)}
        assert abs(at["commbench"] - at["osu"]) == 1 and abs(at["osu-again"] - at["osu"]) == 1
    # without it every tool takes every place
    firsts = {peers.job_order(jobs, turn, control=False)[0] for turn in range(3)}
    assert firsts == set(jobs)


def test_sizes_per_job_cover_the_sweep_once_in_runs_of_that_many(peers):
    assert peers.size_chunks(8, 4 << 20, 0) == [(8, 4 << 20)]
    chunks = peers.size_chunks(8, 4 << 20, 4)
    assert chunks[:2] == [(8, 64), (128, 1024)] and chunks[-1] == (1 << 19, 4 << 20)
    covered = [1 << k for a, b in chunks for k in range(a.bit_length() - 1, b.bit_length())]
    assert covered == [1 << k for k in range(3, 23)]


# a 4 MiB block: glibc's default mmaps it; under the kept policy it comes from the brk heap
HEAP_PROBE = """
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
where = libc.malloc(4 << 20)
for line in open("/proc/self/maps"):
    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
    if lo <= where < hi:
        print("heap" if line.rstrip().endswith("[heap]") else "mmap")
"""


@pytest.mark.parametrize(("heap", "served"), [("kept", "heap"), ("libc", "mmap")])
def test_peer_heap_gives_the_c_tools_commbenchs_malloc_policy(peers, monkeypatch, heap, served):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    env = peers.peer_env(heap)
    if heap == "kept":
        assert (
            env["GLIBC_TUNABLES"]
            == "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647"
        )
    got = subprocess.run(
        [sys.executable, "-c", HEAP_PROBE],
        env={k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"} | env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert got == [served]


def test_peer_heap_keeps_the_users_own_tunables(peers, monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=1")
    assert peers.peer_env("kept")["GLIBC_TUNABLES"].startswith("glibc.malloc.arena_max=1:")
