"""The pipeline schedules are issued as NCCL requires: every schedule the pp pattern builds
completes under NCCL's point-to-point rules once fused (p2p_schedule.fused_groups), and the
old unbatched isend + blocking recv order does not (the deadlock the issue reports)."""

from __future__ import annotations

import pytest

from commbench.ops.p2p_schedule import (
    fused_groups,
    nccl_deadlock,
    split_schedule,
    unfused_groups,
)
from commbench.traffic.patterns import pp
from commbench.traffic.program import Action, Step

GRID = [(p, m) for p in range(2, 9) for m in range(1, 17)]


def groups(sched, how=fused_groups):
    return [how(acts) for acts in sched]


@pytest.mark.parametrize("compute", [(0.0, 0.0), (1e-3, 2e-3)])
def test_every_pp_schedule_completes_under_nccl_rules_when_fused(compute):
    for p, m in GRID:
        sched = pp.schedule(p, m, 4096, *compute)
        assert nccl_deadlock(groups(sched)) is None, (p, m)


@pytest.mark.parametrize("compute", [(0.0, 0.0), (1e-3, 2e-3)])
def test_gpipe_completes_under_nccl_rules(compute):
    """torch's ScheduleGPipe order (pp_schedule, framework torchtitan): all forwards, then
    all backwards, fused as the runner posts them, completes on every (p, m) of the grid."""
    for p, m in GRID:
        sched = pp.schedule(p, m, 4096, *compute, order=pp.gpipe)
        assert nccl_deadlock(groups(sched)) is None, (p, m)


def test_the_old_unbatched_order_deadlocks_under_nccl_rules():
    for p, m in GRID:
        sched = pp.schedule(p, m, 4096)
        why = nccl_deadlock(groups(sched, unfused_groups))
        if m == 1:  # one micro-batch: a forward chain, then a backward chain
            assert why is None, (p, m)
        else:
            assert why is not None and why.startswith("deadlock"), (p, m, why)
        # the old order was fine where sends never block (MPI's Isend, gloo): the model moved
        pp.simulate(sched)


def test_split_pipelines_stay_deadlock_free_and_keep_their_pairing():
    for p, m in [(2, 3), (4, 8), (5, 2)]:
        step = Step(op="p2p_schedule", nbytes=4096, schedule=pp.schedule(p, m, 4096))
        split, k = split_schedule(step, 1024)
        assert k == 4
        assert nccl_deadlock(groups(split.schedule)) is None, (p, m)


def test_megatron_steady_state_groups():
    """After warm-up each stage fuses a forward send with the next backward receive
    (send_forward_recv_backward) and a backward send with the next forward receive."""
    p, m = 4, 8
    sched = pp.schedule(p, m, 64, 1e-3, 2e-3)
    stage = fused_groups(sched[1])
    comm = [tuple((a.kind, a.peer) for a in g) for g in stage if g[0].kind != "compute"]
    assert (("send", 1), ("recv", 1)) in comm  # send_forward_recv_backward
    assert (("send", -1), ("recv", -1)) in comm  # send_backward_recv_forward
    # a send never shares a group with a receive before it (it may forward that data)
    for acts in sched:
        for g in fused_groups(acts):
            kinds = [a.kind for a in g]
            assert kinds == sorted(kinds, key=lambda k: k != "send"), kinds


def test_checker_catches_mismatched_pairs_and_strays():
    send, recv = Action("send", 1, 8, tag=0), Action("recv", -1, 8, tag=0)
    assert nccl_deadlock([[(send,)], [(recv,)]]) is None
    bigger = Action("recv", -1, 16, tag=0)
    assert "meets a receive of 16 B" in nccl_deadlock([[(send,)], [(bigger,)]])
    assert "1 send(s) from 0 to 1 against 0" in nccl_deadlock([[(send,)], []])
    assert "outside" in nccl_deadlock([[(send,)]])
    # a receive-first ring deadlocks however it is fused; send-first completes only fused
    ring_rf = [
        (Action("recv", -1, 8), Action("send", 1, 8)),
        (Action("recv", 1, 8), Action("send", -1, 8)),
    ]
    assert nccl_deadlock(groups(ring_rf)) is not None
    ring_sf = [
        (Action("send", 1, 8), Action("recv", 1, 8)),
        (Action("send", -1, 8), Action("recv", -1, 8)),
    ]
    assert nccl_deadlock(groups(ring_sf)) is None
    assert nccl_deadlock(groups(ring_sf, unfused_groups)) is not None
