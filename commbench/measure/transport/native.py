"""The native timed loop for the mpi backend: native_loop.c, compiled on first use and cached.

The interpreter's per-call cost (~0.5 us) is larger than a shared-memory latency, so on
the Python loop it lands in every fitted alpha. The C loop is built with the mpicc of the
MPI that mpi4py loaded, into a per-user cache keyed by source, compiler and MPI library
version, and loaded with ctypes. Why not an extension built by pip: it would need mpi.h at
install time, would fail the whole install without one, and would silently mismatch when a
cluster user swaps MPI modules under mpi4py; built at run time it always matches the MPI
actually loaded, and without a compiler commbench falls back to the Python loop (meta.json
and every record say which loop timed); where the compiler is there but the loop cannot be
built or loaded (a cache directory it cannot write), rank 0 also says so once on stderr, with
the fix. COMMBENCH_NATIVE=0 disables it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from mpi4py import MPI

from commbench import user_cache
from commbench.measure.transport.base import Fn
from commbench.ops.spec import FROM_ROOT, TO_ROOT

SOURCE = Path(__file__).with_name("native_loop.c")
ABI = 4  # CB_ABI in native_loop.c
ENV_SWITCH = "COMMBENCH_NATIVE"
ENV_MPICC = "COMMBENCH_MPICC"
COMPILE_TIMEOUT_S = 120.0
INT_MAX = 2**31 - 1

KINDS = {
    "allreduce": 1,
    "allgather": 2,
    "reduce_scatter": 3,
    "alltoall": 4,
    "alltoallv": 5,
    "broadcast": 6,
    "reduce": 7,
    "sendrecv": 8,
    "pingpong": 9,
    "barrier": 10,
    "gather": 11,
    "scatter": 12,
    "allgatherv": 13,
    "bw": 14,
    "bibw": 15,
    "iallreduce": 16,
}
MAX_WINDOW = 1024  # CB_MAX_WINDOW

_int_p = ctypes.POINTER(ctypes.c_int)


class OpDesc(ctypes.Structure):
    """One bound op as native_loop.c's cb_op sees it (same fields, same order)."""

    _fields_ = [
        ("kind", ctypes.c_int),
        ("comm", ctypes.c_void_p),
        ("dtype", ctypes.c_void_p),
        ("send", ctypes.c_void_p),
        ("recv", ctypes.c_void_p),
        ("count", ctypes.c_int),
        ("root", ctypes.c_int),
        ("dest", ctypes.c_int),
        ("source", ctypes.c_int),
        ("initiator", ctypes.c_int),
        ("scounts", _int_p),
        ("sdispls", _int_p),
        ("rcounts", _int_p),
        ("rdispls", _int_p),
        ("window", ctypes.c_int),
        ("compute_s", ctypes.POINTER(ctypes.c_double)),
        ("ack", ctypes.c_int),
    ]


@dataclass(frozen=True)
class Availability:
    """Whether this process can time natively, and why not: recorded in meta.json."""

    loop: str  # "native" | "python"
    reason: str = ""
    library: str = ""
    compiler: str = ""

    def as_meta(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v}


class NativeLoop:
    """The loaded library: times an OpDesc for n iterations, or calls it once."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._time = lib.cb_time_loop
        self._time.argtypes = [
            ctypes.POINTER(OpDesc),
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
        ]
        self._time.restype = ctypes.c_int
        self._call = lib.cb_call
        self._call.argtypes = [ctypes.POINTER(OpDesc)]
        self._call.restype = ctypes.c_int

    def time(
        self, desc: OpDesc, iters: int, pipelined: bool, flush: np.ndarray | None = None
    ) -> np.ndarray:
        """Seconds per call on this rank (see cb_time_loop); the GIL is released meanwhile.
        `flush`: scratch whose lines are touched before each iteration (off-cache)."""
        out = np.empty(iters)
        at, n = (flush.ctypes.data, flush.size) if flush is not None else (None, 0)
        _raise(self._time(ctypes.byref(desc), iters, int(pipelined), out.ctypes.data, at, n))
        return out

    def call(self, desc: OpDesc) -> None:
        _raise(self._call(ctypes.byref(desc)))


def _raise(rc: int) -> None:
    if rc:
        raise MPI.Exception(rc) if rc > 0 else AssertionError(f"native loop returned {rc}")


class BoundOp:
    """A bound op: `call` runs it through mpi4py, `native` describes it to the C loop.

    Calling a BoundOp takes the path that times it (native when available), so the
    runner's checked call verifies exactly what is timed.
    """

    __slots__ = ("call", "native", "_loop", "_keep")

    def __init__(
        self, call: Fn, native: OpDesc | None, loop: NativeLoop | None, keep: tuple = ()
    ) -> None:
        self.call = call
        self.native = native if loop is not None else None
        self._loop = loop
        self._keep = keep  # arrays the descriptor points into

    def __call__(self) -> None:
        if self.native is not None:
            assert self._loop is not None  # a descriptor is only kept with its loop
            self._loop.call(self.native)
        else:
            self.call()


ACK_KINDS = {TO_ROOT: 1, FROM_ROOT: 2}  # CB_ACK_* in native_loop.c


def acknowledged(op: BoundOp, call: Fn, ack: str) -> BoundOp:
    """`op` with the zero-byte acknowledgement `ack` after it: `call` through mpi4py, and a
    copy of its descriptor that the C loop runs the same way."""
    if op.native is None:
        return BoundOp(call, None, None)
    desc = OpDesc.from_buffer_copy(op.native)
    desc.ack = ACK_KINDS[ack]
    return BoundOp(call, desc, op._loop, keep=op._keep)


def describe(
    kind: str,
    comm: MPI.Comm,
    dtype: MPI.Datatype,
    send: np.ndarray | None,
    recv: np.ndarray,
    count: int,
    *,
    root: int = 0,
    dest: int = 0,
    source: int = 0,
    initiator: bool = False,
    vcounts: tuple[list[int], list[int], list[int], list[int]] | None = None,
    window: int = 0,
    compute: np.ndarray | None = None,
) -> tuple[OpDesc, tuple] | None:
    """An OpDesc for host numpy buffers (and the arrays it points into), or None when the
    op cannot run natively (device buffers, counts beyond a C int)."""
    bufs = [b for b in (send, recv) if b is not None]
    if not all(isinstance(b, np.ndarray) and b.flags.c_contiguous for b in bufs):
        return None
    if count > INT_MAX or any(b.size > INT_MAX for b in bufs):
        return None
    d = OpDesc(
        kind=KINDS[kind],
        comm=MPI._addressof(comm),
        dtype=MPI._addressof(dtype),
        send=(send if send is not None else recv).ctypes.data,
        recv=recv.ctypes.data,
        count=count,
        root=root,
        dest=dest,
        source=source,
        initiator=int(initiator),
        window=window,
    )
    keep: tuple = (comm, dtype, send, recv, compute)
    if compute is not None:  # read by the loop at each call: the runner sets it between loops
        d.compute_s = compute.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
    if vcounts is not None:
        arrays = [np.ascontiguousarray(v, dtype=np.intc) for v in vcounts]
        d.scounts, d.sdispls, d.rcounts, d.rdispls = (a.ctypes.data_as(_int_p) for a in arrays)
        keep += tuple(arrays)
    return d, keep


# ---- building and loading ---------------------------------------------------------------


def _loaded_libmpi() -> str | None:
    """Path of the libmpi this process has mapped (Linux), to find the mpicc beside it."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1]
                if "/libmpi.so" in path or "/libmpi_" in path:
                    return path
    except OSError:
        pass
    return None


def find_mpicc() -> str | None:
    """The mpicc of the MPI mpi4py loaded: $COMMBENCH_MPICC, mpi4py's build config, the one
    beside the loaded libmpi, the one beside this Python (Open MPI from PyPI), then PATH."""
    candidates = [os.environ.get(ENV_MPICC, "")]
    try:
        import mpi4py

        # get_config reads mpi.cfg with configparser, ~3 ms a rank before the first collective
        # even when there is none to read (mpi4py 4 ships none; a packager may add one)
        if (Path(mpi4py.__file__).parent / "mpi.cfg").is_file():
            candidates.append(str(mpi4py.get_config().get("mpicc", "")))
    except Exception:  # an odd build config must not break timing: fall through
        pass
    lib = _loaded_libmpi()
    if lib:
        candidates.append(str(Path(lib).resolve().parent.parent / "bin" / "mpicc"))
    candidates.append(str(Path(sys.executable).parent / "mpicc"))
    candidates.append(which("mpicc") or "")
    for c in candidates:
        exe = which(c.split()[0]) if c else None  # config values may carry flags
        if exe and os.access(exe, os.X_OK):
            return exe
    return None


def which(name: str) -> str | None:
    """shutil.which(name) for a name or a path, without importing shutil (it loads bz2 and
    lzma: ~5 ms a rank before the first collective, where every rank looks for its mpicc)."""
    dirs = [""] if os.path.dirname(name) else os.environ.get("PATH", os.defpath).split(os.pathsep)
    for d in dirs:
        path = os.path.join(d, name)
        if os.path.exists(path) and os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def build_key(mpicc: str, version: str) -> str:
    """Cache key: source, compiler, MPI library version, machine."""
    h = hashlib.sha256()
    for part in (SOURCE.read_bytes(), mpicc.encode(), version.encode(), platform.machine()):
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _build(mpicc: str, target: Path) -> str:
    """Compile into `target` once per cache entry (a lock serialises concurrent ranks);
    returns "" or the reason it failed. Imports what only a build needs (every rank loads
    this module before its first collective; one in a cache's lifetime builds)."""
    import subprocess
    import tempfile

    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.with_suffix(".lock"), "w") as lock:
        deadline = time.monotonic() + COMPILE_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    return f"cannot lock the build cache ({e})"
                time.sleep(0.05)
        try:
            if target.exists():  # another rank built it while we waited
                return ""
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
            os.close(fd)
            cmd = [mpicc, "-O2", "-shared", "-fPIC", "-o", tmp, str(SOURCE)]
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
            except (OSError, subprocess.SubprocessError) as e:
                os.unlink(tmp)
                return f"{mpicc} failed to run ({e})"
            if out.returncode:
                os.unlink(tmp)
                err = (out.stderr or out.stdout).strip().splitlines()
                return f"{mpicc} failed: {err[-1] if err else f'exit {out.returncode}'}"
            os.replace(tmp, target)
            return ""
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load() -> tuple[NativeLoop | None, Availability]:
    """Build (once per cache entry) and load the native loop for the MPI mpi4py initialised."""
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "no", "off", "false"):
        return None, Availability("python", f"disabled by {ENV_SWITCH}")
    mpicc = find_mpicc()
    if mpicc is None:
        return None, Availability("python", "no mpicc found")
    version = MPI.Get_library_version().strip()
    target = user_cache("native") / f"cbloop-{build_key(mpicc, version)}.so"
    try:
        if not target.exists():
            why = _build(mpicc, target)
            if why:
                return None, Availability("python", why, compiler=mpicc)
        lib = ctypes.CDLL(str(target))
    except OSError as e:
        return None, Availability("python", f"cannot build or load {target}: {e}", compiler=mpicc)
    if lib.cb_abi() != ABI:
        return None, Availability("python", f"{target}: ABI mismatch", compiler=mpicc)
    lib.cb_same_mpi.argtypes = [ctypes.c_void_p]
    if not lib.cb_same_mpi(MPI._addressof(MPI.COMM_WORLD)):
        return None, Availability(
            "python", f"{mpicc} builds against another MPI than mpi4py's", compiler=mpicc
        )
    return NativeLoop(lib), Availability("native", library=str(target), compiler=mpicc)


_LOADED: tuple[NativeLoop | None, Availability] | None = None
_SAID = False


def say_python_loop(reasons: list[tuple[int, str]]) -> None:
    """Rank 0's one line (once a process) when ranks fell back to the Python loop for a
    reason the user can fix: `reasons` is (rank, why) of each."""
    global _SAID
    if _SAID:
        return
    _SAID = True
    ranks = ", ".join(str(r) for r, _ in reasons[:8]) + (" ..." if len(reasons) > 8 else "")
    print(
        f"commbench: warning: rank(s) {ranks} time with the Python timing loop, not the native "
        f"one (~0.5-1 us more a call, in every alpha): {reasons[0][1]}; point "
        "COMMBENCH_CACHE_DIR (or XDG_CACHE_HOME) at a directory they can write",
        file=sys.stderr,
        flush=True,
    )


def loop() -> tuple[NativeLoop | None, Availability]:
    """The process-wide native loop (loaded on first use)."""
    global _LOADED
    if _LOADED is None:
        _LOADED = load()
    return _LOADED
