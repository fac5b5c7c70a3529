"""commbench: collective-communication microbenchmarks for LLM parallelism.

Runs the traffic of DP, ZeRO/FSDP, TP, PP, CP and EP at real model sizes on the process
groups a framework builds, fits alpha-beta link models and plans parallel configs.
"""

import contextlib
import os
from pathlib import Path

__version__ = "0.1.0"
ENV_CACHE = "COMMBENCH_CACHE_DIR"


def user_cache(kind: str) -> Path:
    """commbench's per-user cache of one kind (native, suites, routes): under $COMMBENCH_CACHE_DIR,
    else $XDG_CACHE_HOME/commbench, else ~/.cache/commbench."""
    root = os.environ.get(ENV_CACHE)
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "commbench")
    return Path(root) / kind


def write_cache_entry(where: Path, text: str) -> None:
    """Write a user_cache entry atomically: a private temporary file (host and pid in its name:
    hosts may share a home), renamed into place, so ranks that miss together each write a whole
    copy and a reader sees one; an entry that cannot be written is passed by (a cache only ever
    saves time)."""
    tmp = where.with_name(f".{where.name}.{os.uname().nodename}.{os.getpid()}")
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        os.replace(tmp, where)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
