"""The Communicator protocol every backend implements, and the shared timing loop.

A Communicator is one group of ranks (the world is one too). Op methods *bind* an op to
pre-allocated typed buffers and return a zero-argument callable, so the timed loop does
no argument parsing, allocation or look-ups per iteration. Ranks are group positions.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from commbench.ops.spec import ACKS, TO_ROOT

Fn = Callable[[], None]

PER_ITERATION = "per-iteration"
PIPELINED = "pipelined"
TIMING_MODES = (PER_ITERATION, PIPELINED)
# GPU event timing: PRE_ROLL queues a device sleep before the start event so the host's enqueue
# of the op (Python -> c10d -> NCCL, 20-30 us) happens while the GPU waits and is not timed
# (the technique of stas00's all_reduce_bench); ENQUEUE records the start event as the host
# gets to it, so the time includes that enqueue (the old behaviour).
PRE_ROLL = "pre-roll"
ENQUEUE = "enqueue"
GPU_TIMERS = (PRE_ROLL, ENQUEUE)

# Host buffer pages (--buffers): 2 MiB-aligned with transparent huge pages advised, or the 4 KiB
# pages OSU, IMB and most applications get (THP in `madvise` mode); torch backends use torch's
# allocator (recorded as "torch").
HUGEPAGE = "hugepage"
PLAIN = "plain"
TORCH = "torch"
OFF_CACHE = "off-cache"  # suffix of a record's `buffers`: caches flushed before each iteration


def spin(seconds: float) -> None:
    """Compute stand-in: busy for `seconds` (not asleep: a sleeping rank hands its CPU to
    the MPI library, which is not what compute does), as osu_iallreduce's dummy compute."""
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def touch_lines(scratch: np.ndarray) -> None:
    """Read and write one byte per 64-byte line of `scratch`, evicting what the caches held
    (IMB's -off_cache keeps the op's buffers out of cache; this flushes them instead)."""
    scratch[::64] += 1


class Communicator(ABC):
    """A group of ranks on one backend; the only place that touches a communication library."""

    backend: str
    rank: int  # position in this group
    size: int
    ranks: tuple[int, ...]  # world rank of each position
    flush: np.ndarray | None = None  # off-cache: scratch touched before each timed iteration
    allocates_pages = False  # alloc honours `pages` (mpi); else the library's allocator

    # ---- groups and control -------------------------------------------------------------
    @abstractmethod
    def split(self, groups: Sequence[Sequence[int]]) -> Communicator | None:
        """Collective over this group: the sub-group (of `groups`, in this group's positions)
        holding this rank, or None. Every rank passes the same `groups`."""

    @abstractmethod
    def barrier(self) -> None: ...

    def settle(self) -> None:
        """A control-plane barrier for waits that may be long (rank 0 writing records, reading
        git, creating the run directory): a backend whose barrier busy-polls overrides it to
        sleep, so on an oversubscribed machine the waiting ranks leave the cores to the one
        doing the work (mpi: 16 ranks on 2 cores ran rank 0's share 1.5-2x slower spinning)."""
        self.barrier()

    @abstractmethod
    def abort(self, code: int) -> None:
        """Take the whole job down now (MPI_Abort / process exit)."""

    def close(self) -> None:
        """Release backend resources at the end of a run."""

    # ---- small control messages (pickled, CPU) -------------------------------------------
    @abstractmethod
    def allgather_obj(self, obj: Any) -> list[Any]: ...

    @abstractmethod
    def gather_obj(self, obj: Any, root: int = 0) -> list[Any] | None: ...

    @abstractmethod
    def bcast_obj(self, obj: Any, root: int = 0) -> Any: ...

    def max_int(self, value: int) -> int:
        """Max of an integer over the group (agreement on flags and counts)."""
        return max(self.allgather_obj(int(value)))

    def max_float(self, value: float) -> float:
        return max(self.allgather_obj(float(value)))

    # ---- buffers --------------------------------------------------------------------------
    @abstractmethod
    def alloc(self, nbytes: int, pages: str = HUGEPAGE) -> Any:
        """A raw byte buffer of the backend's kind (host or device); `pages` says which host
        pages where the backend allocates them itself (mpi)."""

    @abstractmethod
    def view(self, raw: Any, nbytes: int, dtype: str, offset: int = 0) -> Any:
        """A typed view of `nbytes` of `raw` starting at byte `offset` (no copy)."""

    @abstractmethod
    def write(self, view: Any, values: np.ndarray) -> None:
        """Copy host values (already in the view's dtype, see transport.data) into a view."""

    @abstractmethod
    def read(self, view: Any) -> np.ndarray:
        """The view's contents as a host numpy array (storage dtype)."""

    # ---- ops: bind now, call many times -------------------------------------------------
    @abstractmethod
    def allreduce(self, send: Any, recv: Any) -> Fn: ...

    @abstractmethod
    def allgather(self, send: Any, recv: Any) -> Fn: ...

    @abstractmethod
    def reduce_scatter(self, send: Any, recv: Any) -> Fn: ...

    @abstractmethod
    def alltoall(self, send: Any, recv: Any) -> Fn: ...

    @abstractmethod
    def alltoallv(
        self,
        send: Any,
        scounts: Sequence[int],
        sdispls: Sequence[int],
        recv: Any,
        rcounts: Sequence[int],
        rdispls: Sequence[int],
    ) -> Fn:
        """Counts and displacements in elements, one per group position."""

    @abstractmethod
    def broadcast(self, buf: Any, root: int) -> Fn: ...

    @abstractmethod
    def reduce(self, send: Any, recv: Any, root: int) -> Fn: ...

    @abstractmethod
    def sendrecv(self, send: Any, dest: int | None, recv: Any, source: int | None) -> Fn:
        """Send to `dest` while receiving from `source`; None skips that half (chain ends)."""

    @abstractmethod
    def pingpong(self, send: Any, recv: Any, peer: int, initiator: bool) -> Fn:
        """One round trip with `peer` from `send` into `recv` (two buffers, as osu_latency):
        the initiator sends then receives, the other receives then answers."""

    # ---- OSU/IMB ops the mpi backend binds (OpSpec.backends keeps the others off them) ----
    def _missing(self, op: str) -> Fn:
        raise NotImplementedError(f"the {self.backend} backend has no {op}")

    def barrier_op(self, buf: Any) -> Fn:
        """A bound barrier (osu_barrier); `buf` only anchors the native descriptor."""
        return self._missing("barrier")

    def gather(self, send: Any, recv: Any, root: int) -> Fn:
        return self._missing("gather")

    def scatter(self, send: Any, recv: Any, root: int) -> Fn:
        return self._missing("scatter")

    def allgatherv(self, send: Any, recv: Any, counts: Sequence[int], displs: Sequence[int]) -> Fn:
        """Counts and displacements in elements, one per group position."""
        return self._missing("allgatherv")

    def window(
        self, send: Any, recv: Any, peer: int, initiator: bool, window: int, both: bool
    ) -> Fn:
        """osu_bw (`both` False: the initiator sends `window` messages, the peer receives them
        and acks) or osu_bibw (`both`: each side sends and receives `window` at once)."""
        return self._missing("bibw" if both else "bw")

    def iallreduce(self, send: Any, recv: Any, compute: np.ndarray) -> Fn:
        """Start an allreduce, spin `compute[0]` seconds (read at each call), wait for it."""
        return self._missing("iallreduce")

    def acknowledged(self, fn: Fn, root: int, ack: str) -> Fn:
        """`fn` followed by a zero-byte acknowledgement between `root` and every other rank,
        `ack` (ACKS) saying which way: the clock of the rank acknowledged stops only once the
        last rank it waits for has completed. Here a one-element fused group (device memory
        on NCCL, so the root's end event waits for the receivers' kernels)."""
        assert ack in ACKS, ack
        if self.size == 1:
            return fn
        token = self.view(self.alloc(4), 4, "float32")
        waits = (ack == TO_ROOT) == (self.rank == root)
        peers = [q for q in range(self.size) if q != root] if self.rank == root else [root]
        signal = self.p2p([("recv" if waits else "send", token, q) for q in peers])

        def acked() -> None:
            fn()
            signal()

        return acked

    @abstractmethod
    def p2p(self, ops: Sequence[tuple[str, Any, int]]) -> Fn:
        """One fused group of ("send" | "recv", buffer, peer): every operation posted at once,
        the call returns when all have completed (NCCL's group call, torch's
        batch_isend_irecv, MPI's Isend/Irecv + Waitall). No tags: messages between two
        positions match in issue order, as on NCCL."""

    def compute(self, seconds: float) -> None:
        """Stand-in for compute between messages (pipeline bubbles): sleep, leaving the CPU
        to other ranks when oversubscribed."""
        if seconds > 0:
            time.sleep(seconds)

    def sync(self) -> None:
        """Wait for the device to finish queued work (no-op on host backends)."""

    # ---- timing -------------------------------------------------------------------------
    def loop_kind(self, fn: Fn, mode: str = PER_ITERATION, timer: str = PRE_ROLL) -> str:
        """Which loop and clock `time_loop` uses for `fn`: "native" (C) or "python" on hosts,
        the GPU event method on devices; records carry it."""
        return "python"

    def timing_info(self) -> dict:
        """How this backend times (for meta.json): the loop, and why not native if not."""
        return {"loop": "python"}

    def device_identity(self) -> dict:
        """This rank's device for meta.json (host backends: none)."""
        return {"device": "cpu"}

    def time_loop(
        self, fn: Fn, iters: int, mode: str = PER_ITERATION, timer: str = PRE_ROLL
    ) -> np.ndarray:
        """Seconds per call on this rank: barrier, clock, op, device sync, clock.

        `pipelined` times `iters` back-to-back calls after one barrier and divides (nccl-tests).
        `timer` picks the GPU event method (GPU_TIMERS); host clocks ignore it.
        """
        barrier, sync, clock, flush = self.barrier, self.sync, time.perf_counter, self.flush
        out = np.empty(iters)
        if mode == PIPELINED:
            barrier()
            t0 = clock()
            for _ in range(iters):
                fn()
            sync()
            out.fill((clock() - t0) / iters)
            return out
        for i in range(iters):
            if flush is not None:
                touch_lines(flush)
            barrier()
            t0 = clock()
            fn()
            sync()
            out[i] = clock() - t0
        return out
