"""torch.distributed backend: gloo on CPU tensors, nccl on one GPU per local rank.

Under mpirun, rank 0 picks a TCP rendezvous and broadcasts it over MPI; under torchrun,
env:// is used. NCCL ops are timed with CUDA events on the current stream. Reductions run
in place on the receive buffer (torch has no out-of-place all_reduce); the runner writes
the input into both buffers before a checked call.
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from commbench.measure.launch import LaunchInfo
from commbench.measure.transport.base import PIPELINED, Communicator, Fn

# torch >= 2.12 renamed the tensor forms; keep working on older releases
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "float64": torch.float64,
    "int8": torch.int8,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _rendezvous_address() -> str:
    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"]
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def init_world(launch: LaunchInfo, backend: str, timeout_s: float) -> TorchCommunicator:
    """Initialise the default process group from the launcher and return the world."""
    timeout = datetime.timedelta(seconds=timeout_s)
    device = torch.device("cpu")
    if backend == "nccl":
        local = launch.local_rank % max(torch.cuda.device_count(), 1)
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    if launch.launcher == "torchrun":
        dist.init_process_group(backend, init_method="env://", timeout=timeout)
    else:
        if launch.is_mpi:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
            addr = comm.bcast((_rendezvous_address(), _free_port()) if comm.rank == 0 else None)
        else:
            addr = ("127.0.0.1", _free_port())
        eager: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(
            backend,
            init_method=f"tcp://{addr[0]}:{addr[1]}",
            rank=launch.rank,
            world_size=launch.size,
            timeout=timeout,
            **eager,
        )
    world = dist.get_world_size()
    return TorchCommunicator(None, tuple(range(world)), device, backend)


class TorchCommunicator(Communicator):
    """A group over a torch.distributed process group (None = the default group)."""

    def __init__(
        self, group: Any, ranks: tuple[int, ...], device: torch.device, backend: str
    ) -> None:
        self.group = group
        self.ranks = ranks
        self.device = device
        self.backend = backend
        self.rank = ranks.index(dist.get_rank())
        self.size = len(ranks)
        self._cuda = device.type == "cuda"

    def _g(self, pos: int) -> int:
        return self.ranks[pos]

    # ---- groups and control ----
    def split(self, groups: Sequence[Sequence[int]]) -> TorchCommunicator | None:
        mine = None
        for g in groups:  # every rank creates every group, in the same order
            ranks = tuple(self.ranks[p] for p in g)
            pg = dist.new_group(list(ranks))
            if self.rank in g:
                mine = TorchCommunicator(pg, ranks, self.device, self.backend)
        return mine

    def barrier(self) -> None:
        if self._cuda:
            dist.barrier(group=self.group, device_ids=[self.device.index])
            torch.cuda.synchronize()
        else:
            dist.barrier(group=self.group)

    def abort(self, code: int) -> None:
        os._exit(code)

    def close(self) -> None:
        if self.group is None and dist.is_initialized():
            dist.destroy_process_group()

    def allgather_obj(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def gather_obj(self, obj: Any, root: int = 0) -> list[Any] | None:
        out: list[Any] | None = [None] * self.size if self.rank == root else None
        dist.gather_object(obj, out, dst=self._g(root), group=self.group)
        return out

    def bcast_obj(self, obj: Any, root: int = 0) -> Any:
        box = [obj]
        dist.broadcast_object_list(box, src=self._g(root), group=self.group)
        return box[0]

    # ---- buffers ----
    def alloc(self, nbytes: int, pages: str = "torch") -> torch.Tensor:
        return torch.zeros(nbytes, dtype=torch.uint8, device=self.device)

    def view(self, raw: torch.Tensor, nbytes: int, dtype: str, offset: int = 0) -> torch.Tensor:
        return raw[offset : offset + nbytes].view(_DTYPES[dtype])

    def write(self, view: torch.Tensor, values: np.ndarray) -> None:
        if view.dtype == torch.bfloat16:
            src = torch.from_numpy(values.view(np.int16)).view(torch.bfloat16)
        else:
            src = torch.from_numpy(np.ascontiguousarray(values))
        view.copy_(src)

    def read(self, view: torch.Tensor) -> np.ndarray:
        host = view.detach().cpu()
        if host.dtype == torch.bfloat16:
            return host.view(torch.int16).numpy().view(np.uint16).copy()
        return host.numpy().copy()

    # ---- ops (reductions in place on recv) ----
    def allreduce(self, send: torch.Tensor, recv: torch.Tensor) -> Fn:
        g = self.group
        return lambda: dist.all_reduce(recv, group=g)

    def allgather(self, send: torch.Tensor, recv: torch.Tensor) -> Fn:
        g = self.group
        return lambda: _all_gather(recv, send, group=g)

    def reduce_scatter(self, send: torch.Tensor, recv: torch.Tensor) -> Fn:
        g = self.group
        return lambda: _reduce_scatter(recv, send, group=g)

    def alltoall(self, send: torch.Tensor, recv: torch.Tensor) -> Fn:
        g = self.group
        return lambda: dist.all_to_all_single(recv, send, group=g)

    def alltoallv(
        self,
        send: torch.Tensor,
        scounts: Sequence[int],
        sdispls: Sequence[int],
        recv: torch.Tensor,
        rcounts: Sequence[int],
        rdispls: Sequence[int],
    ) -> Fn:
        g, sc, rc = self.group, list(scounts), list(rcounts)
        s, r = (
            send[: sum(sc)],
            recv[: sum(rc)],
        )  # torch packs by split sizes: displs are prefix sums
        return lambda: dist.all_to_all_single(
            r, s, output_split_sizes=rc, input_split_sizes=sc, group=g
        )

    def broadcast(self, buf: torch.Tensor, root: int) -> Fn:
        g, src = self.group, self._g(root)
        return lambda: dist.broadcast(buf, src=src, group=g)

    def reduce(self, send: torch.Tensor, recv: torch.Tensor, root: int) -> Fn:
        g, dst = self.group, self._g(root)
        return lambda: dist.reduce(recv, dst=dst, group=g)

    def sendrecv(
        self, send: torch.Tensor, dest: int | None, recv: torch.Tensor, source: int | None
    ) -> Fn:
        if dest == self.rank and source == self.rank:

            def copy() -> None:
                recv.copy_(send)

            return copy
        g, ops = self.group, []
        if dest is not None:
            ops.append(dist.P2POp(dist.isend, send, self._g(dest), g))
        if source is not None:
            ops.append(dist.P2POp(dist.irecv, recv, self._g(source), g))
        if not ops:
            return lambda: None

        def fn() -> None:
            for w in dist.batch_isend_irecv(ops):
                w.wait()

        return fn

    def pingpong(self, send: torch.Tensor, recv: torch.Tensor, peer: int, initiator: bool) -> Fn:
        g, p = self.group, self._g(peer)
        if initiator:

            def fn() -> None:
                dist.send(send, p, group=g)
                dist.recv(recv, p, group=g)
        else:

            def fn() -> None:
                dist.recv(recv, p, group=g)
                dist.send(send, p, group=g)

        return fn

    def isend(self, buf: torch.Tensor, dest: int, tag: int) -> Any:
        return dist.isend(buf, self._g(dest), group=self.group, tag=tag)

    def recv(self, buf: torch.Tensor, source: int, tag: int) -> None:
        dist.recv(buf, self._g(source), group=self.group, tag=tag)

    def waitall(self, requests: list[Any]) -> None:
        for r in requests:
            r.wait()

    def compute(self, seconds: float) -> None:
        if self._cuda and seconds > 0:
            torch.cuda._sleep(int(seconds * 1.4e9))  # ~cycles at a typical boost clock
        else:
            super().compute(seconds)

    def sync(self) -> None:
        if self._cuda:
            torch.cuda.synchronize()

    # ---- timing: CUDA events on the op's stream for nccl ----
    def time_loop(self, fn: Fn, iters: int, mode: str = "per-iteration") -> np.ndarray:
        if not self._cuda:
            return super().time_loop(fn, iters, mode)
        out = np.empty(iters)
        if mode == PIPELINED:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.barrier()
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            out.fill(start.elapsed_time(end) / 1e3 / iters)
            return out
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for i in range(iters):
            self.barrier()
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        for i in range(iters):
            out[i] = starts[i].elapsed_time(ends[i]) / 1e3
        return out
