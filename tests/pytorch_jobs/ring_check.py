"""tests/pytorch_jobs/ring.py against SDPA on the whole sequence: the output and the q, k, v
gradients of every rank's chunk, at c = 2 and 4 (forked gloo ranks). Prints `ok RANK C`."""

import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ring import ring_attention  # noqa: E402


def main(rank: int, init: str, c: int) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=c)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 32, 16, requires_grad=True) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    g = torch.randn_like(ref)
    ref.backward(g)
    n = 32 // c
    sl = slice(rank * n, (rank + 1) * n)
    ql, kl, vl = (t.detach()[:, :, sl].clone().requires_grad_() for t in (q, k, v))
    out = ring_attention(ql, kl, vl, dist.group.WORLD)
    out.backward(g[:, :, sl])
    pairs = (
        (out, ref[:, :, sl], "out"),
        (ql.grad, q.grad[:, :, sl], "dq"),
        (kl.grad, k.grad[:, :, sl], "dk"),
        (vl.grad, v.grad[:, :, sl], "dv"),
    )
    for a, b, name in pairs:
        assert torch.allclose(a, b, atol=1e-5), (rank, name, (a - b).abs().max())
    print("ok", rank, c, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    for c in (2, 4):
        with tempfile.TemporaryDirectory() as t:
            mp.start_processes(main, args=(f"file://{t}/s", c), nprocs=c, start_method="fork")
