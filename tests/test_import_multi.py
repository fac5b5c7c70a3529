"""Importers for the many-pairs and Multi- logs OSU and IMB users have (osu_multi_lat,
osu_mbw_mr, IMB -multi), and IMB's timing label: a collective barriers after every repetition."""

from __future__ import annotations

import pytest

from commbench.errors import UsageError
from commbench.formats import imb, osu
from commbench.formats.common import Hints

MULTI_LAT = """\
# OSU MPI Multi Latency Test v7.4
# Datatype: MPI_CHAR.
# Size       Avg Latency(us)
1                      14.01
16                     21.49
"""
MBW_MR = """\
# OSU MPI Multiple Bandwidth / Message Rate Test v7.4
# [ pairs: 2 ] [ window size: 64 ]
# Datatype: MPI_CHAR.
# Size                  MB/s        Messages/s
1                       0.83         834934.82
16                     16.00        1053000.48
"""
IMB_MULTI = """\
#    Intel(R) MPI Benchmarks 2021.11, MPI-1 part
# MPI_Datatype                   :   MPI_BYTE
# MPI_Datatype for reductions    :   MPI_FLOAT
#----------------------------------------------------------------
# Benchmarking Multi-Allreduce
# ( 2 groups of 2 processes each running simultaneous )
# Group  0:     0    1
#
# Group  1:     2    3
#
#----------------------------------------------------------------
       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]
            8         1000         0.34        11.12         5.74
#----------------------------------------------------------------
# Benchmarking Allreduce
# #processes = 4
#----------------------------------------------------------------
       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]
            8         1000        11.26        11.76        11.56
#-----------------------------------------------------------------------------
# Benchmarking Multi-PingPong
# ( 2 groups of 2 processes each running simultaneous )
#-----------------------------------------------------------------------------
       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]   Mbytes/sec
            8         1000         4.57         4.57         4.57         1.75
"""


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_osu_multi_lat_is_pingpong_on_half_the_processes_as_pairs(tmp_path):
    path = write(tmp_path, "multi_lat.txt", MULTI_LAT)
    with pytest.raises(UsageError, match="does not print its pairs"):
        osu.parse(path, Hints(link_class="intra"))
    recs = osu.parse(path, Hints(link_class="intra", group_size=8)).records
    assert [(r["op"], r["bytes"], r["time_us"]) for r in recs] == [
        ("pingpong", 1, 14.01),
        ("pingpong", 16, 21.49),
    ]
    assert {(r["group_size"], r["groups"], r["world_size"]) for r in recs} == {(2, 4, 8)}


def test_osu_mbw_mr_is_bw_on_its_printed_pairs_sharing_the_bandwidth(tmp_path):
    recs = osu.parse(write(tmp_path, "mbw.txt", MBW_MR), Hints(link_class="intra")).records
    assert [r["op"] for r in recs] == ["bw", "bw"]
    assert {(r["group_size"], r["groups"], r["world_size"]) for r in recs} == {(2, 2, 4)}
    # 16 B at 16 MB/s over 2 pairs: 8 MB/s a pair, 2 us a message
    assert recs[1]["time_us"] == pytest.approx(2.0)


def test_imb_multi_blocks_and_timing_labels(tmp_path):
    recs = imb.parse(write(tmp_path, "IMB.out", IMB_MULTI), Hints(link_class="intra")).records
    got = [(r["op"], r["group_size"], r["groups"], r["world_size"], r["timing"]) for r in recs]
    assert got == [
        ("allreduce", 2, 2, 4, "per-iteration"),  # -sync 1: a barrier after each repetition
        ("allreduce", 4, 1, 4, "per-iteration"),
        ("pingpong", 2, 2, 4, "pipelined"),  # back to back
    ]
    assert [r["time_us"] for r in recs] == [11.12, 11.76, 4.57]  # t_max
