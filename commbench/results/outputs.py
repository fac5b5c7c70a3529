"""The one rule for every output path a command is given (`-o`), checked by the front door
before the command runs: an output is never a file the same command reads, and never a file
of a run directory (its records and meta are the measurements; nothing else writes there).

`fit RUN -o RUN/records.jsonl`, `plan -o RUN/meta.json` or `export astra-sim cal.json -o
cal.json` would replace the measurements or the input with the output and exit 0; a report
written into a run directory mixes its files with the run's. Each is refused with exit 2.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from pathlib import Path

from commbench.errors import UsageError
from commbench.results.rundir import META, RECORDS, is_run_dir

OUTPUT_DEST = "output"  # the dest of every command's -o/--output
RUN_FILES = (RECORDS, META, "check.json")  # what a run directory holds (check adds its verdict)


def _paths(value: object) -> Iterator[str | Path]:
    if isinstance(value, str | Path):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _paths(v)


def _labels(parser: argparse.ArgumentParser | None) -> dict[str, str]:
    """dest -> how the user spelled it (`--base`, `CAL`), for the message."""
    out: dict[str, str] = {}
    for action in parser._actions if parser else ():
        label = "/".join(action.option_strings) or action.metavar or action.dest
        out[action.dest] = str(label)
    return out


def check_output(args: argparse.Namespace, parser: argparse.ArgumentParser | None = None) -> None:
    """Refuse (UsageError) an -o that is another argument's file or a run directory's file."""
    given = getattr(args, OUTPUT_DEST, None)
    if given is None:
        return
    out = Path(given)
    labels = _labels(parser)
    if out.is_file():
        for dest, value in vars(args).items():
            if dest == OUTPUT_DEST:
                continue
            for p in _paths(value):
                if Path(p).is_file() and os.path.samefile(p, out):
                    raise UsageError(
                        f"-o {given}: is also an input of this command "
                        f"({labels.get(dest, dest)}): write the output elsewhere"
                    )
    if out.is_dir() and is_run_dir(out):
        raise UsageError(
            f"-o {given}: is run directory {out.resolve().name}: give a directory of its own"
        )
    parent = out.resolve().parent
    if out.name in RUN_FILES and is_run_dir(parent):
        raise UsageError(
            f"-o {given}: {out.name} is a file of run {parent.name} (a run's files are its "
            "measurements): write the output elsewhere"
        )
