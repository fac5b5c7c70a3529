"""One measuring job on every rank: world, hosts, run directory, watchdog, signals, teardown.

The rules of DESIGN.md section 6 live here: rank 0 prints and writes; a stop signal seen by
any rank stops all of them at the next point (agreed by a collective); an exception or a
point that makes no progress for `--timeout` seconds aborts the whole job instead of
leaving peers waiting; the run directory's status says how it ended.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from commbench import __version__, diag
from commbench.errors import EXIT_FAILURE, EXIT_USAGE, UsageError
from commbench.launch import LaunchInfo
from commbench.layout import host_map
from commbench.results import RunWriter
from commbench.runner import Interrupted, Runner, TimingConfig
from commbench.transport import library_versions, open_world
from commbench.transport.base import Communicator

EXIT_INTERRUPTED = 130
ENV_PREFIXES = (
    "NCCL_",
    "OMPI_MCA_",
    "UCX_",
    "FI_",
    "GLOO_",
    "TORCH_NCCL",
    "MPICH_",
    "I_MPI_",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "SLURM_JOB_ID",
    "COMMBENCH_",
)


@dataclass(frozen=True)
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


def git_revision() -> str | None:
    """The commit commbench runs from, when it runs from a git checkout."""
    try:
        out = subprocess.run(
            ["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def relevant_env() -> dict[str, str]:
    """NCCL/MPI/UCX settings and the like that change what is measured."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}


class Watchdog:
    """Aborts the job when a guarded section runs past its deadline (a dead or hung peer)."""

    def __init__(self, timeout_s: float, on_timeout) -> None:
        self.timeout_s = timeout_s
        self._on_timeout = on_timeout
        self._deadline: float | None = None
        self._label = ""
        threading.Thread(target=self._watch, name="commbench-watchdog", daemon=True).start()

    @contextlib.contextmanager
    def guard(self, label: str) -> Iterator[None]:
        self._label, self._deadline = label, time.monotonic() + self.timeout_s
        try:
            yield
        finally:
            self._deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.timeout_s / 4))
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline:
                self._on_timeout(self._label)
                return


class Session:
    """Opened on every rank by `run` and `suite`; use as a context manager."""

    def __init__(self, launch: LaunchInfo, opts: SessionOptions, timing: TimingConfig) -> None:
        self.launch = launch
        self.opts = opts
        self.timing = timing
        self.stop = threading.Event()
        self.writer: RunWriter | None = None
        self.world: Communicator | None = None
        self.runner: Runner | None = None
        self.nodes: tuple[int, ...] = ()
        self.hosts: list[str] = []

    # ---- printing: rank 0 talks ----
    @property
    def is_root(self) -> bool:
        return self.launch.rank == 0

    def say(self, text: str = "") -> None:
        if self.is_root:
            print(text, flush=True)

    def warn(self, text: str) -> None:
        if self.is_root or self.opts.verbose:
            prefix = "" if self.is_root else f"[rank {self.launch.rank}] "
            print(f"{prefix}commbench: warning: {text}", file=sys.stderr, flush=True)

    # ---- lifecycle ----
    def __enter__(self) -> Session:
        self._install_signals()
        diag.mark("open_world")
        self.world = open_world(self.opts.backend, self.launch, self.opts.timeout_s)
        diag.mark("world")
        self.watchdog = Watchdog(self.opts.timeout_s, self._timed_out)
        with self.watchdog.guard("start-up"):
            self.hosts = self.world.allgather_obj(self.launch.host)
            self.nodes = host_map(self.world.size, self.hosts, self.opts.ranks_per_node)
            self._open_run_dir()
        self.runner = Runner(self.world, self.timing, self.watchdog.guard, self.stop.is_set)
        return self

    def _open_run_dir(self) -> None:
        """Rank 0 creates the run directory; everyone learns whether that worked."""
        outcome: tuple[str, str] = ("ok", "")
        if self.is_root and self.opts.write:
            try:
                self.writer = RunWriter.create(
                    self.opts.results, self.opts.command, self.meta(), self.opts.run_id
                )
                outcome = ("ok", str(self.writer.path))
            except UsageError as e:
                outcome = ("error", str(e))
            except OSError as e:
                outcome = (
                    "error",
                    f"cannot create a run directory under {self.opts.results}: {e.strerror or e}",
                )
        outcome = self.world.bcast_obj(outcome, root=0)
        if outcome[0] == "error":
            raise UsageError(outcome[1])

    def meta(self) -> dict:
        """Provenance for meta.json: command, hosts, backend and library versions, env, git."""
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
            "timeout_s": self.opts.timeout_s,
        }

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            self._finish("complete")
            self._close()
            return False
        if isinstance(exc, Interrupted):
            self._finish("interrupted")
            self.say(
                f"# interrupted: stopped after {self.writer.count if self.writer else 0} records"
            )
            if self.writer:
                self.say(f"results: {self.writer.path}")
            self._close()
            sys.exit(EXIT_INTERRUPTED)
        code = EXIT_USAGE if isinstance(exc, UsageError) else EXIT_FAILURE
        message = str(exc) if isinstance(exc, UsageError) else f"{type(exc).__name__}: {exc}"
        print(f"commbench: rank {self.launch.rank}: error: {message}", file=sys.stderr, flush=True)
        if os.environ.get("COMMBENCH_DEBUG"):
            import traceback

            traceback.print_exception(exc_type, exc, tb)
        self._finish("failed", message)
        if self.world is not None and self.world.size > 1:
            self.world.abort(code)  # peers may be waiting in a collective: take them down
        os._exit(code)

    def _finish(self, status: str, error: str | None = None) -> None:
        if self.writer is not None:
            self.writer.finish(status, error)

    def _close(self) -> None:
        if self.runner is not None:
            self.runner.close()
        if self.world is not None:
            self.world.close()

    def _timed_out(self, label: str) -> None:
        msg = (
            f"no progress for {self.opts.timeout_s:g} s in {label}: a peer died or hung; "
            "aborting the job (raise --timeout for slower points)"
        )
        print(f"commbench: rank {self.launch.rank}: error: {msg}", file=sys.stderr, flush=True)
        with contextlib.suppress(Exception):
            self._finish("failed", msg)
        with contextlib.suppress(Exception):
            self.world.abort(EXIT_FAILURE)
        os._exit(EXIT_FAILURE)

    # ---- signals: a dedicated thread, since MPI calls block the main thread ----
    def _install_signals(self) -> None:
        sigs = {signal.SIGINT, signal.SIGTERM}
        if threading.current_thread() is not threading.main_thread():
            return
        signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
        threading.Thread(
            target=self._signal_loop, args=(sigs,), name="commbench-signals", daemon=True
        ).start()

    def _signal_loop(self, sigs: set) -> None:
        while True:
            signum = signal.sigwait(sigs)
            if self.stop.is_set():  # second signal: stop now
                with contextlib.suppress(Exception):
                    self._finish("interrupted")
                os._exit(EXIT_INTERRUPTED)
            self.stop.set()
            if self.writer is not None:  # say so now, in case we are killed before the point ends
                with contextlib.suppress(Exception):
                    self.writer.mark("interrupted")
            if self.is_root:
                print(
                    f"# {signal.Signals(signum).name}: finishing the current point, then "
                    "stopping (again to stop now)",
                    file=sys.stderr,
                    flush=True,
                )
