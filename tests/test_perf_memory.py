"""Lean memory: lazy check data equals the eager patterns, and binding + checking a large point
allocates a few chunks, not copies of the buffer (one real process on the mpi backend)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from commbench.ops.checkdata import (
    CHUNK,
    concat,
    fill,
    fill_sum,
    fill_zeros,
    pattern,
    pattern_sum,
)

from conftest import REPO, job_env

DTYPES = ["float32", "float16", "bfloat16", "int32", "float64"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "start", "chunk"), [(1, 0, 4), (100, 5, 7), (5000, 123, 61)])
def test_fill_matches_eager_patterns(dtype, n, start, chunk):
    def joined(f):
        parts = list(f.chunks(chunk))
        ends = [a + len(v) for a, v in parts]
        assert [a for a, _ in parts] == [0, *ends[:-1]] and ends[-1] == f.n  # contiguous
        assert all(len(v) <= chunk for _, v in parts)
        return np.concatenate([v for _, v in parts])

    assert np.array_equal(joined(fill(3, n, dtype, start)), pattern(3, n, dtype, start))
    assert np.array_equal(
        joined(fill_sum(range(5), n, dtype, start)), pattern_sum(range(5), n, dtype, start)
    )
    both = concat([fill(q, n, dtype, start) for q in range(3)])
    eager = np.concatenate([pattern(q, n, dtype, start) for q in range(3)])
    assert both.n == 3 * n and np.array_equal(joined(both), eager)
    assert not joined(fill_zeros(n, dtype)).view(np.uint8).any()


BIND_SCRIPT = """
import json, tracemalloc
from commbench.measure.bind import BufferPool, bind
from commbench.traffic.program import Step
from commbench.measure.transport.mpi import MPICommunicator

comm = MPICommunicator.world()
pool = BufferPool(comm)
S = 64 << 20
pool.reserve(S, S)
send, recv = pool.send, pool.recv
tracemalloc.start()
wrong = {}
for op in ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce",
           "sendrecv"):
    b = bind(comm, Step(op=op, nbytes=S, dtype="float32"), pool)
    b.prepare(); b.fn(); wrong[op] = b.verify(); b.reset()
print(json.dumps({"peak": tracemalloc.get_traced_memory()[1], "wrong": wrong,
                  "reused": pool.send is send and pool.recv is recv}))
"""


def test_binding_and_checking_a_large_point_costs_a_few_chunks():
    p = subprocess.run(
        [sys.executable, "-c", BIND_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env=job_env(),
        cwd=REPO,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["reused"] and set(out["wrong"].values()) == {0}, out
    # a chunk of int64 template + its encoding + one read-back chunk, far below S = 64 MiB
    assert out["peak"] < 8 * CHUNK * 4, out["peak"]
