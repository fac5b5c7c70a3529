"""An mpirun job for tests/test_perf_native.py: every op through Session + Runner, both timings.

    mpirun -n N python tests/perf_job.py RESULTS_DIR RUN_ID

Measures each op at a few sizes and dtypes, on the world and on sub-groups, per-iteration
and pipelined, plus a p2p schedule (always the Python loop), and writes one run directory,
so a job with COMMBENCH_NATIVE=0 and one without can be compared record by record.
"""

from __future__ import annotations

import sys
from pathlib import Path

from commbench.measure.launch import detect
from commbench.measure.runner import Runner, TimingConfig
from commbench.measure.session import Session, SessionOptions
from commbench.measure.transport.base import PER_ITERATION, PIPELINED
from commbench.ops import round_bytes
from commbench.traffic.layout import sweep_mesh
from commbench.traffic.program import Action, Step

SIZES = (8, 1000, 64 << 10)


def cases(world: int) -> list[tuple[Step, int]]:
    """(step, group size) pairs covering every op the native loop times, and one it does not."""
    out: list[tuple[Step, int]] = []
    groups = sorted({world, 2})
    for p in groups:
        for op in ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce"):
            for s in SIZES:
                out.append(
                    (Step(op=op, nbytes=round_bytes(op, s, p, "float32"), dtype="float32"), p)
                )
        for s in SIZES:
            n = round_bytes("sendrecv", s, p, "float32")
            out.append((Step(op="sendrecv", nbytes=n, dtype="float32"), p))
            out.append((Step(op="sendrecv", nbytes=n, dtype="float32", ring=False), p))
        split = tuple(tuple(4 * (1 + (i + j) % 3) for j in range(p)) for i in range(p))
        out.append(
            (Step(op="alltoallv", nbytes=max(map(sum, split)), dtype="float32", split=split), p)
        )
    out.append((Step(op="allreduce", nbytes=4096, dtype="int32"), world))
    out.append((Step(op="allreduce", nbytes=4096, dtype="float64"), world))
    n = round_bytes("allgather", 4096, world, "bfloat16")
    out.append((Step(op="allgather", nbytes=n, dtype="bfloat16"), world))
    out.append((Step(op="pingpong", nbytes=4096, dtype="float32"), 2))
    chain = tuple(
        (Action("send", 1, 4096),) if r % 2 == 0 else (Action("recv", -1, 4096),) for r in range(2)
    )
    out.append((Step(op="p2p_schedule", nbytes=4096, dtype="float32", schedule=chain), 2))
    return out


def main() -> int:
    results, run_id = Path(sys.argv[1]), sys.argv[2]
    launch = detect()
    opts = SessionOptions(command="perf-job", backend="mpi", results=results, run_id=run_id)
    with Session(launch, opts, TimingConfig(iters=3, warmup=1, timing=PER_ITERATION)) as s:
        pipelined = Runner(s.world, TimingConfig(iters=3, warmup=1, timing=PIPELINED))
        runners = (s.runner, pipelined)
        steps = cases(s.world.size)
        infos = {
            p: sweep_mesh(s.world.size, p, "contiguous", s.nodes).info("group")
            for p in {2, s.world.size}
        }
        for runner in runners:
            runner.reserve([(st, infos[p]) for st, p in steps])
        for runner in runners:
            for step, p in steps:
                rec = runner.measure(step, infos[p])
                if rec is not None:
                    s.writer.write({**rec.to_json(), "kind": "collective", "backend": "mpi"})
        pipelined.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
