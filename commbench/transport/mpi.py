"""mpi4py backend: numpy host buffers (or CUDA arrays where the MPI is CUDA-aware).

Ops are bound once to buffer specs so each timed call is a single mpi4py method call.
MPI has no float16/bfloat16 reductions, so those dtypes run the data-movement ops only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from commbench.data import storage_dtype
from commbench.transport.base import Communicator, Fn


def _mpitype(buf: np.ndarray) -> Any:
    return {
        np.dtype(np.float32): MPI.FLOAT,
        np.dtype(np.float64): MPI.DOUBLE,
        np.dtype(np.int32): MPI.INT32_T,
        np.dtype(np.float16): MPI.UINT16_T,
        np.dtype(np.uint16): MPI.UINT16_T,
    }[buf.dtype]


def _spec(buf: np.ndarray) -> list:
    return [buf, _mpitype(buf)]


def _nproc(peer: int | None) -> int:
    return MPI.PROC_NULL if peer is None else peer


class MPICommunicator(Communicator):
    """A group over an mpi4py intracommunicator."""

    backend = "mpi"

    def __init__(self, comm: MPI.Intracomm, ranks: tuple[int, ...]) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.ranks = ranks

    @classmethod
    def world(cls) -> MPICommunicator:
        return cls(MPI.COMM_WORLD, tuple(range(MPI.COMM_WORLD.Get_size())))

    # ---- groups and control ----
    def split(self, groups: Sequence[Sequence[int]]) -> MPICommunicator | None:
        color, key = MPI.UNDEFINED, self.rank
        for i, g in enumerate(groups):
            if self.rank in g:
                color, key = i, list(g).index(self.rank)
        sub = self.comm.Split(color, key)
        if sub == MPI.COMM_NULL:
            return None
        return MPICommunicator(sub, tuple(self.ranks[r] for r in groups[color]))

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int) -> None:
        MPI.COMM_WORLD.Abort(code)

    def close(self) -> None:
        if self.comm not in (MPI.COMM_WORLD, MPI.COMM_SELF):
            self.comm.Free()

    def allgather_obj(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj)

    def gather_obj(self, obj: Any, root: int = 0) -> list[Any] | None:
        return self.comm.gather(obj, root=root)

    def bcast_obj(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=root)

    # Buffer Allreduce, not the pickled `allreduce(op=MAX)`: that one holds the GIL while it
    # waits for peers, starving the watchdog and signal threads (a peer hung at a stop
    # agreement would hang us too, and a SIGTERM could not be recorded before the SIGKILL).
    def max_int(self, value: int) -> int:
        buf = np.array([value], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
        return int(buf[0])

    def max_float(self, value: float) -> float:
        buf = np.array([value], dtype=np.float64)
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)
        return float(buf[0])

    # ---- buffers ----
    def alloc(self, nbytes: int) -> np.ndarray:
        return np.zeros(nbytes, dtype=np.uint8)  # zeros touches the pages: no faults when timed

    def view(self, raw: np.ndarray, nbytes: int, dtype: str, offset: int = 0) -> np.ndarray:
        return raw[offset : offset + nbytes].view(storage_dtype(dtype))

    def write(self, view: np.ndarray, values: np.ndarray) -> None:
        view[...] = values

    def read(self, view: np.ndarray) -> np.ndarray:
        return view.copy()

    # ---- ops ----
    def allreduce(self, send: np.ndarray, recv: np.ndarray) -> Fn:
        f, s, r, op = self.comm.Allreduce, _spec(send), _spec(recv), MPI.SUM
        return lambda: f(s, r, op)

    def allgather(self, send: np.ndarray, recv: np.ndarray) -> Fn:
        f, s, r = self.comm.Allgather, _spec(send), _spec(recv)
        return lambda: f(s, r)

    def reduce_scatter(self, send: np.ndarray, recv: np.ndarray) -> Fn:
        f, s, r, op = self.comm.Reduce_scatter_block, _spec(send), _spec(recv), MPI.SUM
        return lambda: f(s, r, op)

    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> Fn:
        f, s, r = self.comm.Alltoall, _spec(send), _spec(recv)
        return lambda: f(s, r)

    def alltoallv(
        self,
        send: np.ndarray,
        scounts: Sequence[int],
        sdispls: Sequence[int],
        recv: np.ndarray,
        rcounts: Sequence[int],
        rdispls: Sequence[int],
    ) -> Fn:
        f = self.comm.Alltoallv
        s = [send, (list(scounts), list(sdispls)), _mpitype(send)]
        r = [recv, (list(rcounts), list(rdispls)), _mpitype(recv)]
        return lambda: f(s, r)

    def broadcast(self, buf: np.ndarray, root: int) -> Fn:
        f, b = self.comm.Bcast, _spec(buf)
        return lambda: f(b, root)

    def reduce(self, send: np.ndarray, recv: np.ndarray, root: int) -> Fn:
        f, s, r, op = self.comm.Reduce, _spec(send), _spec(recv), MPI.SUM
        return lambda: f(s, r, op, root)

    def sendrecv(
        self, send: np.ndarray, dest: int | None, recv: np.ndarray, source: int | None
    ) -> Fn:
        f, s, r = self.comm.Sendrecv, _spec(send), _spec(recv)
        d, src = _nproc(dest), _nproc(source)
        return lambda: f(s, d, 0, r, src, 0)

    def pingpong(self, buf: np.ndarray, peer: int, initiator: bool) -> Fn:
        send, recv, b = self.comm.Send, self.comm.Recv, _spec(buf)
        if initiator:

            def fn() -> None:
                send(b, peer, 1)
                recv(b, peer, 1)
        else:

            def fn() -> None:
                recv(b, peer, 1)
                send(b, peer, 1)

        return fn

    def isend(self, buf: np.ndarray, dest: int, tag: int) -> MPI.Request:
        return self.comm.Isend(_spec(buf), dest, tag)

    def recv(self, buf: np.ndarray, source: int, tag: int) -> None:
        self.comm.Recv(_spec(buf), source, tag)

    def waitall(self, requests: list[Any]) -> None:
        MPI.Request.Waitall(requests)
