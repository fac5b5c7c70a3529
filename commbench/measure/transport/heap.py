"""The C heap's policy for the library's scratch buffers: carved from the heap and kept, so a
call's time does not depend on which sizes the process allocated before.

Open MPI's collectives malloc scratch per call (reduce_scatter's basic linear: a reduce into
a temporary of S and another on the root; recursive doubling's copy of S). glibc serves such a
block by mmap, or from the heap under a threshold that rises to the size of the last mmapped
block freed (up to 32 MiB), and returns the heap's top to the kernel past twice that. So whether
a call pays page faults for 2 S of fresh memory depended on the process's history: on 2 ranks
a reduce_scatter of 21.85 MB took 27.6 ms every call while one of 21.30 MB, after it, took 9.2
ms, and the sweep's ascending sizes faulted at every size (ZeRO-3's layer reduce-scatters
measured at 0.31x the sweep, its stage-1 all-gathers at 0.59x: `bench/validate_accuracy.py`).
With mmap off and no trimming (`mallopt`, glibc's documented knobs; MVAPICH2 sets the same for
its registration cache) every call reuses warm pages: 6.4, 7.5 and 9.2 ms for 16 MiB, 21.30
and 21.85 MB, in proportion to S. A long-running trainer's heap is warm in the same way.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_MAX = -4
KEEP = 2**31 - 1  # the largest trim threshold mallopt takes (an int): never trim
MMAP_MAX = 0  # no block served by mmap
# the same policy for a process commbench does not run (a C benchmark beside it), in glibc's
# tunables (GLIBC_TUNABLES), which glibc reads at start-up as mallopt would set them
TUNABLES = f"glibc.malloc.mmap_max={MMAP_MAX}:glibc.malloc.trim_threshold={KEEP}"

_state: dict[str, str] = {}


def keep_scratch() -> dict[str, str]:
    """Set the policy once per process (before the library allocates); what meta.json says
    (`heap`): 'kept' with glibc, else why not (another libc keeps its own rules)."""
    if _state:
        return _state
    try:  # the process's own symbols: libc is loaded; find_library would run ldconfig
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        _state.update(policy="libc default", why="no mallopt in the C library")
        return _state
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_MMAP_MAX, MMAP_MAX) == 1 and mallopt(M_TRIM_THRESHOLD, KEEP) == 1
    _state.update(
        policy="kept" if ok else "libc default",
        why="mallopt M_MMAP_MAX 0, M_TRIM_THRESHOLD 2^31-1" if ok else "mallopt refused",
    )
    return _state
