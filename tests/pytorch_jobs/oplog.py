"""Every collective and p2p op one rank issues, logged by wrapping torch.distributed's public
functions (c10d's and the functional collectives DTensor calls), never torch's internals.

Each record is what commbench's Program compares: the op (commbench's name), the dtype, the
element count of the nccl-tests S buffer (all-reduce, broadcast, send/recv: the buffer;
all-gather: the gathered output; reduce-scatter: the input; all-to-all: the send buffer), the
group's global ranks and the phase the training loop was in when it issued the op. Nested
calls (a wrapper calling another wrapped function) are logged once, at the outermost call.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.distributed.distributed_c10d as c10d
from torch.utils._python_dispatch import TorchDispatchMode

_state = threading.local()


class OpLog:
    """Records ops while `phase` is set (None: not recorded, e.g. set-up and warm-up)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.phase: str | None = None
        self._undo: list[tuple[Any, str, Any]] = []

    @contextlib.contextmanager
    def during(self, phase: str | None) -> Iterator[None]:
        before, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = before

    def add(self, op: str, tensor: torch.Tensor, count: int, ranks: list[int]) -> None:
        if self.phase is None:
            return
        dtype = str(tensor.dtype).removeprefix("torch.")
        self.records.append(
            {"op": op, "dtype": dtype, "count": int(count), "ranks": ranks, "phase": self.phase}
        )

    def install(self) -> None:
        """Wrap the functions; `uninstall` puts them back."""
        for module, name, op, read in _C10D + _FUNCOL:
            orig = getattr(module, name)
            self._undo.append((module, name, orig))
            setattr(module, name, self._wrap(orig, op, read))
            if module is c10d and hasattr(dist, name):  # dist.X is c10d.X re-exported
                self._undo.append((dist, name, getattr(dist, name)))
                setattr(dist, name, getattr(module, name))

    def uninstall(self) -> None:
        for module, name, orig in reversed(self._undo):
            setattr(module, name, orig)
        self._undo.clear()

    def _wrap(self, orig: Callable, op: str, read: Callable) -> Callable:
        log = self

        @functools.wraps(orig)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(_state, "depth", 0)
            if depth == 0:
                tensor, count, ranks = read(*args, **kwargs)
                log.add(op, tensor, count, ranks)
            _state.depth = depth + 1
            try:
                return orig(*args, **kwargs)
            finally:
                _state.depth = depth

        return wrapper


class FunctionalBackwardMode(TorchDispatchMode):
    """Logs the functional all-to-all that funcol's registered autograd runs in backward
    (torch.library.register_autograd's function calls the op itself, past any wrapper):
    only calls made outside a wrapped function, so a forward call is not logged twice."""

    def __init__(self, log: OpLog) -> None:
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops._c10d_functional.all_to_all_single.default and not getattr(
            _state, "depth", 0
        ):
            t = args[0]
            ranks = _ranks(c10d._resolve_process_group(args[3]))
            self.log.add("alltoall", t, t.numel(), ranks)
        return func(*args, **kwargs)


def _ranks(group: Any) -> list[int]:
    """Global ranks of a c10d group (None: the world)."""
    return dist.get_process_group_ranks(group or dist.group.WORLD)


def _funcol_ranks(group: Any) -> list[int]:
    resolved = funcol._resolve_group(group)
    if isinstance(resolved, str):
        resolved = c10d._resolve_process_group(resolved)
    return _ranks(resolved)


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any = None) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def _c10d_same(i_group: int) -> Callable:
    """(tensor, its numel, group) of a c10d op whose S buffer is its first argument."""

    def read(*a: Any, **k: Any) -> tuple:
        t = _arg(a, k, 0, "tensor")
        return t, t.numel(), _ranks(_arg(a, k, i_group, "group"))

    return read


def _c10d_out_in(i_group: int) -> Callable:
    """f(output, input, ..., group): all-gather and reduce-scatter into one tensor; S is the
    larger of the two buffers."""

    def read(*a: Any, **k: Any) -> tuple:
        out, inp = a[0] if a else k["output"], a[1] if len(a) > 1 else k["input"]
        count = max(out.numel(), inp.numel())
        return out, count, _ranks(_arg(a, k, i_group, "group"))

    return read


def _c10d_a2a(*a: Any, **k: Any) -> tuple:
    inp = _arg(a, k, 1, "input")
    return inp, inp.numel(), _ranks(_arg(a, k, 4, "group"))


def _c10d_p2p(*a: Any, **k: Any) -> tuple:
    """isend / irecv / send / recv(tensor, dst|src, group, tag, group_dst|group_src): the
    buffer, and the two global ranks of the pair."""
    t, peer = _arg(a, k, 0, "tensor"), _arg(a, k, 1, "dst", k.get("src"))
    group = _arg(a, k, 2, "group")
    if peer is None:
        local = k.get("group_dst", k.get("group_src", k.get("group_peer")))
        peer = dist.get_global_rank(group or dist.group.WORLD, local)
    return t, t.numel(), sorted({dist.get_rank(), peer})


def _fc(kind: str, i_group: int) -> Callable:
    """(tensor, S elements, ranks) of a functional collective f(tensor, ..., group, tag)."""

    def read(*a: Any, **k: Any) -> tuple:
        t = a[0]
        ranks = _funcol_ranks(_arg(a, k, i_group, "group"))
        return t, t.numel() * (len(ranks) if kind == "gather" else 1), ranks

    return read


_C10D: list[tuple[Any, str, str, Callable]] = [
    (c10d, "all_reduce", "allreduce", _c10d_same(2)),
    (c10d, "broadcast", "broadcast", _c10d_same(2)),
    (c10d, "all_gather_into_tensor", "allgather", _c10d_out_in(2)),
    (c10d, "all_gather_single", "allgather", _c10d_out_in(2)),
    (c10d, "reduce_scatter_tensor", "reduce_scatter", _c10d_out_in(3)),
    (c10d, "reduce_scatter_single", "reduce_scatter", _c10d_out_in(3)),
    (c10d, "all_to_all_single", "alltoall", _c10d_a2a),
    (c10d, "isend", "send", _c10d_p2p),
    (c10d, "irecv", "recv", _c10d_p2p),
    (c10d, "send", "send", _c10d_p2p),
    (c10d, "recv", "recv", _c10d_p2p),
]
_FUNCOL: list[tuple[Any, str, str, Callable]] = [
    (funcol, "all_reduce", "allreduce", _fc("same", 2)),
    (funcol, "broadcast", "broadcast", _fc("same", 2)),
    (funcol, "all_gather_single", "allgather", _fc("gather", 2)),
    (funcol, "all_gather_tensor", "allgather", _fc("gather", 2)),
    (funcol, "all_gather_tensor_autograd", "allgather", _fc("gather", 2)),
    (funcol, "reduce_scatter_single", "reduce_scatter", _fc("same", 3)),
    (funcol, "reduce_scatter_tensor", "reduce_scatter", _fc("same", 3)),
    (funcol, "reduce_scatter_tensor_autograd", "reduce_scatter", _fc("same", 3)),
    (funcol, "all_to_all_single", "alltoall", _fc("same", 3)),
    (funcol, "all_to_all_single_autograd", "alltoall", _fc("same", 3)),
]
