"""Backends behind one Communicator protocol: mpi (mpi4py), gloo and nccl (torch.distributed).

Backend modules are imported only when chosen, so the mpi path never imports torch.
"""

from __future__ import annotations

import importlib.util

from commbench.errors import UsageError
from commbench.measure.launch import LaunchInfo
from commbench.measure.transport.base import Communicator
from commbench.measure.transport.devices import nccl_problem, torch_build, visible_gpus

BACKENDS = ("auto", "mpi", "gloo", "nccl")


def resolve_backend(name: str, launch: LaunchInfo) -> str:
    """`auto` -> nccl where it can run (a CUDA build of torch, a visible GPU for every local
    rank), else gloo under torchrun, else mpi; an explicit choice is checked and refused with a
    usage error where it cannot run. Decided without importing torch, on every rank."""
    name = name.lower()
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}: choose from {', '.join(BACKENDS)}")
    if name in ("auto", "nccl"):
        problem = nccl_problem(launch, torch_build(), visible_gpus())
        if name == "nccl" and problem:
            raise UsageError(problem)
        if name == "auto":
            name = "nccl" if problem is None else "gloo" if launch.launcher == "torchrun" else "mpi"
    if name == "gloo" and torch_build().version is None:
        raise UsageError("backend gloo needs torch: pip install 'commbench[torch]'")
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
    """Initialise `backend` and return the world communicator (the C heap's policy set first:
    heap.keep_scratch)."""
    from commbench.measure.transport.heap import keep_scratch

    keep_scratch()
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
