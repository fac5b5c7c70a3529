"""gloo's exchange across emulated nodes streams both ways at once, in every run.

`emulate --nodes 2 --link-rate 1gbit --backend gloo -- run sendrecv --sizes 16M` read 0.114
GB/s in one run and 0.060 (half the shaped rate) in the next; on this machine 0.060 in 4 of 4.
gloo's TCP pair sends a message only once the peer's receive is announced, and with the sends
posted first the announcement queued behind the pair's own bulk data: the two directions took
turns. Receives are now posted first (torchdist.receives_first): 0.120-0.121, the one-way rate.
"""

from __future__ import annotations

import pytest
from test_emulate import GOODPUT_GBPS, RATE, _emulate, _finish, _records, needs_root

from conftest import needs_torch


@needs_torch
def test_a_fused_group_posts_its_receives_first_each_kind_in_order():
    from commbench.measure.transport.torchdist import receives_first

    ops = [("send", "a", 1), ("recv", "b", 1), ("send", "c", 2), ("recv", "d", 0)]
    assert receives_first(ops) == [("recv", "b", 1), ("recv", "d", 0), ("send", "a", 1),
                                   ("send", "c", 2)]  # fmt: skip


@needs_root
@needs_torch
def test_gloo_sendrecv_crosses_at_the_shaped_rate_both_ways(tmp_path):
    rc, out = _finish(
        _emulate(
            *("--nodes", "2", "--ranks-per-node", "1", "--link-rate", RATE, "--backend", "gloo"),
            *("--", "run", "sendrecv", "--sizes", "4M", "-n", "3", "-w", "1"),
            *("--results", str(tmp_path), "--run-id", "x"),
        )
    )
    assert rc == 0, out
    (rec,) = _records(tmp_path / "x")
    assert rec["backend"] == "gloo" and rec["link_class"] == "inter"
    # each direction at the link's goodput (taking turns: half of it)
    assert rec["busbw_GBps"] == pytest.approx(GOODPUT_GBPS, rel=0.15), out
