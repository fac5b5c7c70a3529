"""Inference Programs against their formulas: prefill (2 TP all-reduces of b s h per layer,
the CP ring over the prompt, EP dispatch of the prompt's tokens, forward pipeline sends) and
decode (2 TP all-reduces of b h per layer, EP all-to-all of b k token copies, PP sends per
token, CP's partial-attention all-gather); DeepSeek-V3's FP8 dispatch and node-limited
routing; the same per-layer parts as the training patterns."""

import numpy as np
import pytest

from commbench.errors import UsageError
from commbench.traffic import patterns
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.patterns import cp, ep, pp
from commbench.traffic.patterns.base import Role
from commbench.traffic.presets import get_model

L405 = get_model("llama3.1-405b")
DSV3 = get_model("deepseek-v3")


def one(prog, op):
    (st,) = [s for s in prog.steps if s.op == op]
    return st


def test_prefill_tp_allreduce_is_bsh_per_layer_and_cp_ring_is_the_prompts_kv():
    lay = ParallelLayout(16, tp=8, cp=2)
    prog = patterns.build("prefill", lay, L405, {"seq_len": 8192, "micro_batch": 2})
    ar = one(prog, "allreduce")
    assert ar.nbytes == 2 * 8192 // 2 * 16384 * 2  # b (s/c) h x bf16
    assert ar.repeat == 2 * 126 and ar.phase == "forward" and ar.axis == "tp"
    ring = one(prog, "sendrecv")
    assert ring.nbytes == cp.kv_unit_bytes(lay, L405, patterns.make_options("cp", {
        "seq_len": 8192, "micro_batch": 2}))  # fmt: skip
    assert ring.nbytes == 2 * 4096 * (8 // 8) * 128 * 2 * 2  # b (s/c) 2 n_kv/t d_head bf16
    assert ring.repeat == (2 - 1) * 126
    # no backward in inference
    assert all(s.phase == "forward" for s in prog.steps)


@pytest.mark.parametrize("b", [1, 8, 64])
def test_decode_tp_allreduce_is_bh_per_layer_and_grows_with_the_batch(b):
    prog = patterns.build("decode", ParallelLayout(8, tp=8), L405, {"micro_batch": b})
    ar = one(prog, "allreduce")
    assert ar.nbytes == b * 16384 * 2 and ar.repeat == 2 * 126
    assert prog.meta["batch"] == b


def test_decode_ep_moves_b_times_k_token_copies_and_fp8_halves_the_dispatch():
    lay = ParallelLayout(64, ep=64)
    bf16 = patterns.build("decode", lay, DSV3, {"micro_batch": 16})
    fp8 = patterns.build("decode", lay, DSV3, {"micro_batch": 16, "dispatch": "fp8"})
    for prog, token in ((bf16, 7168 * 2), (fp8, 7168 + 4 * 7168 // 128)):
        dispatch, combine = [s for s in prog.steps if s.op == "alltoallv"]
        sent = np.array(dispatch.split)
        assert sent.sum() == 64 * 16 * 8 * token  # every rank routes b tokens x top-8
        assert np.array(combine.split).sum() == 64 * 16 * 8 * 7168 * 2  # combine stays bf16
        assert dispatch.repeat == combine.repeat == 58  # the 58 MoE layers, not the 3 dense
    assert fp8.meta["dispatch_token_bytes"] == 7392


def test_decode_pp_sends_bh_per_token_and_cp_gathers_partial_attention():
    lay = ParallelLayout(8, cp=2, pp=4)
    prog = patterns.build(
        "decode", lay, get_model("llama3-8b"), {"micro_batch": 4, "micro_batches": 4}
    )
    sched = one(prog, "p2p_schedule")
    assert sched.nbytes == 4 * 4096 * 2
    sends = [a for acts in sched.schedule for a in acts if a.kind == "send"]
    assert len(sends) == (4 - 1) * 4  # every stage but the last, each micro-batch
    gather = one(prog, "allgather")
    assert gather.nbytes == 2 * 4 * 32 * (128 + 1) * 4 and gather.dtype == "float32"
    assert gather.repeat == 32 // 4 * 4


def test_forward_schedule_is_1f1bs_forward_passes():
    """The inference pipeline is the forward passes of a 1F1B schedule, in their order."""
    p, m, nbytes = 4, 6, 1024
    train = pp.schedule(p, m, nbytes)
    fwd = pp.forward_schedule(p, m, nbytes)
    assert [[(a.kind, a.peer, a.tag) for a in acts] for acts in fwd] == [
        [(a.kind, a.peer, a.tag) for a in acts if a.tag % 2 == pp.FWD] for acts in train
    ]
    makespan, _ = pp.simulate(pp.forward_schedule(p, m, nbytes, 1.0), 0.0)
    assert makespan == pytest.approx(m + p - 1)  # fill, then one per micro-batch


def test_node_limited_routing_reaches_at_most_m_groups():
    rng = np.random.default_rng(0)
    keys = rng.gumbel(size=(500, 256))
    limited = ep.limit_groups(keys, 8, 4, 8)
    chosen = np.argpartition(-limited, 7, axis=1)[:, :8]
    groups = np.array([len(set(row // 32)) for row in chosen])
    assert groups.max() <= 4 and groups.mean() > 3  # at most M nodes, and usually all M
    free = np.argpartition(-keys, 7, axis=1)[:, :8]
    assert np.array([len(set(row // 32)) for row in free]).mean() > 5  # unlimited: ~6 of 8
    opts = ep.Options(groups=8, group_limit=4)
    counts = ep.route(opts, 64, 256, 8, 8)
    assert counts.sum() == 64 * 8 * 8


def test_inference_roles_options_and_errors():
    assert patterns.get("prefill").role is Role.PREFILL
    assert patterns.get("decode").role is Role.DECODE
    with pytest.raises(UsageError, match="dispatch 'fp4'"):
        patterns.make_options("decode", {"dispatch": "fp4"})
    with pytest.raises(UsageError, match="group_limit 9 must be between 1 and groups 8"):
        patterns.make_options("decode", {"groups": 8, "group_limit": 9})
    with pytest.raises(UsageError, match="groups 3 must divide the 256 experts"):
        patterns.build("decode", ParallelLayout(8, ep=8), DSV3, {"groups": 3})
    with pytest.raises(UsageError, match="does not divide"):
        patterns.build("prefill", ParallelLayout(3, tp=3), L405, {})
    with pytest.raises(UsageError, match="ep=4 needs an MoE model"):
        patterns.build("decode", ParallelLayout(8, tp=2, ep=4), L405, {})


def test_training_ep_dispatches_fp8_and_returns_gradients_in_bf16():
    """DeepSeek-V3's FP8 dispatch in the training pattern: the forward dispatch carries FP8
    tokens, the combine and both backward all-to-alls the activation dtype."""
    lay = ParallelLayout(8, ep=8)
    prog = patterns.build("ep", lay, DSV3, {"seq_len": 512, "dispatch": "fp8"})
    sent = {s.label: np.array(s.split).sum() for s in prog.steps}
    assert sent["dispatch"] * 14336 == sent["combine"] * 7392
    assert sent["combine grad"] == sent["dispatch grad"] == sent["combine"]


def test_shared_experts_hold_activations_beside_the_routed_copies():
    from commbench.traffic.memory import activation_bytes_per_layer

    base = activation_bytes_per_layer(DSV3, 4096, moe_layer=True)
    one = DSV3.__class__(**{**DSV3.to_dict(), "shared_experts": 2})
    assert activation_bytes_per_layer(one, 4096, moe_layer=True) - base == pytest.approx(
        4096 * 6 * 2048
    )
