"""Backends behind one Communicator protocol: mpi (mpi4py), gloo and nccl (torch.distributed).

Backend modules are imported only when chosen, so the mpi path never imports torch.
"""

from __future__ import annotations

import importlib.util
import os

from commbench.errors import UsageError
from commbench.measure.launch import LaunchInfo
from commbench.measure.transport.base import Communicator

BACKENDS = ("auto", "mpi", "gloo", "nccl")


def cuda_present() -> bool:
    """A cheap look for an NVIDIA GPU that does not import torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")


def resolve_backend(name: str, launch: LaunchInfo) -> str:
    """`auto` -> nccl with CUDA and torch, gloo under torchrun, else mpi; check availability."""
    name = name.lower()
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}: choose from {', '.join(BACKENDS)}")
    has_torch = importlib.util.find_spec("torch") is not None
    if name == "auto":
        if has_torch and cuda_present():
            name = "nccl"
        elif launch.launcher == "torchrun":
            name = "gloo"
        else:
            name = "mpi"
    if name in ("gloo", "nccl") and not has_torch:
        raise UsageError(f"backend {name} needs torch: pip install 'commbench[torch]'")
    if name == "nccl" and not cuda_present():
        raise UsageError("backend nccl needs an NVIDIA GPU; none was found (use mpi or gloo)")
    if name == "mpi" and importlib.util.find_spec("mpi4py") is None:
        raise UsageError("backend mpi needs mpi4py: pip install mpi4py")
    if launch.launcher == "torchrun" and name == "mpi":
        raise UsageError(
            "backend mpi needs an MPI launcher (mpirun/srun); under torchrun use gloo or nccl"
        )
    return name


def load_backend(backend: str) -> None:
    """Import a torch backend ahead of its rendezvous: importing torch takes seconds, which
    must not count against --timeout (MPI's import is its rendezvous, so it stays in open_world)."""
    if backend in ("gloo", "nccl"):
        import commbench.measure.transport.torchdist  # noqa: F401


def open_world(backend: str, launch: LaunchInfo, timeout_s: float) -> Communicator:
    """Initialise `backend` and return the world communicator."""
    if backend == "mpi":
        from commbench.measure.transport.mpi import MPICommunicator

        return MPICommunicator.world()
    from commbench.measure.transport.torchdist import init_world

    return init_world(launch, backend, timeout_s)


def library_versions(backend: str) -> dict[str, str]:
    """Versions of the libraries a backend uses, for meta.json."""
    import numpy

    out = {"numpy": numpy.__version__}
    if backend == "mpi" or importlib.util.find_spec("mpi4py"):
        try:
            import mpi4py

            out["mpi4py"] = mpi4py.__version__
            if backend == "mpi":
                from mpi4py import MPI

                out["mpi"] = MPI.Get_library_version().splitlines()[0].strip()
        except ImportError:
            pass
    if backend in ("gloo", "nccl"):
        import torch

        out["torch"] = torch.__version__
        if backend == "nccl":
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            out["cuda"] = str(torch.version.cuda)
            out["gpu"] = torch.cuda.get_device_name()
    return out
