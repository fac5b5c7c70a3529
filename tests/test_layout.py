import pytest

from commbench.errors import UsageError
from commbench.traffic.layout import (
    DEFAULT_ORDER,
    Axis,
    Mesh,
    ParallelLayout,
    host_map,
    parse_order,
    sweep_mesh,
)


def test_megatron_order_example():
    lay = ParallelLayout(16, tp=4, cp=2)
    assert lay.dp == 2
    assert lay.groups("tp")[0] == (0, 1, 2, 3)
    assert lay.groups("cp")[0] == (0, 4)
    assert lay.groups("dp")[0] == (0, 8)
    assert len(lay.groups("tp")) == 4
    assert lay.groups("dp-cp")[0] == (0, 4, 8, 12)


def test_rank_formula():
    lay = ParallelLayout(32, tp=2, cp=2, pp=2)  # dp = 4
    mesh = lay.dense
    for rank in range(32):
        t, c, d, p = (mesh.coord(rank, a) for a in ("tp", "cp", "dp", "pp"))
        assert rank == t + 2 * (c + 2 * (d + 4 * p))


def test_link_classes_with_ranks_per_node():
    nodes = host_map(16, ranks_per_node=8)
    lay = ParallelLayout(16, tp=8, nodes=nodes)
    assert lay.info("tp").link_class == "intra"
    assert lay.info("tp").stride == 1
    dp = lay.info("dp")
    assert dp.link_class == "inter" and dp.stride == 8 and dp.hosts_spanned == 2


def test_expert_mesh():
    lay = ParallelLayout(8, tp=2, ep=2)  # dp = 4, edp = 2
    assert lay.edp == 2
    assert lay.groups("ep")[0] == (0, 2)
    assert lay.groups("edp")[0] == (0, 4)


@pytest.mark.parametrize("kw", [dict(tp=3), dict(tp=4, dp=3), dict(tp=2, ep=3), dict(tp=0)])
def test_bad_degrees(kw):
    with pytest.raises(UsageError):
        ParallelLayout(8, **kw)


def test_sweep_mesh_placements():
    assert sweep_mesh(8, 4).groups("group") == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert sweep_mesh(8, 4, "strided").groups("group") == ((0, 2, 4, 6), (1, 3, 5, 7))
    with pytest.raises(UsageError):
        sweep_mesh(8, 3)


def test_mesh_unknown_axis():
    with pytest.raises(UsageError, match="unknown axis"):
        Mesh(("a",), (2,)).groups("b")


def test_parse_order_is_the_one_permutation_check():
    assert parse_order("pp-tp-cp-ep-dp", "--order") == (Axis.PP, Axis.TP, Axis.CP, Axis.EP, Axis.DP)
    assert parse_order(("tp", "cp", "ep", "dp", "pp"), "order") == DEFAULT_ORDER
    assert DEFAULT_ORDER == ("tp", "cp", "ep", "dp", "pp")  # members equal their strings
    for bad in (
        "tp-cp-ep-dp",
        "tp-cp-ep-dp-pp-tp",
        "tp-cp-ep-dp-xx",
        ["tp", "cp", "ep", "dp", "pp"],
    ):
        with pytest.raises(UsageError, match="is not a permutation of tp-cp-ep-dp-pp"):
            parse_order(bad, "--order")
    with pytest.raises(
        UsageError, match=r"^--order 'tp-cp' is not a permutation of tp-cp-ep-dp-pp$"
    ):
        parse_order("tp-cp", "--order")
    with pytest.raises(UsageError, match=r"^order 'tp-cp-dp-pp' is not a permutation"):
        ParallelLayout(8, order=("tp", "cp", "dp", "pp"))
    lay = ParallelLayout(8, tp=2, order=("pp", "tp", "cp", "ep", "dp"))
    assert lay.order == (Axis.PP, Axis.TP, Axis.CP, Axis.EP, Axis.DP)
    assert lay.dense.axes == (Axis.PP, Axis.TP, Axis.CP, Axis.DP)
    assert lay.groups("tp")[0] == (0, 1)  # pp has degree 1, so tp stays contiguous
