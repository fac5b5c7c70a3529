"""The front door: `commbench COMMAND ...`, a registry of subcommand modules (mpi4py-bench style).

Each module in commbench.commands defines HELP, add_arguments(parser) and main(args) and keeps
heavy imports inside main, so start-up stays fast on every rank; only the module of the command
being run is imported (all of them for top-level help). A UsageError anywhere before
communication starts becomes one line from rank 0 and exit status 2 on every rank.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from commbench import __version__
from commbench.errors import EXIT_FAILURE, EXIT_USAGE, USAGE_LINGER_S, UsageError
from commbench.limits import shorten_message
from commbench.measure import diag
from commbench.measure.launch import detect, exit_status_file

COMMANDS = {
    "run": "commbench.commands.run",
    "suite": "commbench.commands.suite",
    "list": "commbench.commands.listing",
    "fit": "commbench.commands.fit",
    "plan": "commbench.commands.plan",
    "validate": "commbench.commands.validate",
    "report": "commbench.commands.report",
    "import": "commbench.commands.importer",
    "export": "commbench.commands.export",
    "emulate": "commbench.commands.emulate",
    "check": "commbench.commands.check",
    "trace": "commbench.commands.trace",
}


def _is_root() -> bool:
    return detect().rank == 0


def _usage_exit_delay(message: str) -> None:
    """Non-root ranks wait for the launcher to take them down after rank 0 exits, so rank 0's
    message is out before the job is torn down (the launcher kills every rank at the first
    non-zero exit, rank 0 mid-print included). Still here after USAGE_LINGER_S (a launcher that
    does not tear down, or rank 0 did not fail alike): exit quietly, unless --verbose."""
    if _is_root():
        return
    with contextlib.suppress(KeyboardInterrupt):
        time.sleep(USAGE_LINGER_S)
    if "--verbose" in sys.argv:
        print(f"commbench: rank {detect().rank}: error: {message}", file=sys.stderr, flush=True)


def terminal_columns() -> int:
    """shutil.get_terminal_size().columns ($COLUMNS, else stdout's terminal, else 80) without
    importing shutil, which loads bz2 and lzma: ~5 ms a rank before the first collective, since
    argparse sizes a new formatter to check each argument it is given."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, its width found without shutil (terminal_columns)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24) -> None:
        super().__init__(prog, indent_increment, max_help_position, terminal_columns() - 2)


class RawDescriptionHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """argparse's RawDescriptionHelpFormatter (descriptions kept as written), sized likewise."""


GIVEN = "_flags_given"  # namespace attribute: each stored flag's first value, while parsing


class _Once(argparse.Action):
    """A store action that refuses its option given twice with another value: argparse keeps
    the last silently (`run allreduce --sizes 8 --sizes 64` ran 64 only). The same value twice
    is harmless; flags that append (--set) or count are not stores and keep their own rule."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = namespace.__dict__.setdefault(GIVEN, {})
        if option_string is not None and self.dest in given and given[self.dest][1] != values:
            first, old = given[self.dest]
            said = f"({_shown(old)}, then {_shown(values)})"
            parser.error(
                f"{first} given twice {said}: give it once"
                if first == option_string
                else f"{first} and {option_string} both set {self.dest} {said}: give one"
            )
        given.setdefault(self.dest, (option_string, values))
        super().__call__(parser, namespace, values, option_string)


def _shown(value: object) -> str:
    return "on" if value is True else "off" if value is False else repr(value)


def _once(action: type[argparse.Action]) -> type[argparse.Action]:
    return type(f"Once{action.__name__}", (_Once, action), {})


ONCE_ACTIONS = {
    None: _once(argparse._StoreAction),
    "store": _once(argparse._StoreAction),
    "store_const": _once(argparse._StoreConstAction),
    "store_true": _once(argparse._StoreTrueAction),
    "store_false": _once(argparse._StoreFalseAction),
}


class Parser(argparse.ArgumentParser):
    """argparse that reports errors from rank 0 only (every rank still exits 2) and refuses a
    flag given twice with different values (_Once)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, action in ONCE_ACTIONS.items():
            self.register("action", name, action)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        ns, rest = super().parse_known_args(args, namespace)
        ns.__dict__.pop(GIVEN, None)
        return ns, rest

    def error(self, message: str) -> None:  # type: ignore[override]
        message = shorten_message(message)
        if _is_root():
            self.print_usage(sys.stderr)
            sys.stderr.write(f"commbench: error: {message}\n")
            sys.stderr.flush()
        _usage_exit_delay(message)
        sys.exit(EXIT_USAGE)


def command_of(argv: list[str]) -> str | None:
    """The subcommand named in `argv` (its first non-option word), if it is a known one."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def build_parser(only: str | None = None) -> tuple[Parser, dict]:
    """The parser with every built command, or with just `only` (start-up imports one module)."""
    parser = Parser(
        prog="commbench",
        formatter_class=HelpFormatter,
        description="Collective-communication microbenchmarks for LLM parallelism: measure "
        "DP/ZeRO/TP/PP/CP/EP traffic, fit alpha-beta link models, plan parallel configs.",
    )
    parser.add_argument("--version", action="version", version=f"commbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    modules = {}
    for name, path in COMMANDS.items():
        if only is not None and name != only:
            continue
        mod = importlib.import_module(path)
        p = sub.add_parser(
            name,
            help=mod.HELP,
            description=mod.__doc__,
            formatter_class=RawDescriptionHelpFormatter,
        )
        mod.add_arguments(p)
        modules[name] = mod
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    diag.mark("main")
    # numpy's OpenBLAS starts a thread per core when imported (~30 ms of CPU a rank, measured
    # by bench/startup.py); commbench does no BLAS work that threads would speed up, and 16
    # ranks on a small node pay it 16 times. A user's own setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    status = [EXIT_FAILURE]  # what an exception escaping _main (COMMBENCH_DEBUG) leaves
    if (path := exit_status_file()) is not None:
        # registered before mpi4py is imported, so it runs after MPI_Finalize (atexit is LIFO):
        # a file says the rank got all the way out; os._exit (crash, abort) leaves none
        atexit.register(_leave_exit_status, path, status)
    try:
        status[0] = _main(sys.argv[1:] if argv is None else argv)
        return status[0]
    except SystemExit as e:  # argparse's usage errors leave through sys.exit
        status[0] = e.code if isinstance(e.code, int) else EXIT_FAILURE
        raise
    finally:
        diag.dump(detect().rank)


def _leave_exit_status(path: str, status: list[int]) -> None:
    with open(path, "w") as f:
        f.write(f"{status[0]}\n")


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser | None:
    """The parser of `command` (its flags' spellings name an input in messages)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(command)
    return None


def _main(argv: list[str]) -> int:
    parser, modules = build_parser(command_of(argv))
    args = parser.parse_args(argv)
    diag.mark("parsed")  # the command's module imported: what follows is its own preparation
    if not args.command:
        if _is_root():
            parser.print_help()
        return EXIT_USAGE
    try:
        if getattr(args, "output", None) is not None:  # every command's -o: one rule
            from commbench.results.outputs import check_output

            check_output(args, _subparser(parser, args.command))
        return modules[args.command].main(args) or 0
    except UsageError as e:
        message = shorten_message(str(e))
        if _is_root():
            print(f"commbench: error: {message}", file=sys.stderr, flush=True)
        _usage_exit_delay(message)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `commbench ... | head`: the reader left; stop printing quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILURE
    except Exception as e:  # an unexpected failure outside a session: one line, no wall
        if os.environ.get("COMMBENCH_DEBUG"):
            raise
        print(
            f"commbench: rank {detect().rank}: internal error: {type(e).__name__}: {e} "
            "(COMMBENCH_DEBUG=1 shows the traceback)",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
