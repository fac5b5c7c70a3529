"""`commbench run`'s sizes, as OSU and IMB users give them: -m MIN:MAX, --per-rank-size, and
every size that had to change said once and recorded (pure: the parser and build_steps)."""

from __future__ import annotations

import pytest

from commbench.cli import build_parser
from commbench.commands.run import build_steps
from commbench.errors import UsageError
from commbench.sizes import changed_sizes, parse_range


def sweep_of(world: int, *argv: str):
    parser, _ = build_parser("run")
    return build_steps(parser.parse_args(["run", *argv]), world)


def test_allgather_size_below_p_chunks_is_said_not_silently_grown():
    plan = sweep_of(4, "allgather", "--sizes", "8")
    assert [s.nbytes for s in plan.steps] == [16]  # 4 float32 chunks of one element
    assert plan.asked == {16: [8]}
    assert "8 B -> 16 B" in plan.changed and "4 equal chunks" in plan.changed


def test_alltoall_small_sizes_merged_into_one_point_are_each_named():
    plan = sweep_of(4, "alltoall", "-b", "1", "-e", "16")
    assert [s.nbytes for s in plan.steps] == [16]
    assert plan.asked == {16: [1, 2, 4, 8, 16]}
    assert plan.changed.endswith("1 B, 2 B, 4 B, 8 B -> 16 B")


def test_int8_sizes_need_no_change():
    plan = sweep_of(2, "pingpong", "-d", "int8", "-m", "1:8")
    assert [s.nbytes for s in plan.steps] == [1, 2, 4, 8]
    assert plan.changed == ""


def test_per_rank_size_multiplies_only_ops_osu_sizes_per_rank():
    ag = sweep_of(4, "allgather", "--per-rank-size", "-m", "4:1K")
    assert [s.nbytes for s in ag.steps] == [4 * 4 << k for k in range(9)]
    assert ag.changed == ""
    odd = sweep_of(4, "allgather", "--per-rank-size", "--sizes", "2")
    assert odd.asked == {16: [8]} and "S = 4 x the per-rank size" in odd.changed
    ar = sweep_of(4, "allreduce", "--per-rank-size", "-m", "4:1K")
    assert [s.nbytes for s in ar.steps] == [4 << k for k in range(9)]
    assert ar.changed == ""


def test_osu_message_size_range():
    assert parse_range("1:4M") == (1, 4 << 20)
    assert parse_range("64K") == (1, 64 << 10)
    with pytest.raises(UsageError):
        parse_range(":8")


def test_changed_sizes_names_rounded_and_merged():
    assert changed_sizes({12: [12], 16: [16]}, "S") == ""
    assert changed_sizes({12: [13, 14]}, "S") == "sizes changed (S): 13 B, 14 B -> 12 B"
