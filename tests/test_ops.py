"""The op seam against the nccl-tests formulas (doc/PERFORMANCE.md), written out here
independently, and the registry built from the op modules alone."""

import math
from pathlib import Path

import pytest

import commbench.ops
from commbench.ops import MODULES, OP_ALIASES, OPS, SWEEP_OPS, op_spec
from commbench.ops.spec import MODELS, OpSpec
from commbench.traffic.program import Action, Step

S = 840 * 12  # divisible by every p in 1..8, in every dtype
GROUPS = range(1, 9)

BUS = {
    "allreduce": lambda p: 2 * (p - 1) / p,
    "allgather": lambda p: (p - 1) / p,
    "reduce_scatter": lambda p: (p - 1) / p,
    "alltoall": lambda p: (p - 1) / p,
    "alltoallv": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "reduce": lambda p: 1.0,
    "sendrecv": lambda p: 1.0,
    "pingpong": lambda p: 1.0,
    "p2p_schedule": lambda p: 1.0,
    # OSU and IMB ops: rooted gathers/scatters and allgatherv move (p-1)/p of S over the
    # busiest link, as allgather; windows and barrier move S (or nothing) once
    "gather": lambda p: (p - 1) / p,
    "scatter": lambda p: (p - 1) / p,
    "allgatherv": lambda p: (p - 1) / p,
    "iallreduce": lambda p: 2 * (p - 1) / p,
    "bw": lambda p: 1.0,
    "bibw": lambda p: 1.0,
    "barrier": lambda p: 1.0,
}
FORMULAS = {
    "2(p-1)/p": lambda p: 2 * (p - 1) / p,
    "(p-1)/p": lambda p: (p - 1) / p,
    "1": lambda p: 1,
}
BUFFERS = {  # (send, recv) bytes of one rank for S in a group of p
    "allgather": lambda p: (S // p, S),
    "reduce_scatter": lambda p: (S, S // p),
    "gather": lambda p: (S // p, S),
    "scatter": lambda p: (S, S // p),
    "allgatherv": lambda p: (S // p, S),
    "barrier": lambda p: (0, 0),
}
NO_DATA = {"barrier"}  # S = 0 recorded and priced


def cases():
    for name, spec in OPS.items():
        for p in GROUPS:
            if spec.min_group <= p <= (spec.max_group or p):
                yield name, p


def step_of(op: str, p: int) -> Step:
    """A step of S bytes: alltoallv with the even split, p2p_schedule a ring of S messages."""
    if op == "alltoallv":
        return Step(op=op, nbytes=S, split=tuple(tuple([S // p] * p) for _ in range(p)))
    if op == "p2p_schedule":
        ring = tuple((Action("send", 1, S, tag=0), Action("recv", -1, S, tag=0)) for _ in range(p))
        return Step(op=op, nbytes=S, schedule=ring)
    return Step(op=op, nbytes=S)


def test_every_op_has_an_independent_formula():
    assert set(BUS) == set(OPS)


@pytest.mark.parametrize(("op", "p"), list(cases()))
def test_bus_factor_and_buffers_follow_nccl_tests(op, p):
    spec = OPS[op]
    assert spec.bus_factor(p) == pytest.approx(BUS[op](p))
    assert FORMULAS[spec.bus_formula](p) == pytest.approx(BUS[op](p))
    step = step_of(op, p)
    assert spec.buffers(step, p) == BUFFERS.get(op, lambda p: (S, S))(p)
    assert spec.record_bytes(step) == (0 if op in NO_DATA else S)
    assert spec.priced_bytes(step) == (0 if op in NO_DATA else S)
    assert spec.valid(step)
    assert spec.round_bytes(S, p, "float32") == S  # S already whole elements in p chunks


@pytest.mark.parametrize(("op", "p"), list(cases()))
def test_round_bytes_keeps_whole_elements_and_chunks(op, p):
    spec = OPS[op]
    unit = 4 * (p if spec.chunks else 1)
    got = spec.round_bytes(S + 3, p, "float32")
    assert got % unit == 0 and got <= S + 3 and got > S + 3 - unit
    assert spec.round_bytes(1, p, "float32") == unit


@pytest.mark.parametrize("op", list(OPS))
def test_cost_coefficients_for_every_model_claimed(op):
    spec = OPS[op]
    assert set(spec.costs) in (set(), set(MODELS))  # the fitter fits every model jointly
    for model in spec.costs:
        for p in GROUPS:
            a, b = spec.cost(model, p)
            assert math.isfinite(a) and math.isfinite(b) and a >= 0 and b >= 0, (model, p)


def test_cost_coefficients_follow_thakur_rabenseifner_gropp():
    for p in GROUPS:
        lg = math.ceil(math.log2(p)) if p > 1 else 0
        assert OPS["allreduce"].cost("ring", p) == (2 * (p - 1), 2 * (p - 1) / p)
        assert OPS["allreduce"].cost("rabenseifner", p) == (2 * lg, 2 * (p - 1) / p)
        assert OPS["allgather"].cost("tree", p) == (lg, (p - 1) / p)
        assert OPS["alltoallv"].cost("tree", p) == OPS["alltoall"].cost("tree", p)
        assert OPS["broadcast"].cost("pairwise", p) == (p - 1, p - 1)
        assert OPS["sendrecv"].cost("tree", p) == (1.0, 1.0)  # Hockney: one message
    assert OPS["broadcast"].cost("ring", 1) == (0.0, 0.0)  # a group of one moves nothing
    assert not OPS["p2p_schedule"].costs  # a pipeline is priced message by message


def test_registry_is_built_from_the_op_modules_alone():
    package = Path(commbench.ops.__file__).parent
    seam = {"__init__", "spec", "checkdata"}
    files = {f.stem for f in package.glob("*.py")} - seam
    assert files == {m.__name__.rsplit(".", 1)[1] for m in MODULES}
    for module in MODULES:
        spec = module.SPEC
        assert isinstance(spec, OpSpec) and callable(spec.bind) and spec.doc
        assert spec.name == module.__name__.rsplit(".", 1)[1]
        assert OPS[spec.name] is spec
        for alias in spec.aliases:
            assert OP_ALIASES[alias] == spec.name and op_spec(alias) is spec
    assert list(OPS)[-1] == "p2p_schedule" and SWEEP_OPS == tuple(OPS)[:-1]


def _bf16(x: float) -> float:
    """Round a float to bfloat16 (round to nearest even on the float32 bits)."""
    import numpy as np

    bits = int(np.array([x], dtype=np.float32).view(np.uint32)[0])
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def test_exact_sum_limit_is_where_bfloat16_sums_stop_being_exact():
    """Check data lies in [-2, 2]: at 128 ranks every partial sum of any order is exact in
    bfloat16; at 129 one order (128 twos, then a one) already rounds, so the check is off."""
    from commbench.ops.checkdata import EXACT_SUM_RANKS, exact_sum

    def worst_sum(p: int) -> tuple[float, int]:
        acc, values = 0.0, [2] * (p - 1) + [1]
        for v in values:
            acc = _bf16(acc + v)
        return acc, sum(values)

    limit = EXACT_SUM_RANKS["bfloat16"]
    got, want = worst_sum(limit)
    assert got == want and exact_sum("bfloat16", limit)
    got, want = worst_sum(limit + 1)
    assert got != want and not exact_sum("bfloat16", limit + 1)
    assert exact_sum("float32", 1 << 20) and not exact_sum("float16", 1025)
