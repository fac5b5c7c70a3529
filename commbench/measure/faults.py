"""Deterministic fault injection for the reliability tests: make one rank fail at one point.

    COMMBENCH_FAULT="rank=1,point=3,kind=raise" mpirun -n 4 commbench run allreduce ...

`rank` is a world rank or `all`. `point` counts the runner's measured points from 0 on every
rank alike (so point 3 is the same point everywhere), or is `start` (before the backend's
rendezvous). Kinds: `raise` an exception, `usage` (raise a UsageError: bad input found late),
`exit` without cleanup (`code=`, default 3), `sigkill` / `sigint` / `sigterm` itself, `hang`
forever, `delay` for `seconds=` (default 5) and then carry on, or `preempt`: every iteration of
the point's probe (the few that size its iteration count to `--budget`) waits `seconds=` first,
as if the scheduler took the core each time (a loaded box). Unset, the hook costs one
comparison per point. This module is the only place faults come from.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from commbench.errors import UsageError

ENV = "COMMBENCH_FAULT"
KINDS = ("raise", "usage", "exit", "hang", "sigkill", "sigint", "sigterm", "delay", "preempt")
ALL = -1  # `rank=all`
START = -1  # the `point=start` hook, before the backend is opened


class InjectedFault(RuntimeError):
    """The exception `kind=raise` throws (an ordinary failure as far as the session knows)."""


@dataclass(frozen=True)
class Fault:
    """One planned fault: which world rank, at which point, doing what."""

    rank: int  # ALL for every rank
    point: int
    kind: str
    seconds: float = 5.0
    code: int = 3

    def describe(self) -> str:
        where = "start-up" if self.point == START else f"point {self.point}"
        who = "every rank" if self.rank == ALL else f"rank {self.rank}"
        return f"injected fault {self.kind!r} on {who} at {where} ({ENV})"


def parse(text: str) -> Fault:
    """`rank=1,point=3,kind=raise[,seconds=S][,code=C]` -> Fault; anything else is a UsageError."""
    fields: dict[str, str] = {}
    for part in text.split(","):
        key, eq, value = part.partition("=")
        if not eq or not value.strip():
            raise UsageError(f"{ENV}={text!r}: {part.strip()!r} is not key=value")
        fields[key.strip()] = value.strip()
    unknown = set(fields) - {"rank", "point", "kind", "seconds", "code"}
    if unknown:
        raise UsageError(f"{ENV}={text!r}: unknown key(s) {', '.join(sorted(unknown))}")
    missing = [k for k in ("rank", "point", "kind") if k not in fields]
    if missing:
        raise UsageError(f"{ENV}={text!r}: needs {', '.join(missing)}")
    if fields["kind"] not in KINDS:
        raise UsageError(f"{ENV}={text!r}: kind must be one of {', '.join(KINDS)}")
    try:
        rank = ALL if fields["rank"] == "all" else int(fields["rank"])
        point = START if fields["point"] == "start" else int(fields["point"])
        seconds = float(fields.get("seconds", 5.0))
        code = int(fields.get("code", 3))
    except ValueError:
        raise UsageError(
            f"{ENV}={text!r}: rank (or 'all'), point (or 'start') and code are integers, "
            "seconds a number"
        ) from None
    if rank < ALL or point < START or not 0 <= seconds < 1e6 or not 1 <= code <= 255:
        raise UsageError(f"{ENV}={text!r}: a value is out of range")
    return Fault(rank, point, fields["kind"], seconds, code)


def from_env(env: dict[str, str] | None = None) -> Fault | None:
    """The fault planned by the environment, if any."""
    text = (os.environ if env is None else env).get(ENV, "").strip()
    return parse(text) if text else None


def fire(fault: Fault, settle: Callable[[float], object] | None = None) -> None:
    """Do what the fault says, now, on this rank. After a self-signal, `settle(timeout)` waits
    until the session has taken it in (its signal thread runs asynchronously), so the stop is
    agreed at the next point, deterministically."""
    if fault.kind == "raise":
        raise InjectedFault(fault.describe())
    if fault.kind == "usage":
        raise UsageError(fault.describe())
    if fault.kind == "exit":
        os._exit(fault.code)  # a crash: no cleanup, no atexit, no MPI_Finalize
    if fault.kind in ("sigkill", "sigint", "sigterm"):
        os.kill(os.getpid(), getattr(signal, fault.kind.upper()))
        if settle is not None:
            settle(30.0)
        return  # sigint/sigterm: the session's signal thread takes it from here
    if fault.kind == "delay":
        time.sleep(fault.seconds)
        return
    if fault.kind == "preempt":
        return  # strikes inside the probe (Injector.preempt_s), not at the point's start
    while True:  # hang: a peer that never arrives
        time.sleep(3600)


class Injector:
    """Holds this rank's planned fault and fires it when its point comes."""

    def __init__(
        self,
        rank: int,
        fault: Fault | None,
        settle: Callable[[float], object] | None = None,
    ) -> None:
        mine = fault is not None and fault.rank in (rank, ALL)
        self._fault = fault if mine else None
        self._settle = settle

    @classmethod
    def from_env(cls, rank: int, settle: Callable[[float], object] | None = None) -> Injector:
        return cls(rank, from_env(), settle)

    def at(self, point: int) -> None:
        """Called at `point` (START, or a measured point's index)."""
        if self._fault is not None and self._fault.point == point:
            fire(self._fault, self._settle)

    def preempt_s(self, point: int) -> float:
        """Seconds each probe iteration of `point` is descheduled on this rank (`preempt`)."""
        f = self._fault
        return f.seconds if f is not None and f.kind == "preempt" and f.point == point else 0.0
