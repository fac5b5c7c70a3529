"""torch.distributed backend: gloo on CPU tensors, nccl on one GPU per local rank.

Under mpirun, rank 0 picks a TCP rendezvous and broadcasts it over MPI; under torchrun,
env:// is used. NCCL ops are timed with CUDA events on the current stream. Reductions run
in place on the receive buffer (torch has no out-of-place all_reduce); the runner writes
the input into both buffers before a checked call.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from commbench.errors import UsageError
from commbench.measure.launch import LaunchInfo
from commbench.measure.transport.base import (
    ENQUEUE,
    PER_ITERATION,
    PIPELINED,
    PRE_ROLL,
    Communicator,
    Fn,
)
from commbench.measure.transport.devices import device_problem, gpu_index
from commbench.measure.transport.gputime import preroll_seconds, sleep_cycles
from commbench.measure.transport.rendezvous import (
    free_port,
    process_group_timeout_s,
    rendezvous_address,
)

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


def init_world(launch: LaunchInfo, backend: str, timeout_s: float) -> TorchCommunicator:
    """Initialise the default process group from the launcher and return the world.

    nccl: one GPU per local rank (`devices.gpu_index`), bound with `device_id` on every launch
    path (eager init: the same communicators and p2p semantics under torchrun and mpirun), and
    gloo beside it for CPU tensors ("cpu:gloo,cuda:nccl"), so pickled control messages never
    go through NCCL. torch's timeout sits a margin above commbench's watchdog."""
    timeout = datetime.timedelta(seconds=process_group_timeout_s(timeout_s))
    device = torch.device("cpu")
    kwargs: dict[str, Any] = {"timeout": timeout}
    pg_backend = backend
    if backend == "nccl":
        problem = device_problem(
            launch, torch.cuda.is_available(), torch.cuda.device_count(), dist.is_nccl_available()
        )
        if problem:
            raise UsageError(problem)
        device = torch.device("cuda", gpu_index(launch, torch.cuda.device_count()))
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
        pg_backend = "cpu:gloo,cuda:nccl"
    if launch.launcher == "torchrun":
        dist.init_process_group(pg_backend, init_method="env://", **kwargs)
    else:
        if launch.is_mpi:
            from mpi4py import MPI

            comm = MPI.COMM_WORLD
            spans = launch.local_size < launch.size
            mine = None
            if comm.rank == 0:
                try:
                    mine = ("ok", rendezvous_address(spans), free_port())
                except UsageError as e:
                    mine = ("error", str(e), 0)
            status, addr, port = comm.bcast(mine)
            if status == "error":
                raise UsageError(addr)
        else:
            addr, port = "127.0.0.1", free_port()
        dist.init_process_group(
            pg_backend,
            init_method=f"tcp://{addr}:{port}",
            rank=launch.rank,
            world_size=launch.size,
            **kwargs,
        )
    world = dist.get_world_size()
    return TorchCommunicator(None, tuple(range(world)), device, backend, timeout)


def receives_first(ops: Sequence[tuple[str, Any, int]]) -> list[tuple[str, Any, int]]:
    """A fused group's actions as posted: receives, then sends, each kind in its order (the
    k-th send to a peer matches its k-th receive). gloo sends only once the peer's receive is
    announced, and the announcement queues behind the pair's own bulk data: sends first, a
    16 MiB exchange across emulated nodes at 1 Gbit/s took turns (0.060 GB/s, half the rate)
    or not (0.114), by run; receives first, 0.120-0.121 every run (one way: 0.121)."""
    return [op for op in ops if op[0] != "send"] + [op for op in ops if op[0] == "send"]


class TorchCommunicator(Communicator):
    """A group over a torch.distributed process group (None = the default group)."""

    def __init__(
        self,
        group: Any,
        ranks: tuple[int, ...],
        device: torch.device,
        backend: str,
        timeout: datetime.timedelta,
    ) -> None:
        self.group = group
        self.timeout = timeout
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
        members = [tuple(self.ranks[p] for p in g) for g in groups]
        mine = next((m for m in members if dist.get_rank() in m), None)
        if self._cuda and hasattr(dist, "split_group"):
            # one ncclCommSplit for all groups (torch >= 2.6), not one world-wide split per group
            pg = dist.split_group(self.group, [list(g) for g in groups], timeout=self.timeout)
        else:
            pg = None
            for ranks in members:  # every rank creates every group, in the same order
                created = dist.new_group(list(ranks), timeout=self.timeout)
                if ranks == mine:
                    pg = created
        if mine is None:
            return None
        return TorchCommunicator(pg, mine, self.device, self.backend, self.timeout)

    def barrier(self) -> None:
        """Host barrier once this rank's GPU work is done (gloo under "cpu:gloo,cuda:nccl")."""
        if self._cuda:
            torch.cuda.synchronize()
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
        if source is not None:
            ops.append(dist.P2POp(dist.irecv, recv, self._g(source), g))
        if dest is not None:
            ops.append(dist.P2POp(dist.isend, send, self._g(dest), g))
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

    def p2p(self, ops: Sequence[tuple[str, Any, int]]) -> Fn:
        g = self.group
        batch = [
            dist.P2POp(dist.isend if kind == "send" else dist.irecv, buf, self._g(peer), g)
            for kind, buf, peer in receives_first(ops)
        ]

        def fn() -> None:
            for w in dist.batch_isend_irecv(batch):
                w.wait()

        return fn

    def compute(self, seconds: float) -> None:
        if self._cuda and seconds > 0:
            torch.cuda._sleep(sleep_cycles(seconds, sleep_rate()))
        else:
            super().compute(seconds)

    def sync(self) -> None:
        if self._cuda:
            torch.cuda.synchronize()

    # ---- timing: CUDA events on the op's stream for nccl ----
    def loop_kind(self, fn: Fn, mode: str = PER_ITERATION, timer: str = PRE_ROLL) -> str:
        return f"cuda-events ({timer})" if self._cuda else "python"

    def timing_info(self) -> dict:
        if not self._cuda:
            return {"loop": "python"}
        return {
            "loop": "python, CUDA events",
            "gpu_timers": {
                PRE_ROLL: "device sleep queued before the start event: the host's enqueue "
                "of the op is not timed",
                ENQUEUE: "start event recorded as the host reaches it: includes the enqueue",
            },
            "sleep_cycles_per_s": sleep_rate(),
        }

    def device_identity(self) -> dict:
        if not self._cuda:
            return {"device": "cpu"}
        props = torch.cuda.get_device_properties(self.device)
        bus = getattr(props, "pci_bus_id", None)
        pci = (
            f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:"
            f"{getattr(props, 'pci_device_id', 0):02x}.0"
            if bus is not None
            else None
        )
        return {
            "device": str(self.device),
            "gpu": props.name,
            "pci_bus_id": pci,
            "uuid": str(getattr(props, "uuid", "")) or None,
            "memory_bytes": int(props.total_memory),
        }

    def time_loop(
        self, fn: Fn, iters: int, mode: str = PER_ITERATION, timer: str = PRE_ROLL
    ) -> np.ndarray:
        """CUDA events around the op. With PRE_ROLL, a device sleep a few times the host's
        enqueue (measured on one untimed call, the group's largest) is queued first, so the
        start event fires only once the op is queued behind it; every rank sleeps as long."""
        if not self._cuda:
            return super().time_loop(fn, iters, mode)
        rate, clock = sleep_rate(), time.perf_counter
        preroll = 0.0
        if timer == PRE_ROLL:
            self.barrier()
            t0 = clock()
            fn()
            preroll = self.max_float(preroll_seconds(clock() - t0))  # the same on every rank
        out = np.empty(iters)
        if mode == PIPELINED:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.barrier()
            if preroll:
                torch.cuda._sleep(sleep_cycles(preroll, rate))
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
            if preroll:
                torch.cuda._sleep(sleep_cycles(preroll, rate))
            starts[i].record()
            fn()
            ends[i].record()
        torch.cuda.synchronize()
        for i in range(iters):
            out[i] = starts[i].elapsed_time(ends[i]) / 1e3
        return out


_SLEEP_RATE: list[float] = []


def sleep_rate() -> float:
    """torch.cuda._sleep's cycles per second on this GPU, measured once per process (the
    clock it spins on runs at the SM clock: ~1.98 GHz boost on H100/H200, not an assumed 1.4)."""
    if not _SLEEP_RATE:
        cycles = 20_000_000
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles // 10)  # wake the clocks
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _SLEEP_RATE.append(cycles / (start.elapsed_time(end) / 1e3))
    return _SLEEP_RATE[0]
