"""Byte counts and bus-bandwidth factors against the nccl-tests formulas (PERFORMANCE.md)."""

import pytest

from commbench.dtypes import canonical_dtype
from commbench.errors import UsageError
from commbench.ops import OPS, bus_factor, op_spec, round_bytes
from commbench.traffic.program import Step


@pytest.mark.parametrize("p", [1, 2, 4, 8, 16])
def test_bus_factors(p):
    assert bus_factor("allreduce", p) == pytest.approx(2 * (p - 1) / p)
    for op in ("allgather", "reduce_scatter", "alltoall", "alltoallv"):
        assert bus_factor(op, p) == pytest.approx((p - 1) / p)
    for op in ("broadcast", "reduce", "sendrecv", "pingpong"):
        assert bus_factor(op, p) == 1.0


def test_send_recv_bytes_follow_nccl_tests():
    # allgather: S is the gathered output; reduce_scatter: S is the input
    assert OPS["allgather"].buffers(Step(op="allgather", nbytes=1024), 4) == (256, 1024)
    assert OPS["reduce_scatter"].buffers(Step(op="reduce_scatter", nbytes=1024), 4) == (1024, 256)
    assert OPS["allreduce"].buffers(Step(op="allreduce", nbytes=1024), 4) == (1024, 1024)
    assert OPS["alltoall"].buffers(Step(op="alltoall", nbytes=1024), 4) == (1024, 1024)


def test_round_bytes():
    assert round_bytes("allreduce", 10, 4, "float32") == 8
    assert round_bytes("allgather", 100, 4, "float32") == 96  # 4 ranks x 6 floats
    assert round_bytes("allgather", 8, 4, "float32") == 16  # never below one element per rank
    assert round_bytes("broadcast", 3, 4, "bfloat16") == 2


def test_aliases_and_unknowns():
    assert op_spec("all_reduce").name == "allreduce"
    assert canonical_dtype("bf16") == "bfloat16"
    with pytest.raises(UsageError, match="unknown op"):
        op_spec("allfoo")
    with pytest.raises(UsageError, match="unknown dtype"):
        canonical_dtype("float8")
