"""Can this host run NCCL, and which GPU is this rank's: decided without importing torch.

`--backend auto` and `--backend nccl` are resolved on every rank before any communication,
and the MPI path must never import torch (seconds per rank), so the CUDA build of torch is read
from its `version.py` and the visible GPUs from `/dev/nvidia<N>` and CUDA_VISIBLE_DEVICES.
After torch is imported, `torchdist` confirms with torch's own answers (`device_problem`).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from commbench.errors import UsageError
from commbench.measure.launch import LaunchInfo


@dataclass(frozen=True)
class TorchBuild:
    """What the installed torch was built with (None: torch is not installed)."""

    version: str | None
    cuda: str | None


def torch_build() -> TorchBuild:
    """The installed torch's version and CUDA version, read from torch/version.py."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return TorchBuild(None, None)
    text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    return parse_torch_version(text)


def parse_torch_version(text: str) -> TorchBuild:
    """`__version__` and `cuda` of a torch/version.py ('' or None for a CPU build)."""

    def field(name: str) -> str | None:
        m = re.search(rf"^{name}\s*(?::[^=]*)?=\s*['\"]([^'\"]*)['\"]", text, re.M)
        return m.group(1) if m and m.group(1) else None

    return TorchBuild(field("__version__") or "unknown", field("cuda"))


def visible_gpus(env: Mapping[str, str] | None = None, dev: Path = Path("/dev")) -> int:
    """NVIDIA GPUs this process may use: the /dev/nvidia<N> nodes, limited to the entries of
    CUDA_VISIBLE_DEVICES when it is set ("" or -1: none)."""
    env = os.environ if env is None else env
    try:
        nodes = sum(1 for p in dev.iterdir() if re.fullmatch(r"nvidia\d+", p.name))
    except OSError:
        nodes = 0
    listed = env.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return nodes
    entries = [e for e in listed.split(",") if e.strip()]
    if not entries or entries[0].strip() == "-1":
        return 0
    return min(nodes, len(entries))


def nccl_problem(launch: LaunchInfo, build: TorchBuild, gpus: int) -> str | None:
    """Why NCCL cannot run here with one GPU per local rank, or None when it can."""
    if build.version is None:
        return "backend nccl needs torch: pip install a CUDA build of torch"
    if build.cuda is None:
        return (
            f"backend nccl needs a CUDA build of torch; torch {build.version} is a CPU build "
            "(install one, e.g. `make install TORCH_SPEC=torch`, or use --backend gloo or mpi)"
        )
    if gpus == 0:
        return "backend nccl needs an NVIDIA GPU; none is visible (use --backend gloo or mpi)"
    if launch.local_size > gpus:
        return (
            f"{launch.local_size} ranks on host {launch.host} share {gpus} visible GPU(s): NCCL "
            f"needs one GPU per rank (start at most {gpus} ranks per host)"
        )
    return None


def device_problem(
    launch: LaunchInfo, cuda_available: bool, device_count: int, nccl_available: bool
) -> str | None:
    """torch's own answer once imported: CUDA usable, NCCL built in, a GPU for every local rank."""
    if not cuda_available:
        return "backend nccl: torch.cuda.is_available() is False (driver or CUDA_VISIBLE_DEVICES)"
    if not nccl_available:
        return "backend nccl: this torch has no NCCL (torch.distributed.is_nccl_available())"
    if launch.local_size > device_count:
        return (
            f"{launch.local_size} ranks on host {launch.host} share {device_count} GPU(s): NCCL "
            f"needs one GPU per rank (start at most {device_count} ranks per host)"
        )
    return None


def gpu_index(launch: LaunchInfo, device_count: int) -> int:
    """This rank's GPU: its local rank (one GPU per rank; NCCL rejects two ranks on one)."""
    problem = device_problem(launch, True, device_count, True)
    if problem:
        raise UsageError(problem)
    return launch.local_rank
