"""Programs of each pattern against the published traffic formulas (Megatron-LM, ZeRO, 1F1B):
byte counts, repeats, groups, the worked checks, 1F1B action lists and EP router splits."""

from collections import Counter

import numpy as np
import pytest

from commbench.errors import UsageError
from commbench.ops import bus_factor
from commbench.traffic import patterns
from commbench.traffic.layout import ParallelLayout, host_map
from commbench.traffic.model import ModelShape
from commbench.traffic.patterns import collectives, cp, dp, ep, pp, tp, zero
from commbench.traffic.patterns.base import buckets, resolve_axis
from commbench.traffic.presets import get_model

MiB = 1 << 20
L7 = get_model("llama-7b")
L70 = get_model("llama-70b")
MIX = get_model("mixtral-8x7b")


def steps_by(prog, **match):
    return [s for s in prog.steps if all(getattr(s, k) == v for k, v in match.items())]


# ---- TP ----
def test_tp_seed_check_32_mib_per_allreduce():
    prog = patterns.build("tp", ParallelLayout(8, tp=8), L7, {"seq_len": 4096})
    assert [s.op for s in prog.steps] == ["allreduce", "allreduce"]
    assert all(s.nbytes == 4096 * 4096 * 2 == 32 * MiB for s in prog.steps)
    # 2 forward + 2 backward per layer, 32 layers
    assert [(s.phase, s.repeat) for s in prog.steps] == [("forward", 64), ("backward", 64)]
    assert all(s.axis == "tp" for s in prog.steps)


def test_tp_sequence_parallel_counts_and_cp_pp_split():
    lay = ParallelLayout(16, tp=4, cp=2, pp=2)
    opts = tp.Options(seq_len=8192, micro_batches=3, sequence_parallel=True)
    prog = tp.build(lay, L7, opts)
    S = 1 * (8192 // 2) * 4096 * 2
    n = 32 // 2 * 3
    got = Counter()
    for s in prog.steps:
        assert s.nbytes == S
        got[(s.phase, s.op)] += s.repeat
    assert got == {
        ("forward", "allgather"): 2 * n,
        ("forward", "reduce_scatter"): 2 * n,
        ("backward", "allgather"): 4 * n,
        ("backward", "reduce_scatter"): 2 * n,
    }
    assert tp.build(ParallelLayout(8), L7, tp.Options()).steps == ()


# ---- DP ----
def test_dp_seed_check_fp32_grads_and_ddp_buckets():
    prog = patterns.build("dp", ParallelLayout(8), L7, {"grad_dtype": "fp32"})
    total = sum(s.total_bytes for s in prog.steps)
    assert total == 4 * L7.params  # every gradient once, fp32
    assert total == pytest.approx(28e9, rel=0.05)  # "7B x fp32 = 28 GB"
    # a ring all-reduce moves about twice that over the busiest link
    bus = sum(s.total_bytes * bus_factor(s.op, 8) for s in prog.steps)
    assert bus / total == pytest.approx(2 * 7 / 8)
    # DDP buckets whole tensors: every fp32 matrix of llama-7b is over 25 MiB, so each is a
    # bucket of its own (a norm joins the next): 32 layers x 7 + the head + the embedding
    assert sum(s.repeat for s in prog.steps) == 226
    assert 64 * MiB <= min(s.nbytes for s in prog.steps) < max(s.nbytes for s in prog.steps)
    assert max(s.nbytes for s in prog.steps) == 4 * (32000 * 4096 + 4096)  # head + final norm
    assert all(s.op == "allreduce" and s.axis == "dp" and s.dtype == "float32" for s in prog.steps)


def test_dp_local_grads_and_axes():
    # P/(t p): tensor and pipeline parallel shrink the local gradients
    lay = ParallelLayout(16, tp=2, pp=2)
    prog = dp.build(lay, L7, dp.Options(grad_dtype="bfloat16"))
    total = sum(s.total_bytes for s in prog.steps)
    assert total == pytest.approx(2 * L7.params / 4, rel=0.02)
    assert total == 2 * L7.rank_params(tp=2, pp=2)
    # cp > 1: Megatron reduces over dp x cp
    prog = dp.build(ParallelLayout(16, cp=2), L7, dp.Options())
    assert {s.axis for s in prog.steps} == {"dp-cp"}
    assert resolve_axis(ParallelLayout(16, cp=2), "dp-cp").size == 16
    # MoE: expert grads over edp, dense grads over dp
    prog = dp.build(ParallelLayout(16, ep=4), MIX, dp.Options())
    dense = sum(s.total_bytes for s in prog.steps if s.axis == "dp")
    expert = sum(s.total_bytes for s in prog.steps if s.axis == "edp")
    assert expert == pytest.approx(4 * MIX.param_counts().expert / 4, rel=1e-6)
    assert dense == pytest.approx(4 * MIX.param_counts().dense, rel=1e-6)
    assert dp.build(ParallelLayout(4, tp=4), L7, dp.Options()).steps == ()


def test_ddp_buckets_whole_tensors_in_ready_order():
    """torch DDP's rule on the tiny Llama at 0.5 MiB: 12 buckets, as a real DDP on gloo issued
    (tests/pytorch_jobs); splitting the 8 MiB of gradients by bytes gave 16."""
    from commbench.traffic.patterns import tensors

    tiny = ModelShape(name="t", layers=2, hidden=256, heads=4, ffn_hidden=688, vocab=1024)
    dense, expert = tensors.grad_tensors(ParallelLayout(2), tiny)
    assert sum(dense) == tiny.params and not expert and len(dense) == 21
    prog = patterns.build("dp", ParallelLayout(2), tiny, {"bucket_mb": 0.5})
    got = sorted((s.count, int(s.repeat)) for s in prog.steps)
    assert got == [(131072, 2), (131328, 2), (176128, 4), (176384, 2), (262144, 1), (262400, 1)]
    assert tensors.ddp_buckets([10, 1, 1], 1, 5) == [1, 11]  # first cap, then the rest
    assert tensors.ddp_caps(25.0, None) == (MiB, 25 * MiB)  # 1 MiB only at the default cap
    assert tensors.ddp_caps(0.5, None) == (MiB // 2, MiB // 2)
    titan = patterns.build("dp", ParallelLayout(2), L7, {"framework": "torchtitan"})
    assert max(s.nbytes for s in titan.steps) > 100 * MiB  # replicate's 100 MiB buckets
    assert sum(s.repeat for s in titan.steps) < 226


def test_cp_comm_types():
    """Megatron's cp_comm_type forms and torch's context parallel rotations: torch sends
    dK,dV c times in fp32, so at cp 2 its all-to-all backward moves 1.5x the p2p ring's bytes
    in fp32 and 2.5x in bf16 (issue 31); torchtitan's default is the all-gather rotation."""
    lay, model = ParallelLayout(2, cp=2), get_model("llama3-8b")

    def moved(form, dt, **extra):
        opts = {"seq_len": 4096, "micro_batches": 1, "dtype": dt, **extra}
        prog = cp.build(lay, model, cp.Options(cp_comm_type=form, **opts))
        return {ph: sum(s.total_bytes for s in prog.steps if s.phase == ph) for ph in PHASES}

    ring32, ring16 = moved("p2p", "float32"), moved("p2p", "bfloat16")
    assert moved("torch_alltoall", "float32")["backward"] == 1.5 * ring32["backward"]
    assert moved("torch_alltoall", "bfloat16")["backward"] == 2.5 * ring16["backward"]
    assert moved("torch_alltoall", "bfloat16")["forward"] == ring16["forward"]
    gather = cp.build(lay, model, cp.Options(cp_comm_type="torch_allgather", seq_len=4096))
    assert [(s.op, s.phase, s.repeat) for s in gather.steps][:2] == [
        ("allgather", "forward", 32),
        ("allgather", "backward", 32),
    ]  # one all-gather of K and V per layer each way
    titan = cp.build(lay, model, cp.Options(framework="torchtitan", seq_len=4096))
    assert titan.steps == gather.steps
    a2a = cp.build(lay, model, cp.Options(cp_comm_type="a2a", seq_len=4096, micro_batches=1))
    assert sum(s.repeat for s in a2a.steps) == 8 * 32  # Q, K, V, O and their grads per layer
    assert {s.op for s in moved_steps(lay, model, "all_gather")} == {"allgather", "reduce_scatter"}
    with pytest.raises(UsageError, match="cp_comm_type 'ring': choose from p2p"):
        cp.Options(cp_comm_type="ring")


def test_cp_a2a_needs_cp_to_split_the_heads_of_a_tp_rank():
    """Ulysses' all-to-all gives each cp rank whole heads (TE AttnFuncWithCPAndQKVOA2A asserts
    it): TINY_GQA's 2 KV heads cannot go to 4 cp ranks; the ring has no such limit."""
    lay = ParallelLayout(4, cp=4)
    opts = {"seq_len": 64, "micro_batches": 1}
    with pytest.raises(UsageError, match="cp=4 does not divide the 4 heads and 2 KV heads"):
        cp.build(lay, TINY_GQA, cp.Options(cp_comm_type="a2a", **opts))
    assert cp.build(lay, TINY_GQA, cp.Options(cp_comm_type="p2p", **opts)).steps
    assert cp.node_hierarchy(ParallelLayout(8, cp=8), TINY_GQA, 8) == [2, 4]


TINY_GQA = ModelShape(name="tiny-gqa", layers=3, hidden=128, ffn_hidden=256, heads=4,
                      kv_heads=2, vocab=512)  # fmt: skip


def test_cp_a2a_plus_p2p_hierarchical():
    """Megatron's a2a+p2p with hierarchical_context_parallel_sizes [2, 2] at cp 4 (TE
    AttnFuncWithCPAndKVP2P with two groups): per layer pass, Q, K, V all-to-all inside the
    blocks {0,1} {2,3} of cp (cp_in2), the K,V ring over {0,2} {1,3} (cp_out2), O back; the
    backward O and dO, the ring's 2 units, dQ, dK, dV. Tiny GQA model, s 64, b 1, bf16: a
    rank's local Q is 16 tokens x 128 x 2 B = 4 KiB, K (2 KV heads of 32) 2 KiB, the ring's
    K,V unit 16 x (64 + 64) x 2 B = 4 KiB; 3 layers x 2 micro-batches = 6 passes."""
    lay = ParallelLayout(4, cp=4)
    opts = {"seq_len": 64, "micro_batches": 2, "cp_comm_type": "a2a+p2p",
            "hierarchical_context_parallel_sizes": (2, 2)}  # fmt: skip
    prog = cp.build(lay, TINY_GQA, cp.Options(**opts))
    got = [(s.op, s.axis, s.phase, s.nbytes, s.repeat) for s in prog.steps]
    assert got == [
        ("alltoall", "cp_in2", "forward", 4096, 6),  # Q
        ("alltoall", "cp_in2", "forward", 2048, 12),  # K, V
        ("sendrecv", "cp_out2", "forward", 4096, 6),  # r - 1 = 1 ring hop
        ("alltoall", "cp_in2", "forward", 4096, 6),  # O
        ("alltoall", "cp_in2", "backward", 4096, 12),  # O, dO
        ("sendrecv", "cp_out2", "backward", 4096, 12),  # K,V first, dK,dV last
        ("alltoall", "cp_in2", "backward", 4096, 6),  # dQ
        ("alltoall", "cp_in2", "backward", 2048, 12),  # dK, dV
    ]
    assert lay.groups("cp_in2") == ((0, 1), (2, 3)) and lay.groups("cp_out2") == ((0, 2), (1, 3))
    # one level of size 1 runs on cp itself: [1, 4] is the p2p ring (on axis cp), [4, 1] a2a
    ring = cp.build(
        lay, TINY_GQA, cp.Options(**{**opts, "hierarchical_context_parallel_sizes": (1, 4)})
    )
    plain = cp.build(lay, TINY_GQA, cp.Options(seq_len=64, micro_batches=2))
    assert ring.steps == plain.steps
    mha = ModelShape(**{**TINY_GQA.__dict__, "kv_heads": 4})
    a2a_only = cp.build(
        lay, mha, cp.Options(**{**opts, "hierarchical_context_parallel_sizes": (4, 1)})
    )
    assert {(s.op, s.axis) for s in a2a_only.steps} == {("alltoall", "cp")}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"hierarchical_context_parallel_sizes": (2, 3)}, r"2 x 3 = 6, not cp = 4"),
        ({"hierarchical_context_parallel_sizes": (4,)}, "give two positive sizes"),
        ({"hierarchical_context_parallel_sizes": None}, "a2a\\+p2p takes hierarchical"),
        ({"hierarchical_context_parallel_sizes": (4, 1)}, "must divide the 4 heads and 2 KV"),
    ],
)
def test_cp_a2a_plus_p2p_bad_sizes(extra, message):
    opts = {"seq_len": 64, "cp_comm_type": "a2a+p2p", **extra}
    with pytest.raises(UsageError, match=message):
        cp.build(ParallelLayout(4, cp=4), TINY_GQA, cp.Options(**opts))
    with pytest.raises(UsageError, match="a2a\\+p2p takes hierarchical"):
        cp.Options(seq_len=64, cp_comm_type="p2p", hierarchical_context_parallel_sizes=(2, 2))
    step_opts = {**opts, "hierarchical_context_parallel_sizes": (2, 2)}
    with pytest.raises(UsageError, match=r"\[2, 2\] with cp = 1"):
        patterns.build("step", ParallelLayout(4), TINY_GQA, step_opts)


PHASES = ("forward", "backward")


def moved_steps(lay, model, form):
    return cp.build(lay, model, cp.Options(cp_comm_type=form, seq_len=4096)).steps


def test_buckets():
    assert buckets(90, 30) == [(30, 3, "full")]
    assert buckets(95, 30) == [(30, 3, "full"), (5, 1, "last")]
    assert buckets(7, 30) == [(7, 1, "last")]
    assert buckets(60, 30) == [(30, 2, "full")]
    assert buckets(0, 30) == []


# ---- ZeRO ----
def test_zero3_moves_about_3p_against_ddp_2p():
    lay = ParallelLayout(8)
    same = {"grad_dtype": "bfloat16"}
    z3 = patterns.build("zero", lay, L7, {"stage": 3, **same})
    ddp = patterns.build("dp", lay, L7, same)

    def bus(prog):
        return sum(s.total_bytes * bus_factor(s.op, 8) for s in prog.steps)

    assert bus(z3) / bus(ddp) == pytest.approx(1.5, rel=1e-3)  # 3P (p-1)/p vs 2P (p-1)/p
    ag = steps_by(z3, op="allgather")
    rs = steps_by(z3, op="reduce_scatter")
    assert sum(s.repeat for s in ag if s.label.endswith("layer params")) == 2 * 32
    assert sum(s.repeat for s in rs if "layer" in s.label) == 32
    layer_bytes = (L7.layer_params(0)[0]) * 2
    assert steps_by(z3, label="dense layer params")[0].nbytes == pytest.approx(layer_bytes, abs=16)
    assert all(s.nbytes % (8 * 2) == 0 for s in z3.steps)  # padded to equal shards


def test_zero_stages_1_2_and_micro_batches():
    lay = ParallelLayout(8)
    z1 = zero.build(lay, L7, zero.Options(stage=1, micro_batches=4))
    z2 = zero.build(lay, L7, zero.Options(stage=2, micro_batches=4))
    z3 = zero.build(lay, L7, zero.Options(stage=3, micro_batches=4))

    def total(prog, op):
        return sum(s.total_bytes for s in prog.steps if s.op == op)

    P2 = 2 * L7.params
    assert total(z1, "reduce_scatter") == pytest.approx(P2, rel=1e-4)
    assert total(z1, "allgather") == pytest.approx(P2, rel=1e-4)
    assert total(z2, "reduce_scatter") == pytest.approx(4 * P2, rel=1e-4)  # every micro-batch
    assert total(z3, "allgather") == pytest.approx(2 * 4 * P2, rel=1e-4)
    assert {s.axis for s in z3.steps} == {"dp"}
    with pytest.raises(UsageError, match="stage 4"):
        zero.Options(stage=4)


# ---- PP ----
def test_bubble_seed_check():
    assert pp.bubble_fraction(4, 8) == pytest.approx(0.273, abs=5e-4)
    assert pp.bubble_fraction(4, 32) == pytest.approx(0.086, abs=5e-4)
    prog = patterns.build("pp", ParallelLayout(8, pp=4), L7, {"micro_batches": 8})
    assert prog.meta["bubble_fraction"] == pytest.approx(3 / 11)


@pytest.mark.parametrize("p,m", [(2, 1), (4, 8), (4, 2), (8, 4), (3, 7)])
def test_1f1b_action_lists(p, m):
    sched = pp.schedule(p, m, 1024, 0.001, 0.002)
    order = pp.one_f_one_b(p, m)
    for i, passes in enumerate(order):
        w = pp.warmup_forwards(p, i, m)
        assert w == min(p - i - 1, m)
        assert passes[:w] == [(pp.FWD, j) for j in range(w)]
        assert sorted(passes) == sorted(
            [(pp.FWD, j) for j in range(m)] + [(pp.BWD, j) for j in range(m)]
        )
        if w < m:
            assert passes[w : w + 2] == [(pp.FWD, w), (pp.BWD, 0)]  # then one forward, one backward
    # every send has a matching receive on the peer, same bytes and tag
    sends = Counter(
        (i, i + a.peer, a.tag, a.nbytes)
        for i, acts in enumerate(sched)
        for a in acts
        if a.kind == "send"
    )
    recvs = Counter(
        (i + a.peer, i, a.tag, a.nbytes)
        for i, acts in enumerate(sched)
        for a in acts
        if a.kind == "recv"
    )
    assert sends == recvs
    assert sum(sends.values()) == 2 * (p - 1) * m
    # first stage never receives activations, last never sends them
    assert all(a.peer != -1 for a in sched[0]) and all(a.peer != 1 for a in sched[-1])
    # a blocking-receive, non-blocking-send execution completes (no deadlock) and, with free
    # messages and backward = 2 x forward, takes (m + p - 1)(tf + tb): the bubble formula
    makespan, _ = pp.simulate(sched)
    assert makespan == pytest.approx((m + p - 1) * 0.003)
    assert 1 - m * 0.003 / makespan == pytest.approx(pp.bubble_fraction(p, m))


def test_pp_program_activation_bytes():
    lay = ParallelLayout(16, tp=2, cp=2, pp=4)
    prog = pp.build(lay, L7, pp.Options(seq_len=4096, micro_batches=4))
    (step,) = prog.steps
    act = 4096 // 2 * 4096 * 2
    assert step.op == "p2p_schedule" and step.axis == "pp" and step.nbytes == act
    assert {a.nbytes for acts in step.schedule for a in acts if a.kind != "compute"} == {act}
    sp = pp.build(lay, L7, pp.Options(seq_len=4096, micro_batches=4, sequence_parallel=True))
    assert sp.steps[0].nbytes == act // 2
    assert not any(a.kind == "compute" for acts in step.schedule for a in acts)
    assert pp.build(ParallelLayout(4), L7, pp.Options()).steps == ()


def test_simulate_holds_a_fused_group_until_its_sends_are_delivered():
    """p=2, m=2, messages of 1 s, no compute. Stage 0 posts forwards 0 and 1 (one after the
    other on its link: they arrive at 1 and 2) fused with the backward receives; stage 1
    receives f0 at 1, sends b0 fused with receiving f1 (both done at 2), then sends b1,
    delivered at 3. Sends that never blocked (the old model) finished at 2: stage 1 sent b1
    the moment it had f1, at 1."""
    sched = pp.schedule(2, 2, 8)
    makespan, finish = pp.simulate(sched, 1.0)
    assert makespan == pytest.approx(3.0) and finish == pytest.approx([3.0, 3.0])
    # per stage pair: only the 1 -> 0 direction costs 1 s; forwards are free
    makespan, _ = pp.simulate(sched, lambda src, dst, n: 1.0 if src > dst else 0.0)
    assert makespan == pytest.approx(2.0)  # b0 sent at 0, arrives 1; b1 sent at 1, arrives 2
    # a link whose directions take turns: b0 waits for f1 to clear it (2 -> 3), b1 follows
    makespan, _ = pp.simulate(sched, 1.0, half_duplex=frozenset({0}))
    assert makespan == pytest.approx(4.0)


def test_simulate_is_linear_and_reports_every_compute_at_its_index():
    """p=8, m=1024 (the planner's deep pipelines): free messages give the 1F1B makespan
    (m + p - 1)(tf + tb) and on_compute names each compute by its index in the schedule.
    The per-group index was once rebuilt by summing every earlier group again (11.5 s for
    p=16, m=1024; linear now, well under a second)."""
    p, m = 8, 1024
    sched = pp.schedule(p, m, 8, 1e-3, 2e-3)
    seen: list[tuple[int, int, float, float]] = []
    makespan, _ = pp.simulate(sched, 0.0, on_compute=lambda *x: seen.append(x))
    assert makespan == pytest.approx((m + p - 1) * 3e-3)
    assert len(seen) == 2 * p * m
    for stage, index, start, end in seen:
        action = sched[stage][index]
        assert action.kind == "compute" and end - start == pytest.approx(action.seconds)


def test_simulate_detects_deadlock():
    from commbench.traffic.program import Action

    bad = ((Action("recv", 1, 8, tag=0), Action("send", 1, 8, tag=1)),
           (Action("recv", -1, 8, tag=1), Action("send", -1, 8, tag=0)))  # fmt: skip
    with pytest.raises(RuntimeError, match="deadlock"):
        pp.simulate(bad)


# ---- CP ----
@pytest.mark.parametrize("c", [2, 4, 8])
def test_cp_ring_units_gqa_aware(c):
    lay = ParallelLayout(16, cp=c, tp=16 // c if 16 // c <= 8 else 1)
    t = lay.tp
    prog = cp.build(lay, L70, cp.Options(seq_len=32768))
    unit = 2 * 1 * (32768 // c) * (8 // t) * 128 * 2  # 2 b (s/c) (n_kv/t) d_head x bf16
    L = 80
    fwd = sum(s.total_bytes for s in prog.steps if s.phase == "forward")
    bwd = sum(s.total_bytes for s in prog.steps if s.phase == "backward")
    assert fwd == (c - 1) * unit * L
    assert bwd == 2 * (c - 1) * unit * L
    assert all(s.op == "sendrecv" and s.axis == "cp" and s.peer == 1 for s in prog.steps)
    mha = cp.build(ParallelLayout(16, cp=c), L7, cp.Options(seq_len=32768))
    assert mha.meta["kv_unit_bytes"] == 2 * (32768 // c) * 32 * 128 * 2


# ---- EP ----
def test_ep_uniform_split_rows_sum_to_tkh():
    lay = ParallelLayout(8, ep=4)  # dp = 8, ep divides it
    prog = ep.build(lay, MIX, ep.Options(seq_len=1024))
    T, k, h = 1024, 2, 4096
    dispatch, combine, cgrad, dgrad = prog.steps
    assert [s.op for s in prog.steps] == ["alltoallv"] * 4
    assert all(sum(row) == T * k * h * 2 for row in dispatch.split)
    assert combine.split == tuple(zip(*dispatch.split))
    assert cgrad.split == dispatch.split and dgrad.split == combine.split
    assert [s.phase for s in prog.steps] == ["forward", "forward", "backward", "backward"]
    assert all(s.repeat == 32 and s.axis == "ep" for s in prog.steps)
    assert dispatch.nbytes == max(sum(r) for r in dispatch.split)
    assert prog.meta["imbalance"] < 1.2 and prog.meta["dropped_fraction"] == 0


def test_ep_router_skew_seed_and_capacity():
    lay = ParallelLayout(8, ep=8)
    zipf = ep.build(lay, MIX, ep.Options(seq_len=2048, router="zipf", seed=3))
    again = ep.build(lay, MIX, ep.Options(seq_len=2048, router="zipf", seed=3))
    other = ep.build(lay, MIX, ep.Options(seq_len=2048, router="zipf", seed=4))
    assert zipf.steps[0].split == again.steps[0].split != other.steps[0].split
    assert zipf.meta["imbalance"] > 1.5
    diri = ep.build(lay, MIX, ep.Options(seq_len=2048, router="dirichlet", dirichlet_alpha=0.3))
    assert diri.meta["imbalance"] > 1.2
    # capacity C = ceil(T k / E x cf); drop only
    opts = ep.Options(seq_len=2048, router="zipf", capacity_factor=1.0, pad=False)
    dropped = ep.build(lay, MIX, opts)
    C = ep.capacity(2048, 2, 8, 1.0)
    assert dropped.meta["capacity"] == C == 512
    per_expert = np.array(dropped.steps[0].split) / (4096 * 2)  # one expert per rank
    assert per_expert.max() <= C and dropped.meta["dropped_fraction"] > 0.1
    # drop-and-pad: every (source, expert) buffer is exactly C tokens
    padded = ep.build(lay, MIX, ep.Options(seq_len=2048, router="zipf", capacity_factor=1.0))
    assert set(np.ravel(padded.steps[0].split)) == {C * 4096 * 2}
    assert padded.meta["imbalance"] == 1.0 and padded.meta["router_imbalance"] > 1.5


def test_ep_tokens_split_by_tp_and_cp():
    lay = ParallelLayout(16, tp=2, cp=2, ep=4)
    prog = ep.build(lay, MIX, ep.Options(seq_len=4096))
    assert prog.meta["tokens"] == 4096 // 4
    assert all(sum(r) == 1024 * 2 * 4096 * 2 for r in prog.steps[0].split)
    with pytest.raises(UsageError, match="MoE"):
        ep.build(ParallelLayout(8, ep=2), L7, ep.Options())
    with pytest.raises(UsageError, match="router"):
        ep.Options(router="random")


# ---- collectives ----
def test_collectives_sweep_groups_and_placements():
    opts = collectives.Options(
        ops=("allreduce", "all_gather", "pingpong"), max_bytes=1024, factor=4
    )
    prog = collectives.build(ParallelLayout(8), None, opts)
    axes = Counter(s.axis for s in prog.steps)
    assert set(axes) == {"contig2", "contig4", "contig8", "strided2", "strided4"}
    assert {s.op for s in prog.steps if s.axis != "contig2" and s.axis != "strided2"} == {
        "allreduce",
        "allgather",
    }  # pingpong only on pairs
    lay = ParallelLayout(8, nodes=host_map(8, ranks_per_node=4))
    c4, s4 = resolve_axis(lay, "contig4"), resolve_axis(lay, "strided4")
    assert c4.groups == ((0, 1, 2, 3), (4, 5, 6, 7)) and c4.link_class == "intra"
    assert s4.groups == ((0, 2, 4, 6), (1, 3, 5, 7)) and s4.link_class == "inter"
    for s in prog.steps:
        g = resolve_axis(lay, s.axis).size
        assert s.nbytes % (4 * (g if s.op == "allgather" else 1)) == 0
    with pytest.raises(UsageError, match="does not divide"):
        collectives.build(ParallelLayout(8), None, collectives.Options(group_sizes=(3,)))


# ---- layout of the patterns' axes ----
def test_pattern_axes_on_megatron_layout():
    lay = ParallelLayout(16, tp=2, cp=2, ep=2, pp=2, nodes=host_map(16, ranks_per_node=8))
    assert lay.dp == 2 and lay.edp == 2
    info = {a: lay.info(a) for a in ("tp", "cp", "dp", "pp", "dp-cp", "ep", "edp")}
    assert info["tp"].groups[0] == (0, 1) and info["tp"].link_class == "intra"
    assert info["cp"].groups[0] == (0, 2) and info["cp"].stride == 2
    assert info["dp"].groups[0] == (0, 4)
    assert info["pp"].groups[0] == (0, 8) and info["pp"].link_class == "inter"
    assert info["dp-cp"].groups[0] == (0, 2, 4, 6)
    assert info["ep"].groups[0] == (0, 2) and info["edp"].groups[0] == (0, 4)
    for a, g in info.items():
        assert sorted(r for grp in g.groups for r in grp) == list(range(16)), a


def test_degree_violations_name_the_degree():
    with pytest.raises(UsageError, match="tp: tp=16 does not divide the 8 KV heads"):
        tp.build(ParallelLayout(16, tp=16), L70, tp.Options())
    with pytest.raises(UsageError, match="pp: pp=3 does not divide the 32 layers"):
        pp.build(ParallelLayout(6, pp=3), L7, pp.Options())
    with pytest.raises(UsageError, match="cp: cp=3 does not divide the sequence length 4096"):
        cp.build(ParallelLayout(6, cp=3), L7, cp.Options())
    tiny = ModelShape(name="t", layers=2, hidden=64, ffn_hidden=128, heads=4, experts=6, top_k=2)
    with pytest.raises(UsageError, match="ep: ep=4 does not divide the 6 experts"):
        ep.build(ParallelLayout(8, ep=4), tiny, ep.Options(seq_len=64))


def test_options_validation_names_fields():
    with pytest.raises(UsageError, match="o.colour: unknown option"):
        patterns.make_options("tp", {"colour": 1}, "o")
    with pytest.raises(UsageError, match=r"o.sequence_parallel: expected bool, got 'yes'"):
        patterns.make_options("tp", {"sequence_parallel": "yes"}, "o")
    with pytest.raises(UsageError, match="unknown dtype"):
        patterns.make_options("dp", {"grad_dtype": "fp8"}, "o")
    with pytest.raises(UsageError, match="unknown pattern 'tensor'"):
        patterns.get("tensor")
    opts = patterns.make_options("collectives", {"max_bytes": "1M", "ops": ["allreduce"]}, "o")
    assert opts.max_bytes == MiB and opts.ops == ("allreduce",)


@pytest.mark.parametrize("name", sorted(patterns.PATTERNS))
def test_option_types_are_typing_own(name):
    """The options' types, read once per annotation text, are what typing.get_type_hints says."""
    import typing

    from commbench.traffic.patterns.base import _hints

    cls = patterns.get(name).Options
    assert _hints(cls) == typing.get_type_hints(cls)


def test_training_step_collects_every_strategy():
    lay = ParallelLayout(64, tp=2, cp=2, ep=4, pp=2)  # dp = 8
    progs = patterns.training_step(
        lay, MIX, {"seq_len": 4096, "micro_batches": 4, "sequence_parallel": True}, zero_stage=1
    )
    assert set(progs) == {"tp", "cp", "pp", "ep", "zero"}
    assert progs["pp"].meta["micro_batches"] == 4
    assert {s.op for s in progs["tp"].steps} == {"allgather", "reduce_scatter"}
    assert progs["zero"].meta["stage"] == 1
    dense = patterns.training_step(ParallelLayout(8, tp=8), L7)
    assert set(dense) == {"tp"}
    assert set(patterns.training_step(ParallelLayout(8, tp=2), L7)) == {"tp", "dp"}
