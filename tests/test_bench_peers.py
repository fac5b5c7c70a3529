"""bench/peers.py: how it finds the OSU and IMB programs a user has installed (by path, in the
layouts HPC-X, MVAPICH and Spack install them, else on PATH), the tables it reads and the ratio
it prints (median over rounds of the ratio within each round), and a round end to end against
stand-ins for the installed programs that print the tools' tables. It builds nothing: the repo
carries no build recipe for another project's sources."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

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


def _install(folder: Path, name: str, table: str) -> Path:
    """A stand-in for an installed program: an executable that prints `table` (as the tool
    prints it) whatever its arguments."""
    folder.mkdir(parents=True, exist_ok=True)
    prog = folder / name
    prog.write_text(f"#!/bin/sh\ncat <<'EOF'\n{table}EOF\n")
    prog.chmod(0o755)
    return prog


def _osu_prefix(root: Path) -> Path:
    """OSU 7's `make install` layout (MVAPICH, Spack): libexec/osu-micro-benchmarks/mpi/..."""
    mpi = root / "libexec" / "osu-micro-benchmarks" / "mpi"
    _install(mpi / "pt2pt" / "standard", "osu_latency", OSU_LOG)
    for op in ("allreduce", "allgather", "alltoall"):
        _install(mpi / "collective" / "blocking", f"osu_{op}", OSU_LOG)
    return root


def test_finds_an_osu_install_prefix_and_imb_by_folder(peers, tmp_path):
    osu = _osu_prefix(tmp_path / "mvapich")
    imb = _install(tmp_path / "hpcx" / "ompi" / "tests" / "imb", "IMB-MPI1", IMB_LOG)
    found = peers.find_tools(["osu", "imb"], osu, tmp_path / "hpcx")
    assert found["osu"]["pingpong"].name == "osu_latency"
    assert found["osu"]["alltoall"].parent.name == "blocking"
    assert found["imb"] == imb
    assert peers.find_program("IMB-MPI1", imb) == imb  # the file itself will do


def test_finds_the_programs_on_path(peers, tmp_path, monkeypatch):
    bin_ = tmp_path / "spack-view" / "bin"
    for name in ("osu_latency", "osu_allreduce", "osu_allgather", "osu_alltoall", "IMB-MPI1"):
        _install(bin_, name, OSU_LOG)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    found = peers.find_tools(["osu", "imb"], None, None)
    assert set(found["osu"]) == set(peers.OPS) and found["imb"] == bin_ / "IMB-MPI1"


def test_a_missing_program_is_one_line_naming_it_and_where(peers, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    _install(tmp_path / "osu", "osu_latency", OSU_LOG)  # the collectives are not there
    with pytest.raises(SystemExit) as e:
        peers.find_tools(["osu"], tmp_path / "osu", None)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert (
        "osu_allreduce, osu_allgather, osu_alltoall not found under" in err and "--osu-bin" in err
    )
    with pytest.raises(SystemExit):
        peers.find_tools(["imb"], None, tmp_path / "empty")
    assert "IMB-MPI1 not found under" in capsys.readouterr().err
    # a file that is not executable is not a program
    plain = tmp_path / "IMB-MPI1"
    plain.write_text("")
    assert peers.find_program("IMB-MPI1", plain) is None


def test_the_repo_builds_no_other_projects_sources():
    """No build recipe for OSU, IMB or any other project: no autotools, CMake or make run on
    a source tree anywhere in bench/ or the Makefile. The words are spelled in pieces, so this
    test is not itself what it looks for."""
    words = ["auto" + "reconf", "autogen" + r"\.sh", r"\./" + "configure", "c" + "make", "src_cpp"]
    recipe = re.compile(r"(?<!\w)(" + "|".join([*words, "make IMB"]) + r")(?!\w)")
    assert recipe.search("cd src && ./" + "configure --prefix=/x")  # the pattern itself bites
    for path in [REPO / "Makefile", *sorted((REPO / "bench").glob("*.py"))]:
        hits = [ln for ln in path.read_text().splitlines() if recipe.search(ln)]
        assert not hits, (path, hits)


@pytest.mark.mpi
def test_a_round_against_installed_stand_ins(peers, tmp_path):
    """The whole script, 1 round on 2 ranks at 8-16 B, against stand-ins that print OSU's and
    IMB's tables: it finds them, runs commbench and them in turn, prints the ratio table."""
    osu = _osu_prefix(tmp_path / "osu")
    imb_log = (
        IMB_LOG
        + IMB_LOG.replace("Allreduce", "Allgather")
        + IMB_LOG.replace("Allreduce", "Alltoall")
    )
    _install(tmp_path / "imb", "IMB-MPI1", imb_log.replace(" 8         1000", "16         1000"))
    cmd = [sys.executable, str(REPO / "bench" / "peers.py"), "--osu-bin", str(osu), "--imb-bin",
           str(tmp_path / "imb"), "--ranks", "2", "--rounds", "1", "--max", "16", "--iters",
           "adapt", "--pause", "0"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"# osu: {osu}" in p.stderr
    rows = [ln.split() for ln in p.stdout.splitlines() if ln.split()[:1] in (["pingpong"],
            ["allreduce"], ["allgather"], ["alltoall"])]  # fmt: skip
    assert {(r[0], r[2]) for r in rows} >= {("pingpong", "8"), ("allreduce", "16")}
    assert "cells outside 0.9-1.1x" in p.stdout
