"""commbench's torchtitan Program against real PyTorch parallelism, op for op.

tests/pytorch_jobs/run.py trains the issue's tiny Llama (2 layers, hidden 256, 4 heads,
SwiGLU 688, vocab 1024, seq 128, micro-batch 2, fp32) with DTensor TP, FSDP2 and DDP on gloo
and logs every op each rank issued by wrapping torch.distributed. Each rank's ops (kind,
dtype, element count, group ranks, phase) must equal, as a multiset, the ops of `suite step`'s
Program for the same shape and degrees with `framework: torchtitan` expanded on that rank.
One job per world size (ranks forked, torch imported once): ~10 s for 2 ranks, ~15 s for 4.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from commbench.traffic import patterns
from commbench.traffic.layout import ParallelLayout
from commbench.traffic.patterns.base import resolve_axis
from commbench.traffic.program import Program

from conftest import REPO

pytest.importorskip("torch")

JOB = REPO / "tests" / "pytorch_jobs" / "run.py"
MODEL = "tiny-llama:layers=2,hidden=256,heads=4,ffn_hidden=688,vocab=1024,seq_len=128"
# config -> (world, degrees, step options): what the job's config applies
CONFIGS = {
    "tp": (2, {"tp": 2}, {"micro_batches": 2}),
    "tp-sp": (2, {"tp": 2}, {"micro_batches": 2, "sequence_parallel": True}),
    "fsdp": (2, {}, {"micro_batches": 2, "zero_stage": 3}),
    "fsdp-bf16": (2, {}, {"micro_batches": 2, "zero_stage": 3, "dtype": "bfloat16"}),
    "ddp": (2, {}, {"micro_batches": 1, "bucket_mb": 0.5}),
    "tp-fsdp": (4, {"tp": 2}, {"micro_batches": 2, "zero_stage": 3, "sequence_parallel": True}),
    # GPipe issues 1F1B's sends and receives in its own order (test_pipeline_order)
    "pp-1f1b": (2, {"pp": 2}, {"micro_batches": 4, "pp_schedule": "Schedule1F1B"}),
    "pp-gpipe": (2, {"pp": 2}, {"micro_batches": 4, "pp_schedule": "ScheduleGPipe"}),
    # a TE/Megatron-style p2p ring (tests/pytorch_jobs/ring.py), FSDP2 over the cp ranks
    "cp-ring": (2, {"cp": 2}, {"micro_batches": 2, "zero_stage": 3, "cp_comm_type": "p2p"}),
    # torchtitan's EP (4 experts, top 2) over the 2 dp ranks, a balanced router: the
    # expected routing, exactly
    "ep": (2, {"ep": 2}, {"micro_batches": 2, "zero_stage": 3, "routing": "expected"}),
}
MOE = ",experts=4,top_k=2"
STAND_IN = {"float64": "int64"}  # commbench moves int64 scalars as 8-byte float64


def program(config: str) -> tuple[ParallelLayout, Program]:
    """The torchtitan step Program of a job config, as `suite step --dry-run` builds it."""
    from commbench.traffic.presets import parse_model_arg

    world, degrees, options = CONFIGS[config]
    layout = ParallelLayout(world, **degrees)
    opts = {
        "framework": "torchtitan", "micro_batch": 2, "dtype": "float32",
        "grad_dtype": "float32", **options,
    }  # fmt: skip
    model = MODEL + (MOE if config == "ep" else "")
    return layout, patterns.build("step", layout, parse_model_arg(model), opts)


def expected_ops(layout: ParallelLayout, prog: Program, rank: int) -> Counter:
    """The Program's ops as one rank issues them: each Step `repeat` times on its group."""
    out: Counter = Counter()
    for s in prog.steps:
        group = next(g for g in resolve_axis(layout, s.axis).groups if rank in g)
        dtype = STAND_IN.get(s.dtype, s.dtype)
        if s.split is not None:  # all-to-all-v: this rank's send buffer
            me = group.index(rank)
            count = sum(s.split[me]) // (s.nbytes // s.count)
            out[(s.phase, "alltoall", dtype, count, tuple(sorted(group)))] += int(s.repeat)
            continue
        if s.op == "sendrecv":  # a ring hop: send to +peer, receive from -peer
            me, c = group.index(rank), len(group)
            for kind, other in (("send", me + s.peer), ("recv", me - s.peer)):
                pair = tuple(sorted((rank, group[other % c])))
                out[(s.phase, kind, dtype, s.count, pair)] += int(s.repeat)
            continue
        if s.schedule is not None:  # a pipeline: this stage's sends and receives
            me = group.index(rank)
            for a in s.schedule[me]:
                if a.kind != "compute":
                    pair = tuple(sorted((rank, group[me + a.peer])))
                    out[(s.phase, a.kind, dtype, a.nbytes // (s.nbytes // s.count), pair)] += 1
            continue
        out[(s.phase, s.op, dtype, s.count, tuple(sorted(group)))] += int(s.repeat)
    return out


def logged_ops(doc: dict) -> Counter:
    return Counter(
        (o["phase"], o["op"], o["dtype"], o["count"], tuple(sorted(o["ranks"]))) for o in doc["ops"]
    )


@pytest.fixture(scope="module")
def op_logs(tmp_path_factory) -> Path:
    """Run the job once per world size; the op logs' directory."""
    out = tmp_path_factory.mktemp("ops")
    for world in sorted({w for w, _, _ in CONFIGS.values()}):
        names = [c for c, (w, _, _) in CONFIGS.items() if w == world]
        cmd = [sys.executable, str(JOB), "--world", str(world), "--out", str(out), *names]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_torchtitan_program_matches_real_pytorch(op_logs, config):
    layout, prog = program(config)
    world = CONFIGS[config][0]
    for rank in range(world):
        doc = json.loads((op_logs / config / f"rank{rank}.json").read_text())
        want, got = expected_ops(layout, prog, rank), logged_ops(doc)
        missing, extra = want - got, got - want
        assert not missing and not extra, (
            f"{config} rank {rank}: modelled but not issued {dict(missing)}; "
            f"issued but not modelled {dict(extra)}"
        )
        assert sum(got.values()) > 0


@pytest.mark.parametrize("config", ["pp-1f1b", "pp-gpipe"])
def test_pipeline_order(op_logs, config):
    """Each stage's sends and receives in the order torch's schedule issued them, against the
    order of the pp_schedule's action list on that stage (GPipe: every forward's, then every
    backward's; 1F1B: interleaved)."""
    layout, prog = program(config)
    (step,) = [s for s in prog.steps if s.schedule is not None]
    for rank in range(2):
        doc = json.loads((op_logs / config / f"rank{rank}.json").read_text())
        got = [o["op"] for o in doc["ops"] if o["op"] in ("send", "recv")]
        want = [a.kind for a in step.schedule[rank] if a.kind != "compute"]
        assert got == want, (config, rank)


def test_ring_attention_is_exact():
    """The cp-ring job's ring attention (TE's K/V exchange) gives SDPA's output and grads."""
    job = REPO / "tests" / "pytorch_jobs" / "ring_check.py"
    done = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("ok") == 6


def test_job_writes_profiler_traces(tmp_path):
    """--profile (for `commbench trace`, issue 32): the logged step's Chrome trace per rank,
    beside the same op log."""
    cmd = [sys.executable, str(JOB), "--world", "2", "--out", str(tmp_path / "ops"),
           "--profile", str(tmp_path / "traces"), "tp"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        trace = json.loads((tmp_path / "traces" / "tp" / f"rank{rank}.json").read_text())
        assert trace["traceEvents"]
        doc = json.loads((tmp_path / "ops" / "tp" / f"rank{rank}.json").read_text())
        assert len(doc["ops"]) == 27
