"""Run directories: append-safe `records.jsonl` + atomic `meta.json`, and the reader.

Rank 0 writes one JSON object per line and flushes (and fsyncs) each point, so a killed
run keeps every finished point. `meta.json` carries the run's status: running, complete,
interrupted, failed or partial (an imported log that warned). Records are the only input of
fit, plan, validate and report.

The reader accepts what a crash leaves behind: a run whose status is not `complete` is
`partial`, and a torn last line (no newline, a write cut short) is skipped and reported;
any other bad line is a UsageError naming file:line.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commbench.errors import UsageError
from commbench.keys import unique_pairs
from commbench.limits import bounded_json_int
from commbench.results.records import REQUIRED_FIELDS

SCHEMA_VERSION = 1
RECORDS = "records.jsonl"
META = "meta.json"
STATUSES = ("running", "complete", "interrupted", "failed", "partial")


class WriteError(OSError):
    """A file of a run could not be written (a full disk): the OSError, naming the file."""


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temp file beside `path`, fsync, then rename over it. A write that
    fails (a full disk) removes the temp file and raises an OSError naming `path`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2, sort_keys=False, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise WriteError(e.errno, e.strerror, str(path)) from e


def cannot_create_run(root: Path, e: OSError) -> str:
    """The one line for a run directory that could not be made: the file, when one failed."""
    if isinstance(e, WriteError):
        return f"cannot write {e.filename}: {e.strerror or e}"
    return f"cannot create a run directory under {root}: {e.strerror or e}"


def write_json_output(path: str | Path, doc: Any, flag: str = "-o") -> Path:
    """Write a command's JSON output (plan, validation) atomically; a missing directory, a
    directory given as the file or an unwritable place is a UsageError naming the flag."""
    p = Path(path)
    if p.parent and not p.parent.exists():
        raise UsageError(f"{flag} {path}: directory {p.parent} does not exist")
    if p.is_dir():
        raise UsageError(f"{flag} {path}: is a directory (give a file name)")
    try:
        write_json_atomic(p, doc)
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot write ({e.strerror or e})") from None
    return p


def new_run_dir(root: Path, command: str, run_id: str | None = None) -> Path:
    """Create a fresh `<root>/<timestamp>-<command>-<random>` directory (mkdir is exclusive,
    so two runs never share one), or `<root>/<run_id>` when named (it must not exist yet)."""
    if root.exists() and not root.is_dir():
        raise UsageError(f"results directory {root} is a file, not a directory")
    root.mkdir(parents=True, exist_ok=True)
    if run_id:
        path = root / run_id
        try:
            path.mkdir()
        except FileExistsError:
            raise UsageError(
                f"run directory {path} already exists: pick another --run-id"
            ) from None
        return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for _ in range(100):
        path = root / f"{stamp}-{command}-{secrets.token_hex(3)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a unique run directory under {root}")


class RunWriter:
    """Writes one run directory: meta.json (atomic, with status) and records.jsonl (append)."""

    def __init__(self, path: Path, meta: dict) -> None:
        self.path = path
        self.run_id = path.name
        self.meta = {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            **meta,
            "status": "running",
            "records": 0,
        }
        self.count = 0
        self._lock = threading.Lock()
        self._final = False
        write_json_atomic(path / META, self.meta)
        self._f = open(path / RECORDS, "a", buffering=1)

    @classmethod
    def create(cls, root: Path, command: str, meta: dict, run_id: str | None = None) -> RunWriter:
        """A new run directory with its meta.json; if that cannot be written the directory is
        removed again, so the same --run-id is free for the retry."""
        path = new_run_dir(root, command, run_id)
        try:
            return cls(path, meta)
        except OSError:
            with contextlib.suppress(OSError):
                (path / RECORDS).unlink(missing_ok=True)
                path.rmdir()
            raise

    def write(self, record: dict) -> None:
        """Append one record and make it durable before returning."""
        rec = {"schema_version": SCHEMA_VERSION, "run_id": self.run_id, **record}
        try:
            self._f.write(json.dumps(rec, default=_json_default) + "\n")
            self._f.flush()
            os.fsync(self._f.fileno())
        except OSError as e:  # a full disk: say which file
            raise WriteError(e.errno, e.strerror, str(self.path / RECORDS)) from e
        self.count += 1

    def mark(self, status: str, **fields: Any) -> None:
        """Rewrite meta.json with a new status (atomic; safe from the signal thread).

        Once finished, marks are ignored (a late signal must not undo `complete`); once
        `failed`, the status stays failed and the first error is kept (it is the cause)."""
        assert status in STATUSES, status
        with self._lock:
            if self._final:
                return
            if self.meta["status"] == "failed":
                status = "failed"
                if "error" in self.meta:
                    fields.pop("error", None)
            self.meta.update(status=status, records=self.count, **fields)
            write_json_atomic(self.path / META, self.meta)

    def finish(self, status: str, error: str | None = None) -> None:
        """Close records and stamp meta.json with the final status."""
        if not self._f.closed:
            self._f.close()
        self.mark(status, end_time=time.time(), **({"error": error} if error else {}))
        self._final = True


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


@dataclass
class Run:
    """A run read back: its directory, meta, records and how complete it is."""

    path: Path
    meta: dict
    records: list[dict]
    torn_line: int | None = None  # line number of a torn last line that was skipped

    @property
    def run_id(self) -> str:
        """The run's id as meta.json names it, else its directory's name."""
        return str(self.meta.get("run_id") or self.path.name)

    @property
    def status(self) -> str:
        """running, complete, interrupted or failed; `unknown` without meta.json."""
        return self.meta.get("status", "unknown")

    @property
    def partial(self) -> bool:
        """True unless the run says it completed and nothing was torn (running = the job was
        killed before it could say how it ended)."""
        return self.status != "complete" or self.torn_line is not None

    def partial_note(self) -> str | None:
        """One line for fit/report to print about a partial run; None when it is complete."""
        if not self.partial:
            return None
        why = {
            "running": "status running: the job was killed before it could say how it ended",
            "interrupted": "status interrupted: stopped by a signal",
            "failed": f"status failed: {self.meta.get('error', 'no reason recorded')}",
            "partial": f"status partial: {self.meta.get('error', 'no reason recorded')}",
            "unknown": f"no {META}",
        }.get(self.status, f"status {self.status}")
        signal = self.meta.get("stop_signal")
        if self.status == "interrupted" and signal:
            why = f"status interrupted: stopped by {signal}"
        torn = (
            f"; torn last line {self.torn_line} of {RECORDS} skipped"
            if self.torn_line is not None
            else ""
        )
        return (
            f"{self.path.name}: partial run ({why}); {len(self.records)} finished "
            f"point(s) kept{torn}"
        )


@dataclass
class RecordsFile:
    """The records of one records.jsonl and the torn last line skipped, if any."""

    records: list[dict]
    torn_line: int | None = None


def is_run_dir(path: Path) -> bool:
    return (path / RECORDS).is_file() or (path / META).is_file()


class _BadLine(Exception):
    """A line that is not a record; `torn` when it may be a write cut short."""

    def __init__(self, message: str, torn: bool = False) -> None:
        super().__init__(message)
        self.torn = torn


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_record(rec: Any) -> dict:
    """The fields every consumer relies on, with the types they rely on."""
    if not isinstance(rec, dict):
        raise _BadLine("a record must be a JSON object")
    missing = [k for k in REQUIRED_FIELDS if k not in rec]
    if missing:
        raise _BadLine(f"record lacks {', '.join(missing)}")
    version = rec["schema_version"]
    if type(version) is not int or version != SCHEMA_VERSION:
        raise _BadLine(f"schema_version {version!r} is not {SCHEMA_VERSION}")
    for key in ("run_id", "kind", "op", "backend", "dtype"):
        if not isinstance(rec[key], str):
            raise _BadLine(f"{key} must be a string, not {rec[key]!r}")
    for key, least in (("bytes", 0), ("group_size", 1)):
        if type(rec[key]) is not int or rec[key] < least:
            raise _BadLine(f"{key} must be an integer >= {least}, not {rec[key]!r}")
    t = rec["time_us"]
    if not _is_number(t) or not math.isfinite(t) or t < 0:
        raise _BadLine(f"time_us must be a finite number >= 0, not {t!r}")
    return rec


def _parse_line(raw: bytes) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _BadLine("not UTF-8 text", torn=True) from None
    try:
        rec = json.loads(text, parse_int=bounded_json_int)
    except UsageError as e:
        raise _BadLine(str(e)) from None
    except json.JSONDecodeError as e:
        raise _BadLine(f"not a JSON record ({e.msg})", torn=True) from None
    except RecursionError:
        raise _BadLine("not a JSON record (nested too deeply)") from None
    return _check_record(rec)


def read_records(path: Path) -> RecordsFile:
    """Parse records.jsonl. A last line without its newline that does not parse is a write cut
    short by a crash: skipped and reported. Any other bad line is a UsageError naming file:line."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e.strerror or e}") from None
    lines = data.split(b"\n")  # the element after the last newline is b"" unless torn
    records: list[dict] = []
    torn = None
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            records.append(_parse_line(raw))
        except _BadLine as e:
            if e.torn and lineno == len(lines):
                torn = lineno
                continue
            raise UsageError(f"{path}:{lineno}: {e}") from None
    return RecordsFile(records, torn)


def iter_records(path: Path) -> Iterator[dict]:
    """The records of records.jsonl (see read_records; a torn last line is skipped)."""
    yield from read_records(path).records


def read_meta(path: Path) -> dict:
    """meta.json as a dict; a clear UsageError when it is unreadable or malformed (its
    integers bounded and a key given twice refused, as in every JSON file a user gives)."""
    try:
        text = path.read_bytes().decode("utf-8")
        meta = json.loads(text, parse_int=bounded_json_int, object_pairs_hook=unique_pairs)
    except OSError as e:
        raise UsageError(f"{path}: unreadable meta ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:  # JSON and UTF-8 errors are ValueErrors
        raise UsageError(f"{path}: unreadable meta ({e})") from None
    if not isinstance(meta, dict):
        raise UsageError(f"{path}: meta must be a JSON object")
    status = meta.get("status", "running")
    if status not in STATUSES:
        raise UsageError(f"{path}: status {status!r} is not one of {', '.join(STATUSES)}")
    return meta


def read_run(path: str | Path) -> Run:
    """Load one run directory; clear errors for a missing, non-run or corrupt directory.
    A partial run loads: check `run.partial` and print `run.partial_note()`."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such run directory")
    if not path.is_dir():
        raise UsageError(f"{path}: not a directory (give a run directory holding {RECORDS})")
    if not os.access(path, os.R_OK | os.X_OK):
        raise UsageError(f"{path}: directory is not readable")
    if not is_run_dir(path):
        raise UsageError(f"{path}: not a run directory (no {RECORDS} or {META})")
    meta = read_meta(path / META) if (path / META).exists() else {}
    found = read_records(path / RECORDS) if (path / RECORDS).exists() else RecordsFile([])
    return Run(path, meta, found.records, found.torn_line)
