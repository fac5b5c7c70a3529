"""mpi4py backend: numpy host buffers, always (a CUDA-aware MPI still measures host memory).

Ops are bound once to buffer specs so each timed call is a single mpi4py method call, and
carry a native descriptor so the timed loop runs in C (transport/native.py) when the MPI's
mpicc can build it; the Python loop is the fallback. MPI has no float16/bfloat16
reductions, so those dtypes run the data-movement ops only.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Sequence
from functools import partial
from typing import Any, cast

import mpi4py
import numpy as np

# Under MPI_THREAD_MULTIPLE Open MPI locks inside every call (~100 ns here, half a shared-memory
# allreduce). commbench calls MPI from one thread at a time (the main thread; the watchdog's
# MPI_Abort ends the job), so it asks for "serialized". MPI4PY_RC_THREAD_LEVEL still overrides.
mpi4py.rc.thread_level = "serialized"

from mpi4py import MPI  # noqa: E402

from commbench.measure.transport import native  # noqa: E402
from commbench.measure.transport.base import (  # noqa: E402
    HUGEPAGE,
    PER_ITERATION,
    PIPELINED,
    PLAIN,
    PRE_ROLL,
    Communicator,
    Fn,
    spin,
    touch_lines,
)
from commbench.ops.checkdata import storage_dtype  # noqa: E402
from commbench.ops.spec import ACKS, TO_ROOT  # noqa: E402

HUGE_PAGE = 2 << 20


def _mpitype(buf: np.ndarray) -> Any:
    return {
        np.dtype(np.float32): MPI.FLOAT,
        np.dtype(np.float64): MPI.DOUBLE,
        np.dtype(np.int32): MPI.INT32_T,
        np.dtype(np.float16): MPI.UINT16_T,
        np.dtype(np.uint16): MPI.UINT16_T,
        np.dtype(np.int8): MPI.INT8_T,
    }[buf.dtype]


def _wait_gently(req: MPI.Request) -> None:
    """Complete `req`, polling with sleeps that grow from 20 us to 1 ms: Open MPI's blocking
    waits busy-poll (yielding at best), which on an oversubscribed machine takes the cores
    from the rank being waited for; the sleeps also leave the interpreter lock to the
    watchdog and signal threads."""
    pause = 2e-5
    while not req.Test():
        time.sleep(pause)
        pause = min(2 * pause, 1e-3)


def _spec(buf: np.ndarray) -> list:
    return [buf, _mpitype(buf)]


def _nproc(peer: int | None) -> int:
    return MPI.PROC_NULL if peer is None else peer


class MPICommunicator(Communicator):
    """A group over an mpi4py intracommunicator."""

    backend = "mpi"
    allocates_pages = True

    def __init__(
        self,
        comm: MPI.Intracomm,
        ranks: tuple[int, ...],
        loop: native.NativeLoop | None = None,
        availability: native.Availability | None = None,
    ) -> None:
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.ranks = ranks
        self._loop = loop
        self._availability = availability or native.Availability("python", "not loaded")

    @classmethod
    def world(cls) -> MPICommunicator:
        """The world, timing natively only if every rank can (collective). Where a rank found
        its mpicc but could not build or load the loop (a cache it cannot write), rank 0 says
        so once: the Python loop adds ~0.5-1 us a call, in every fitted alpha."""
        loop, avail = native.loop()
        broken = avail.reason if loop is None and avail.compiler else ""
        states = MPI.COMM_WORLD.allgather((loop is not None, broken))
        if not all(ok for ok, _ in states) and loop:
            loop, avail = None, native.Availability("python", "native loop missing on some rank")
        reasons = [(r, why) for r, (_, why) in enumerate(states) if why]
        if reasons and MPI.COMM_WORLD.Get_rank() == 0:
            native.say_python_loop(reasons)
        return cls(MPI.COMM_WORLD, tuple(range(MPI.COMM_WORLD.Get_size())), loop, avail)

    # ---- groups and control ----
    def split(self, groups: Sequence[Sequence[int]]) -> MPICommunicator | None:
        color, key = MPI.UNDEFINED, self.rank
        for i, g in enumerate(groups):
            if self.rank in g:
                color, key = i, list(g).index(self.rank)
        sub = self.comm.Split(color, key)
        if sub == MPI.COMM_NULL:
            return None
        ranks = tuple(self.ranks[r] for r in groups[color])
        return MPICommunicator(cast(MPI.Intracomm, sub), ranks, self._loop, self._availability)

    def barrier(self) -> None:
        self.comm.Barrier()

    def settle(self) -> None:
        _wait_gently(self.comm.Ibarrier())

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
    def alloc(self, nbytes: int, pages: str = HUGEPAGE) -> np.ndarray:
        """Zeroed host bytes on a 2 MiB boundary. `hugepage` (the default) requests transparent
        huge pages: here a 4 MiB shared-memory sendrecv takes ~90 us on such pages and 200-400
        us on 4 KiB ones (numpy's own THP advice covers only the aligned interior; bench/floor.c
        does the same). `plain` asks for 4 KiB pages (MADV_NOHUGEPAGE), what OSU's and IMB's
        page-aligned malloc gets when THP is `madvise`. The checked call and the warmup touch
        the pages before anything is timed."""
        assert pages in (HUGEPAGE, PLAIN), pages
        mm = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        advice = "MADV_HUGEPAGE" if pages == HUGEPAGE else "MADV_NOHUGEPAGE"
        if hasattr(mmap, advice):
            mm.madvise(getattr(mmap, advice))
        raw = np.frombuffer(mm, dtype=np.uint8)
        start = -raw.ctypes.data % HUGE_PAGE
        return raw[start : start + nbytes]

    def view(self, raw: np.ndarray, nbytes: int, dtype: str, offset: int = 0) -> np.ndarray:
        return raw[offset : offset + nbytes].view(storage_dtype(dtype))

    def write(self, view: np.ndarray, values: np.ndarray) -> None:
        view[...] = values

    def read(self, view: np.ndarray) -> np.ndarray:
        return view.copy()

    # ---- ops ----
    def _bound(self, call: Fn, kind: str, send, recv, count: int, **kw) -> native.BoundOp:
        """`call` through mpi4py, plus the descriptor the native loop times."""
        if self._loop is None:
            return native.BoundOp(call, None, None)
        desc = native.describe(kind, self.comm, _mpitype(recv), send, recv, count, **kw)
        if desc is None:
            return native.BoundOp(call, None, None)
        return native.BoundOp(call, desc[0], self._loop, keep=desc[1])

    def allreduce(self, send: np.ndarray, recv: np.ndarray) -> Fn:
        call = partial(self.comm.Allreduce, _spec(send), _spec(recv), MPI.SUM)
        return self._bound(call, "allreduce", send, recv, send.size)

    def allgather(self, send: np.ndarray, recv: np.ndarray) -> Fn:
        call = partial(self.comm.Allgather, _spec(send), _spec(recv))
        return self._bound(call, "allgather", send, recv, send.size)

    def reduce_scatter(self, send: np.ndarray, recv: np.ndarray) -> Fn:
        call = partial(self.comm.Reduce_scatter_block, _spec(send), _spec(recv), MPI.SUM)
        return self._bound(call, "reduce_scatter", send, recv, recv.size)

    def alltoall(self, send: np.ndarray, recv: np.ndarray) -> Fn:
        call = partial(self.comm.Alltoall, _spec(send), _spec(recv))
        return self._bound(call, "alltoall", send, recv, send.size // self.size)

    def alltoallv(
        self,
        send: np.ndarray,
        scounts: Sequence[int],
        sdispls: Sequence[int],
        recv: np.ndarray,
        rcounts: Sequence[int],
        rdispls: Sequence[int],
    ) -> Fn:
        s = [send, (list(scounts), list(sdispls)), _mpitype(send)]
        r = [recv, (list(rcounts), list(rdispls)), _mpitype(recv)]
        vcounts = (list(scounts), list(sdispls), list(rcounts), list(rdispls))
        call = partial(self.comm.Alltoallv, s, r)
        return self._bound(call, "alltoallv", send, recv, 0, vcounts=vcounts)

    def broadcast(self, buf: np.ndarray, root: int) -> Fn:
        call = partial(self.comm.Bcast, _spec(buf), root)
        return self._bound(call, "broadcast", None, buf, buf.size, root=root)

    def reduce(self, send: np.ndarray, recv: np.ndarray, root: int) -> Fn:
        call = partial(self.comm.Reduce, _spec(send), _spec(recv), MPI.SUM, root)
        return self._bound(call, "reduce", send, recv, send.size, root=root)

    def sendrecv(
        self, send: np.ndarray, dest: int | None, recv: np.ndarray, source: int | None
    ) -> Fn:
        assert send.size == recv.size, (send.size, recv.size)
        d, src = _nproc(dest), _nproc(source)
        call = partial(self.comm.Sendrecv, _spec(send), d, 0, _spec(recv), src, 0)
        return self._bound(call, "sendrecv", send, recv, send.size, dest=d, source=src)

    def pingpong(self, send: np.ndarray, recv: np.ndarray, peer: int, initiator: bool) -> Fn:
        assert send.size == recv.size, (send.size, recv.size)
        out, into, s, r = self.comm.Send, self.comm.Recv, _spec(send), _spec(recv)
        if initiator:

            def fn() -> None:
                out(s, peer, 1)
                into(r, peer, 1)
        else:

            def fn() -> None:
                into(r, peer, 1)
                out(s, peer, 1)

        return self._bound(fn, "pingpong", send, recv, send.size, dest=peer, initiator=initiator)

    def acknowledged(self, fn: Fn, root: int, ack: str) -> Fn:
        """Zero-byte messages, in the C loop too (native_loop.c's cb_ack)."""
        assert ack in ACKS and isinstance(fn, native.BoundOp), ack
        if self.size == 1:
            return fn
        c, op, none = self.comm, fn.call, [np.empty(0, np.uint8), MPI.BYTE]
        waits = (ack == TO_ROOT) == (self.rank == root)
        if self.rank == root:
            others = [q for q in range(self.size) if q != root]

            def call() -> None:
                op()
                for q in others:
                    c.Recv(none, MPI.ANY_SOURCE, 4) if waits else c.Send(none, q, 4)
        else:

            def call() -> None:
                op()
                c.Recv(none, root, 4) if waits else c.Send(none, root, 4)

        return native.acknowledged(fn, call, ack)

    def barrier_op(self, buf: np.ndarray) -> Fn:
        return self._bound(self.comm.Barrier, "barrier", None, buf, 0)

    def gather(self, send: np.ndarray, recv: np.ndarray, root: int) -> Fn:
        call = partial(self.comm.Gather, _spec(send), _spec(recv), root)
        return self._bound(call, "gather", send, recv, send.size, root=root)

    def scatter(self, send: np.ndarray, recv: np.ndarray, root: int) -> Fn:
        call = partial(self.comm.Scatter, _spec(send), _spec(recv), root)
        return self._bound(call, "scatter", send, recv, recv.size, root=root)

    def allgatherv(
        self, send: np.ndarray, recv: np.ndarray, counts: Sequence[int], displs: Sequence[int]
    ) -> Fn:
        r = [recv, (list(counts), list(displs)), _mpitype(recv)]
        call = partial(self.comm.Allgatherv, _spec(send), r)
        v: tuple[list[int], list[int], list[int], list[int]] = ([], [], list(counts), list(displs))
        return self._bound(call, "allgatherv", send, recv, send.size, vcounts=v)

    def window(
        self,
        send: np.ndarray,
        recv: np.ndarray,
        peer: int,
        initiator: bool,
        window: int,
        both: bool,
    ) -> Fn:
        assert window <= native.MAX_WINDOW, window
        s, r, c = _spec(send), _spec(recv), self.comm
        ack = [recv[:1], _mpitype(recv)]

        def fn() -> None:
            reqs = []
            if both or not initiator:
                reqs += [c.Irecv(r, peer, 2) for _ in range(window)]
            if both or initiator:
                reqs += [c.Isend(s, peer, 2) for _ in range(window)]
            MPI.Request.Waitall(reqs)
            if both:
                return
            if initiator:
                c.Recv(ack, peer, 3)
            else:
                c.Send([send[:1], _mpitype(send)], peer, 3)

        kind = "bibw" if both else "bw"
        return self._bound(
            fn, kind, send, recv, send.size, dest=peer, initiator=initiator, window=window
        )

    def iallreduce(self, send: np.ndarray, recv: np.ndarray, compute: np.ndarray) -> Fn:
        start, s, r = self.comm.Iallreduce, _spec(send), _spec(recv)

        def fn() -> None:
            req = start(s, r, MPI.SUM)
            if compute[0] > 0:
                spin(float(compute[0]))
            req.Wait()

        return self._bound(fn, "iallreduce", send, recv, send.size, compute=compute)

    def p2p(self, ops: Sequence[tuple[str, Any, int]]) -> Fn:
        comm = self.comm
        posts = [
            (comm.Isend if kind == "send" else comm.Irecv, _spec(buf), peer)
            for kind, buf, peer in ops
        ]
        waitall = MPI.Request.Waitall

        def fn() -> None:
            waitall([post(spec, peer, 0) for post, spec, peer in posts])

        return fn

    # ---- timing ----
    def loop_kind(self, fn: Fn, mode: str = PER_ITERATION, timer: str = PRE_ROLL) -> str:
        return "native" if getattr(fn, "native", None) is not None else "python"

    def timing_info(self) -> dict:
        return {
            **self._availability.as_meta(),
            "host_buffers": "2 MiB aligned; hugepage: THP advised, plain: THP refused",
        }

    def time_loop(
        self, fn: Fn, iters: int, mode: str = PER_ITERATION, timer: str = PRE_ROLL
    ) -> np.ndarray:
        """Seconds per call: in C when `fn` carries a native descriptor, else in Python with
        nothing but the mpi4py call between the clocks (host buffers: no device sync)."""
        desc = getattr(fn, "native", None)
        if desc is not None:
            assert self._loop is not None  # descriptors are made by this loop
            return self._loop.time(desc, iters, mode == PIPELINED, self.flush)
        call = getattr(fn, "call", fn)
        barrier, clock, flush = self.comm.Barrier, time.perf_counter, self.flush
        out = np.empty(iters)
        if mode == PIPELINED:
            barrier()
            t0 = clock()
            for _ in range(iters):
                call()
            out.fill((clock() - t0) / iters)
            return out
        for i in range(iters):
            if flush is not None:
                touch_lines(flush)
            barrier()
            t0 = clock()
            call()
            out[i] = clock() - t0
        return out
