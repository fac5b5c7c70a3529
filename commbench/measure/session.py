"""One measuring job on every rank: world, hosts, run directory, watchdog, signals, teardown.

The rules of a measuring job live here (docs/design.md, "Failures"): rank 0 prints and
writes; a stop signal seen by any rank stops all of them at the next point (agreed by a
collective); an exception or a point that makes no progress for `--timeout` seconds aborts
the whole job instead of leaving peers waiting; the run directory's status says how it ended.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import platform
import shlex
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn

from commbench import __version__
from commbench.errors import EXIT_FAILURE, EXIT_USAGE, USAGE_LINGER_S, UsageError
from commbench.measure import diag
from commbench.measure.faults import START, Injector
from commbench.measure.launch import (
    LaunchInfo,
    oversubscribed,
    oversubscription_warning,
    usable_cores,
)
from commbench.measure.notice import Notice
from commbench.measure.progress import Progress, describe
from commbench.measure.provenance import emulation
from commbench.measure.runner import Interrupted, Runner, TimingConfig
from commbench.measure.transport import library_versions, load_backend, open_world
from commbench.measure.transport.base import Communicator
from commbench.measure.transport.heap import keep_scratch
from commbench.measure.watchdog import Watchdog, outside_guard
from commbench.traffic.layout import host_map

if TYPE_CHECKING:  # rank 0 alone writes the run directory: the others never import it
    from commbench.results.rundir import RunWriter

EXIT_INTERRUPTED = 130
# SIGUSR1 is the graceful stop under mpirun: Open MPI forwards it to every rank as is, whereas
# on SIGINT/SIGTERM it sends the ranks SIGTERM and SIGKILLs them 0.25 s later.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


@dataclass(frozen=True, kw_only=True)
class SessionOptions:
    """What every measuring command shares: backend, where results go, safety limits."""

    command: str
    backend: str  # already resolved (mpi, gloo, nccl)
    results: Path
    timeout_s: float = 300.0
    ranks_per_node: int | None = None
    verbose: bool = False
    write: bool = True
    run_id: str | None = None


class Session:
    """Opened on every rank by `run` and `suite`; use as a context manager."""

    def __init__(self, launch: LaunchInfo, opts: SessionOptions, timing: TimingConfig) -> None:
        self.launch = launch
        self.opts = opts
        self.timing = timing
        self.stop = threading.Event()
        self.writer: RunWriter | None = None
        self._world: Communicator | None = None
        self._runner: Runner | None = None
        self.nodes: tuple[int, ...] = ()
        self.hosts: list[str] = []
        self.devices: list[dict] = []  # per rank: host, local rank, device (GPU name, PCI bus)
        self.oversubscribed: list[dict] = []  # hosts with more ranks than cores
        # a bad spec fails here, before any talk; a self-signal waits for the signal thread
        self.faults = Injector.from_env(launch.rank, settle=self.stop.wait)
        self.notice = Notice()
        self.progress = Progress()
        self.watchdog = Watchdog(opts.timeout_s, self._timed_out)
        self._saved_signals: dict = {}

    @property
    def world(self) -> Communicator:
        """The world communicator (open inside the `with` block)."""
        assert self._world is not None, "the session is not open"
        return self._world

    @property
    def runner(self) -> Runner:
        """The runner on the world (inside the `with` block)."""
        assert self._runner is not None, "the session is not open"
        return self._runner

    # ---- printing: rank 0 talks ----
    @property
    def is_root(self) -> bool:
        return self.launch.rank == 0

    def say(self, text: str = "") -> None:
        if self.is_root:
            print(text, flush=True)

    # ---- lifecycle ----
    def __enter__(self) -> Session:
        self._install_signals()
        atexit.register(_alarm_at_exit, self.opts.timeout_s)
        try:
            load_backend(self.opts.backend)
            start_up = "start-up (rendezvous)"
            # MPI_Init holds the interpreter lock, so the watchdog's thread cannot fire there:
            # a sentinel process outside it covers the rendezvous too, a moment later.
            with (
                self.watchdog.guard(start_up),
                outside_guard(self.opts.timeout_s + 2, self._timeout_line(start_up)),
            ):
                self.faults.at(START)
                diag.mark("open_world")
                self._world = open_world(self.opts.backend, self.launch, self.opts.timeout_s)
                diag.mark("world")
                # one gather at start-up: each rank's host, device and the cores it may use
                me = {"host": self.launch.host, "local_rank": self.launch.local_rank}
                everyone = self.world.allgather_obj(
                    ({**me, **self.world.device_identity()}, usable_cores())
                )
                self.devices = [d for d, _ in everyone]
                self.hosts = [d["host"] for d in self.devices]
                self.nodes = host_map(self.world.size, self.hosts, self.opts.ranks_per_node)
                # emulated nodes are namespaces of one machine: their ranks share its cores
                machines = ["emulated nodes"] * len(self.hosts) if emulation() else self.hosts
                self.oversubscribed = oversubscribed(machines, [c for _, c in everyone])
                if (warning := oversubscription_warning(self.oversubscribed)) and self.is_root:
                    print(warning, file=sys.stderr, flush=True)
                self._open_run_dir()
        except UsageError as e:  # the run directory's outcome was broadcast: every rank is here
            if self._world is None:  # refused before the rendezvous (say, no GPU for this rank)
                self._fail(e)
            self._agreed_usage_exit(e)
        except BaseException as e:
            self._fail(e)
        self._runner = Runner(
            self.world,
            self.timing,
            self.watchdog.guard,
            self.stop.is_set,
            self._reached,
            self.faults.preempt_s,
        )
        return self

    def _agreed_usage_exit(self, e: UsageError) -> None:
        """All ranks raised `e` together after communication started: rank 0 says it, then
        everyone leaves with status 2 (the barrier keeps anyone from exiting first)."""
        if self.is_root:
            print(f"commbench: error: {e}", file=sys.stderr, flush=True)
        with self.watchdog.guard("shut-down"):
            self.world.barrier()
            self._close()
        sys.exit(EXIT_USAGE)

    def _open_run_dir(self) -> None:
        """Rank 0 creates the run directory; everyone learns whether that worked."""
        outcome: tuple[str, str] = ("ok", "")
        if self.is_root and self.opts.write:
            from commbench.results.rundir import RunWriter, cannot_create_run

            try:
                self.writer = RunWriter.create(
                    self.opts.results, self.opts.command, self.meta(), self.opts.run_id
                )
                outcome = ("ok", str(self.writer.path))
            except UsageError as e:
                outcome = ("error", str(e))
            except OSError as e:
                outcome = ("error", cannot_create_run(self.opts.results, e))
        self.world.settle()  # the others wait while rank 0 reads git and writes meta.json
        outcome = self.world.bcast_obj(outcome, root=0)
        if outcome[0] == "error":
            raise UsageError(outcome[1])
        if outcome[1]:
            self.notice = Notice(Path(outcome[1]), self.launch.rank)
            self.progress = Progress(Path(outcome[1]), self.launch.rank, self.world.size)

    def meta(self) -> dict:
        """Provenance for meta.json: command, hosts, backend and library versions, env, git."""
        from commbench.measure.provenance import git_revision, relevant_env

        unique_hosts = list(dict.fromkeys(self.hosts))
        return {
            "command": shlex.join(["commbench", *sys.argv[1:]]),
            "subcommand": self.opts.command,
            "start_time": time.time(),
            "start_time_iso": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "commbench_version": __version__,
            "git_revision": git_revision(),
            "backend": self.opts.backend,
            "launcher": self.launch.launcher,
            "world_size": self.world.size,
            "hosts": unique_hosts,
            "num_hosts": len(unique_hosts),
            "ranks_per_node": self.opts.ranks_per_node
            or (self.world.size // max(1, len(unique_hosts))),
            "ranks_per_node_override": self.opts.ranks_per_node is not None,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "libraries": library_versions(self.opts.backend),
            "env": relevant_env(),
            "timing": self.timing.timing,
            "timing_loop": self.world.timing_info(),
            "heap": keep_scratch(),
            "gpu_timer": self.timing.gpu_timer,
            "devices": self.devices,
            "timeout_s": self.opts.timeout_s,
            "emulation": emulation(),
            "oversubscribed": self.oversubscribed,
        }

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if exc is None:
            self._finish("complete")
            with self.watchdog.guard("shut-down"):
                self.world.settle()  # rank 0 wrote the last records: no one spins meanwhile
                self._close()
            return False
        if isinstance(exc, Interrupted):
            self._finish("interrupted")
            self.say(
                f"# interrupted: stopped after {self.writer.count if self.writer else 0} records"
            )
            if self.writer:
                self.say(f"results: {self.writer.path}")
            with self.watchdog.guard("shut-down"):
                self._close()
            sys.exit(EXIT_INTERRUPTED)
        self._fail(exc)

    def _fail(self, exc: BaseException) -> NoReturn:
        """This rank failed: say why, mark the run, tell rank 0, take the whole job down now."""
        usage = isinstance(exc, UsageError)
        code = EXIT_USAGE if usage else EXIT_FAILURE
        message = str(exc) if usage else f"{type(exc).__name__}: {exc}"
        _exit_anyway_after(2 * USAGE_LINGER_S, code)  # whatever below blocks, this process ends
        if usage and not self.is_root:
            # Every rank may have raised the same: let rank 0 say it and take the job down.
            with contextlib.suppress(BaseException):
                time.sleep(USAGE_LINGER_S)
        where = "" if usage and self.is_root else f"rank {self.launch.rank}: "
        print(f"commbench: {where}error: {message}", file=sys.stderr, flush=True)
        if os.environ.get("COMMBENCH_DEBUG"):
            import traceback

            traceback.print_exception(type(exc), exc, exc.__traceback__)
        self._die(code, message)

    def _die(self, code: int, message: str) -> NoReturn:
        """Record the failure (rank 0) or report it to rank 0 (others), then abort the job."""
        with contextlib.suppress(BaseException):
            if self.is_root:
                cause = self.notice.poll(wait_s=0.05)  # a peer's failure may have caused ours
                self._finish("failed", cause or message)
            else:
                self.notice.send(f"rank {self.launch.rank}: {message}")
        if self._world is not None and self._world.size > 1:
            with contextlib.suppress(BaseException):
                self._world.abort(code)  # peers may be waiting in a collective: take them down
        os._exit(code)

    def _finish(self, status: str, error: str | None = None) -> None:
        if self.writer is not None:
            self.writer.finish(status, error)

    def _close(self) -> None:
        self.progress.close()
        if self._runner is not None:
            self._runner.close()
        if self._world is not None:
            self._world.close()
        self._restore_signals()

    def _reached(self, point: int) -> None:
        """The runner is at `point` (0-based): a planned fault strikes, then the rank says so."""
        self.faults.at(point)
        self.progress.reached(point + 1)

    def _timeout_message(self, label: str) -> str:
        who = "a peer died or hung"
        if self._runner is not None and self._runner.points:
            point = self._runner.points  # the one under way, numbered from 1
            who = describe(self.progress.behind(point), point) or who
        return (
            f"no progress for {self.opts.timeout_s:g} s in {label}: {who}; "
            "aborting the job (raise --timeout for slower points)"
        )

    def _timeout_line(self, label: str) -> str:
        return f"commbench: rank {self.launch.rank}: error: {self._timeout_message(label)}"

    def _timed_out(self, label: str) -> None:
        print(self._timeout_line(label), file=sys.stderr, flush=True)
        _exit_anyway_after(5.0, EXIT_FAILURE)
        self._die(EXIT_FAILURE, self._timeout_message(label))

    # ---- signals: a dedicated thread, since MPI calls block the main thread ----
    def _install_signals(self) -> None:
        """Route SIGINT/SIGTERM/SIGUSR1 to a thread that acts at once, whichever thread the
        kernel delivers them to. (Blocking them and sigwait-ing is not enough: threads started
        before the session, such as OpenBLAS's at numpy import, would still take a SIGTERM
        and its default action kills the process before meta.json says anything.)"""
        if threading.current_thread() is not threading.main_thread():
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._saved_signals = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
        self._saved_signals["wakeup"] = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        for sig in STOP_SIGNALS:
            signal.signal(sig, _ignore_in_main_thread)
        threading.Thread(
            target=self._signal_loop, args=(read_fd,), name="commbench-signals", daemon=True
        ).start()

    def _restore_signals(self) -> None:
        """After the session, signals mean what they meant before it (Ctrl-C stops at once)."""
        saved, self._saved_signals = self._saved_signals, {}
        if "wakeup" in saved:
            signal.set_wakeup_fd(saved.pop("wakeup"))
        for sig, handler in saved.items():
            signal.signal(sig, handler)

    def _signal_loop(self, read_fd: int) -> None:
        while True:
            for signum in os.read(read_fd, 64):
                if signum in STOP_SIGNALS:
                    self._on_signal(signum)

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.stop.is_set():  # second signal: stop now
            with contextlib.suppress(Exception):
                self._finish("interrupted")
            os._exit(EXIT_INTERRUPTED)
        self.stop.set()
        if self.writer is not None:
            # Say so now: under mpirun a SIGTERM is followed by SIGKILL 0.25 s later.
            with contextlib.suppress(Exception):
                self.writer.mark("interrupted", stop_signal=name)
                # ... unless the signal is the launcher tearing the job down after a peer
                # failed: that peer has told us why.
                cause = self.notice.poll(wait_s=0.1) or self.notice.oom_cause()
                if cause:
                    self.writer.mark("failed", error=cause)
        if self.is_root:
            hint = (
                " (mpirun kills the ranks 0.25 s after a SIGTERM; `kill -USR1 <mpirun pid>` "
                "stops gracefully)"
                if name == "SIGTERM" and self.launch.launcher == "openmpi"
                else ""
            )
            print(
                f"# {name}: run marked interrupted; finishing the current point, then "
                f"stopping (signal again to stop now){hint}",
                file=sys.stderr,
                flush=True,
            )


def _ignore_in_main_thread(signum: int, frame: object) -> None:
    """The Python-level handler: nothing to do, the signal thread has already acted."""


def _alarm_at_exit(timeout_s: float) -> None:
    """At interpreter exit, before mpi4py's MPI_Finalize (which waits for every rank and runs
    where no Python thread can, so the watchdog cannot), start the kernel's alarm: a peer that
    never reaches Finalize then costs --timeout, not forever."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(max(1, math.ceil(timeout_s)))


def _exit_anyway_after(seconds: float, code: int) -> None:
    """A last-resort timer: end this process even if an abort path itself blocks."""
    timer = threading.Timer(seconds, os._exit, (code,))
    timer.daemon = True
    timer.start()
