"""commbench: collective-communication microbenchmarks for LLM parallelism.

Runs the traffic of DP, ZeRO/FSDP, TP, PP, CP and EP at real model sizes on the process
groups a framework builds, fits alpha-beta link models and plans parallel configs.
"""

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
